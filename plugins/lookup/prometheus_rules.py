# Copyright: tritonops contributors
# Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""The tritonops.triton.prometheus_rules lookup: the project's Prometheus rule file, rendered in-process."""

from __future__ import annotations

DOCUMENTATION = r"""
name: prometheus_rules
author:
  - tritonops maintainers (@tritonops)
version_added: 0.2.0
short_description: The project's Prometheus rule file (recording and alert rules) for one scrape job
description:
  - Returns the text of the Prometheus rule file that C(tritonops observability export) writes
    (C(tritonops-rules.yml)), rendered by the C(tritonops.observability) module of the C(tritonops) Python
    package inside the Ansible process, with no command run. The node_monitoring role installs it on each
    node and checks it with promtool.
  - Runs on the controller and needs the C(tritonops) package, of the same release as this collection,
    in the Python that runs Ansible (as the C(tritonops.triton.pin) lookup does). It does not need the
    Grafana SDK (the obs extra), since no dashboard is rendered.
options:
  job:
    description: The Prometheus scrape job of Triton's metrics port, written into the rules' selectors.
    type: str
    default: triton
notes:
  - A job that is not a plain scrape job name (letters, digits and C(_.:/-), at most 128) fails.
"""

EXAMPLES = r"""
- name: Install the rules for the scrape job "triton"
  ansible.builtin.copy:
    dest: /etc/prometheus/rules/tritonops-rules.yml
    content: "{{ lookup('tritonops.triton.prometheus_rules', job='triton') }}"
    mode: "0644"
    validate: promtool check rules %s
"""

RETURN = r"""
_raw:
  description: The rule file's text, one element.
  type: list
  elements: str
"""

# ansible-test (validate-modules) wants the imports below DOCUMENTATION, EXAMPLES and RETURN.
import importlib  # noqa: E402
import sys  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = sorted(set(kwargs) - {"job"})
        if terms or unknown:
            raise AnsibleLookupError(f"tritonops.triton.prometheus_rules: takes only job=NAME, not {terms or unknown}")
        try:
            rules = importlib.import_module("tritonops.observability.rules")
            export = importlib.import_module("tritonops.observability.export")
        except ImportError as e:
            raise AnsibleLookupError(
                f"tritonops.triton.prometheus_rules: the tritonops Python package is not importable by "
                f"{sys.executable} (the Python that runs Ansible): install the tritonops wheel of this "
                f"collection's release into it ({e})") from None
        try:
            settings = rules.RuleSettings(job=rules.check_job(kwargs.get("job", "triton")))
        except ValueError as e:
            raise AnsibleLookupError(f"tritonops.triton.prometheus_rules: job {e}") from None
        return [export.rules_yaml(settings)]
