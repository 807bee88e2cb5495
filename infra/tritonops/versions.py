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

# CPU-only install method: the nvidia-pytriton wheel bundles tritonserver 2.51 with the Python backend.
PYTRITON_VERSION = "0.7.0"
ONNXRUNTIME_VERSION = "1.32.0"
NUMPY_VERSION = "1.26.4"

# Python backend stub shipped in the wheel, by the node's Python minor version.
PYTHON_BACKEND_STUB_PYTHON = "3.11"

# --- Kubernetes: Helm charts and cluster (infra/tritonops/k8s, stacks/) -----------------------------------
# Each chart is installed from its upstream repository at exactly this version.
KUBERNETES_VERSION = "1.30"  # EKS control plane; also the oldest schema the tests validate against
GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_CHART_VERSION = "v25.3.0"
GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "75.15.1"
KUBE_PROMETHEUS_STACK_REPO = "https://prometheus-community.github.io/helm-charts"
KEDA_CHART = "keda"
KEDA_CHART_VERSION = "2.17.2"  # fallback.behavior (currentReplicasIfHigher) needs KEDA >= 2.17
KEDA_REPO = "https://kedacore.github.io/charts"
# Karpenter (cluster-aws): GPU nodes that follow demand. OCI chart; its CRDs (karpenter.sh/v1 NodePool,
# karpenter.k8s.aws/v1 EC2NodeClass) are kept as test data in tests/unit/k8s/data/karpenter/.
KARPENTER_CHART = "karpenter"
KARPENTER_CRD_CHART = "karpenter-crd"  # its CRDs as templates, at the same version: upgraded with it
KARPENTER_CHART_VERSION = "1.14.1"
KARPENTER_REPO = "oci://public.ecr.aws/karpenter"
# cluster-autoscaler (cluster-aws): grows the managed GPU node groups up to their maxSize. Its minor must
# be the control plane's (KUBERNETES_VERSION), so the image tag is pinned beside the chart.
CLUSTER_AUTOSCALER_CHART = "cluster-autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.52.1"
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_IMAGE_TAG = "v1.30.7"
# EKS-optimized AMI releases the EC2NodeClasses pin (amiSelectorTerms alias family@version, never
# @latest): AL2023 (Karpenter picks its NVIDIA variant on GPU instances) and Bottlerocket.
KARPENTER_AMI_ALIASES = {"al2023": "al2023@v20251120", "bottlerocket": "bottlerocket@v1.50.0"}
# Prerequisites no stack installs, at the versions the cluster contract's commands install
# (tritonops.k8s.cluster_contract): ingress-nginx (IngressClass nginx) and the Gateway API CRDs.
INGRESS_NGINX_CHART_VERSION = "4.11.3"
GATEWAY_API_VERSION = "v1.2.1"  # standard channel: GatewayClass, Gateway, HTTPRoute, GRPCRoute at v1

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
