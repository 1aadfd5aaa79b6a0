# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Read-only discovery of a GPU node: GPUs, driver, toolkit, glibc, container
runtimes, kubelet, and the runtime instance kubelet really uses.

Incident I2 is the reason for this module: a snap-packaged Kubernetes ran its
own containerd beside the distribution's ``containerd.service`` and the
toolkit configured the wrong one. Nobody asked kubelet. Here kubelet is asked
first (its running command line, its flag files, its config file), and its
runtime endpoint is matched against every runtime instance found on the node.

``gather`` puts the sections together: the NVIDIA stack (nvidia_facts.py),
the runtime instances (runtime_instances.py), kubelet and the target (here).
Everything is read through ``root`` (node_reader.py): ``/`` for the live
node, a mounted image or a test tree otherwise; nothing is written.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import walk_files
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import (
    Node, flag_value, normalize_socket, processes, read_env_file, split_args, unit, unit_lines)
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.nvidia_facts import driver, glibc, gpus, toolkit
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.runtime_instances import (
    K8S_SNAP_ARGS, MICROK8S_DATA, microk8s_args, runtimes)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import (
    DEFAULT_SOCKETS, KUBELET_DEFAULT_ENDPOINT, PLATFORM_CONTAINERD_SOCKETS)

SECTIONS = ("gpus", "driver", "toolkit", "glibc", "runtimes", "kubelet", "target")

YAML_OR_JSON_KEY = r"""^\s*"?%s"?\s*:\s*["']?([^"'\s,}#]+)"""


# --- kubelet ----------------------------------------------------------------------------

def kubelet(node, procs=None):
    """Is kubelet running, which runtime endpoint does it use, and where was that set?"""
    procs = processes(node) if procs is None else procs
    facts = {"running": False, "pid": None, "binary": None, "installed": False, "platform": None,
             "embedded_in": None, "endpoint": None, "endpoint_socket": None, "endpoint_source": None,
             "endpoint_origin": None, "config_path": None, "config_dir": None, "cgroup_driver": None,
             "legacy_container_runtime": None, "flag_sources": [], "service": None}
    sources = _running_kubelet(node, procs, facts) or _installed_kubelet(node, facts)
    facts["installed"] = facts["installed"] or facts["running"] or bool(sources)
    _apply_flags(facts, sources)
    _apply_config_file(node, facts)
    if facts["endpoint"] is None and facts["installed"]:
        _apply_default_endpoint(facts)
    facts["endpoint_socket"] = normalize_socket(facts["endpoint"])
    return facts


def _running_kubelet(node, procs, facts):
    """Flag sources [(origin, argv)] of a running kubelet (or of the process that embeds it)."""
    for proc in procs:
        if proc["name"] == "kubelet":
            facts.update(running=True, pid=proc["pid"], binary=proc.get("exe") or proc["argv"][0],
                         service=proc.get("service"),
                         platform=_kubelet_platform(proc["argv"][0], proc.get("service")))
            sources = [("/proc/%d/cmdline" % proc["pid"], proc["argv"][1:])]
            if facts["platform"] == "k8s-snap":
                sources.insert(0, (K8S_SNAP_ARGS + "/kubelet", split_args(node.read(K8S_SNAP_ARGS + "/kubelet"))))
            return sources
    for proc in procs:
        if proc["name"] == "kubelite":
            args_file = flag_value(proc["argv"], ("--kubelet-args-file",)) or MICROK8S_DATA + "/args/kubelet"
            facts.update(running=True, pid=proc["pid"], binary=proc["argv"][0], platform="microk8s",
                         embedded_in="kubelite")
            return [(args_file, microk8s_args(node, "kubelet", os.path.dirname(os.path.dirname(args_file))))]
    for proc in procs:
        if proc["name"] in ("k3s", "rke2") and len(proc["argv"]) > 1 and proc["argv"][1] in ("server", "agent"):
            facts.update(running=True, pid=proc["pid"], binary=proc["argv"][0], platform=proc["name"],
                         embedded_in=proc["name"])
            return [("/proc/%d/cmdline" % proc["pid"], proc["argv"][1:])] + _rancher_config(node, proc["name"])
    return None


def _kubelet_platform(binary, service=None):
    if "/snap/k8s/" in binary or (service or "").startswith("snap.k8s."):
        return "k8s-snap"
    if "/k0s/" in binary:
        return "k0s"
    return None


def _rancher_config(node, name):
    """container-runtime-endpoint from /etc/rancher/NAME/config.yaml, as a flag source."""
    path = "/etc/rancher/%s/config.yaml" % name
    match = re.search(r"^\s*container-runtime-endpoint\s*:\s*[\"']?([^\"'\s#]+)", node.read(path) or "", re.M)
    return [(path, ["--container-runtime-endpoint=" + match.group(1)])] if match else []


