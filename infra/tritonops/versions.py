"""Every pinned version in the project, in one place.

Stack code and Helm releases import these constants; the Ansible roles' defaults read them through the
collection's lookup (``{{ lookup('tritonops.triton.pin', 'TRITON_IMAGE') }}``, plugins/lookup/pin.py),
which calls :func:`pin`. A pin is an upper-case constant of this module; nothing repeats one.
"""

from __future__ import annotations

import copy
from typing import Any

# --- Triton Inference Server -------------------------------------------------------------------
# Server release shipped as NGC containers and Jetson tarballs, and the matching client library.
TRITON_RELEASE = "24.10"  # NGC container tag line; Triton server 2.51.0
TRITON_SERVER_VERSION = "2.51.0"
TRITON_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3"
TRITON_IMAGE_IGPU = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3-igpu"  # Jetson Orin line
# The release agent's own image where no Triton image is on the node (the drift CronJob, on CPU nodes):
# the agent needs python3 >= 3.10 and its standard library only (ssl included), which the Docker Official
# Image python:*-slim (Debian) has, at about 45 MiB compressed against Triton's 8 GiB. Tag and the digest of
# its multi-arch index: https://hub.docker.com/_/python (python 3.13.11, Debian 13 trixie), read
# 2026-12-07 from public Dockerfiles that pin it; the registry itself was not reachable from here.
AGENT_IMAGE = ("docker.io/library/python:3.13.11-slim-trixie"
               "@sha256:2b9c9803c6a287cafa0a8c917211dddd23dcd2016f049690ee5219f5d3f1636e")

# CPU-only install method: the nvidia-pytriton wheel bundles tritonserver 2.51 with the Python backend.
PYTRITON_VERSION = "0.7.0"
ONNXRUNTIME_VERSION = "1.32.0"
NUMPY_VERSION = "1.26.4"

# Python backend stub shipped in the wheel, by the node's Python minor version.
PYTHON_BACKEND_STUB_PYTHON = "3.11"

