# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
#
# Triton's repository API (POST /v2/repository/...) from a module on the node, in one place: the
# tritonops.triton.triton_model module loads, unloads and reads the index with it; tritonops.triton.release
# reads the index in the same run as the node's releases (command=status, triton_url).

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.module_utils.urls import fetch_url


def repository_call(module, url, path, body, timeout, admin_header=None, admin_secret=None):
    """POST ``url``/v2/repository``path``: (the answer's JSON, None, 200) on HTTP 200, else (None, the
    error, the HTTP status: -1 when nothing answered).

    The admin header is sent only when ``admin_secret`` is set; the error names the URL and Triton's
    message (its ``{"error": ...}``) or what the connection said.
    """
    headers = {"Content-Type": "application/json"}
    if admin_secret:
        headers[admin_header] = admin_secret
    target = url.rstrip("/") + "/v2/repository" + path
    resp, info = fetch_url(module, target, data=json.dumps(body), headers=headers, method="POST", timeout=timeout)
    # On an HTTP error fetch_url has already read the body (Triton's {"error": ...}) into info.
    raw = resp.read() if info["status"] == 200 else info.get("body") or b""
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    if info["status"] != 200:
        error = (doc or {}).get("error") if isinstance(doc, dict) else None
        return None, "Triton %s: %s" % (target, error or info.get("msg", "no answer")), info["status"]
    return doc, None, 200
