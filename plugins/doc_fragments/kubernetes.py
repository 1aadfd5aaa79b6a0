# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The kubeconfig options (plugin_utils/cluster/client.py KUBE_OPTIONS), action group, requirement and test note of
the modules that talk to the Kubernetes API from the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description: The kubeconfig file on the controller. Default, C(KUBECONFIG) or C(~/.kube/config).
    type: path
  context:
    description: The kubeconfig context. Default, its current context.
    type: str
attributes:
  action_group:
    description: >-
      C(module_defaults: {group/gpunode.nvidia.cluster: {kubeconfig: ..., context: ...}}) names the cluster once
      for every cluster module of a play or block.
    support: full
    membership:
      - gpunode.nvidia.cluster
requirements:
  - kubernetes (the Python client) on the controller
notes:
  - Tested against a local Kubernetes API stand-in (no kube-apiserver can run on the test machines) with the
    real C(kubernetes) client; no branch of this code knows about the stand-in.
"""
