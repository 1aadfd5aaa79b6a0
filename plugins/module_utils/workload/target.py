# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Which runtime gpu_workload_check runs the workload with: the options, else the runtime kubelet uses.

The runtime kubelet uses is node discovery's target (discovery.gather, section `target`), the one
gpu_node_facts reports and the container_runtime role configures; nothing here chooses among
instances again. The options only complete or override it. Standard library only (node side).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.http2_grpc import socket_path
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import DEFAULT_SOCKETS
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import normalize_socket

ENGINES = ("containerd", "crio", "docker")
FACT_SECTIONS = ("gpus", "driver", "toolkit")
TARGET_SECTIONS = ("runtimes", "kubelet", "target")

# service and binary are None unless the socket is the discovered target's.
RuntimeTarget = namedtuple("RuntimeTarget", "engine socket config_path service binary")


class TargetUnknown(Exception):
    """engine auto, and discovery found no runtime kubelet uses; the message says why and what to set."""


def sections_needed(engine, socket, config_path):
    """The discovery sections the check reads: the target only when the options leave something to it."""
    if engine == "auto" or not socket or not config_path:
        return list(FACT_SECTIONS + TARGET_SECTIONS)
    return list(FACT_SECTIONS)


def default_socket(engine):
    return DEFAULT_SOCKETS[engine]


def resolve(engine, socket, config_path, facts):
    """The runtime to check from the options (engine, socket, config_path) and discovery's facts."""
    target = facts.get("target") or {}
    if engine == "auto":
        engine = target.get("kind")
        if engine not in ENGINES:
            raise TargetUnknown("cannot tell which container runtime to check: %s; set engine and socket" % (
                facts.get("target_reason") or "no runtime found"))
    is_target_engine = target.get("kind") == engine
    chosen_socket = socket_path(socket or (is_target_engine and target.get("socket")) or default_socket(engine))
    # The target's file, service and binary belong to the socket only when it is the target's.
    same = is_target_engine and normalize_socket(target.get("socket") or "") == normalize_socket(chosen_socket)
    return RuntimeTarget(
        engine=engine, socket=chosen_socket,
        config_path=config_path or (same and target.get("config_path")) or None,
        service=(same and target.get("service")) or None,
        binary=(same and target.get("binary")) or None)