# --- Kubernetes: Helm charts and cluster (infra/tritonops/k8s, stacks/) -----------------------------------
# Each chart is installed from its upstream repository at exactly this version.
# EKS control plane, in standard support (tritonops.world.EKS_VERSIONS); the schema the tests validate against.
KUBERNETES_VERSION = "1.35"
GPU_OPERATOR_CHART = "gpu-operator"
# v26.3.3 (2026-06-23): NVIDIA's lifecycle table (cloud-native-docs platform-support) lists 25.3.x and older
# as End of Support and 26.3.x as supported; its chart values and gpu.deploy.* node labels the stacks use
# are those of v25.3.0 (checked in NVIDIA/gpu-operator at b0a49c0e: one new label, kata-sandbox-device-plugin).
GPU_OPERATOR_CHART_VERSION = "v26.3.3"
GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "75.15.1"
KUBE_PROMETHEUS_STACK_REPO = "https://prometheus-community.github.io/helm-charts"
KEDA_CHART = "keda"
KEDA_CHART_VERSION = "2.20.2"  # fallback.behavior needs KEDA >= 2.17; 2.20 is tested on Kubernetes 1.33-1.35
KEDA_REPO = "https://kedacore.github.io/charts"
# Karpenter (cluster-aws): GPU nodes that follow demand. OCI chart; its CRDs (karpenter.sh/v1 NodePool,
# karpenter.k8s.aws/v1 EC2NodeClass) are kept as test data in tests/unit/k8s/data/karpenter/.
KARPENTER_CHART = "karpenter"
KARPENTER_CRD_CHART = "karpenter-crd"  # its CRDs as templates, at the same version: upgraded with it
KARPENTER_CHART_VERSION = "1.14.1"
KARPENTER_REPO = "oci://public.ecr.aws/karpenter"
# cluster-autoscaler (cluster-aws): grows the managed GPU node groups up to their maxSize. Its minor must
# be the control plane's, so its image tag is pinned per Kubernetes minor beside the chart (the release follows
# the stack's kubernetesVersion; check-config refuses a minor with no tag here).
CLUSTER_AUTOSCALER_CHART = "cluster-autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.52.1"
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
# registry.k8s.io/autoscaling/cluster-autoscaler, promoted in kubernetes/k8s.io#9676 (2026-07-02).
CLUSTER_AUTOSCALER_IMAGE_TAGS = {"1.33": "v1.33.5", "1.34": "v1.34.4", "1.35": "v1.35.1"}
# EKS-optimized AMI releases the EC2NodeClasses pin (amiSelectorTerms alias family@version, never
# @latest): AL2023 (Karpenter picks its NVIDIA variant on GPU instances) and Bottlerocket. Each release must
# ship an image for KUBERNETES_VERSION: amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260520 and
# bottlerocket-aws-k8s-1.35-nvidia-x86_64-v1.58.0 exist (releases of 2025, e.g. v20251120, predate 1.35).
KARPENTER_AMI_ALIASES = {"al2023": "al2023@v20260520", "bottlerocket": "bottlerocket@v1.58.0"}
# Prerequisites no stack installs, at the versions the cluster contract's commands install
# (tritonops.k8s.cluster_contract): Envoy Gateway with the Gateway API CRDs, and legacy ingress-nginx.
# ingress-nginx is LEGACY here: the project was retired upstream (best-effort maintenance ended March 2026,
# repository archived; https://kubernetes.io/blog/2025/11/11/ingress-nginx-retirement/, read 2026-12-07) and
# receives no fixes any more. Kept (ingress.mode: ingress) because the wake-from-zero trigger and the canary
# weights read it; pinned to its final release, chart 4.15.1 / controller v1.15.1 of 2026-03-19
# (https://github.com/kubernetes/ingress-nginx/releases/tag/helm-chart-4.15.1, read 2026-12-07), which carries
# the fixes of CVE-2025-1974 "IngressNightmare" (fixed in v1.11.5 / v1.12.1, charts 4.11.5 / 4.12.1;
# https://github.com/kubernetes/kubernetes/issues/131009) and of the 2026 injection CVEs (CVE-2026-24512: v1.14.3,
# https://github.com/kubernetes/kubernetes/issues/136678; CVE-2026-3288: v1.15.0). The 4.11.3 pinned before
# had CVE-2025-1974.
INGRESS_NGINX_CHART_VERSION = "4.15.1"
# Gateway API: the default way in (ingress.mode: gateway). Implementation: Envoy Gateway, maintained (CNCF Envoy
# project), runs on EKS behind an NLB/ELB Service, and its Envoy proxies export per-route cluster request counters
# (tritonops.observability.keda_trigger.GATEWAY_REQUESTS). Release v1.9.1 of 2026-08-28 (latest of the v1.9 line,
# supported Kubernetes 1.33-1.36, end of life 2027-02-14: site/content/en/news/releases/matrix.md at tag v1.9.0;
# https://github.com/envoyproxy/gateway/blob/main/release-notes/v1.9.1.yaml and
# https://gateway.envoyproxy.io/news/releases/v1.9/, read 2026-12-07). Its Helm chart is the OCI artifact
# oci://docker.io/envoyproxy/gateway-helm (https://gateway.envoyproxy.io/v1.9/tasks/observability/proxy-metric/,
# read 2026-12-07) and installs the Gateway API CRDs it was built against: sigs.k8s.io/gateway-api v1.6.1 (go.mod
# of envoyproxy/gateway on the v1.9 line, read 2026-12-07; v1.9 requires the v1.6 CRDs, its release notes say).
ENVOY_GATEWAY_CHART = "oci://docker.io/envoyproxy/gateway-helm"
ENVOY_GATEWAY_CHART_VERSION = "v1.9.1"
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"  # controller and, by default, the Envoy proxy pods
GATEWAY_API_VERSION = "v1.6.1"  # standard channel: GatewayClass, Gateway, HTTPRoute, GRPCRoute at v1 (the chart's)

