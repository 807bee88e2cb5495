# tritonops: `make demo` and `make test` each install what they need on a fresh Debian machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The development kit (tools/devkit: Podman hosts, the demo, role README tables) is not in the wheel.
DEVKIT := PYTHONPATH=$(CURDIR)/tools $(BIN)/python -m devkit
EXTRAS := triton,k8s,ansible,obs,signing,dev
# Debian packages the tests and the demo use (real Prometheus/Alertmanager, Podman systemd hosts, qemu for arm64,
# libb64 for perf_analyzer: `tritonops bench` and `tune` measure with it; catatonit, `podman kube play`'s pause process;
# docker-registry, the CNCF distribution registry the oci:// release store is tested against).
APT_PACKAGES := prometheus prometheus-alertmanager podman runc mmdebstrap arch-test uidmap fuse-overlayfs \
	slirp4netns qemu-user-static binfmt-support curl libb64-0d catatonit openssh-client docker-registry

.PHONY: all demo demo-down demo-fleet demo-fleet-down demo-k8s fleet-live test print-test-stages check collection drift-live kube-play unit integration lint lint-mypy lint-ansible apt venv checkov bench molecule host-checks gpu-check gpu-bundle clean

all: test

# The venv is rebuilt only when pyproject.toml is newer than its stamp. uv installs it (about 45 s with a
# cold cache, where pip took about 3 min); its version is the dev extra's pin, read from pyproject.toml.
UV_PIN = $(shell grep -o '"uv[<>=!~][^"]*"' pyproject.toml | tr -d '"')
$(VENV)/.stamp: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check '$(UV_PIN)'
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[$(EXTRAS)]'
	touch $@

# The checkout is also the collection tritonops.triton (galaxy.yml): a link in the venv's site-packages
# lets this venv's Ansible resolve tritonops.triton.* (modules, lookup, roles) to it from any folder,
# as `ansible-galaxy collection install` would (molecule, the tests that run roles by path).
venv: $(VENV)/.stamp
	@d=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections/tritonops; \
	  mkdir -p $$d && ln -sfn $(CURDIR) $$d/triton

# checkov, an independent Kubernetes scanner (tests/unit/k8s/test_k8s_checkov.py), in a venv of its
# own: its pins conflict with ours. Rebuilt only when CHECKOV_VERSION changes.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .cache/checkov-venv
$(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION): | $(VENV)/.stamp
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(BIN)/uv pip install --python $(CHECKOV_VENV)/bin/python --quiet 'checkov==$(CHECKOV_VERSION)'
	touch $@

checkov: $(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION)

# Installs only what is missing, so a warm machine pays nothing.
apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# mypy and ansible-lint take a core each, so they run side by side (-O: each one's output in one piece).
lint: venv
	$(BIN)/ruff check infra tests examples tools
	@$(MAKE) --no-print-directory -j2 -Otarget lint-mypy lint-ansible

lint-mypy: venv
	$(BIN)/mypy

lint-ansible: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint -q

# Test tiers: every test carries one marker that says what it needs (tests/conftest.py gives each its
# folder's unless the file marks another): unit, integration (real servers on loopback), host (Podman
# nodes: molecule, drift-live); slow (> ~30 s) on top. `unit` and `integration` together run every
# test of TEST_PATHS but the host checks, which molecule's verify (-m host) and drift-live run. A role's
# tests sit together in tests/infra/<role>/ (host checks and its unit-tier tests, marked unit).
TEST_PATHS := tests/unit tests/integration tests/infra tests/collection

# pytest-xdist spreads unit and integration over PYTEST_WORKERS processes (on 2 cores: unit 159 s instead
# of about 350 s, integration 322 s instead of about 670 s); PYTEST_WORKERS=0 runs them in one process.
# Integration leaves the cores idle 42% of its time, but 4 workers are not safe yet: one run took 303 s
# instead of 431 s, the next had Triton 2.51 crash (SIGSEGV) in test_validate_parity, loading a model while
# it still unloaded the one before (issue 22's closing note).
PYTEST_WORKERS ?= 2
# Each stage's test times, for .ci/run's list of the slowest tests (out/pytest/<stage>.xml).
JUNIT = --junit-xml=out/pytest/$@.xml
unit: venv checkov
	$(BIN)/pytest -q -rs --durations=10 -n $(PYTEST_WORKERS) -m unit $(TEST_PATHS) $(JUNIT)

integration: venv apt
	$(BIN)/pytest -q -rs --durations=10 -n $(PYTEST_WORKERS) -m integration $(TEST_PATHS) $(JUNIT)

# `make check`: the fast tier to run before every commit (lint and the unit tests that are not slow:
# no servers beyond loopback helpers, no Podman nodes; a few minutes).
check: venv lint
	$(BIN)/pytest -q -x -n $(PYTEST_WORKERS) -m "unit and not slow" $(TEST_PATHS)

