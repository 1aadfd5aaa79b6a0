# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""What every gpu_doctor rule reads and returns: the node's context, findings, evidence and fixes.

``Context`` holds the facts of discovery, the runtime views (what each runtime
instance really runs) and the probes of one node. The helpers build findings
in the catalogue's format (see rules.py): evidence of where an
instance runs and what kubelet uses, and fixes that name the playbook and the
variables pointing the container_runtime role at an instance, or the commands
to run by hand.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import DEFAULT_SOCKETS
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader

# Fixes name the playbook as an installed collection runs it (ansible-playbook gpunode.nvidia.site).
PLAYBOOK = "gpunode.nvidia.site"
DEFAULT_CONFIGS = ("/etc/containerd/config.toml",)
BUNDLED_CONTAINERD = ("k3s", "rke2", "k0s", "microk8s", "k8s-snap")


# --- the node as the rules see it ---------------------------------------------------------------

class Context(object):
    """Facts, runtime views and probes of one node; what every rule reads."""

    def __init__(self, facts, node, views, runtime_name="nvidia", health=None, on=None):
        self.facts = facts
        self.on = on  # the day of the diagnosis, 'YYYY-MM-DD' (the security rules' branch lifecycle)
        self.node = node
        self.views = views
        self.runtime_name = runtime_name
        self.health = health
        self.kubelet = facts.get("kubelet") or {}
        self.instances = facts.get("runtimes") or []
        self.booted = node.live or any(name.isdigit() for name in node.listdir("/proc"))

    def instance(self, instance_id):
        return next((i for i in self.instances if i["id"] == instance_id), None)

    def target(self):
        """The runtime instance kubelet uses (or, without kubelet, the one discovery chose)."""
        target = self.facts.get("target")
        return self.instance(target["id"]) if target else None

    def kubelet_selected(self):
        target = self.facts.get("target")
        return bool(target and target.get("selected_by") == "kubelet")

    def is_target(self, instance):
        target = self.target()
        return bool(target and target["id"] == instance["id"])

    def view(self, instance):
        return self.views.get(instance["id"]) or {}

    def runtimes(self, instance):
        """(runtimes, source): what the daemon runs (live CRI when it answered, else its files)."""
        view = self.view(instance)
        live = view.get("live") or {}
        if live.get("ok"):
            runtimes = {}
            for name, runtime in live["runtimes"].items():
                merged = dict(runtime)
                merged["origin"] = (view.get("runtimes", {}).get(name) or {}).get("origin")
                runtimes[name] = merged
            return runtimes, "cri"
        return view.get("runtimes") or {}, view.get("source") or "files"

    def file_evidence(self, path, line=None, note=None):
        evidence = {"kind": "file", "path": path, "line": line}
        if line:
            text = self.node.read(path) or ""
            lines = text.splitlines()
            if 0 < line <= len(lines):
                evidence["text"] = lines[line - 1].strip()
        if note:
            evidence["note"] = note
        return evidence


def finding(rule, message, evidence, fix, severity=None, incident=None):
    """One finding of RULE (node or cluster); SEVERITY and INCIDENT override the rule's when this case is another."""
    return {"rule": rule.id, "severity": severity or rule.severity, "incident": incident or rule.incident,
            "title": rule.title, "message": message, "evidence": [e for e in evidence if e], "fix": fix}


def note(text):
    return {"kind": "note", "text": text}


def describe(instance):
    return "%s %s (%s%s)" % (instance["kind"], instance["socket"], instance["platform"],
                             ", " + instance["service"] if instance.get("service") else "")


def instance_evidence(instance):
    """Where an instance runs: its process (or service) and its version."""
    evidence = []
    if instance.get("pid"):
        evidence.append({"kind": "process", "pid": instance["pid"], "command": instance.get("binary"),
                         "service": instance.get("service")})
    elif instance.get("service"):
        evidence.append({"kind": "process", "pid": None, "service": instance["service"],
                         "state": "not running"})
    evidence.append({"kind": "socket", "path": instance["socket"],
                     "state": "served" if instance.get("running") else "not served"})
    if instance.get("version"):
        evidence.append({"kind": "version", "name": instance["kind"], "version": instance["version"],
                         "source": instance.get("version_source")})
    return evidence


