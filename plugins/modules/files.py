#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: files
short_description: Converge a list of files and directories on a node in one module run
description:
  - Puts a whole bundle of files and directories (a role's units, scripts, configuration) in place in one
    round trip, where one C(ansible.builtin.template), C(copy) or C(file) task per path would cost a module
    run each.
  - Each entry is a directory, a file with the given O(files[].content) (render templates on the controller
    with C(lookup('ansible.builtin.template', ...))), a file copied from the controller (O(files[].src), binary
    files too, the action plugin sends their bytes), a file copied from another path on the node
    (O(files[].remote_src)), or a path to remove. Owner, group and mode are set as C(ansible.builtin.file)
    sets them.
  - A file is replaced atomically (a temporary file in the same folder, renamed), after O(files[].validate)
    accepted the new content.
  - Returns one entry per path in C(files) with its own C(changed), and C(changed_paths), so that a handler
    can act on its own files only; with C(--diff), C(diff) holds one diff per changed path, each headed by the
    path.
version_added: 0.2.0
author:
  - tritonops maintainers (@tritonops)
options:
  files:
    description: The paths, converged in order (a directory before the files in it).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path on the node.
        type: path
        required: true
      state:
        description:
          - V(file) writes O(files[].content) (or copies O(files[].remote_src)); V(directory) creates the
            directory; V(absent) removes the path (a directory with its content).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description:
          - The file's text, with V(state=file) (exactly one of this, O(files[].src), O(files[].content_b64)
            and O(files[].remote_src)).
        type: str
      src:
        description:
          - A file on the controller (looked up as C(ansible.builtin.copy) looks up its C(src)); the action
            plugin reads it and sends its bytes as O(files[].content_b64).
        type: path
      content_b64:
        description: The file's bytes, base64-encoded (what the action plugin makes of O(files[].src)).
        type: str
      remote_src:
        description: A file on the node whose bytes the path gets, with V(state=file).
        type: path
      owner:
        description: Owner of the path.
        type: str
        default: root
      group:
        description: Group of the path.
        type: str
        default: root
      mode:
        description: Octal mode of the path, as a string (V("0644")).
        type: raw
      validate:
        description:
          - Command run on the new file before it replaces the path; C(%s) is the new file. A non-zero exit
            fails the module and leaves the path as it was.
        type: str
      diff:
        description: Show the content in the diff (V(false) for a file that holds a secret).
        type: bool
        default: true
      if_missing:
        description:
          - Converge the path only when nothing is there yet; a path that exists, of whatever kind (a
            symlink another role manages), is left as it is.
        type: bool
        default: false
  units:
    description:
      - systemd units whose state the module reads after the files (C(systemctl is-enabled) and C(is-active)),
        returned in RV(units), so that a role enables or starts one only when it is not already, with no
        probe task of its own. Read only; nothing is enabled or started here.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of the change without modifying the node.
    support: full
    details: Reads every path and reports, per path, what would change and its diff.
  diff_mode:
    description: Returns details on what changed (or would change in check mode) in diff mode.
    support: full
    details: Per path, the content before and after (as C(ansible.builtin.copy) shows it), or the state, owner and mode.
"""

EXAMPLES = r"""
- name: Write the timer's script and units
  tritonops.triton.files:
    files:
      - path: /usr/local/lib/tritonops/recover.sh
        content: "{{ lookup('ansible.builtin.template', 'recover.sh.j2') }}"
        mode: "0755"
      - path: /etc/systemd/system/recover.service
        content: "{{ lookup('ansible.builtin.template', 'recover.service.j2') }}"
        mode: "0644"
      - path: /usr/local/lib/tritonops/agent.pyz
        src: "{{ lookup('env', 'HOME') }}/.cache/tritonops/agent/tritonops-agent.pyz"
        mode: "0755"
  register: _units
  notify: daemon-reload

- name: The paths that changed
  ansible.builtin.debug:
    msg: "{{ _units.changed_paths }}"
"""

RETURN = r"""
files:
  description: One entry per path, in order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path.
      type: str
    changed:
      description: Whether the path changed (would change, in check mode).
      type: bool
    state:
      description: The entry's state.
      type: str
    existed:
      description: Whether something was at the path before this run.
      type: bool
changed_paths:
  description: The paths that changed (would change, in check mode).
  returned: always
  type: list
  elements: str