def _installed_kubelet(node, facts):
    """Flag sources of a kubelet that is installed but not running (an image bake, a stopped node)."""
    if node.exists(K8S_SNAP_ARGS + "/kubelet"):
        facts.update(platform="k8s-snap", installed=True)
        return [(K8S_SNAP_ARGS + "/kubelet", split_args(node.read(K8S_SNAP_ARGS + "/kubelet")))]
    if node.exists(MICROK8S_DATA + "/args/kubelet"):
        facts.update(platform="microk8s", installed=True, embedded_in="kubelite")
        return [(MICROK8S_DATA + "/args/kubelet", microk8s_args(node, "kubelet"))]
    for name in ("k3s", "rke2"):
        for svc_name in ("%s.service" % name, "%s-agent.service" % name, "%s-server.service" % name):
            svc = unit(node, svc_name)
            if svc:
                facts.update(platform=name, installed=True, embedded_in=name)
                return [(svc["path"], svc["exec_argv"][1:])] + _rancher_config(node, name)
    if unit(node, "k0sworker.service"):
        facts.update(platform="k0s", installed=True)
        return []
    return _kubelet_unit_sources(node, facts)


def _kubelet_unit_sources(node, facts):
    svc = unit(node, "kubelet.service")
    sources = []
    if svc:
        facts["installed"] = True
        sources.append((svc["path"], svc["exec_argv"][1:]))
    for path in ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet"):
        env = read_env_file(node, path)
        args = [arg for value in env.values() for arg in split_args(value)]
        if args:
            sources.append((path, args))
    if svc:
        # EKS AL2 keeps flags in drop-ins as Environment=KUBELET_ARGS=...; they are in ExecStart already
        # when ExecStart names the variable, but an origin file is more useful to the operator.
        for path in svc["files"][1:]:
            for key, value in unit_lines(node.read(path) or ""):
                if key == "Environment":
                    args = [a for pair in split_args(value) for a in split_args(pair.partition("=")[2])]
                    if args:
                        sources.append((path, args))
    if node.isfile("/usr/bin/kubelet") or node.isfile("/usr/local/bin/kubelet"):
        facts["installed"] = True
    return sources


def _apply_flags(facts, sources):
    for origin, argv in sources:
        facts["flag_sources"].append(origin)
        endpoint = flag_value(argv, ("--container-runtime-endpoint",))
        if endpoint:
            facts.update(endpoint=endpoint, endpoint_source="flag", endpoint_origin=origin)
        for key, names in (("config_path", ("--config",)), ("legacy_container_runtime", ("--container-runtime",)),
                           ("cgroup_driver", ("--cgroup-driver",))):
            value = flag_value(argv, names)
            if value:
                facts[key] = value
        facts["config_dir"] = flag_value(argv, ("--config-dir",)) or facts["config_dir"]
    if facts["legacy_container_runtime"] == "remote":
        facts["legacy_container_runtime"] = None


def _apply_config_file(node, facts):
    """containerRuntimeEndpoint (unless a flag set it) and cgroupDriver from the KubeletConfiguration
    file and its --config-dir drop-ins (later files win)."""
    candidates = [facts["config_path"]] if facts["config_path"] else [
        "/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet/config.json",
        "/etc/kubernetes/kubelet/kubelet-config.json"]
    files = [p for p in candidates if p and node.isfile(p)][:1]
    if facts["config_dir"]:
        files += walk_files(facts["config_dir"], node.listdir, node.isdir, ".conf")  # kubelet reads only these
    config_cgroup = None
    for path in files:
        if facts["config_path"] is None:
            facts["config_path"] = path
        text = node.read(path) or ""
        endpoint = _config_key(text, "containerRuntimeEndpoint")
        if endpoint and facts["endpoint_source"] in (None, "config"):  # flags win
            facts.update(endpoint=endpoint, endpoint_source="config", endpoint_origin=path)
        config_cgroup = _config_key(text, "cgroupDriver") or config_cgroup
    facts["cgroup_driver"] = facts["cgroup_driver"] or config_cgroup  # a --cgroup-driver flag wins
    if files:
        facts["installed"] = True


def _config_key(text, key):
    match = re.search(YAML_OR_JSON_KEY % key, text, re.M)
    return match.group(1) if match else None


