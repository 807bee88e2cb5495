"""Facts about the world the stacks run in, as dated data with their sources.

``versions.py`` says what we pin; this module says what the world allows: which Kubernetes versions EKS
still creates (and until when), what each EC2 instance type a stack may name holds (vCPU, memory, GPUs,
what the kubelet can allocate after its overhead, max pods), what each EKS GPU AMI family preinstalls
(and so what the GPU Operator must leave off), and which Kubernetes versions each pinned chart supports.
None of it can be checked here against the real thing (no AWS, no EKS), so each table names its source
and the day it was read; ``tritonops render --check-config`` holds the stack files against these tables
with an injectable clock (:func:`today`), so a version going out of support fails a check, not a user's
first ``pulumi up``. A row goes stale: re-read its source and update it (and its date) when a check or a
pin needs a newer one.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

from tritonops import versions


@dataclass(frozen=True)
class Source:
    url: str
    read: dt.date  # the day the row was read from url
    note: str = ""


def today() -> dt.date:
    """The day the checks run on: ``TRITONOPS_TODAY`` (YYYY-MM-DD) when set, else the system's date."""
    fixed = os.environ.get("TRITONOPS_TODAY")
    return dt.date.fromisoformat(fixed) if fixed else dt.date.today()


# --- EKS Kubernetes versions ----------------------------------------------------------------------

EKS_VERSIONS_SOURCE = Source(
    "https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html",
    dt.date(2026, 12, 7),
    "standard support 14 months from the EKS release, extended support 12 more (cluster creation allowed "
    "in both); dates cross-checked with https://endoflife.date/amazon-eks. 1.36 is not listed: its EKS "
    "dates were not found in a source read here",
)


@dataclass(frozen=True)
class EksVersion:
    minor: str
    released: dt.date
    end_of_standard: dt.date
    end_of_extended: dt.date  # after it EKS creates no cluster of this version and upgrades existing ones


EKS_VERSIONS: dict[str, EksVersion] = {
    v.minor: v
    for v in (
        EksVersion("1.29", dt.date(2024, 1, 23), dt.date(2025, 3, 23), dt.date(2026, 3, 23)),
        EksVersion("1.30", dt.date(2024, 5, 23), dt.date(2025, 7, 23), dt.date(2026, 7, 23)),
        EksVersion("1.31", dt.date(2024, 9, 26), dt.date(2025, 11, 26), dt.date(2026, 11, 26)),
        EksVersion("1.32", dt.date(2025, 1, 23), dt.date(2026, 3, 23), dt.date(2027, 3, 23)),
        EksVersion("1.33", dt.date(2025, 5, 29), dt.date(2026, 7, 29), dt.date(2027, 7, 29)),
        EksVersion("1.34", dt.date(2025, 10, 2), dt.date(2026, 12, 2), dt.date(2027, 12, 2)),
        EksVersion("1.35", dt.date(2026, 1, 27), dt.date(2027, 3, 27), dt.date(2028, 3, 27)),
    )
}

# Warn this long before a support window ends.
SUPPORT_WARNING = dt.timedelta(days=90)


def eks_support(minor: str, on: dt.date) -> tuple[str, str]:
    """(verdict, why) of an EKS Kubernetes version on a day: verdict ``error`` (EKS does not create it, or
    it is unknown), ``warn`` (extended support, paid, or a window ending within 90 days) or ``ok``."""
    v = EKS_VERSIONS.get(minor)
    if v is None:
        known = ", ".join(sorted(EKS_VERSIONS, key=lambda m: tuple(int(p) for p in m.split("."))))
        return "error", (f"{minor!r} is no EKS Kubernetes version known to tritonops.world (known: {known}; "
                         f"source {EKS_VERSIONS_SOURCE.url}, read {EKS_VERSIONS_SOURCE.read})")
    where = f"({EKS_VERSIONS_SOURCE.url}, read {EKS_VERSIONS_SOURCE.read})"
    if on > v.end_of_extended:
        return "error", (f"EKS ended extended support of Kubernetes {minor} on {v.end_of_extended}: it creates "
                         f"no such cluster {where}; use {newest_in_standard(on) or 'a newer version'}")
    if on > v.end_of_standard:
        return "warn", (f"Kubernetes {minor} left EKS standard support on {v.end_of_standard}: extended "
                        f"support (billed per cluster hour) ends {v.end_of_extended} {where}")
    if v.end_of_standard - on <= SUPPORT_WARNING:
        return "warn", (f"Kubernetes {minor} leaves EKS standard support on {v.end_of_standard}, in "
                        f"{(v.end_of_standard - on).days} days {where}")
    return "ok", f"Kubernetes {minor}: EKS standard support until {v.end_of_standard}"


