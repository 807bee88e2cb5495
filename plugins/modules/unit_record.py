#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: unit_record
short_description: Record a systemd unit's properties, as systemd runs it, for the drift check
description:
  - Reads C(systemctl show UNIT) on the node and writes its properties as one JSON object to O(dest), in
    one module run. This is the record that the release agent's drift check compares the live unit with (every
    property that differs from the record is a finding).
  - Properties whose names match O(runtime) (state systemd fills in at run time) are left out; the values
    of properties matching O(sets) (dependency lists, printed in hash order) have their words sorted; in
    every other value, text matching O(exec_runtime) (an Exec command's last run) is cut to C( }). A
    property listed more than once holds its values one a line.
  - Writes nothing while systemd has not loaded the unit's files (C(NeedDaemonReload=yes)), when the unit
    is not loaded from O(fragment_path), or when systemd does not answer; RV(skipped_because) says why.
  - The file is replaced atomically, and only when its content changes, so a converge that changes
    nothing writes nothing.
version_added: 0.2.0
author:
  - tritonops maintainers (@tritonops)
options:
  unit:
    description: The unit's name, with its suffix (V(tritonserver.service)).
    type: str
    required: true
  dest:
    description: The record's path on the node (owner root, mode 0644).
    type: path
    required: true
  fragment_path:
    description: The unit file the role installs; a unit loaded from another file is not recorded.
    type: path
    required: true
  runtime:
    description: Regular expressions (full match) of the property names left out.
    type: list
    elements: str
    default: []
  sets:
    description: A regular expression (full match) of the properties whose words are sorted.
    type: str
    default: "^$"
  exec_runtime:
    description: A regular expression cut out of every value (replaced by C( })).
    type: str
    default: "^$"
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of the change without modifying the node.
    support: full
    details: Reads the unit and the record and reports whether the record would change.
  diff_mode:
    description: Returns details on what changed (or would change in check mode) in diff mode.
    support: full
    details: The record before and after.
"""

EXAMPLES = r"""
- name: Record Triton's unit for the drift check
  tritonops.triton.unit_record:
    unit: tritonserver.service
    dest: /etc/tritonserver/expected-unit.json
    fragment_path: /etc/systemd/system/tritonserver.service
    runtime: [ActiveState, SubState, MainPID, "[A-Za-z]*Timestamp(Monotonic)?"]
    sets: "^(Requires|Wants|After|Before)$"
    exec_runtime: " ; start_time=[^}]*}"
"""

RETURN = r"""
skipped_because:
  description: Why nothing was recorded (systemd did not answer, the unit is not loaded from O(fragment_path), or
    a daemon-reload is pending); absent when the record was checked or written.
  returned: when nothing was recorded
  type: str
properties:
  description: How many properties the record holds.
  returned: when recorded
  type: int
"""

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule


def record(show, runtime, sets, exec_runtime):
    """The properties of ``systemctl show`` output as the drift check compares them."""
    skip = re.compile("^(%s)$" % "|".join(runtime)) if runtime else None
    unordered, exec_run = re.compile(sets), re.compile(exec_runtime)
    out = {}
    for line in show.splitlines():
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        if skip is not None and skip.match(key):
            continue
        # Sorted as the drift check sorts the live unit's (tritonops.agent.effective.unit_properties).
        value = " ".join(sorted(value.split())) if unordered.match(key) else exec_run.sub(" }", value)
        out[key] = out[key] + "\n" + value if key in out else value
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            fragment_path=dict(type="path", required=True),
            runtime=dict(type="list", elements="str", default=[]),
            sets=dict(type="str", default="^$"),
            exec_runtime=dict(type="str", default="^$"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rc, show, err = module.run_command(["systemctl", "show", p["unit"]], environ_update={"LC_ALL": "C"})
    lines = show.splitlines()
    why = None
    if rc != 0:
        why = "systemctl show %s exited %d: %s" % (p["unit"], rc, err.strip()[:200])
    elif "LoadState=loaded" not in lines:
        why = "%s is not loaded" % p["unit"]
    elif "FragmentPath=" + p["fragment_path"] not in lines:
        why = "%s is not loaded from %s" % (p["unit"], p["fragment_path"])
    elif "NeedDaemonReload=yes" in lines:
        why = "systemd has not loaded %s's changed files yet (NeedDaemonReload=yes)" % p["unit"]
    if why:
        module.exit_json(changed=False, skipped_because=why)
    try:
        props = record(show, p["runtime"], p["sets"], p["exec_runtime"])
    except re.error as e:
        module.fail_json(msg="unit_record: a pattern is not a regular expression: %s" % e)
    # The bytes of Ansible's to_nice_json, which wrote the records before this module.
    new = json.dumps(props, indent=4, sort_keys=True, ensure_ascii=False, separators=(",", ": "))
    dest = p["dest"]
    try:
        with open(dest, "r", encoding="utf-8") as fh:
            old = fh.read()
    except (IOError, OSError):
        old = None
    changed = old != new
    out = dict(changed=changed, properties=len(props))
    if changed and module._diff:
        out["diff"] = {"before_header": dest, "after_header": dest, "before": old or "", "after": new}
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".unit-record-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(new)
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, dest, unsafe_writes=False)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
