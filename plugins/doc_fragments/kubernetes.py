# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The kubeconfig options of the modules that talk to the Kubernetes API from the controller."""

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
"""
