"""tritonops' development kit: test and demo scaffolding that is not part of the product wheel.

``hosts`` builds the Debian systemd images and disposable Podman nodes the molecule scenarios and host
checks run on, ``demo`` is ``make demo``, ``role_docs`` regenerates the role READMEs' variable tables,
``docs`` runs the docs' console examples (``docs --check`` / ``--update``).
Run it from the checkout as ``python -m devkit {hosts,demo,role-docs,docs}`` with ``tools/`` on the path
(the Makefile and pytest's ``pythonpath`` put it there).
"""
