"""Drift detection: is what runs (hosts, models, cluster) still what the code says?

Sources: ``ansible`` (playbooks in check+diff mode), ``models`` (release manifest vs node files, Triton's
repository index vs the release), ``pulumi`` (Automation API previews). See ``tritonops.drift.run``.
"""

SOURCES = ("ansible", "models", "pulumi")
TEXTFILE_NAME = "tritonops_drift.prom"  # the controller's metrics (the agent writes the node's own)
