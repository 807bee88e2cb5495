"""The node-side release agent: standard library only, shipped to nodes and pods as one file.

Everything that runs on a node or in a pod lives here, once: the manifest format and its hashing
(``manifest``), the release layout on disk (``releases``), Triton's HTTP API (``triton``), the golden
gate of both modes (``golden``), release stores and signatures (``store``, ``signing``), who may sign
what (``trust``: the root, thresholds, envelopes) and the signed channel metadata a node keeps
(``metadata``), the pull loop (``pull``), serving and gating a release (``serve``), failures classed by
cause (``failures``), staged rollouts (``rollout``), metrics (``metrics``) and the drift check
(``drift``), and HTTP requests with a deadline, a byte cap and same-origin redirects only (``netio``).
The plumbing it shares with every other package (error classes, exit codes, bounded reads and atomic
writes, the names of a release's files, a store's keys) is ``tritonops.core``'s.
The controller imports the same modules, each name from its home; ``bundle.build`` writes them and
``tritonops.core`` into one zipapp (``tritonops agent build``) that the roles push, the Kubernetes pod
runs and the drift timer uses.

Rules for this package: the standard library and ``tritonops.core`` only (nothing else of
``tritonops``: tests/unit/test_layers.py), Python 3.10 or newer (Debian 12, Ubuntu 22.04 on JetPack,
slim images), relative imports only (the zipapp renames the package), and secrets from the
environment, never from argv.
"""

AGENT_VERSION = "1"
