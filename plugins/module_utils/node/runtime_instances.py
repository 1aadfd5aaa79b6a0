# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Every container runtime instance on a node, running or installed, and how each is configured.

An instance is one daemon (containerd, dockerd or CRI-O) with its socket,
config file, service and platform: the distribution's containerd.service,
the containerd bundled by k8s-snap, MicroK8s, k3s, RKE2 or k0s, the one EKS
nodes generate, dockerd's private one. Instances come from running processes
and from installed units (merged per socket); ``PLATFORM_RULES`` say per
platform which file to edit and what regenerates it, and ``restart_hint`` how
the instance picks up a changed config. discovery.py matches them against
kubelet's runtime endpoint.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.daemon_json import (
    DockerConfigError, parse_daemon_json)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.toml_reader import TomlError, read_toml
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.value_kinds import mismatch, values_at
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import walk_files
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import (
    CRI_DOCKERD_SOCKET, DEFAULT_SOCKETS, PLATFORM_CONTAINERD_SOCKETS)
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import (
    binary_version, flag_value, normalize_socket, processes, split_args, unit)

DEFAULT_CONTAINERD_CONFIG = "/etc/containerd/config.toml"
MICROK8S_DATA = "/var/snap/microk8s/current"
MICROK8S_COMMON = "/var/snap/microk8s/common"
K8S_SNAP_ARGS = "/var/snap/k8s/common/args"
RANCHER = {"k3s": "/var/lib/rancher/k3s", "rke2": "/var/lib/rancher/rke2"}
RUNTIME_PACKAGES = {"containerd": ("containerd", "containerd.io"),
                    "dockerd": ("docker.io", "docker-ce", "moby-engine", "docker"),
                    "crio": ("cri-o",)}

TOML_VERSION_RE = re.compile(r"^\s*version\s*=\s*(\d+)\s*(?:#.*)?$", re.M)
TOML_TABLE_RE = re.compile(r"^\s*\[", re.M)
TOML_IMPORTS_RE = re.compile(r"^\s*imports\s*=\s*\[(.*?)\]", re.M | re.S)
TOML_DISABLED_RE = re.compile(r"^\s*disabled_plugins\s*=\s*\[(.*?)\]", re.M | re.S)
QUOTED_RE = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'([^']*)'")


def new_instance(kind, platform, **fields):
    instance = {
        "id": None, "kind": kind, "platform": platform, "service": None, "running": False,
        "pid": None, "binary": None, "version": None, "version_source": None,
        "socket": None, "cri_socket": None, "config_path": None, "config_exists": False,
        "config_version": None, "imports": [], "dropin_dir": None, "disabled_plugins": [],
        "edit_path": None, "edit_mode": "main", "regenerated_by": None, "platform_config": None,
        "nvidia_autodetect": False, "used_by": [], "sources": [], "enabled": None,
        "restart": None, "notes": [], "is_target": False, "used_by_kubelet": False,
        "containerd_socket": None, "masked": False, "missing_binary": None,
    }
    instance.update(fields)
    return instance


def toml_top_version(text):
    """`version = N` before the first table; a containerd file without it is version 1."""
    if text is None:
        return None
    table = TOML_TABLE_RE.search(text)
    head = text[:table.start()] if table else text
    match = TOML_VERSION_RE.search(head)
    return int(match.group(1)) if match else 1


def toml_string_list(regex, text):
    match = regex.search(text or "")
    if not match:
        return []
    return [a or b for a, b in QUOTED_RE.findall(match.group(1))]


def toml_section_string(text, section, key):
    """Value of `key = "..."` inside [section] (a regex, not a TOML parser)."""
    current = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[] ")
            continue
        if current == section:
            match = re.match(r"%s\s*=\s*[\"']([^\"']*)[\"']" % re.escape(key), stripped)
            if match:
                return match.group(1)
    return None


