"""The node program: the release agent that runs on edge nodes and in pods, shipped as one file.

The pull loop (``pull``), the release layout on disk (``releases``: install, activate, mark, prune,
recover), serving and gating a release (``serve``), failures classed by cause (``failures``), the
agent's half of a staged rollout (``reporting``), its metrics (``metrics``), the node cache and its
daemon (``cache``, ``cache_daemon``), the drift probe of a node (``drift_probe``, ``effective``,
``posture``, ``kube``) and its command line (``cli``, ``argtypes``). What it shares with the controller
lives below it: the release format and its checks (``tritonops.release_format``), the store kinds
(``tritonops.stores``) and the plumbing (``tritonops.core``); ``tritonops.agent_bundle`` writes the four
into one zipapp (``tritonops agent build``) that the roles push, the Kubernetes pod runs and the drift
timer uses.

Rules for this package: the standard library and those three packages only; imported by nothing but
``tritonops.cli`` (tests/unit/test_layers.py); Python 3.10 or newer (Debian 12, Ubuntu 22.04 on JetPack,
slim images), relative imports only (the zipapp renames the package), and secrets from the environment,
never from argv.
"""

AGENT_VERSION = "1"
