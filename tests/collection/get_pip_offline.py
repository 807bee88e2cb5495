"""Offline stand-in for ansible-test's https://ci-files.testing.ansible.com/ansible-test/get-pip-<v>.py.

ansible-test bootstraps pip into each sanity tool's venv with that script, downloaded once into
``~/.ansible/test/cache/``; the test machines reach a PyPI mirror but not ci-files. This does the same
job: pip from the interpreter's own ensurepip, then pip installs what ansible-test asked for (from the
configured index). test_collection.py puts it in the cache of a HOME of its own under .cache/.
"""
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=False)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
    args = ["--cert", "/etc/ssl/certs/ca-certificates.crt"] + args
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
