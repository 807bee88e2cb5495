#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: release_stage
short_description: Validate, checksum and stage a model release on the controller, and build the release agent
description:
  - Runs on the controller only (an action plugin; nothing is sent to the host), inside the Ansible worker
    with no command started. It validates the model repository O(source) with Triton's own config schema,
    checksums every file into a manifest, and stages the release as one folder (and tarball) per release
    id under O(cache), as C(python -m tritonops.release.push prepare) does.
  - With O(agent), also writes the release agent zipapp there (C(python -m tritonops.agent_bundle)),
    rewritten only when its bytes changed.
  - Needs the C(tritonops) Python package, of the same release as this collection, in the Python that
    runs Ansible (as the C(tritonops.triton.pin) lookup does).
  - A controller artefact, so the task never reports changed; what changes the host is reported by the
    M(tritonops.triton.release) steps that push and install the release.
version_added: 0.2.0
author:
  - tritonops maintainers (@tritonops)
options:
  source:
    description: The model repository folder, or with O(tarball=true) a (sha256-checked) tarball of it.
    type: path
    required: true
  tarball:
    description: O(source) is a tarball; it is unpacked under O(cache) first (a single top folder is the repository).
    type: bool
    default: false
  cache:
    description: The controller's folder of staged releases (one folder and one tarball per release id).
    type: path
    required: true
  target:
    description: The hardware the release is validated for (instance groups, backends).
    type: str
    choices: [cpu, gpu, jetson]
  version:
    description: The release id; default the first 16 hex digits of the manifest digest.
    type: str
  config_name:
    description: Validate the models' C(configs/NAME.pbtxt) instead of their C(config.pbtxt).
    type: str
  agent:
    description: Also write the release agent zipapp to this path on the controller.
    type: path
attributes:
  check_mode:
    description: Runs in check mode too (it changes only the controller's cache), so that the check plans from the real release.
    support: full
  diff_mode:
    description: Nothing on the host changes, so there is no diff.
    support: none
notes:
  - An invalid repository, a checksum that does not hold, or a O(version) already staged with other
    content fails the task with the message of the check (it names the file), before the host changes.
"""

EXAMPLES = r"""
- name: Validate, checksum and stage the release on the controller
  tritonops.triton.release_stage:
    source: examples/model_repository
    cache: "{{ lookup('env', 'HOME') }}/.cache/tritonops/releases"
    target: cpu
    agent: "{{ lookup('env', 'HOME') }}/.cache/tritonops/tritonops-agent.pyz"
  register: staged
"""

RETURN = r"""
release:
  description: The staged release (what C(tritonops.release.push prepare) prints).
  returned: success
  type: dict
  sample:
    release: 0f623c0bf6537975
    path: /root/.cache/tritonops/releases/0f623c0bf6537975
    tarball: /root/.cache/tritonops/releases/0f623c0bf6537975.tar
    digest: 0f623c0bf6537975...
    files: 18
    models: {mlp: "sha256..."}
    ensembles: [pipeline]
    warnings: []
    changed: false
agent:
  description: The release agent zipapp written, with O(agent).
  returned: with O(agent)
  type: dict
  sample: {path: /root/.cache/tritonops/tritonops-agent.pyz, sha256: "4f...", changed: false}
"""