path:
  description: The paths that changed, joined with C(, ).
  returned: changed
  type: str
units:
  description:
    - For each unit of O(units), what C(systemctl is-enabled) and C(systemctl is-active) print (V(enabled),
      V(active); V(not-found), V(inactive), ...; empty when systemctl is not there).
  returned: always
  type: dict
  sample: {"tritonops-drift-check.timer": {"enabled": "enabled", "active": "active"}}
"""

import base64
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

# As ansible.builtin.copy's diff: no content shown above this size or for binary content.
MAX_DIFF_BYTES = 104448


def _text_for_diff(data):
    if data is None:
        return ""
    if len(data) > MAX_DIFF_BYTES or b"\x00" in data:
        return None
    try:
        return to_text(data, errors="strict")
    except UnicodeError:
        return None


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except (IOError, OSError):
        return None


def _mode_str(path):
    try:
        return "%04o" % (os.lstat(path).st_mode & 0o7777)
    except OSError:
        return None


def _state(path):
    if os.path.islink(path):
        return "link"
    if os.path.isdir(path):
        return "directory"
    if os.path.exists(path):
        return "file"
    return "absent"


def _attrs(module, entry, path):
    args = module.load_file_common_arguments({"path": path, "owner": entry["owner"], "group": entry["group"],
                                              "mode": entry["mode"]})
    return args


def _apply_attrs(module, entry, path, diff):
    """Owner, group and mode: (changed, diff) as ansible.builtin.file reports them."""
    attr_diff = {"before": {"path": path}, "after": {"path": path}}
    changed = module.set_fs_attributes_if_different(_attrs(module, entry, path), False, diff=attr_diff)
    if changed:
        for key in ("before", "after"):
            diff.setdefault(key + "_attrs", {}).update(attr_diff[key])
    return changed


def _directory(module, entry, path):
    before = _state(path)
    diff = {}
    if before == "directory":
        changed = _apply_attrs(module, entry, path, diff)
        if changed:
            return True, {"before": diff["before_attrs"], "after": diff["after_attrs"]}
        return False, None
    if before != "absent":
        module.fail_json(msg="files: %s is a %s, expected a directory" % (path, before), path=path)
    if not module.check_mode:
        # Missing parents too, with the same owner and mode (as ansible.builtin.file creates them).
        missing = []
        cur = path
        while not os.path.lexists(cur):
            missing.append(cur)
            cur = os.path.dirname(cur)
        for created in reversed(missing):
            os.mkdir(created)
            _apply_attrs(module, entry, created, {})
    return True, {"before": {"path": path, "state": "absent"}, "after": {"path": path, "state": "directory"}}


def _absent(module, entry, path):
    before = _state(path)
    if before == "absent":
        return False, None
    if not module.check_mode:
        if before == "directory":
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return True, {"before": {"path": path, "state": before}, "after": {"path": path, "state": "absent"}}


def _file(module, entry, path):
    sources = [k for k in ("content", "content_b64", "remote_src") if entry[k] is not None]
    if entry["src"] is not None:
        module.fail_json(msg="files: %s: src is read by the action plugin: call the module as "
                             "tritonops.triton.files" % path, path=path)
    if len(sources) != 1:
        module.fail_json(msg="files: %s: give exactly one of content, src and remote_src (got %s)"
                             % (path, ", ".join(sources) or "none"), path=path)
    before_state = _state(path)
    if before_state not in ("file", "absent"):
        module.fail_json(msg="files: %s is a %s, expected a file" % (path, before_state), path=path)
    if entry["content"] is not None:
        new = to_bytes(entry["content"], errors="surrogate_or_strict")
    elif entry["content_b64"] is not None:
        try:
            new = base64.b64decode(entry["content_b64"], validate=True)
        except (TypeError, ValueError) as e:
            module.fail_json(msg="files: %s: content_b64 is not base64: %s" % (path, to_native(e)), path=path)
    else:
        new = _read(entry["remote_src"])
        if new is None and module.check_mode:
            # The source is made by an earlier step that check mode only predicted (a package install).
            return True, {"prepared": "--- %s\n+++ %s\n(would copy %s, not there yet)" % (
                path, path, entry["remote_src"])}
        if new is None:
            module.fail_json(msg="files: %s: remote_src %s cannot be read" % (path, entry["remote_src"]), path=path)
    old = _read(path) if before_state == "file" else None
    parent = os.path.dirname(path)
    diff = {}
    content_changed = old != new
    if content_changed:
        before_text, after_text = _text_for_diff(old), _text_for_diff(new)
        if not entry["diff"]:
            diff.update(before="", after="", before_header=path, after_header=path,
                        prepared="--- %s\n+++ %s\n(content hidden)" % (path, path))
        elif before_text is None or after_text is None:
            diff.update(prepared="--- %s\n+++ %s\n(binary or large content differs)" % (path, path))
        else:
            diff.update(before=before_text, after=after_text, before_header=path,
                        after_header=entry["remote_src"] or path)
        if not module.check_mode:
            if not os.path.isdir(parent):
                module.fail_json(msg="files: %s: its folder %s does not exist" % (path, parent), path=path)
            fd, tmp = tempfile.mkstemp(prefix=".tritonops-", dir=parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(new)
                if entry["validate"]:
                    if "%s" not in entry["validate"]:
                        module.fail_json(msg="files: %s: validate must contain %%s" % path, path=path)
                    rc, out, err = module.run_command(entry["validate"] % tmp)
                    if rc != 0:
                        module.fail_json(msg="files: %s: validate failed (rc %d): %s" % (path, rc, err or out),
                                         path=path, stdout=out, stderr=err)
                _apply_attrs(module, entry, tmp, {})
                module.atomic_move(tmp, path, unsafe_writes=False)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    attrs_changed = os.path.exists(path) and _apply_attrs(module, entry, path, diff)
    if not content_changed and not attrs_changed:
        return False, None
    if not content_changed:
        return True, {"before": diff["before_attrs"], "after": diff["after_attrs"]}
    diff.pop("before_attrs", None)
    diff.pop("after_attrs", None)
    return True, diff


def _unit_states(module, units):
    """What systemctl says of each unit: {unit: {"enabled": ..., "active": ...}} (read only)."""
    systemctl = module.get_bin_path("systemctl")
    states = {}
    for unit in units:
        state = {"enabled": "", "active": ""}
        if systemctl:
            for key, verb in (("enabled", "is-enabled"), ("active", "is-active")):
                state[key] = module.run_command([systemctl, verb, unit], environ_update={"LC_ALL": "C"})[1].strip()
        states[unit] = state
    return states


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="path", required=True),
                state=dict(type="str", choices=["file", "directory", "absent"], default="file"),
                content=dict(type="str"),
                src=dict(type="path"),
                content_b64=dict(type="str"),
                remote_src=dict(type="path"),
                owner=dict(type="str", default="root"),
                group=dict(type="str", default="root"),
                mode=dict(type="raw"),
                validate=dict(type="str"),
                diff=dict(type="bool", default=True),
                if_missing=dict(type="bool", default=False),
            )),
            units=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    results, diffs = [], []
    for entry in module.params["files"]:
        path = entry["path"]
        if not os.path.isabs(path):
            module.fail_json(msg="files: path %s is not absolute" % path, path=path)
        existed = os.path.lexists(path)
        try:
            if entry["if_missing"] and (os.path.lexists(path)):
                changed, diff = False, None
            elif entry["state"] == "directory":
                changed, diff = _directory(module, entry, path)
            elif entry["state"] == "absent":
                changed, diff = _absent(module, entry, path)
            else:
                changed, diff = _file(module, entry, path)
        except (IOError, OSError) as e:
            module.fail_json(msg="files: %s: %s" % (path, to_native(e)), path=path)
        results.append({"path": path, "state": entry["state"], "changed": changed, "existed": existed})
        if changed and module._diff and diff:
            if "before_header" not in diff and "prepared" not in diff:
                diff = dict(diff, before_header=path, after_header=path)
            diffs.append(diff)
    changed_paths = [r["path"] for r in results if r["changed"]]
    out = dict(changed=bool(changed_paths), changed_paths=changed_paths, files=results)
    if changed_paths:
        # What a report names (tritonops drift: "would change path=..."), as ansible.builtin.file's path.
        out["path"] = ", ".join(changed_paths)
    if diffs:
        out["diff"] = diffs
    out["units"] = _unit_states(module, module.params["units"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