def newest_in_standard(on: dt.date) -> str | None:
    """The newest version EKS has in standard support on a day (None if this table has none)."""
    ok = [v for v in EKS_VERSIONS.values() if v.released <= on <= v.end_of_standard]
    return max(ok, key=lambda v: v.released).minor if ok else None


# --- EC2 instance types ---------------------------------------------------------------------------
# Every size of the GPU families tritonops.k8s.catalog knows and of the general-purpose families a system
# pool may use (m5, m6i, m7i, c6i, c7i, r6i), metal aside: rows generated from the source below.

INSTANCE_TYPES_SOURCE = Source(
    "https://github.com/aws/karpenter-provider-aws/blob/1d927085dd81a9df9301e613f371dac5b4d16bfe/website/"
    "content/en/docs/reference/instance-types.md",
    dt.date(2026, 12, 7),
    "generated by Karpenter from the EC2 API (hack/docs/instancetypes_gen_docs.go): allocatable is what "
    "the kubelet offers pods after kube-reserved, system-reserved and eviction thresholds, on AL2023 "
    "without prefix delegation; GPU memory per GPU in MiB as EC2 reports it",
)


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_mib: int
    alloc_cpu_m: int  # allocatable millicores
    alloc_memory_mib: int
    max_pods: int
    gpus: int = 0
    gpu: str = ""  # model, as Karpenter's label karpenter.k8s.aws/instance-gpu-name
    gpu_memory_mib: int = 0  # of one GPU
    local_nvme_gb: int = 0  # instance store; 0: EBS only (ephemeral storage is the root volume)


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("m5.large", 2, 8192, 1930, 6903, 29),
        InstanceType("m5.xlarge", 4, 16384, 3920, 14162, 58),
        InstanceType("m5.2xlarge", 8, 32768, 7910, 29317, 58),
        InstanceType("m5.4xlarge", 16, 65536, 15890, 57691, 234),
        InstanceType("m5.8xlarge", 32, 131072, 31850, 118312, 234),
        InstanceType("m5.12xlarge", 48, 196608, 47810, 178933, 234),
        InstanceType("m5.16xlarge", 64, 262144, 63770, 234021, 737),
        InstanceType("m5.24xlarge", 96, 393216, 95690, 355262, 737),
        InstanceType("m6i.large", 2, 8192, 1930, 6903, 29),
        InstanceType("m6i.xlarge", 4, 16384, 3920, 14162, 58),
        InstanceType("m6i.2xlarge", 8, 32768, 7910, 29317, 58),
        InstanceType("m6i.4xlarge", 16, 65536, 15890, 57691, 234),
        InstanceType("m6i.8xlarge", 32, 131072, 31850, 118312, 234),
        InstanceType("m6i.12xlarge", 48, 196608, 47810, 178933, 234),
        InstanceType("m6i.16xlarge", 64, 262144, 63770, 234021, 737),
        InstanceType("m6i.24xlarge", 96, 393216, 95690, 355262, 737),
        InstanceType("m6i.32xlarge", 128, 524288, 127610, 476504, 737),
        InstanceType("m7i.large", 2, 8192, 1930, 6903, 29),
        InstanceType("m7i.xlarge", 4, 16384, 3920, 14162, 58),
        InstanceType("m7i.2xlarge", 8, 32768, 7910, 29317, 58),
        InstanceType("m7i.4xlarge", 16, 65536, 15890, 57691, 234),
        InstanceType("m7i.8xlarge", 32, 131072, 31850, 118312, 234),
        InstanceType("m7i.12xlarge", 48, 196608, 47810, 178933, 234),
        InstanceType("m7i.16xlarge", 64, 262144, 63770, 234021, 737),
        InstanceType("m7i.24xlarge", 96, 393216, 95690, 355262, 737),
        InstanceType("m7i.48xlarge", 192, 786432, 191450, 718987, 737),
        InstanceType("c6i.large", 2, 4096, 1930, 3114, 29),
        InstanceType("c6i.xlarge", 4, 8192, 3920, 6584, 58),
        InstanceType("c6i.2xlarge", 8, 16384, 7910, 14162, 58),
        InstanceType("c6i.4xlarge", 16, 32768, 15890, 27381, 234),
        InstanceType("c6i.8xlarge", 32, 65536, 31850, 57691, 234),
        InstanceType("c6i.12xlarge", 48, 98304, 47810, 88002, 234),
        InstanceType("c6i.16xlarge", 64, 131072, 63770, 112779, 737),
        InstanceType("c6i.24xlarge", 96, 196608, 95690, 173400, 737),
        InstanceType("c6i.32xlarge", 128, 262144, 127610, 234021, 737),
        InstanceType("c7i.large", 2, 4096, 1930, 3114, 29),
        InstanceType("c7i.xlarge", 4, 8192, 3920, 6584, 58),
        InstanceType("c7i.2xlarge", 8, 16384, 7910, 14162, 58),
        InstanceType("c7i.4xlarge", 16, 32768, 15890, 27381, 234),
        InstanceType("c7i.8xlarge", 32, 65536, 31850, 57691, 234),
        InstanceType("c7i.12xlarge", 48, 98304, 47810, 88002, 234),
        InstanceType("c7i.16xlarge", 64, 131072, 63770, 112779, 737),
        InstanceType("c7i.24xlarge", 96, 196608, 95690, 173400, 737),
        InstanceType("c7i.48xlarge", 192, 393216, 191450, 355262, 737),
        InstanceType("r6i.large", 2, 16384, 1930, 14481, 29),
        InstanceType("r6i.xlarge", 4, 32768, 3920, 29317, 58),
        InstanceType("r6i.2xlarge", 8, 65536, 7910, 59627, 58),
        InstanceType("r6i.4xlarge", 16, 131072, 15890, 118312, 234),
        InstanceType("r6i.8xlarge", 32, 262144, 31850, 239554, 234),
        InstanceType("r6i.12xlarge", 48, 393216, 47810, 360795, 234),
        InstanceType("r6i.16xlarge", 64, 524288, 63770, 476504, 737),
        InstanceType("r6i.24xlarge", 96, 786432, 95690, 718987, 737),
        InstanceType("r6i.32xlarge", 128, 1048576, 127610, 961470, 737),
        InstanceType("g4dn.xlarge", 4, 16384, 3920, 14481, 29, 1, "t4", 16384, 125),
        InstanceType("g4dn.2xlarge", 8, 32768, 7910, 29636, 29, 1, "t4", 16384, 225),
        InstanceType("g4dn.4xlarge", 16, 65536, 15890, 59946, 29, 1, "t4", 16384, 225),
        InstanceType("g4dn.8xlarge", 32, 131072, 31850, 120248, 58, 1, "t4", 16384, 900),
        InstanceType("g4dn.12xlarge", 48, 196608, 47810, 178933, 234, 4, "t4", 16384, 900),
        InstanceType("g4dn.16xlarge", 64, 262144, 63770, 241490, 58, 1, "t4", 16384, 900),
        InstanceType("g5.xlarge", 4, 16384, 3920, 14162, 58, 1, "a10g", 22888, 250),
        InstanceType("g5.2xlarge", 8, 32768, 7910, 29317, 58, 1, "a10g", 22888, 450),
        InstanceType("g5.4xlarge", 16, 65536, 15890, 57691, 234, 1, "a10g", 22888, 600),
        InstanceType("g5.8xlarge", 32, 131072, 31850, 118312, 234, 1, "a10g", 22888, 900),
        InstanceType("g5.12xlarge", 48, 196608, 47810, 173400, 737, 4, "a10g", 22888, 3800),
        InstanceType("g5.16xlarge", 64, 262144, 63770, 239554, 234, 1, "a10g", 22888, 1900),
        InstanceType("g5.24xlarge", 96, 393216, 95690, 355262, 737, 4, "a10g", 22888, 3800),
        InstanceType("g5.48xlarge", 192, 786432, 191450, 723299, 345, 8, "a10g", 22888, 7600),
        InstanceType("g6.xlarge", 4, 16384, 3920, 14162, 58, 1, "l4", 22888, 250),
        InstanceType("g6.2xlarge", 8, 32768, 7910, 29317, 58, 1, "l4", 22888, 450),
        InstanceType("g6.4xlarge", 16, 65536, 15890, 57691, 234, 1, "l4", 22888, 600),
        InstanceType("g6.8xlarge", 32, 131072, 31850, 118312, 234, 1, "l4", 22888, 900),
        InstanceType("g6.12xlarge", 48, 196608, 47810, 178933, 234, 4, "l4", 22888, 3760),
        InstanceType("g6.16xlarge", 64, 262144, 63770, 234021, 737, 1, "l4", 22888, 1880),
        InstanceType("g6.24xlarge", 96, 393216, 95690, 355262, 737, 4, "l4", 22888, 3760),
        InstanceType("g6.48xlarge", 192, 786432, 191450, 718987, 737, 8, "l4", 22888, 7520),
        InstanceType("g6e.xlarge", 4, 32768, 3920, 29317, 58, 1, "l40s", 45776, 250),
        InstanceType("g6e.2xlarge", 8, 65536, 7910, 59627, 58, 1, "l40s", 45776, 450),
        InstanceType("g6e.4xlarge", 16, 131072, 15890, 118312, 234, 1, "l40s", 45776, 600),
        InstanceType("g6e.8xlarge", 32, 262144, 31850, 239554, 234, 1, "l40s", 45776, 900),
        InstanceType("g6e.12xlarge", 48, 393216, 47810, 360157, 292, 4, "l40s", 45776, 3800),
        InstanceType("g6e.16xlarge", 64, 524288, 63770, 476504, 737, 1, "l40s", 45776, 1900),
        InstanceType("g6e.24xlarge", 96, 786432, 95690, 721682, 492, 4, "l40s", 45776, 3800),
        InstanceType("g6e.48xlarge", 192, 1572864, 191450, 1449132, 492, 8, "l40s", 45776, 7600),
        InstanceType("p4d.24xlarge", 96, 1179648, 95690, 1082712, 737, 8, "a100", 40960, 8000),
        InstanceType("p4de.24xlarge", 96, 1179648, 95690, 1082712, 737, 8, "a100", 81920, 8000),
        InstanceType("p5.4xlarge", 16, 262144, 15890, 240830, 118, 1, "h100", 81920, 3800),
        InstanceType("p5.48xlarge", 192, 2097152, 191450, 1938410, 100, 8, "h100", 81920, 30400),
        InstanceType("p5e.48xlarge", 192, 2097152, 191450, 1938410, 100, 8, "h200", 144384, 30400),
    )
}


