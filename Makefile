# tritonops: `make demo` and `make test` each install what they need on a fresh Debian machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The development kit (tools/devkit: Podman hosts, the demo, role README tables) is not in the wheel.
DEVKIT := PYTHONPATH=$(CURDIR)/tools $(BIN)/python -m devkit
EXTRAS := triton,k8s,ansible,obs,dev
# Debian packages the tests and the demo use (real Prometheus/Alertmanager, Podman systemd hosts, qemu for arm64,
# libb64 for perf_analyzer: `tritonops bench` and `tune` measure with it).
APT_PACKAGES := prometheus prometheus-alertmanager podman runc debootstrap uidmap fuse-overlayfs \
	slirp4netns qemu-user-static binfmt-support curl libb64-0d

.PHONY: all demo test check drift-live unit integration lint apt venv checkov bench molecule host-checks gpu-check clean

all: test

# The venv is rebuilt only when pyproject.toml is newer than its stamp.
$(VENV)/.stamp: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

venv: $(VENV)/.stamp

# checkov, an independent Kubernetes scanner (tests/unit/k8s/test_k8s_checkov.py), in a venv of its
# own: its pins conflict with ours. Rebuilt only when CHECKOV_VERSION changes.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .cache/checkov-venv
$(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION):
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet 'checkov==$(CHECKOV_VERSION)'
	touch $@

checkov: $(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION)

# Installs only what is missing, so a warm machine pays nothing.
apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

lint: venv
	$(BIN)/ruff check infra tests examples tools
	$(BIN)/mypy
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint -q

unit: venv checkov
	$(BIN)/pytest -q tests/unit

integration: venv apt
	$(BIN)/pytest -q tests/integration

# `make check`: the fast tier to run before every commit (lint and the unit tests: no servers beyond
# loopback helpers, no Podman nodes).
check: venv lint
	$(BIN)/pytest -q -x tests/unit

# `make test` (what CI runs): lint, unit and integration tests (a real Triton, Prometheus and
# Alertmanager on loopback), every role's molecule scenarios (amd64, and arm64 for Jetson), and the
# live drift test on a Podman node (tests/infra/drift_live: converge, tamper, detect exactly that,
# converge, clean; about 15 min).
ALL_ROLES := $(patsubst roles/%/molecule,%,$(wildcard roles/*/molecule))

test: venv apt checkov lint
	$(BIN)/pytest -q -rs tests/unit tests/integration tests/infra/test_unit_templates.py
	$(MAKE) --no-print-directory molecule
	$(MAKE) --no-print-directory drift-live

drift-live: venv apt
	$(BIN)/pytest -q -rs -s -p no:cacheprovider tests/infra/drift_live

# Molecule: every scenario under roles/*/molecule/ (converge, idempotence, check, verify) on the
# locally built Podman images (`python -m devkit hosts build` is a no-op while its inputs are unchanged).
# Narrow it with MOLECULE_ROLES, e.g. `make molecule MOLECULE_ROLES="nvidia_driver jetson"`.
MOLECULE_ROLES ?= $(ALL_ROLES)
molecule: venv apt
	$(DEVKIT) hosts build --arch amd64
	@if grep -qs systemd-arm64 $(foreach r,$(MOLECULE_ROLES),roles/$(r)/molecule/*/molecule.yml); then \
	  $(DEVKIT) hosts build --arch arm64; fi
	@set -e; for r in $(MOLECULE_ROLES); do for f in roles/$$r/molecule/*/molecule.yml; do \
	  s=$$(basename $$(dirname $$f)); start=$$(date +%s); echo "== molecule test $$r/$$s"; \
	  (cd roles/$$r && PATH=$(CURDIR)/$(BIN):$$PATH molecule test -s $$s); \
	  echo "== $$r/$$s passed in $$(( $$(date +%s) - start ))s"; done; done

# Host checks (tests/infra: gpu_facts + triton_server) against any inventory, the same checks molecule's
# verify runs; e.g. the local fleet after `make demo`, or a real one with its vault secret exported:
#   make host-checks INVENTORY=ansible/inventories/example HOSTS=edge TRITONOPS_ADMIN_SECRET=...
INVENTORY ?= ansible/inventories/local
HOSTS ?= edge
host-checks: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -p no:cacheprovider -rs tests/infra/gpu_facts tests/infra/triton_server \
	  --hosts=ansible://$(HOSTS) --ansible-inventory=$(INVENTORY)

demo: venv apt
	$(DEVKIT) demo

# Benchmarks print figures (they are not timed tests): tests/benchmarks/bench_*.py
bench: venv apt
	@for f in tests/benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# On a machine with an NVIDIA GPU: Triton with a GPU model, nv_gpu_* metrics, the GPU panels and alerts
# against a real Prometheus, gpu_facts and the memory budget against nvidia-smi (tools/gpu_check.py).
# Without a GPU it says so and exits 0.
gpu-check: venv apt
	$(BIN)/python tools/gpu_check.py

clean:
	rm -rf $(VENV) .cache
