"""The Pod Security Standards' checks of a pod spec (kubernetes.io/docs/concepts/security/pod-security-standards,
v1.30 and later), for tests: what the admission controller of a namespace labelled ``baseline`` or
``restricted`` would refuse. The upstream evaluator is Go (k8s.io/pod-security-admission) and no Python
port is published; the field list below is the standard's, one check per row of its tables."""

from __future__ import annotations

from typing import Any

BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def violations(pod: dict[str, Any], level: str) -> list[str]:
    """What Pod Security ``level`` (baseline or restricted) refuses in ``pod`` (a PodSpec); [] when admitted."""
    assert level in ("baseline", "restricted")
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    containers = [(k, c) for k in ("initContainers", "containers", "ephemeralContainers") for c in pod.get(k) or []]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"{field}")
    for vol in pod.get("volumes") or []:
        kind = next(k for k in vol if k != "name")
        if kind == "hostPath":
            out.append(f"volume {vol['name']}: hostPath")
        elif level == "restricted" and kind not in RESTRICTED_VOLUMES:
            out.append(f"volume {vol['name']}: {kind}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl['name']}")
    for where, sc in [("pod", psc)] + [(f"{k} {c['name']}", c.get("securityContext") or {}) for k, c in containers]:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}: hostProcess")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}: seccomp Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"{where}: appArmor {sc['appArmorProfile']['type']}")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"{where}: seLinuxOptions")
        if sc.get("runAsUser") == 0 and level == "restricted":
            out.append(f"{where}: runAsUser 0")
    for kind, c in containers:
        where, sc = f"{kind} {c['name']}", c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{where}: procMount")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{where}: hostPort")
        added = set(caps.get("add") or [])
        if added - BASELINE_CAPS:
            out.append(f"{where}: capabilities {sorted(added - BASELINE_CAPS)}")
        if level == "baseline":
            continue
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation not false")
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities do not drop ALL")
        if added - {"NET_BIND_SERVICE"}:
            out.append(f"{where}: capabilities add {sorted(added - {'NET_BIND_SERVICE'})}")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"{where}: runAsNonRoot not true")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccomp {seccomp}")
    return out
