# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules about kubelet and the runtime it talks to (incident I3 and its neighbours).

Is kubelet running and healthy, does it still carry the dockershim flag, is
its runtime endpoint served by a runtime instance of the node, and does that
runtime run and answer CRI. The checks are listed in doctor_rules.CATALOGUE.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.urls import open_url

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import (
    describe, finding, instance_evidence, kubelet_evidence, manual_fix, note)
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import CRI_DISABLE_NAMES

try:
    from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.explain import explain
except ImportError:  # pragma: no cover - explain.py ships with the collection
    def explain(message, context=None):
        return None


def kubelet_fix(ctx):
    service = "kubelet" if not ctx.kubelet.get("embedded_in") else ctx.kubelet["embedded_in"]
    return manual_fix("Start kubelet again and watch it stay up (journalctl -u %s). Change the runtime with the role "
                      "container_runtime: it restarts the runtime under a node lock and brings back a kubelet that "
                      "dies in the restart." % service,
                      ["systemctl start %s" % service, "journalctl -u %s -n 50" % service])


def check_kubelet_not_running(rule, ctx):
    kubelet = ctx.kubelet
    if not kubelet.get("installed") or kubelet.get("running") or not ctx.booted:
        return []
    evidence = [ctx.file_evidence(path) for path in kubelet.get("flag_sources") or [] if path.startswith("/")]
    if kubelet.get("config_path"):
        evidence.append(ctx.file_evidence(kubelet["config_path"]))
    evidence.append(note("no kubelet process is running"))
    return [finding(rule, "kubelet is installed but not running: the node is NotReady and no pod starts. A kubelet "
                    "that died when its container runtime restarted (incident I3) stays down.", evidence,
                    kubelet_fix(ctx))]


def healthz_url(ctx, given):
    if given:
        return given
    if not ctx.node.live:
        return None
    text = ctx.node.read(ctx.kubelet.get("config_path") or "/var/lib/kubelet/config.yaml") or ""
    port = re.search(r"""^\s*"?healthzPort"?\s*:\s*(\d+)""", text, re.M)
    address = re.search(r"""^\s*"?healthzBindAddress"?\s*:\s*"?([0-9.]+)""", text, re.M)
    return "http://%s:%s/healthz" % (address.group(1) if address else "127.0.0.1", port.group(1) if port else "10248")


def probe_healthz(url, timeout=3.0):
    """(ok, detail) of kubelet's /healthz."""
    try:
        # No proxy: the address is the node's own kubelet.
        response = open_url(url, timeout=timeout, use_proxy=False)
        body = response.read(200).decode("utf-8", "replace").strip()
        return (response.getcode() == 200 and body == "ok"), "HTTP %s %r" % (response.getcode(), body)
    except Exception as exc:  # URLError, socket errors, HTTP errors: all mean "not healthy"
        return False, str(getattr(exc, "reason", exc))


def check_kubelet_unhealthy(rule, ctx):
    health = ctx.health
    if not health or not ctx.kubelet.get("running") or health.get("ok"):
        return []
    evidence = [{"kind": "process", "pid": ctx.kubelet.get("pid"), "command": ctx.kubelet.get("binary")},
                {"kind": "socket", "path": health["url"], "state": health["detail"]}]
    return [finding(rule, "kubelet runs but its health endpoint %s does not answer ok (%s)." % (
        health["url"], health["detail"]), evidence, manual_fix(
        "Look at journalctl -u kubelet for 'failed to write client preface' or runtime errors; restart kubelet "
        "once its runtime answers.", ["journalctl -u kubelet -n 50", "systemctl restart kubelet"]))]


KUBELET_FLAG_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet")


def lines_matching(ctx, paths, regex):
    """File evidence for each line of PATHS that matches REGEX."""
    found = []
    for path in paths:
        for number, line in enumerate((ctx.node.read(path) or "").splitlines(), 1):
            if re.search(regex, line):
                found.append(ctx.file_evidence(path, number))
    return found


def check_kubelet_legacy_flag(rule, ctx):
    if ctx.kubelet.get("legacy_container_runtime") != "docker":
        return []
    evidence = [{"kind": "process", "pid": ctx.kubelet.get("pid"), "command": ctx.kubelet.get("binary"),
                 "text": "--container-runtime docker"}] if ctx.kubelet.get("pid") else []
    sources = [p for p in ctx.kubelet.get("flag_sources") or [] if p.startswith("/") and not p.startswith("/proc/")]
    evidence += lines_matching(ctx, sorted(set(sources + list(KUBELET_FLAG_FILES))), r"--container-runtime[= ]+docker")
    evidence.append(note("--container-runtime docker: dockershim was removed in Kubernetes 1.24 and the flag in 1.27"))
    return [finding(rule, "kubelet is still started with --container-runtime docker while the node's runtime is "
                    "configured through its CRI endpoint: kubelet either uses Docker (not the runtime being "
                    "configured) or does not start at all on Kubernetes 1.27+.", evidence, manual_fix(
                        "Remove --container-runtime from kubelet's flags (kubeadm-flags.env or its drop-in) and set "
                        "--container-runtime-endpoint (or containerRuntimeEndpoint) to the runtime's socket, then "
                        "restart kubelet.", ["systemctl daemon-reload", "systemctl restart kubelet"]))]


