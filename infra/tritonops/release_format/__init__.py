"""The release format: what a release is and how a node decides to trust it (standard library only).

The manifest of a release and its hashing (``manifest``), who may sign what (``trust``: the root,
thresholds, signed envelopes), Ed25519 signatures with the openssl CLI (``signing``), producer
signatures (``producer``), the signed channel metadata a node keeps (``metadata``), the golden gate
(``golden``), staged rollouts: waves and each agent's decision (``waves``), and the drift rules of a node
serving a release (``node_drift``). The node program (``tritonops.agent``) and the controller
(``tritonops.release``, ``tritonops.drift``, the stacks) import it alike; it ships in the agent's zipapp.

Rules for this package: the standard library and ``tritonops.core`` only (tests/unit/test_layers.py),
Python 3.10 or newer, relative imports only (the zipapp renames the package).
"""