def instance_type(name: str) -> InstanceType:
    """The facts of an instance type; ``KeyError`` naming the source when this table lacks it."""
    if name not in INSTANCE_TYPES:
        raise KeyError(f"instance type {name!r} is not in tritonops.world.INSTANCE_TYPES: add its row from "
                       f"{INSTANCE_TYPES_SOURCE.url} (known: {', '.join(sorted(INSTANCE_TYPES))})")
    return INSTANCE_TYPES[name]


# --- EKS GPU AMI families -------------------------------------------------------------------------


@dataclass(frozen=True)
class AmiFamily:
    ami_type: str
    driver: bool  # the NVIDIA kernel driver is on the image
    toolkit: bool  # NVIDIA Container Toolkit (the container runtime's nvidia hook)
    device_plugin: bool  # the node advertises nvidia.com/gpu without a device-plugin DaemonSet
    source: Source


AMI_FAMILIES: dict[str, AmiFamily] = {
    a.ami_type: a
    for a in (
        AmiFamily("AL2023_x86_64_NVIDIA", driver=True, toolkit=True, device_plugin=False, source=Source(
            "https://docs.aws.amazon.com/eks/latest/userguide/ml-eks-optimized-ami.html", dt.date(2026, 12, 7),
            "the EKS-optimized accelerated AL2023 AMI ships the NVIDIA driver and container toolkit; the NVIDIA "
            "device plugin is installed by the user (here: the GPU Operator's)")),
        AmiFamily("BOTTLEROCKET_x86_64_NVIDIA", driver=True, toolkit=True, device_plugin=True, source=Source(
            "https://bottlerocket.dev/en/os/latest/concepts/variants/#nvidia-variants", dt.date(2026, 12, 7),
            "the aws-k8s-*-nvidia variants ship the driver, the toolkit and the NVIDIA k8s device plugin as a "
            "host service; the GPU Operator's DaemonSets must not run there")),
    )
}


