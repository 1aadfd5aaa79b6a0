# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Where each container runtime listens when nothing on the node says otherwise: the one table discovery, the
CRI client, the doctor, first boot and the modules take their defaults from.

Standard library only: this runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each runtime's own default (its packages' unit and config), and kubelet's default endpoint: containerd's.
DEFAULT_SOCKETS = {
    "containerd": "/run/containerd/containerd.sock",
    "crio": "/var/run/crio/crio.sock",
    "docker": "/var/run/docker.sock",
}
KUBELET_DEFAULT_ENDPOINT = "unix://" + DEFAULT_SOCKETS["containerd"]
# The containerd a Kubernetes distribution bundles, and the endpoint its kubelet uses by default.
PLATFORM_CONTAINERD_SOCKETS = {
    "k3s": "/run/k3s/containerd/containerd.sock",
    "rke2": "/run/k3s/containerd/containerd.sock",
    "k0s": "/run/k0s/containerd.sock",
    "microk8s": "/var/snap/microk8s/common/run/containerd.sock",
}
# cri-dockerd's socket when it runs without --container-runtime-endpoint and without a socket unit.
CRI_DOCKERD_SOCKET = "/run/cri-dockerd.sock"
