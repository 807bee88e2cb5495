# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action for tritonops.triton.release_stage: the controller's release steps in the Ansible worker.

``tritonops.release.push.prepare`` and ``tritonops.agent_bundle.build``, called in-process: no Python
started per host and task (the two commands they replace cost about 1.7 s on every converge).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import importlib
import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

ARGS = dict(
    source=dict(type="path", required=True),
    tarball=dict(type="bool", default=False),
    cache=dict(type="path", required=True),
    target=dict(type="str", choices=["cpu", "gpu", "jetson"]),
    version=dict(type="str"),
    config_name=dict(type="str"),
    agent=dict(type="path"),
)


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise AnsibleActionFail(
            "tritonops.triton.release_stage: the tritonops Python package is not importable by %s (the Python "
            "that runs Ansible): install the tritonops wheel of this collection's release into it (%s)"
            % (sys.executable, e))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False  # the controller only

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        p = self.validate_argument_spec(argument_spec=ARGS)[1]
        push = _import("tritonops.release.push")
        errors = _import("tritonops.core.errors")
        cache = Path(p["cache"])
        try:
            source = Path(p["source"])
            if p["tarball"]:  # the unpacked folder is shared by the hosts of the play: one at a time
                with push.staging_lock(cache):
                    source = push.extract_tarball(source, cache / (push.STAGING_PREFIX + "unpacked"))
                    result["release"] = push.prepare(source, cache, p["target"], p["version"], p["config_name"])
            else:  # validated and checksummed in parallel; only the staging holds the cache's lock
                result["release"] = push.prepare(source, cache, p["target"], p["version"], p["config_name"])
        except errors.ReleaseError as e:
            raise AnsibleActionFail("%s" % e, result={"error": "%s" % e})
        if p["agent"]:
            bundle = _import("tritonops.agent_bundle")
            out = Path(p["agent"])
            before = out.read_bytes() if out.is_file() else None
            data = bundle.build(out).read_bytes()
            result["agent"] = {"path": str(out), "sha256": hashlib.sha256(data).hexdigest(), "changed": before != data}
        result["changed"] = False  # a controller artefact: the host's changes are the release module's
        return result
