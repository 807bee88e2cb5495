# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action for tritonops.triton.release: with agent_src, copy the controller's agent to the node's
temporary folder for this task (as ansible.builtin.script does), then run the module with it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        args = dict(self._task.args)
        src = args.pop("agent_src", None)
        try:
            if src is not None:
                if args.get("agent"):
                    raise AnsibleActionFail("release: agent and agent_src are mutually exclusive")
                try:
                    source = self._loader.get_real_file(self._find_needle("files", src), decrypt=False)
                except AnsibleError as e:
                    raise AnsibleActionFail("release: agent_src %s: %s" % (src, to_native(e)))
                tmpdir = self._connection._shell.tmpdir
                remote = self._connection._shell.join_path(tmpdir, "tritonops-agent.pyz")
                self._transfer_file(source, remote)
                self._fixup_perms2((tmpdir, remote))
                args["agent"] = remote
            result.update(self._execute_module(module_name="tritonops.triton.release", module_args=args,
                                               task_vars=task_vars))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
