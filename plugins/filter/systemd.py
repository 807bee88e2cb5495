# Copyright: tritonops contributors
# Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""The filters tritonops.triton.systemd_quote and tritonops.triton.systemd_env_quote: values from data (an
inventory, a store URL) quoted for systemd files, so that they stay literals.

``systemd_quote``: one word of an ``Exec*=`` command line. systemd
expands specifiers (``%x``) and environment variables (``$X``, ``${X}``) in command lines, then splits
them into words with C-style escapes inside double quotes: the word is written as ``"..."`` with
backslash and double quote escaped and ``%`` and ``$`` doubled. (Paths in ``ReadWritePaths=`` are
quoted with it too; the release_agent role's preflight admits only paths that need no escaping there.)

``systemd_env_quote``: one value of an ``EnvironmentFile=``, double-quoted with backslash, double
quote, backtick and ``$`` escaped (systemd reads it like a POSIX shell double-quoted string).

Both refuse newlines and NUL: they would end the setting (and a secret must not be cut short).
Their documentation is in systemd_quote.yml and systemd_env_quote.yml next to this file (one file per
filter, as ansible-doc and ansible-test read filter documentation).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def _checked(value: Any, what: str) -> str:
    text = str(value)
    if any(c in text for c in "\n\r\x00"):
        # The value itself is not shown: it may be a secret.
        raise AnsibleFilterError(f"{what}: a value holds a line break or NUL; it cannot go into a systemd file")
    return text


def systemd_quote(value: Any) -> str:
    text = _checked(value, "systemd_quote")
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{text}"'


def systemd_env_quote(value: Any) -> str:
    text = _checked(value, "systemd_env_quote")
    for c in ("\\", '"', "`", "$"):
        text = text.replace(c, "\\" + c)
    return f'"{text}"'


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"systemd_quote": systemd_quote, "systemd_env_quote": systemd_env_quote}
