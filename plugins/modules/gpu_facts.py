#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: NVIDIA GPU, Jetson (L4T/JetPack) and CPU-only facts of a node
description:
  - Reads the node's NVIDIA PCI devices (sysfs), driver (C(/proc/driver/nvidia/version)), C(nvidia-smi)
    (names, UUIDs, memory, compute capability) and Jetson release (C(/etc/nv_tegra_release) or the
    C(nvidia-l4t-core) package), and sets the fact C(ansible_facts.gpu).
  - Only reads, and never fails on a probe that cannot run; its field stays empty and C(errors) says why.
  - The same probe is the gpu_facts role's local fact (C(ansible_local.gpu)).
version_added: 0.1.0
author:
  - tritonops maintainers (@tritonops)
options:
  jetpack_map:
    description: L4T (Jetson Linux) release C(R.M.P) to JetPack version.
    type: dict
    default: {}
  use_nvidia_smi:
    description: Run C(nvidia-smi) (when present) for GPU names, memory and driver version.
    type: bool
    default: true
  nvidia_smi_timeout:
    description: Seconds allowed to C(nvidia-smi).
    type: int
    default: 10
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of the change without modifying the node.
    support: full
    details: Only reads.
  diff_mode:
    description: Returns details on what changed in diff mode.
    support: none
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""

EXAMPLES = r"""
- name: Read the GPU facts
  tritonops.triton.gpu_facts:
    jetpack_map: {"36.4.0": "6.1"}

- name: Report the platform
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu.platform }}: {{ ansible_facts.gpu.gpu_count }} GPU(s)"
"""

RETURN = r"""
ansible_facts:
  description: The facts.
  returned: always
  type: complex
  contains:
    gpu:
      description:
        - C(platform) (V(cpu), V(nvidia_gpu) or V(jetson)), C(arch), C(gpu_count), C(pci_devices),
          C(driver_loaded), C(driver_version), C(nvidia_smi), C(jetson), C(errors) and C(schema) (1).
      returned: always
      type: dict
      sample: {"platform": "cpu", "gpu_count": 0, "errors": [], "schema": 1}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tritonops.triton.plugins.module_utils.gpu import probe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            jetpack_map=dict(type="dict", default={}),
            use_nvidia_smi=dict(type="bool", default=True),
            nvidia_smi_timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["nvidia_smi_timeout"] < 1:
        module.fail_json(msg="gpu_facts: nvidia_smi_timeout must be at least 1 (got %d)" % p["nvidia_smi_timeout"])
    fact = probe(dict((str(k), str(v)) for k, v in p["jetpack_map"].items()), p["use_nvidia_smi"],
                 p["nvidia_smi_timeout"])
    module.exit_json(changed=False, ansible_facts={"gpu": fact})


if __name__ == "__main__":
    main()