def kubelet_evidence(ctx):
    kubelet = ctx.kubelet
    if not kubelet.get("installed"):
        return None
    text = "kubelet runtime endpoint %s (%s)" % (kubelet.get("endpoint"), kubelet.get("endpoint_source"))
    if kubelet.get("pid"):
        return {"kind": "process", "pid": kubelet["pid"], "command": kubelet.get("binary"), "text": text}
    origin = kubelet.get("endpoint_origin")
    if origin and not origin.startswith("/proc/"):
        return {"kind": "file", "path": origin, "line": None, "text": text}
    return note(text)


# --- fixes --------------------------------------------------------------------------------------

def runtime_vars(instance, runtime_name="nvidia"):
    """The collection variables that point the container_runtime role at this instance."""
    service = ((instance.get("restart") or {}).get("service") or instance.get("service") or "")
    service = service[:-len(".service")] if service.endswith(".service") else service
    if instance["kind"] == "docker":
        found = {"container_runtime_engine": "docker", "container_runtime_docker_config": instance["config_path"]}
        if service:
            found["container_runtime_docker_service"] = service
    elif instance["kind"] == "crio":
        found = {"container_runtime_engine": "crio",
                 "container_runtime_crio_dropin": (instance.get("dropin_dir") or "/etc/crio/crio.conf.d")
                 + "/99-nvidia.toml", "container_runtime_crio_socket": instance["socket"]}
        if service:
            found["container_runtime_crio_service"] = service
    else:
        found = {"container_runtime_engine": "containerd",
                 "container_runtime_containerd_config": instance.get("edit_path") or instance["config_path"],
                 "container_runtime_containerd_socket": instance["socket"]}
        if service and (instance.get("restart") or {}).get("method") in ("systemd", "snap"):
            found["container_runtime_containerd_service"] = service
    if runtime_name != "nvidia":
        found["container_runtime_name"] = runtime_name
    return found


def operator_values(instance):
    """GPU operator Helm values that point its toolkit container at this containerd, or None."""
    if instance["kind"] != "containerd":
        return None
    config = instance.get("edit_path") or instance["config_path"]
    if config in DEFAULT_CONFIGS and node_reader.normalize_socket(instance["socket"]) == DEFAULT_SOCKETS["containerd"]:
        return None
    env = [{"name": "CONTAINERD_CONFIG", "value": config},
           {"name": "CONTAINERD_SOCKET", "value": instance["socket"]}]
    note_text = "toolkit.env of the gpu-operator chart (or ClusterPolicy spec.toolkit.env)"
    if instance["platform"] in BUNDLED_CONTAINERD:
        # The toolkit container would otherwise run `containerd config dump` with a containerd that is
        # not the node's bundled one: read the file instead.
        env.append({"name": "RUNTIME_CONFIG_SOURCE", "value": "file"})
        note_text += "; RUNTIME_CONFIG_SOURCE=file because %s bundles its own containerd" % instance["platform"]
    return {"helm_values": {"toolkit": {"env": env}}, "note": note_text}


def site_fix(instance, summary, runtime_name="nvidia", extra_vars=None, commands=None):
    if instance.get("edit_mode") == "none":
        return manual_fix(summary + " " + " ".join(instance.get("notes") or []), commands)
    variables = runtime_vars(instance, runtime_name)
    variables.update(extra_vars or {})
    fix = {"summary": summary, "playbook": PLAYBOOK, "vars": variables, "commands": list(commands or [])}
    values = operator_values(instance)
    if values:
        fix["gpu_operator"] = values
    return fix


def manual_fix(summary, commands=None):
    return {"summary": summary, "playbook": None, "vars": {}, "commands": [c for c in commands or [] if c]}


def playbook_fix(summary, variables=None):
    """A fix that is a run of site.yml with these variables (no runtime instance to point at)."""
    return {"summary": summary, "playbook": PLAYBOOK, "vars": dict(variables or {}), "commands": []}


def runtime_instances(ctx):
    """Instances whose runtime tables matter: all but dockerd's private containerd."""
    return [i for i in ctx.instances if i["platform"] != "docker-managed"]