def containerd_instance(node, argv, platform, defaults=None):
    """A containerd instance from its arguments (process, unit or args file)."""
    defaults = defaults or {}
    config = flag_value(argv, ("--config", "-c")) or defaults.get("config") or DEFAULT_CONTAINERD_CONFIG
    text = node.read(config)
    settings, error = containerd_settings(text)
    socket = (flag_value(argv, ("--address", "-a")) or settings["address"]
              or defaults.get("socket") or DEFAULT_SOCKETS["containerd"])
    instance = new_instance(
        "containerd", platform, socket=socket, config_path=config, config_exists=text is not None,
        config_version=settings["version"], imports=settings["imports"],
        disabled_plugins=settings["disabled_plugins"], dropin_dir=_dropin_dir(settings["imports"]), edit_path=config,
        binary=defaults.get("binary") or (argv[0] if argv and argv[0].startswith("/") else None))
    if error:
        instance["notes"].append("%s line %s: %s" % (config, error.line, error.message))
    PLATFORM_RULES.get(platform, _no_rule)(node, instance)
    return instance


def containerd_settings(text):
    """({version, imports, disabled_plugins, address}, TomlError or None) of a containerd config, read as TOML
    (the doctor's reader). Text that is no TOML (a platform's Go template, a broken file) gives what line
    patterns find in it, and the error; a value of another type than containerd's counts as absent."""
    if text is None:
        return {"version": None, "imports": [], "disabled_plugins": [], "address": None}, None
    try:
        data = read_toml(text).data
    except TomlError as exc:
        return {"version": toml_top_version(text), "imports": toml_string_list(TOML_IMPORTS_RE, text),
                "disabled_plugins": toml_string_list(TOML_DISABLED_RE, text),
                "address": toml_section_string(text, "grpc", "address")}, exc
    version = data.get("version", 1)  # a file without `version` is version 1
    return {"version": None if mismatch(version, "an integer") else version,
            "imports": _typed(data, ("imports",), "a list of strings") or [],
            "disabled_plugins": _typed(data, ("disabled_plugins",), "a list of strings") or [],
            "address": _typed(data, ("grpc", "address"), "a string")}, None


def _typed(data, keys, kind):
    """The value at KEYS when it is of KIND, else None."""
    return next((value for _keys, value in values_at(data, keys) if not mismatch(value, kind)), None)


def _dropin_dir(imports):
    for item in imports:
        if "*" in item:
            return os.path.dirname(item)
    return None


def _no_rule(node, instance):
    return None


def _rule_microk8s(node, instance):
    # Name files through `current`, not a revision: a snap refresh moves to a new revision directory.
    instance["config_path"] = re.sub(r"^/var/snap/microk8s/[^/]+/", MICROK8S_DATA + "/", instance["config_path"])
    instance.update(edit_path=os.path.dirname(instance["config_path"]) + "/containerd-template.toml",
                    edit_mode="template", regenerated_by="microk8s")
    if instance["config_version"] is None:
        instance["config_version"] = toml_top_version(node.read(instance["edit_path"]))
    instance["notes"].append("MicroK8s regenerates %s from containerd-template.toml at every start: "
                             "edit the template." % os.path.basename(instance["config_path"]))


def _rule_rancher(node, instance):
    """k3s / RKE2: config.toml is regenerated at every start; edit the platform's template."""
    name = instance["platform"]
    directory = os.path.dirname(instance["config_path"])
    v3, v2 = directory + "/config-v3.toml.tmpl", directory + "/config.toml.tmpl"
    if node.exists(v3):
        template = v3
    elif node.exists(v2):
        template = v2
    else:
        template = v3 if (instance["config_version"] or 0) >= 3 else v2
    instance.update(edit_path=template, edit_mode="template", regenerated_by=name,
                    nvidia_autodetect=True, platform_config="/etc/rancher/%s/config.yaml" % name)
    instance["notes"].append(
        "%s rewrites config.toml at every start from its built-in template, adding an 'nvidia' runtime by "
        "itself when /usr/bin/nvidia-container-runtime exists; a custom template must start with "
        "'{{ template \"base\" . }}' and is only needed for what auto-detection does not do." % name)


