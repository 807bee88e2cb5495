"""Action for tritonops.triton.files: each entry's ``src`` (a file on the controller, binary too, found as
ansible.builtin.copy finds its src) is read here and sent to the module as ``content_b64``, so that a whole
bundle, controller files included, is one module run on the node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        args = dict(self._task.args)
        entries = args.get("files")
        if isinstance(entries, list):
            sent = []
            for entry in entries:
                if isinstance(entry, dict) and entry.get("src") is not None:
                    entry = dict(entry)
                    src = entry.pop("src")
                    if entry.get("content") is not None or entry.get("content_b64") is not None:
                        raise AnsibleActionFail("files: %s: src and content are mutually exclusive"
                                                % entry.get("path"))
                    try:
                        source = self._loader.get_real_file(self._find_needle("files", src), decrypt=False)
                        with open(source, "rb") as fh:
                            entry["content_b64"] = base64.b64encode(fh.read()).decode("ascii")
                    except (AnsibleError, IOError, OSError) as e:
                        raise AnsibleActionFail("files: %s: src %s: %s" % (entry.get("path"), src, to_native(e)))
                sent.append(entry)
            args["files"] = sent
        result.update(self._execute_module(module_name="tritonops.triton.files", module_args=args,
                                           task_vars=task_vars))
        return result