def _apply_default_endpoint(facts):
    if facts["legacy_container_runtime"] == "docker":
        facts.update(endpoint="unix://" + DEFAULT_SOCKETS["docker"], endpoint_source="legacy-dockershim")
        return
    platform_default = PLATFORM_CONTAINERD_SOCKETS.get(facts["platform"])
    if platform_default:
        facts.update(endpoint="unix://" + platform_default, endpoint_source="platform-default")
    else:
        facts.update(endpoint=KUBELET_DEFAULT_ENDPOINT, endpoint_source="kubelet-default")


# --- the target ---------------------------------------------------------------------------

def choose_target(instances, kubelet_facts):
    """(instance or None, selected_by, reason). Marks used_by_kubelet/is_target on instances."""
    socket = kubelet_facts.get("endpoint_socket") if kubelet_facts else None
    if socket:
        matches = [i for i in instances
                   if socket in (normalize_socket(i["socket"]), normalize_socket(i["cri_socket"]))]
        for instance in matches:
            instance["used_by_kubelet"] = True
        source = "%s (%s%s)" % (kubelet_facts["endpoint"], kubelet_facts["endpoint_source"],
                                ", " + kubelet_facts["endpoint_origin"] if kubelet_facts["endpoint_origin"] else "")
        chosen, why = _pick(matches)
        if chosen:
            return _mark(chosen, "kubelet", "kubelet's runtime endpoint %s is served by %s%s" % (
                source, _describe(chosen), why))
        if matches:
            return None, None, "kubelet's runtime endpoint %s matches several instances: %s; set the path " \
                               "explicitly" % (source, ", ".join(_describe(i) for i in matches))
        if kubelet_facts["endpoint_source"] != "kubelet-default":
            return None, None, "kubelet uses %s but no runtime instance on this node serves that socket " \
                               "(found: %s)" % (source, ", ".join(_describe(i) for i in instances) or "none")
        return _target_without_kubelet(instances, "kubelet is installed but has no runtime endpoint configured "
                                                  "and nothing serves its default %s" % kubelet_facts["endpoint"])
    return _target_without_kubelet(instances, "no kubelet configuration found")


def _target_without_kubelet(instances, why):
    """Image bakes and plain Docker hosts: the one instance no other daemon uses, or the one running."""
    candidates = [i for i in instances if not i["used_by"]]
    chosen, _running = _pick(candidates)
    if chosen and len(candidates) == 1:
        return _mark(chosen, "only-instance", "%s; %s is the only runtime instance" % (why, _describe(chosen)))
    if chosen:
        return _mark(chosen, "only-running", "%s; %s is the only running one of %d runtime instances" % (
            why, _describe(chosen), len(candidates)))
    if not candidates:
        return None, None, "no container runtime found on this node"
    return None, None, "%s and %d runtime instances could be meant: %s; set the path explicitly" % (
        why, len(candidates), ", ".join(_describe(i) for i in candidates))


def _pick(instances):
    if len(instances) == 1:
        return instances[0], ""
    running = [i for i in instances if i["running"]]
    if len(running) == 1:
        return running[0], " (the only one of them running)"
    return None, ""


def _mark(instance, selected_by, reason):
    instance["is_target"] = True
    return instance, selected_by, reason


def _describe(instance):
    return "%s %s (%s, %s)" % (instance["kind"], instance["socket"], instance["platform"],
                               instance["service"] or "pid %s" % instance["pid"])


# --- everything ------------------------------------------------------------------------------

def gather(root="/", sections=SECTIONS, run=None):
    """The facts for `sections`, read through root."""
    node = Node(root, run)
    wanted = set(sections)
    facts = {"root": node.root}
    if "gpus" in wanted:
        facts["gpus"] = gpus(node)
    if "driver" in wanted:
        facts["driver"] = driver(node)
    if wanted & set(("toolkit", "glibc")):
        glibc_facts = glibc(node)
        if "glibc" in wanted:
            facts["glibc"] = glibc_facts
        if "toolkit" in wanted:
            facts["toolkit"] = toolkit(node, glibc_facts)
    if wanted & set(("runtimes", "kubelet", "target")):
        procs = processes(node)
        instances = runtimes(node, procs)
        kubelet_facts = kubelet(node, procs)
        chosen, selected_by, reason = choose_target(instances, kubelet_facts)
        if "runtimes" in wanted:
            facts["runtimes"] = instances
        if "kubelet" in wanted:
            facts["kubelet"] = kubelet_facts
        if "target" in wanted:
            target = dict(chosen, selected_by=selected_by) if chosen else None
            facts["target"] = target
            facts["target_reason"] = reason
            # Whether systemd runs this system (sd_booted's test): the runtime roles restart through it.
            facts["systemd"] = node.isdir("/run/systemd/system")
    return facts