def _rule_k0s(node, instance):
    instance.update(edit_path="/etc/k0s/containerd.d", edit_mode="dropin", dropin_dir="/etc/k0s/containerd.d",
                    regenerated_by="k0s")
    instance["notes"].append("k0s generates its containerd.toml and imports /etc/k0s/containerd.d/*.toml: "
                             "add a drop-in there.")


def _rule_eks_al2023(node, instance):
    instance.update(edit_path=None, edit_mode="none", regenerated_by="nodeadm", nvidia_autodetect=True)
    instance["notes"].append(
        "nodeadm rewrites /etc/containerd/config.toml at every boot and makes 'nvidia' the default runtime "
        "when /usr/bin/nvidia-container-runtime exists; do not edit the file, give extra settings through "
        "the NodeConfig (spec.containerd.config).")


def _rule_eks_al2(node, instance):
    if instance["dropin_dir"] is None:
        instance["dropin_dir"] = "/etc/containerd/config.d"
    instance["notes"].append("EKS AL2 imports /etc/containerd/config.d/*.toml (config.d, not conf.d).")


def _rule_docker_managed(node, instance):
    instance.update(edit_path=None, edit_mode="none", regenerated_by="dockerd")
    instance["notes"].append("dockerd's private containerd: its file is written by dockerd at start; "
                             "configure dockerd (daemon.json) instead.")


PLATFORM_RULES = {"microk8s": _rule_microk8s, "k3s": _rule_rancher, "rke2": _rule_rancher, "k0s": _rule_k0s,
                  "eks-al2023": _rule_eks_al2023, "eks-al2": _rule_eks_al2,
                  "docker-managed": _rule_docker_managed}


def distro_platform(node):
    """distro, eks-al2 or eks-al2023 for a plain containerd.service."""
    if node.exists("/usr/bin/nodeadm") or unit(node, "nodeadm-config.service") or node.isdir("/etc/eks/nodeadm"):
        return "eks-al2023"
    if node.exists("/etc/eks/bootstrap.sh"):
        return "eks-al2"
    return "distro"


def containerd_platform(node, proc, distro):
    """Which platform started this containerd process (from its paths, service or parent)."""
    text = " ".join(proc["argv"] + [proc.get("exe") or "", proc.get("service") or ""])
    parent = proc.get("parent_name") or ""
    for platform, needle in (("k8s-snap", "/snap/k8s/"), ("k8s-snap", "snap.k8s."),
                             ("microk8s", "microk8s"), ("k3s", "/rancher/k3s/"), ("rke2", "/rancher/rke2/"),
                             ("k3s", "k3s"), ("rke2", "rke2"), ("k0s", "k0s"),
                             ("docker-managed", "/run/docker/containerd")):
        if needle in text or needle == parent:
            return platform
    return "docker-managed" if parent == "dockerd" else distro


def k8s_snap_args(node):
    return split_args(node.read(K8S_SNAP_ARGS + "/containerd"))


def microk8s_args(node, name, snap_data=MICROK8S_DATA):
    return split_args(node.read("%s/args/%s" % (snap_data, name)),
                      {"SNAP_DATA": snap_data, "SNAP_COMMON": MICROK8S_COMMON})


def rancher_defaults(name, argv=None):
    data_dir = flag_value(argv or [], ("--data-dir", "-d")) or RANCHER[name]
    return {"config": data_dir + "/agent/etc/containerd/config.toml", "socket": PLATFORM_CONTAINERD_SOCKETS[name],
            "binary": data_dir + "/data/current/bin/containerd"}


