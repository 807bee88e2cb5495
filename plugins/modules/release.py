#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: release
short_description: Model releases on a node (status, install, activate, mark, prune) through the release agent
description:
  - Runs one command of the tritonops release agent (C(tritonops-agent.pyz), built from the C(tritonops)
    Python package with C(python -m tritonops.agent_bundle FILE)) on the node and returns its JSON.
  - The agent keeps one folder per release under O(releases) and points the models symlink O(link) at
    the active one; C(install) verifies a pushed copy against its manifest before renaming it into place,
    C(activate) switches the symlink atomically, C(mark) records the release that passed its gate,
    C(prune) keeps the last O(keep) releases.
  - Give either O(agent) (a file already on the node) or O(agent_src) (a file on the controller, copied
    to the node's temporary folder for this task only, like M(ansible.builtin.script) does).
version_added: 0.1.0
author:
  - tritonops maintainers (@tritonops)
options:
  command:
    description: The agent command.
    type: str
    required: true
    choices: [status, install, activate, mark, prune]
  agent:
    description: Path of the agent zipapp on the node.
    type: path
  agent_src:
    description:
      - Path of the agent zipapp on the controller (the action plugin copies it to the node).
      - Mutually exclusive with O(agent).
    type: path
  python:
    description: The node's Python that runs the agent (default the interpreter running this module).
    type: path
  link:
    description: The models symlink (C(tritonserver --model-repository)).
    type: path
    required: true
  releases:
    description: The folder holding one folder per release.
    type: path
    required: true
  release:
    description:
      - The release id. Required by O(command=install), O(command=activate) and O(command=mark);
        with O(command=status), the release whose presence and checksums are reported.
    type: str
  digest:
    description:
      - The content digest the release must have (O(command=status), and the check mode of
        O(command=install)); a release id already installed with other content is reported as
        C(release_conflict).
    type: str
  staging:
    description: O(command=install) the pushed copy, a folder directly in O(releases).
    type: path
  tarball:
    description: O(command=install) a pushed tarball, unpacked into O(staging) (both removed after).
    type: path
  owner:
    description: O(command=install) the owner of the release files.
    type: str
  group:
    description: O(command=install) the group of the release files.
    type: str
  touch:
    description: O(command=activate) models about to be (re)loaded from the release (Triton re-reads them).
    type: list
    elements: str
    default: []
  keep:
    description: O(command=prune) how many releases to keep (the active and the current one always stay).
    type: int
  triton_url:
    description:
      - O(command=status) also reads Triton's repository index at this HTTP endpoint (C(POST
        /v2/repository/index), what M(tritonops.triton.triton_model) reads) in the same module run, and
        returns it as RV(index).
      - When Triton does not answer, the task fails, except in check mode (a stopped Triton is what the
        play would start), where RV(index) is absent and RV(index_error) says why.
    type: str
  admin_header:
    description: The admin header's name for O(triton_url).
    type: str
    default: triton-admin-key
  admin_secret:
    description: The admin header's value for O(triton_url) (omit when the repository API is not restricted).
    type: str
  lock_timeout:
    description:
      - Seconds the agent waits for another command that holds the releases folder (its lock file
        C(.lock), held by a pull agent's poll or another play) before it fails naming the holder (C(rc) 3).
      - Default the agent's (C(TRITONOPS_LOCK_TIMEOUT) on the node, else 60).
    type: float
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of the change without modifying the node.
    support: full
    details:
      - Runs the agent's read-only C(status) and reports what the command would change. For O(command=prune)
        the prediction is C(changed) when more than O(keep) releases are present; O(command=activate) and
        O(command=mark) predict from the release id alone, as if an earlier O(command=install) of the same
        check run had happened.
  diff_mode:
    description: Returns details on what changed (or would change in check mode) in diff mode.
    support: full
    details: The active and the current release before and after.
notes:
  - The agent prints one JSON object per command; a refused step fails the task with the agent's
    message (it names the file and the step) and its exit code in C(rc) (1 refused, 2 usage, 3 unreachable
    or the releases folder held by another command for longer than O(lock_timeout)).
  - Every command that changes the node (install, activate, mark, prune) holds the releases folder's lock,
    so a pull agent on the same node and this module never change it at once.
"""

EXAMPLES = r"""
- name: Read the node's releases
  tritonops.triton.release:
    command: status
    agent_src: /var/cache/tritonops/agent/tritonops-agent.pyz
    link: /opt/tritonserver/models
    releases: /opt/tritonserver/releases
    release: "2025-01-01"

- name: Switch to a release (atomic symlink rename) with the agent installed on the node
  tritonops.triton.release:
    command: activate
    agent: /opt/tritonops/tritonops-agent.pyz
    link: /opt/tritonserver/models
    releases: /opt/tritonserver/releases
    release: "2025-01-01"
    touch: [densenet_onnx]

- name: Keep the last three releases
  tritonops.triton.release:
    command: prune
    agent: /opt/tritonops/tritonops-agent.pyz
    link: /opt/tritonserver/models
    releases: /opt/tritonserver/releases
    keep: 3
"""

RETURN = r"""
agent:
  description: The agent's JSON output (for O(command=status) also in check mode).
  returned: success
  type: dict
  sample: {"active": "r2", "current": "r2", "releases": ["r1", "r2"], "active_models": {"m": "sha256..."}}
index:
  description: Triton's repository index (C(name), C(version), C(state), C(reason)), with O(triton_url).
  returned: O(command=status) with O(triton_url), when Triton answered
  type: list
  elements: dict
index_error:
  description: Why Triton's index could not be read (check mode only; outside it the task fails).
  returned: O(command=status) with O(triton_url) in check mode, when Triton did not answer
  type: str
active:
  description: The active release after the command (predicted in check mode).
  returned: success
  type: str
current:
  description: The current (gated) release after the command (predicted in check mode).
  returned: success
  type: str
error:
  description: The agent's message when it refused the command.
  returned: failure
  type: str
rc:
  description: The agent's exit code.
  returned: always
  type: int
"""

import json
import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tritonops.triton.plugins.module_utils.triton_api import repository_call

REQUIRES = {
    "install": ("release", "staging"),
    "activate": ("release",),
    "mark": ("release",),
    "prune": ("keep",),
}


class Agent(object):
    def __init__(self, module):
        self.module = module
        p = module.params
        self.base = [p["python"] or sys.executable, p["agent"]]
        self.layout = ["--link", p["link"], "--releases", p["releases"]]
        if p["lock_timeout"] is not None:
            self.layout += ["--lock-timeout", str(p["lock_timeout"])]

    def run(self, command, *args):
        argv = self.base + [command] + self.layout + [str(a) for a in args]
        rc, out, err = self.module.run_command(argv)
        try:
            doc = json.loads(out) if out.strip() else {}
        except ValueError:
            doc = {}
        if rc != 0 or not isinstance(doc, dict):
            error = doc.get("error") if isinstance(doc, dict) else None
            error = error or (err.strip().splitlines() or ["the agent exited %d with no message" % rc])[-1]
            self.module.fail_json(msg="release agent %s: %s" % (command, error), error=error, rc=rc,
                                  stderr=err, agent=doc)
        return doc

    def status(self, release=None, digest=None):
        args = []
        if release is not None:
            args += ["--release", release]
        if digest:
            args += ["--digest", digest]
        return self.run("status", *args)


def command_args(p):
    cmd = p["command"]
    args = []
    if cmd == "status":
        if p["release"] is not None:
            args += ["--release", p["release"]]
        if p["digest"]:
            args += ["--digest", p["digest"]]
    elif cmd == "install":
        args += ["--staging", p["staging"], "--release", p["release"]]
        for opt in ("tarball", "owner", "group"):
            if p[opt]:
                args += ["--" + opt, p[opt]]
    elif cmd == "activate":
        args += ["--release", p["release"]] + ["--touch=" + m for m in p["touch"]]
    elif cmd == "mark":
        args += ["--release", p["release"]]
    else:
        args += ["--keep", p["keep"]]
    return args


def predict(p, st):
    """What the command would do, from the read-only status (check mode): (changed, after)."""
    cmd = p["command"]
    after = {"active": st.get("active"), "current": st.get("current")}
    if cmd == "install":
        if st.get("release_conflict"):
            return None, st.get("release_error") or "release %s is installed with other content" % p["release"]
        return not (st.get("release_present") and st.get("release_verified")), after
    if cmd == "activate":
        after["active"] = p["release"]
        return st.get("active") != p["release"] or bool(p["touch"]), after
    if cmd == "mark":
        after["current"] = p["release"]
        return st.get("current") != p["release"], after
    return len(st.get("releases") or []) > p["keep"], after


def main():
    module = AnsibleModule(
        argument_spec=dict(
            command=dict(type="str", required=True, choices=["status", "install", "activate", "mark", "prune"]),
            agent=dict(type="path"),
            agent_src=dict(type="path"),
            python=dict(type="path"),
            link=dict(type="path", required=True),
            releases=dict(type="path", required=True),
            release=dict(type="str"),
            digest=dict(type="str"),
            staging=dict(type="path"),
            tarball=dict(type="path"),
            owner=dict(type="str"),
            group=dict(type="str"),
            touch=dict(type="list", elements="str", default=[]),
            keep=dict(type="int"),
            lock_timeout=dict(type="float"),
            triton_url=dict(type="str"),
            admin_header=dict(type="str", default="triton-admin-key", no_log=False),
            admin_secret=dict(type="str", no_log=True),
        ),
        required_if=[("command", cmd, fields) for cmd, fields in REQUIRES.items()],
        mutually_exclusive=[("agent", "agent_src")],
        supports_check_mode=True,
    )
    p = module.params
    if not p["agent"]:
        module.fail_json(msg="release: give agent (the agent on the node) or agent_src (on the controller)")
    if not os.path.isfile(p["agent"]):
        module.fail_json(msg="release: agent %s: no such file on the node" % p["agent"])
    cmd = p["command"]
    if p["triton_url"] and cmd != "status":
        module.fail_json(msg="release: triton_url reads Triton's index with command=status only, not %s" % cmd)
    agent = Agent(module)
    # The release's checksums are read only where they decide something (status, install's check mode).
    probe = cmd == "status" or (cmd == "install" and module.check_mode)
    before = status = agent.status(p["release"] if probe else None, p["digest"] if probe else None)
    if cmd == "status":
        out = dict(changed=False, agent=status, active=status.get("active"), current=status.get("current"), rc=0)
        if p["triton_url"]:
            index, error = repository_call(module, p["triton_url"], "/index", {}, 30, p["admin_header"],
                                           p["admin_secret"])[:2]
            if error and not module.check_mode:
                module.fail_json(msg=error, **out)
            out.update(dict(index=index or []) if not error else dict(index_error=error))
        module.exit_json(**out)
    if module.check_mode:
        changed, after = predict(p, status)
        if changed is None:
            module.fail_json(msg="release agent install would refuse: %s" % after, error=after, rc=1)
        out = dict(changed=changed, agent=status, rc=0, **after)
    else:
        doc = agent.run(cmd, *command_args(p))
        if cmd in ("activate", "mark"):
            after = agent.status()
        else:
            after = before
        out = dict(changed=bool(doc.get("changed")), agent=doc, rc=0, active=after.get("active"),
                   current=after.get("current"))
    if module._diff:
        out["diff"] = {
            "before": {"active": before.get("active"), "current": before.get("current"),
                       "releases": before.get("releases")},
            "after": {"active": out["active"], "current": out["current"],
                      "releases": (before.get("releases") if module.check_mode or cmd != "prune"
                                   else [r for r in before.get("releases") or [] if r not in doc.get("removed", [])])},
        }
        if cmd == "install" and out["changed"]:
            out["diff"]["after"]["releases"] = sorted(set(before.get("releases") or []) | {p["release"]})
    module.exit_json(**out)


if __name__ == "__main__":
    main()
