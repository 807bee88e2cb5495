"""The shared plumbing of every tritonops package: standard library only, shipped to nodes inside the agent.

What every other package needs and none of them owns: the error classes (``errors``), the exit codes
(``exitcodes``), bounded reads and atomic writes (``fsio``), the names a release is made of and their
checks (``names``: the manifest's and golden files' names, a file path inside a release, a release id,
an id or label) and a release store's layout (``keys``: its keys, size caps and timeouts).

Rules for this package: the standard library only, Python 3.10 or newer (it runs on nodes inside the
agent's zipapp, ``tritonops.agent_bundle``), relative imports only (the zipapp renames the package),
no I/O at import, and nothing from the rest of ``tritonops``: this is the ground floor
(tests/unit/test_layers.py).
"""
