"""Disposable Debian bookworm systemd hosts on rootful Podman, built locally with mmdebstrap.

``images`` builds (and caches) the amd64/arm64 images, ``nodes`` creates and destroys named nodes,
``commands`` is the ``python -m devkit hosts`` CLI. No image registry is involved.
"""

from devkit.hosts.images import ImageSpec, build_image, image_name
from devkit.hosts.nodes import Node, list_nodes, node_down, node_up

__all__ = ["ImageSpec", "Node", "build_image", "image_name", "list_nodes", "node_down", "node_up"]
