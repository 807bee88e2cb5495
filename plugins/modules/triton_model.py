#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: triton_model
short_description: Load and unload models through Triton's model repository API
description:
  - Loads or unloads one model through Triton Inference Server's repository API
    (C(POST /v2/repository/models/NAME/load) and C(/unload)), and returns the repository index
    (C(POST /v2/repository/index)).
  - Triton restricts the repository API behind an admin header (C(--http-restricted-api)); O(admin_secret)
    is its value, never logged.
  - Without O(name), only reads the index (nothing changes).
  - Runs on the node (the API listens on loopback by default).
version_added: 0.1.0
author:
  - tritonops maintainers (@tritonops)
options:
  url:
    description: Triton's HTTP endpoint.
    type: str
    default: http://127.0.0.1:8000
  name:
    description: The model. Without it the module only reads the repository index.
    type: str
  state:
    description:
      - V(loaded) loads the model when it is not READY (or always with O(reload=true));
        V(unloaded) unloads it when it is READY.
    type: str
    choices: [loaded, unloaded]
    default: loaded
  reload:
    description:
      - Load even when the model is READY, so that Triton re-reads its files (a new release). Triton loads
        the new version beside the old one and swaps when it is ready.
    type: bool
    default: false
  unload_dependents:
    description: With O(state=unloaded), unload the models that depend on this one too.
    type: bool
    default: false
  admin_header:
    description: The admin header's name.
    type: str
    default: triton-admin-key
  admin_secret:
    description: The admin header's value (omit when the repository API is not restricted).
    type: str
  timeout:
    description: Seconds to wait for Triton's answer (a load can take minutes).
    type: int
    default: 600
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of the change without modifying the node.
    support: full
    details: Reads the repository index and reports whether the model's state would change.
  diff_mode:
    description: Returns details on what changed (or would change in check mode) in diff mode.
    support: full
    details: The model's state in the index before and after.
"""

EXAMPLES = r"""
- name: Load a model (reload it when a new release changed its files)
  tritonops.triton.triton_model:
    name: densenet_onnx
    reload: true
    admin_secret: "{{ triton_server_admin_secret }}"

- name: Unload a model the release dropped
  tritonops.triton.triton_model:
    name: old_model
    state: unloaded
    admin_secret: "{{ triton_server_admin_secret }}"

- name: Read the repository index
  tritonops.triton.triton_model:
    admin_secret: "{{ triton_server_admin_secret }}"
  register: triton_index
"""

RETURN = r"""
index:
  description: The repository index before the change (Triton's C(name), C(version), C(state), C(reason)).
  returned: success
  type: list
  elements: dict
  sample: [{"name": "densenet_onnx", "version": "1", "state": "READY"}]
state:
  description: The model's state after the call (predicted in check mode); absent from the index is V(absent).
  returned: when O(name) is given
  type: str
  sample: READY
"""

from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tritonops.triton.plugins.module_utils.triton_api import repository_call


def call(module, path, body, timeout):
    p = module.params
    doc, error, status = repository_call(module, p["url"], path, body, timeout, p["admin_header"], p["admin_secret"])
    if error:
        module.fail_json(msg=error, status=status)
    return doc


def model_state(index, name):
    """READY when any version of ``name`` is READY, else the first state the index gives, else absent."""
    states = [m.get("state") or "UNKNOWN" for m in index if m.get("name") == name]
    if "READY" in states:
        return "READY"
    return states[0] if states else "absent"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            name=dict(type="str"),
            state=dict(type="str", choices=["loaded", "unloaded"], default="loaded"),
            reload=dict(type="bool", default=False),
            unload_dependents=dict(type="bool", default=False),
            admin_header=dict(type="str", default="triton-admin-key", no_log=False),
            admin_secret=dict(type="str", no_log=True),
            timeout=dict(type="int", default=600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    index = call(module, "/index", {}, 30) or []
    if not p["name"]:
        module.exit_json(changed=False, index=index)
    before = model_state(index, p["name"])
    if p["state"] == "loaded":
        changed = p["reload"] or before != "READY"
        after = "READY" if changed else before
        path, body = "/models/%s/load" % quote(p["name"], safe=""), {}
    else:
        changed = before == "READY"
        after = "UNAVAILABLE" if changed else before
        path, body = "/models/%s/unload" % quote(p["name"], safe=""), {"parameters": {"unload_dependents": p["unload_dependents"]}}
    if changed and not module.check_mode:
        call(module, path, body, p["timeout"])
    out = dict(changed=changed, index=index, state=after)
    if module._diff:
        out["diff"] = {"before": {p["name"]: before}, "after": {p["name"]: after}}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