def process_instances(node, procs, distro):
    by_pid = dict((p["pid"], p) for p in procs)
    instances = []
    for proc in procs:
        parent = by_pid.get(proc["ppid"])
        proc["parent_name"] = parent["name"] if parent else None
        instance = None
        if proc["name"] == "containerd":
            platform = containerd_platform(node, proc, distro)
            instance = containerd_instance(node, proc["argv"][1:], platform)
        elif proc["name"] == "dockerd":
            instance = docker_instance(node, proc["argv"][1:])
        elif proc["name"] == "crio":
            instance = crio_instance(node, proc["argv"][1:])
        if instance is None:
            continue
        instance.update(running=True, pid=proc["pid"], sources=["process"],
                        binary=proc.get("exe") or instance["binary"] or proc["argv"][0],
                        service=proc.get("service"))
        # Its cgroup names no service: started by hand or by a non-systemd init, not by a unit.
        instance["outside_service"] = bool(proc.get("cgroup_read") and not proc.get("service"))
        instances.append(instance)
    return instances


def unit_instances(node, distro):
    """Runtime instances declared by installed services (running or not)."""
    found = []
    svc = unit(node, "containerd.service")
    if svc:
        found.append(_with_unit(node, containerd_instance(node, svc["exec_argv"][1:], distro), svc))
    svc = unit(node, "snap.k8s.containerd.service")
    if svc or node.exists(K8S_SNAP_ARGS + "/containerd"):
        instance = containerd_instance(node, k8s_snap_args(node), "k8s-snap",
                                       {"binary": "/snap/k8s/current/bin/containerd"})
        found.append(_with_unit(node, instance, svc or {"name": "snap.k8s.containerd.service"}))
    svc = unit(node, "snap.microk8s.daemon-containerd.service")
    if svc or node.exists(MICROK8S_DATA + "/args/containerd"):
        instance = containerd_instance(node, microk8s_args(node, "containerd"), "microk8s",
                                       {"config": MICROK8S_DATA + "/args/containerd.toml",
                                        "socket": PLATFORM_CONTAINERD_SOCKETS["microk8s"],
                                        "binary": "/snap/microk8s/current/bin/containerd"})
        found.append(_with_unit(node, instance, svc or {"name": "snap.microk8s.daemon-containerd.service"}))
    for name in ("k3s", "rke2"):
        for svc_name in ("%s.service" % name, "%s-agent.service" % name, "%s-server.service" % name):
            svc = unit(node, svc_name)
            if svc and not _external_runtime(node, name, svc["exec_argv"]):
                found.append(_with_unit(node, containerd_instance(
                    node, [], name, rancher_defaults(name, svc["exec_argv"])), svc))
    for svc_name in ("k0sworker.service", "k0scontroller.service"):
        svc = unit(node, svc_name)
        if svc and (svc_name == "k0sworker.service" or
                    set(svc["exec_argv"]) & set(("--enable-worker", "--single"))):
            found.append(_with_unit(node, containerd_instance(
                node, [], "k0s", {"config": "/etc/k0s/containerd.toml", "socket": PLATFORM_CONTAINERD_SOCKETS["k0s"],
                                  "binary": "/var/lib/k0s/bin/containerd"}), svc))
    svc = unit(node, "docker.service")
    if svc:
        found.append(_with_unit(node, docker_instance(node, svc["exec_argv"][1:]), svc))
    svc = unit(node, "crio.service")
    if svc:
        found.append(_with_unit(node, crio_instance(node, svc["exec_argv"][1:]), svc))
    return found


def _external_runtime(node, name, argv):
    """k3s/RKE2 told to use another runtime do not run their embedded containerd."""
    config = node.read("/etc/rancher/%s/config.yaml" % name) or ""
    return bool(flag_value(argv, ("--container-runtime-endpoint",)) or "--docker" in argv
                or re.search(r"^\s*container-runtime-endpoint\s*:", config, re.M)
                or re.search(r"^\s*docker\s*:\s*true", config, re.M))


def _with_unit(node, instance, svc):
    """An instance declared by a unit. A masked unit (a link to /dev/null) cannot be started, and a unit whose
    program is gone (a removed package's unit left in /etc) starts nothing: both are marked, so that the runtime
    roles treat the runtime as not there before they write anything."""
    instance.update(service=svc["name"], enabled=svc.get("enabled"), sources=["unit"] if svc.get("path")
                    else ["args-file"], masked=bool(svc.get("masked")))
    if svc.get("masked"):
        instance["notes"].append("service %s is masked" % svc["name"])
    program = (svc.get("exec_argv") or [""])[0]
    if program.startswith("/") and not node.exists(program):
        instance["missing_binary"] = program
        instance["notes"].append("service %s starts %s, which is not on the node" % (svc["name"], program))
    if svc.get("path") and not instance["binary"] and svc.get("exec_argv"):
        instance["binary"] = svc["exec_argv"][0]
    return instance


