# Copyright: tritonops contributors
# Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""The tritonops.triton.pin lookup: a pinned version from tritonops.versions, the project's one list of pins."""

from __future__ import annotations

DOCUMENTATION = r"""
name: pin
author:
  - tritonops maintainers (@tritonops)
version_added: 0.1.0
short_description: A pinned version (image, wheel, package, chart) from tritonops.versions
description:
  - Returns the pin called by each term, from the C(tritonops.versions) module of the C(tritonops) Python
    package, the one place the project pins versions. Role defaults read their pins through this lookup,
    so no role repeats a pin; set the role variable in the inventory to use another version.
  - Runs on the controller and needs the C(tritonops) package, of the same release as this collection,
    in the Python that runs Ansible (the roles that build the node agent need it there anyway).
options:
  _terms:
    description: Pin names, the upper-case constants of C(tritonops.versions) (for example C(TRITON_IMAGE)).
    type: list
    elements: str
    required: true
notes:
  - An unknown name fails with the list of known pins.
"""

EXAMPLES = r"""
- name: Show the Triton image this collection pins
  ansible.builtin.debug:
    msg: "{{ lookup('tritonops.triton.pin', 'TRITON_IMAGE') }}"

# In a role's defaults/main.yml: the pin unless the inventory sets the variable.
# triton_server_wheels: "{{ lookup('tritonops.triton.pin', 'TRITON_WHEELS') }}"
"""

RETURN = r"""
_raw:
  description: The value of each pin, as tritonops.versions holds it (a string, or a mapping such as TRITON_WHEELS).
  type: list
  elements: raw
"""

# ansible-test (validate-modules) wants the imports below DOCUMENTATION, EXAMPLES and RETURN.
import importlib  # noqa: E402
import sys  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            versions = importlib.import_module("tritonops.versions")
        except ImportError as e:
            raise AnsibleLookupError(
                f"tritonops.triton.pin: the tritonops Python package is not importable by {sys.executable} "
                f"(the Python that runs Ansible): install the tritonops wheel of this collection's release "
                f"into it ({e})") from None
        values = []
        for term in terms:
            try:
                values.append(versions.pin(str(term)))
            except KeyError as e:
                raise AnsibleLookupError(f"tritonops.triton.pin: {e.args[0]}") from None
        return values