# Wheels the triton_server role's `wheel` install method downloads on the controller and pushes to
# CPU-only nodes (installed with --no-index --no-deps): the tritonserver binary, onnxruntime for the
# Python-backend ONNX models, and onnxruntime's own runtime requirements. sha256 per node platform.
TRITON_WHEELS: dict[str, dict[str, str]] = {
    "x86_64": {
        f"nvidia-pytriton=={PYTRITON_VERSION}":
            "21f063ff93bb426d0c06b7a55e7eb9efcfe62c0dddd9a908e9877e18710128df",
        f"onnxruntime=={ONNXRUNTIME_VERSION}":
            "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d",
        f"numpy=={NUMPY_VERSION}": "666dbfb6ec68962c033a450943ded891bed2d54e6755e35e5835d63f4f6931d5",
        "flatbuffers==25.12.19": "7634f50c427838bb021c2d66a3d1168e9d199b0607e6329399f04846d42e20b4",
        "packaging==26.4": "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2",
        "protobuf==4.25.9": "438c636de8fb706a0de94a12a268ef1ae8f5ba5ae655a7671fcda5968ba3c9be",
    },
    "aarch64": {
        f"nvidia-pytriton=={PYTRITON_VERSION}":
            "f99e07ee56fe065337453956afba17d2673e02ec6a632c3de26ce6e7b32a0898",
        f"onnxruntime=={ONNXRUNTIME_VERSION}":
            "2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c",
        f"numpy=={NUMPY_VERSION}": "7ab55401287bfec946ced39700c053796e7cc0e3acbef09993a9ad2adba6ca6e",
        "flatbuffers==25.12.19": "7634f50c427838bb021c2d66a3d1168e9d199b0607e6329399f04846d42e20b4",
        "packaging==26.4": "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2",
        "protobuf==4.25.9": "999146ef02e7fa6a692477badd1528bcd7268df211852a3df2d834ba2b480791",
    },
}

# Triton's Jetson release tarballs (github.com/triton-inference-server/server/releases), by JetPack;
# the triton_server role's `tarball` method fetches them from a mirror with an inventory sha256.
# Asset names follow the release pages (older releases ship .tar.gz); confirm on a new pin.
TRITON_JETSON_TARBALLS: dict[str, str] = {
    "6.1": f"tritonserver{TRITON_SERVER_VERSION}-igpu.tar",
    "6.2": f"tritonserver{TRITON_SERVER_VERSION}-igpu.tar",
    "6.0": "tritonserver2.49.0-igpu.tar.gz",
}

# --- GPU host preparation (roles nvidia_driver, container_runtime, jetson, node_monitoring) ------
# Driver branch the nvidia_driver role installs by default (Debian 12 non-free carries 535 only;
# Ubuntu and the RHEL family may choose 550/570 per host).
NVIDIA_DRIVER_BRANCH = "535"
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.17.8"
# cuda-keyring package of NVIDIA's CUDA repository (nvidia_driver on Ubuntu with the `cuda` source).
NVIDIA_CUDA_KEYRING_VERSION = "1.1-1"
# DCGM exporter on x86 GPU hosts (the line GPU Operator v25.3 ships).
DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
# L4T releases the jetson role supports -> JetPack apt repository version: exactly the JetPack
# versions with a Triton Jetson build in TRITON_JETSON_TARBALLS (JetPack 6.0, 6.1, 6.2).
JETSON_L4T_APT_REPOS: dict[str, str] = {"36.3.0": "r36.3", "36.4.0": "r36.4", "36.4.3": "r36.4"}


def pins() -> dict[str, Any]:
    """Every pin by name: the module's public upper-case constants."""
    return {k: v for k, v in globals().items() if k.isupper() and not k.startswith("_")}


def pin(name: str) -> Any:
    """The pin called ``name`` (a copy: callers may not change the pin); KeyError names the known pins."""
    known = pins()
    if name not in known:
        raise KeyError(f"no pin {name!r} in tritonops.versions; pins: {', '.join(sorted(known))}")
    return copy.deepcopy(known[name])