def check_endpoint_unserved(rule, ctx):
    kubelet = ctx.kubelet
    socket = kubelet.get("endpoint_socket")
    if not kubelet.get("installed") or not socket or not ctx.instances:
        return []
    if any(i.get("used_by_kubelet") for i in ctx.instances):
        return []
    evidence = [kubelet_evidence(ctx), {"kind": "socket", "path": socket, "state": "exists" if ctx.node.exists(socket)
                                        else "missing"}]
    evidence += [note("runtime instance %s" % describe(i)) for i in ctx.instances]
    return [finding(rule, "kubelet's runtime endpoint %s is served by no runtime instance on this node (found: %s)." % (
        kubelet.get("endpoint"), ", ".join(describe(i) for i in ctx.instances)), evidence, manual_fix(
        "Point kubelet's --container-runtime-endpoint (or containerRuntimeEndpoint in %s) at the socket of the "
        "runtime that should run pods, or start that runtime." % (kubelet.get("config_path") or "its config"),
        ["systemctl restart kubelet"]))]


def check_no_runtime(rule, ctx):
    if ctx.instances:
        return []
    return [finding(rule, "No container runtime (containerd, Docker, CRI-O) was found on this node.",
                    [note(ctx.facts.get("target_reason") or "no runtime instance found")],
                    manual_fix("Install a container runtime (e.g. the distribution's containerd) before the "
                               "GPU setup."))]


def check_runtime_down(rule, ctx):
    instance = ctx.target()
    if instance is None or instance.get("running") or not ctx.booted or not ctx.kubelet.get("installed"):
        return []
    command = (instance.get("restart") or {}).get("command") or ""
    start = command.replace(" restart ", " start ") if command.startswith("systemctl") else command
    return [finding(rule, "%s, the runtime kubelet uses, is not running: no pod can start on this node." % describe(
        instance), instance_evidence(instance) + [kubelet_evidence(ctx)], manual_fix(
        "Start it and look at its log for why it stopped.",
        [c for c in (start, "journalctl -u %s -n 50" % (instance.get("service") or instance["kind"])) if c]))]


def check_cri_unavailable(rule, ctx):
    instance = ctx.target()
    if instance is None or instance["kind"] != "containerd":
        return []
    live = ctx.view(instance).get("live") or {}
    if not live.get("queried") or live.get("ok"):
        return []
    known = explain(live.get("error"), {"socket": instance["socket"], "engine": "containerd",
                                        "config_path": instance["config_path"]})
    disabled = [p for p in ctx.view(instance).get("disabled_plugins") or [] if p in CRI_DISABLE_NAMES]
    if known and known["rule"] == "cri-disabled" and not disabled:
        # "unknown service" also means the CRI plugin failed to load, e.g. a default runtime it cannot find.
        known = {"cause": "The CRI plugin is not disabled but did not load: containerd logs 'failed to load plugin "
                          "io.containerd.grpc.v1.cri' with the reason (often its runtime settings).",
                 "fix": "Read the reason in the daemon's log, fix the config (the other findings name the "
                        "problems the diagnosis found in it), then restart it."}
    evidence = instance_evidence(instance) + [{"kind": "cri", "socket": instance["socket"], "text": live.get("error")}]
    if known:
        evidence.append(note(known["cause"]))
    fix = manual_fix(known["fix"] if known else "Read the daemon's log (journalctl -u %s): the CRI plugin failed to "
                     "load, usually because of its config." % (instance.get("service") or "containerd"),
                     ["journalctl -u %s -n 100" % (instance.get("service") or "containerd")])
    return [finding(rule, "%s runs but does not answer kubelet's CRI calls: %s" % (describe(instance), live.get("error")),
                    evidence, fix)]


# (id, severity, incident, title, check) of each rule, as in every rule module of this package: rules.py runs them.
RULES = (
    ("kubelet-not-running", "critical", "I3", "kubelet is installed but not running", check_kubelet_not_running),
    ("kubelet-unhealthy", "critical", "I3", "kubelet runs but is not healthy", check_kubelet_unhealthy),
    ("kubelet-legacy-docker-flag", "critical", "I3", "kubelet still started with --container-runtime docker",
     check_kubelet_legacy_flag),
    ("kubelet-endpoint-unserved", "critical", "I3", "kubelet's runtime endpoint is served by nobody",
     check_endpoint_unserved),
    ("runtime-not-running", "critical", None, "The runtime kubelet uses is not running", check_runtime_down),
    ("cri-unavailable", "critical", None, "The runtime kubelet uses does not answer CRI", check_cri_unavailable),
    ("no-container-runtime", "critical", None, "No container runtime on the node", check_no_runtime),
)