# --- charts and the Kubernetes versions they support ----------------------------------------------


@dataclass(frozen=True)
class ChartSupport:
    chart: str
    version: str  # the pinned version this row is about (versions.py)
    oldest: str
    newest: str
    source: Source


CHART_SUPPORT: dict[str, ChartSupport] = {
    c.chart: c
    for c in (
        ChartSupport(versions.KARPENTER_CHART, "1.14.1", "1.30", "1.36", Source(
            "https://github.com/aws/karpenter-provider-aws/blob/1d927085dd81a9df9301e613f371dac5b4d16bfe/website/"
            "content/en/docs/upgrading/compatibility.md", dt.date(2026, 12, 7),
            "Karpenter >= 1.9 for Kubernetes 1.35, >= 1.13 for 1.36; the matrix starts at 1.30")),
        ChartSupport(versions.KEDA_CHART, "2.20.2", "1.33", "1.35", Source(
            "https://keda.sh/docs/2.20/operate/cluster/", dt.date(2026, 12, 7),
            "KEDA's tested window: v2.20 on Kubernetes v1.33 - v1.35 (v2.17: v1.30 - v1.32)")),
    )
}


def minor_of(version: str) -> str:
    """``v1.35.1`` or ``1.35`` -> ``1.35``."""
    return ".".join(version.lstrip("v").split(".")[:2])


