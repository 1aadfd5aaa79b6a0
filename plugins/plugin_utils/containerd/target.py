# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Which containerd config containerd_runtime edits (controller side, pure): the instance kubelet uses,
from the node's discovery (gpu_node_facts), and the file of it that is ours to edit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import posixpath

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import ConfigError

DEFAULT_PATH = "/etc/containerd/config.toml"
DROPIN_NAME = "99-nvidia.toml"


def choose(args, node):
    """(runtime instance kubelet uses or None, file to edit) from the node's discovery: incident I2 is why."""
    target, reason = node.get("target"), node.get("target_reason")
    if args["path"] is None:
        if target is None:
            if not node.get("runtimes"):
                return None, DEFAULT_PATH  # an image bake before any runtime is installed
            raise ConfigError("could not tell which containerd to configure: %s. Set path explicitly." % reason)
        if target["kind"] != "containerd":
            raise ConfigError("the runtime kubelet uses is %s (%s), not containerd: use gpunode.nvidia.%s_runtime "
                              "(role variable container_runtime_engine: %s)."
                              % (target["kind"], target.get("socket"), target["kind"], target["kind"]))
        if target.get("edit_mode") == "dropin":
            # k0s imports every file of its drop-in directory: ours gets a file of its own.
            return target, posixpath.join(target.get("edit_path") or target["dropin_dir"], DROPIN_NAME)
        return target, target.get("edit_path") or DEFAULT_PATH
    if target is not None and not args["allow_path_mismatch"] and not_read_by(target, args["path"]):
        raise ConfigError(path_mismatch_message(args["path"], target))
    return target, args["path"]


def path_mismatch_message(path, target):
    """A path that is not the file the containerd on this node reads: a typo, or incident I2."""
    if target.get("selected_by") == "kubelet":
        return (
            "%s is not the config of the containerd kubelet uses: kubelet talks to %s, served by the %s "
            "containerd that reads %s (edit %s). Editing %s would leave GPU pods failing with "
            "'no runtime for \"nvidia\" is configured' (incident I2). Leave path unset to configure the right "
            "instance, or set allow_path_mismatch: true to edit %s anyway."
            % (path, target.get("socket"), target.get("platform"), target.get("config_path"),
               target.get("edit_path"), path, path))
    return (
        "%s is not the config of the containerd on this node: the %s containerd (%s) reads %s, and no "
        "kubelet says otherwise. Nothing was changed. Check the path for a typo: leave path unset (role "
        "variable container_runtime_containerd_config) to configure %s, or set allow_path_mismatch: true "
        "(container_runtime_containerd_allow_path_mismatch) to edit %s anyway."
        % (path, target.get("platform"), target.get("service") or "pid %s" % target.get("pid"),
           target.get("config_path"), target.get("edit_path") or target.get("config_path"), path))


def not_read_by(target, path):
    """Whether PATH is clearly not a file this containerd reads: any other file when kubelet uses it
    (incident I2); without kubelet, a file beside its config that it does not import (a typo'd name).
    Files elsewhere stay allowed there: an image bake or a second instance may be meant."""
    if target["kind"] != "containerd" or posixpath.dirname(path) == target.get("dropin_dir"):
        return False
    if path in (target.get("edit_path"), target.get("config_path")):
        return False
    if target.get("selected_by") == "kubelet":
        return True
    config_dir = posixpath.dirname(target.get("config_path") or "")
    imported = [posixpath.join(config_dir, entry) for entry in target.get("imports") or []]
    return posixpath.dirname(path) == config_dir and not any(fnmatch.fnmatchcase(path, p) for p in imported)


DISCOVERED_FORM = ("discovered takes the registered result of a gpunode.nvidia.gpu_node_facts task of this run "
                   "on this node, with gather: [runtimes, kubelet, target]")


def discovered_node(discovered):
    """The node's discovery from option `discovered`: what the role's own gpu_node_facts task found in this run.

    Only a registered result is taken, never ansible_facts: those may come from an earlier run or a fact
    cache, and must never choose the containerd instance whose config is edited."""
    if discovered.get("skipped"):
        raise ConfigError("%s, but that task was skipped: leave discovered unset, and this task discovers the "
                          "node itself." % DISCOVERED_FORM)
    if discovered.get("failed"):
        raise ConfigError("%s, but that task failed: %s" % (DISCOVERED_FORM, mask_text(str(discovered.get("msg")))))
    facts = discovered.get("ansible_facts")
    node = facts.get("gpu_node") if isinstance(facts, dict) else None
    if not isinstance(node, dict):
        raise ConfigError("%s; the value given has no ansible_facts.gpu_node (keys: %s)."
                          % (DISCOVERED_FORM, ", ".join(sorted(str(key) for key in discovered)) or "none"))
    missing = [key for key in ("root", "runtimes", "target", "target_reason") if key not in node]
    if missing:
        raise ConfigError("%s; its gpu_node lacks %s." % (DISCOVERED_FORM, ", ".join(missing)))
    if not isinstance(node["root"], str) or posixpath.normpath(node["root"]) != "/":
        raise ConfigError("%s; that task read the tree at %s (root), not the live node." % (DISCOVERED_FORM,
                                                                                            node["root"]))
    target = node["target"]
    if (not isinstance(node["runtimes"], list) or not all(isinstance(item, dict) for item in node["runtimes"])
            or not (target is None or (isinstance(target, dict) and isinstance(target.get("kind"), str)))):
        raise ConfigError("%s; its gpu_node.runtimes (a list of instances) or gpu_node.target (an instance with "
                          "a kind, or null) has another form." % DISCOVERED_FORM)
    return node


def platform_writes_config(target):
    """k3s/RKE2 (auto-detection of the toolkit), EKS AL2023 (nodeadm): no file of ours to edit."""
    if target is None:
        return False
    return target.get("edit_mode") == "none" or (target.get("edit_mode") == "template" and target.get("nvidia_autodetect"))


def target_summary(target):
    """What the role needs to restart and check the instance: socket, service, restart method."""
    if not target:
        return None
    restart = target.get("restart") or {}
    return dict(
        platform=target.get("platform"), socket=target.get("socket"), config_path=target.get("config_path"),
        edit_path=target.get("edit_path"), edit_mode=target.get("edit_mode"), service=restart.get("service"),
        restart_method=restart.get("method"), restart_command=restart.get("command"),
        selected_by=target.get("selected_by"), version=target.get("version"),
    )