# `make test` (what CI runs, timed per stage by .ci/run): lint, unit and integration tests (a real
# Triton, Prometheus and Alertmanager on loopback), every role's molecule scenarios (amd64, and arm64
# for Jetson), the rendered dev Triton pod under `podman kube play` (kube-play, about 2 min), and the
# live drift test on a Podman node (tests/infra/drift_live: converge, tamper, detect exactly that,
# converge, clean; about 10 min), and `make demo-fleet`'s test twin (fleet-live: three pull-mode nodes).
ALL_ROLES := $(patsubst roles/%/molecule,%,$(wildcard roles/*/molecule))
TEST_STAGES := lint unit integration molecule kube-play collection drift-live fleet-live

test: venv apt checkov
	@set -e; for t in $(TEST_STAGES); do $(MAKE) --no-print-directory $$t; done

print-test-stages:
	@echo $(TEST_STAGES)

# The built collection used as a user would, against a Podman node (tests/collection: its host-tier
# test; the tarball and ansible-test sanity checks run in `integration`).
collection: venv apt
	$(BIN)/pytest -q -rs -m host tests/collection $(JUNIT)

# The rendered dev Triton pod under `podman kube play` (tests/infra/kube_play: init container, securityContext,
# golden gate, a publish reaching the pod, a tampered release refused; about 2 minutes with the image cached).
kube-play: venv apt
	$(BIN)/pytest -q -rs -s -p no:cacheprovider tests/infra/kube_play $(JUNIT)

drift-live: venv apt
	$(BIN)/pytest -q -rs -s -p no:cacheprovider tests/infra/drift_live $(JUNIT)

# The fleet demo run as a test (tests/infra/demo_fleet): three pull-mode nodes, a release in waves, a
# failing one halted at its first wave and rolled back; the nodes removed after.
fleet-live: venv apt
	$(BIN)/pytest -q -rs -s -p no:cacheprovider tests/infra/demo_fleet $(JUNIT)

# Molecule: every scenario under roles/*/molecule/ (converge, idempotence, check, verify) on the
# locally built Podman images (`python -m devkit hosts build` is a no-op while its inputs are unchanged),
# MOLECULE_JOBS roles at a time, longest first (.ci/molecule; logs and a summary in out/molecule/). 2 leave
# the cores idle about a third of the time; 3 took 484 s instead of 678 s in the one run tried, kept at 2
# until more runs show the scenarios' waits hold with the cores saturated.
# Narrow it with MOLECULE_ROLES, e.g. `make molecule MOLECULE_ROLES="nvidia_driver jetson" MOLECULE_JOBS=1`.
MOLECULE_ROLES ?= $(ALL_ROLES)
MOLECULE_JOBS ?= 2
molecule: venv apt
	$(DEVKIT) hosts build --arch amd64
	@if grep -qs systemd-arm64 $(foreach r,$(MOLECULE_ROLES),roles/$(r)/molecule/*/molecule.yml); then \
	  $(DEVKIT) hosts build --arch arm64; fi
	MOLECULE_JOBS=$(MOLECULE_JOBS) .ci/molecule $(MOLECULE_ROLES)

# Host checks (tests/infra: gpu_facts + triton_server) against any inventory, the same checks molecule's
# verify runs; e.g. the local fleet after `make demo`, or a real one with its vault secret exported:
#   make host-checks INVENTORY=ansible/inventories/example HOSTS=edge TRITONOPS_ADMIN_SECRET=...
INVENTORY ?= ansible/inventories/local
HOSTS ?= edge
host-checks: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -q -p no:cacheprovider -rs -m host tests/infra/gpu_facts tests/infra/triton_server \
	  --hosts=ansible://$(HOSTS) --ansible-inventory=$(INVENTORY)

demo: venv apt
	$(DEVKIT) demo

# Remove the demo's edge node (its closing lines say so).
demo-down:
	$(DEVKIT) hosts down tritonops-edge-1

# Pull mode on three local edge nodes (tritonops-fleet-1..3, the image `make demo` builds): a signed root
# with a store name, a release rolled out in waves (a canary, then all), a failing one halted at its first
# wave and rolled back, `release status` per node, each step's seconds (tools/devkit/demo_fleet.py).
demo-fleet: venv apt
	$(DEVKIT) demo-fleet

demo-fleet-down:
	$(DEVKIT) demo-fleet --down

# The Kubernetes side: the sample repository published, the rendered dev pod played with `podman kube play`
# (a local CPU Triton image built from the wheel), smoke-checked (tools/devkit/kube_play.py).
demo-k8s: venv apt
	$(DEVKIT) demo-k8s

# Benchmarks print figures (they are not timed tests): tests/benchmarks/bench_*.py
bench: venv apt
	@for f in tests/benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# On a machine with an NVIDIA GPU: Triton with a GPU model, nv_gpu_* metrics, the GPU panels and alerts
# against a real Prometheus, gpu_facts and the memory budget against nvidia-smi, then the batching table
# (off / tune's pick / grid best with GPU utilization: tools/gpu_check.py, tools/gpu_batching.py).
# Without a GPU it says so and exits 0.
gpu-check: venv apt
	$(BIN)/python tools/gpu_check.py

# gpu-check for a GPU machine with no network: a folder under 64 MiB (tools/devkit/gpu_bundle.py) made
# afresh here, for that machine's Python; there: `sh $(GPU_BUNDLE)/run.sh [its python]`.
GPU_BUNDLE ?= .cache/gpu-bundle
GPU_PYTHON ?= 3.12
gpu-bundle: venv
	rm -rf $(GPU_BUNDLE)
	$(DEVKIT) gpu-bundle $(GPU_BUNDLE) --python $(GPU_PYTHON)

clean:
	rm -rf $(VENV) .cache