def _key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split("."))


def chart_problems(minor: str) -> list[str]:
    """Why a pinned chart does not support a Kubernetes version: each chart whose row excludes it, a row
    that is about another chart version than the pin, and cluster-autoscaler, whose minor must equal the
    cluster's."""
    out = []
    pins = versions.pins()
    for c in CHART_SUPPORT.values():
        pinned = next((v for k, v in pins.items() if k.endswith("_CHART_VERSION")
                       and pins.get(k.removesuffix("_VERSION")) == c.chart), None)
        if pinned != c.version:
            out.append(f"chart {c.chart} is pinned at {pinned} but tritonops.world.CHART_SUPPORT knows "
                       f"{c.version}: re-read {c.source.url}")
        elif not _key(c.oldest) <= _key(minor) <= _key(c.newest):
            out.append(f"chart {c.chart} {c.version} supports Kubernetes {c.oldest} - {c.newest}, not {minor} "
                       f"({c.source.url}, read {c.source.read})")
    tag = versions.CLUSTER_AUTOSCALER_IMAGE_TAGS.get(minor)
    if tag is None:
        out.append(f"cluster-autoscaler has no image pinned for Kubernetes {minor} (its minor must equal the "
                   f"cluster's; versions.CLUSTER_AUTOSCALER_IMAGE_TAGS has "
                   f"{', '.join(sorted(versions.CLUSTER_AUTOSCALER_IMAGE_TAGS))})")
    elif minor_of(tag) != minor:
        out.append(f"cluster-autoscaler {tag} is pinned for Kubernetes {minor}: its minor must equal the cluster's")
    return out


# --- what every node gives to DaemonSets before our pods ------------------------------------------


@dataclass(frozen=True)
class DaemonSetShare:
    name: str
    cpu_m: int
    memory_mib: int
    source: Source


# The requests of the DaemonSets that run on every EKS node of our pools (the EKS add-ons cluster-aws
# installs); the charts the platform stack installs on GPU nodes (GPU Operator, node-exporter) set no
# requests by default, so they take no share of the allocatable.
NODE_DAEMONSETS: tuple[DaemonSetShare, ...] = (
    DaemonSetShare("aws-node (VPC CNI)", 25, 0, Source(
        "https://github.com/aws/amazon-vpc-cni-k8s/blob/master/charts/aws-vpc-cni/values.yaml",
        dt.date(2026, 12, 7), "resources.requests.cpu 25m")),
    DaemonSetShare("kube-proxy", 100, 0, Source(
        "https://docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html", dt.date(2026, 12, 7),
        "the EKS add-on's DaemonSet requests cpu 100m")),
    DaemonSetShare("ebs-csi-node", 30, 120, Source(
        "https://github.com/kubernetes-sigs/aws-ebs-csi-driver/blob/master/charts/aws-ebs-csi-driver/values.yaml",
        dt.date(2026, 12, 7), "node: ebs-plugin, node-driver-registrar, liveness-probe at 10m / 40Mi each")),
)