def docker_instance(node, argv):
    config = flag_value(argv, ("--config-file",)) or "/etc/docker/daemon.json"
    text = node.read(config)
    data, error = _daemon_json(text, config)
    hosts = [flag_value(argv, ("-H", "--host"))] + list(data.get("hosts") or [])
    socket = next((h for h in hosts if h and h.startswith("unix://")), None)
    if socket is None and any(h and h.startswith("fd://") for h in hosts):
        svc = unit(node, "docker.socket")
        socket = svc["listen"] if svc and svc["listen"] else DEFAULT_SOCKETS["docker"]
    instance = new_instance("docker", "docker", socket=(socket or DEFAULT_SOCKETS["docker"]).replace("unix://", ""),
                            config_path=config, config_exists=text is not None, edit_path=config,
                            binary="/usr/bin/dockerd")
    instance["containerd_socket"] = flag_value(argv, ("--containerd",)) or data.get("containerd")
    if error:
        instance["notes"].append("%s line %s: %s" % (config, error.line, error.reason))
    return instance


def _daemon_json(text, path):
    """daemon.json as dockerd reads it, and the error that stops dockerd reading it (the data is then empty)."""
    try:
        return parse_daemon_json(text or "", path), None
    except DockerConfigError as exc:
        return {}, exc


def crio_instance(node, argv):
    config = flag_value(argv, ("--config",)) or "/etc/crio/crio.conf"
    dropins = flag_value(argv, ("--config-dir",)) or "/etc/crio/crio.conf.d"
    socket = flag_value(argv, ("--listen",))
    texts = [node.read(config)] + [node.read(p) for p in walk_files(dropins, node.listdir, node.isdir)]
    for text in texts:  # drop-ins in name order override the main file
        socket = _crio_listen(text) or socket
    return new_instance("crio", "crio", socket=socket or DEFAULT_SOCKETS["crio"], config_path=config,
                        config_exists=texts[0] is not None, dropin_dir=dropins, edit_path=dropins,
                        edit_mode="dropin", binary="/usr/bin/crio")


def _crio_listen(text):
    """crio.api.listen of one CRI-O file, read as TOML (None when unset, or in a file CRI-O cannot read)."""
    try:
        data = read_toml(text).data if text is not None else {}
    except TomlError:
        return None
    api = (data.get("crio") if isinstance(data.get("crio"), dict) else {}).get("api")
    listen = api.get("listen") if isinstance(api, dict) else None
    return listen if isinstance(listen, str) else None


def cri_dockerd_socket(node, procs):
    for proc in procs:
        if proc["name"] == "cri-dockerd":
            endpoint = flag_value(proc["argv"], ("--container-runtime-endpoint",))
            if endpoint and endpoint.startswith("unix://"):
                return endpoint[len("unix://"):]
    for name in ("cri-docker.socket", "cri-dockerd.socket"):
        svc = unit(node, name)
        if svc and svc["listen"]:
            return svc["listen"]
    if any(p["name"] == "cri-dockerd" for p in procs) or unit(node, "cri-docker.service"):
        return CRI_DOCKERD_SOCKET
    return None


