# -*- coding: utf-8 -*-
# Copyright: tritonops contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
#
# The GPU probe, in one place: the tritonops.triton.gpu_facts module imports it, and the gpu_facts role's
# local fact (/etc/ansible/facts.d/gpu.fact, templates/gpu.fact.j2) is this file plus one call of probe().
# It only reads (sysfs, /proc, /etc, dpkg, nvidia-smi) and never fails: a probe that cannot run leaves its
# field empty and says why in "errors". Standard library only: the fact runs with the node's python3.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import platform
import re
import shutil
import subprocess

NVIDIA_VENDOR = "0x10de"


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def _pci_devices(errors):
    """NVIDIA display/3D controllers from sysfs (no lspci needed)."""
    found = []
    base = "/sys/bus/pci/devices"
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        errors.append("sysfs: %s" % exc)
        return found
    for addr in names:
        vendor = (_read(os.path.join(base, addr, "vendor")) or "").strip()
        klass = (_read(os.path.join(base, addr, "class")) or "").strip()
        if vendor != NVIDIA_VENDOR or not klass.startswith("0x03"):
            continue
        driver = os.path.join(base, addr, "driver")
        found.append({
            "address": addr,
            "vendor_id": vendor[2:],
            "device_id": (_read(os.path.join(base, addr, "device")) or "").strip()[2:],
            "class": klass[2:6],
            "driver": os.path.basename(os.path.realpath(driver)) if os.path.exists(driver) else "",
        })
    return found


def _nvidia_smi(errors, use, timeout):
    info = {"present": shutil.which("nvidia-smi") is not None, "gpus": [], "driver_version": ""}
    if not (use and info["present"]):
        return info
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,uuid,memory.total,driver_version,compute_cap",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append("nvidia-smi: %s" % exc)
        return info
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        info["gpus"].append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2],
                             "memory_total_mib": int(parts[3]) if parts[3].isdigit() else None,
                             "compute_capability": parts[5]})
        info["driver_version"] = parts[4]
    return info


def _l4t_from_release_file(errors):
    text = _read("/etc/nv_tegra_release")
    if not text:
        return None
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+)\.(\d+)", text)
    if not m:
        errors.append("/etc/nv_tegra_release: unrecognised format")
        return None
    board = re.search(r"BOARD:\s*([^,\s]+)", text)
    return {"release": "%s.%s.%s" % m.groups(), "source": "/etc/nv_tegra_release",
            "board": board.group(1) if board else ""}


def _l4t_from_package():
    if shutil.which("dpkg-query") is None:
        return None
    res = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "nvidia-l4t-core"],
                         capture_output=True, text=True, check=False)
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", res.stdout.strip()) if res.returncode == 0 else None
    if not m:
        return None
    return {"release": "%s.%s.%s" % m.groups(), "source": "nvidia-l4t-core", "board": ""}


def _jetson(errors, jetpack_map):
    l4t = _l4t_from_release_file(errors) or _l4t_from_package()
    compatible = (_read("/proc/device-tree/compatible") or "").split("\x00")
    soc = next((c.split(",", 1)[1] for c in compatible if c.startswith("nvidia,tegra")), "")
    if not l4t:
        return {"present": False}
    major = int(l4t["release"].split(".")[0])
    return {
        "present": True,
        "l4t_release": l4t["release"],
        "l4t_major": major,
        "jetpack_version": jetpack_map.get(l4t["release"], ""),
        "source": l4t["source"],
        "board": l4t["board"],
        "soc": soc,
        "model": (_read("/proc/device-tree/model") or "").strip("\x00\n "),
        # Orin is tegra234; L4T 36 (JetPack 6) runs only on Orin.
        "orin": soc == "tegra234" or major >= 36,
    }


def probe(jetpack_map, use_nvidia_smi=True, nvidia_smi_timeout=10):
    """The gpu fact: platform (cpu, nvidia_gpu, jetson), PCI devices, driver, nvidia-smi, Jetson/L4T."""
    errors = []
    pci = _pci_devices(errors)
    smi = _nvidia_smi(errors, use_nvidia_smi, nvidia_smi_timeout)
    jet = _jetson(errors, jetpack_map)
    proc_version = _read("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc_version)
    driver_version = smi["driver_version"] or (m.group(1) if m else "")
    if jet["present"]:
        kind = "jetson"
    elif pci or smi["gpus"]:
        kind = "nvidia_gpu"
    else:
        kind = "cpu"
    if jet["present"] and not jet["jetpack_version"]:
        errors.append("L4T %s is not in gpu_facts_jetpack_map" % jet["l4t_release"])
    return {
        "schema": 1,
        "platform": kind,
        "arch": platform.machine(),
        "gpu_count": max(len(pci), len(smi["gpus"])),
        "pci_devices": pci,
        "driver_loaded": bool(proc_version),
        "driver_version": driver_version,
        "nvidia_smi": smi,
        "jetson": jet,
        "errors": errors,
    }
