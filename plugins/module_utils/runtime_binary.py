# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The one warning the three runtime editors (containerd, Docker, CRI-O) give for a runtime binary
that is not on the node yet. Standard library only (runs on managed nodes and on the controller)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def missing_binary_warning(binary, name):
    """Added anyway (an image bake may install it later), but every workload that selects it fails until then."""
    return ("Runtime binary %s is not on this node yet: the %r runtime was configured, but every container that "
            "selects it (RuntimeClass handler %s, docker --runtime %s) will fail to start until it is there. "
            "Install the NVIDIA container toolkit (role gpunode.nvidia.nvidia_container_toolkit) or point binary "
            "(role variable container_runtime_binary) at the installed runtime." % (binary, name, name, name))