def merge_instances(from_processes, from_units):
    """One entry per (kind, socket): a running process joins the service that declares the same socket.

    The process's own arguments are the truth for files and socket; the unit adds the service name
    (when the process's cgroup did not give it), whether it is enabled, and its source.
    """
    merged = list(from_processes)
    for declared in from_units:
        key = (declared["kind"], normalize_socket(declared["socket"]))
        same = [i for i in from_processes if (i["kind"], normalize_socket(i["socket"])) == key
                and len(i["sources"]) == 1]
        if not same:
            merged.append(declared)
            continue
        running = same[0]
        running["sources"] = running["sources"] + declared["sources"]
        if running.get("outside_service"):
            running["notes"].append("%s declares this socket, but the running process (pid %d) was not started "
                                    "by it: restarting the service will not restart this process"
                                    % (declared["service"], running["pid"]))
            continue
        running["service"] = running["service"] or declared["service"]
        running["enabled"] = declared["enabled"]
        running["masked"] = declared["masked"]  # it runs, but systemd will not restart it
    return merged


def runtimes(node, procs=None):
    """Every container runtime instance on the node, running or installed."""
    procs = processes(node) if procs is None else procs
    distro = distro_platform(node)
    instances = merge_instances(process_instances(node, procs, distro), unit_instances(node, distro))
    cri_docker = cri_dockerd_socket(node, procs)
    for instance in instances:
        instance.pop("outside_service", None)
        instance["id"] = "%s:%s" % (instance["kind"], instance["socket"])
        if instance["kind"] == "docker":
            instance["cri_socket"] = cri_docker
            _mark_docker_backend(instances, instance)
        instance["restart"] = restart_hint(instance)
        _add_version(node, instance)
    return instances


def _mark_docker_backend(instances, docker):
    backend = normalize_socket(docker.get("containerd_socket"))
    for instance in instances:
        if instance["kind"] != "containerd":
            continue
        if instance["platform"] == "docker-managed" or (backend and normalize_socket(instance["socket"]) == backend):
            if "docker" not in instance["used_by"]:
                instance["used_by"].append("docker")


def _add_version(node, instance):
    binary = instance["binary"] or ""
    program = {"containerd": "containerd", "docker": "dockerd", "crio": "crio"}[instance["kind"]]
    packages = node.packages()["packages"]
    if binary.startswith(("/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/")):
        for package in RUNTIME_PACKAGES[program]:
            if package in packages:
                instance.update(version=packages[package], version_source="package " + package)
                return
    if node.run and binary.startswith("/") and node.isfile(binary):
        instance.update(version=binary_version(node, binary), version_source="--version")


# --- restart hints ---------------------------------------------------------------------

def restart_hint(instance):
    """How this instance picks up a changed config, and what else that restarts."""
    service, platform = instance["service"], instance["platform"]
    hint = {"method": "systemd", "service": service, "command": None, "also_restarts": [], "note": None}
    if platform == "k8s-snap":
        hint.update(method="snap", service="snap.k8s.containerd.service", command="snap restart k8s.containerd")
    elif platform == "microk8s":
        hint.update(method="snap", service="snap.microk8s.daemon-containerd.service",
                    command="snap restart microk8s.daemon-containerd")
    elif platform in ("k3s", "rke2"):
        unit_name = service or ("%s.service" % platform if platform == "k3s" else "rke2-server.service")
        hint.update(service=unit_name, command="systemctl restart %s" % unit_name[:-len(".service")],
                    also_restarts=["kubelet"],
                    note="the embedded kubelet restarts too; config.toml is regenerated from the template")
    elif platform == "docker-managed":
        hint.update(method="none", note="restart dockerd instead; this containerd belongs to it")
    elif instance["kind"] == "docker" and not service and instance["pid"]:
        hint.update(method="signal", command="kill -s HUP %d" % instance["pid"],
                    note="dockerd is not run by a service here; it re-reads runtimes on SIGHUP")
    elif instance["kind"] == "docker":
        hint.update(command="systemctl reload %s" % _short(service or "docker.service"), method="systemd-reload",
                    note="dockerd re-reads runtimes on SIGHUP (ExecReload)")
    elif service:
        hint["command"] = "systemctl restart %s" % _short(service)
        if platform == "k0s":
            hint["note"] = "k0s regenerates containerd.toml from the drop-ins when the worker restarts"
    else:
        hint.update(method="manual", note="not started by a service: restart it the way it was started")
    return hint


def _short(service):
    return service[:-len(".service")] if service.endswith(".service") else service
