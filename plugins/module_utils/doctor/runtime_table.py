# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules about the runtime table: where the nvidia runtime is, and whether the table works.

I1: the runtime kubelet uses has no nvidia runtime (or has not loaded it);
I2: the nvidia runtime was configured in another runtime instance; I5: the
default runtime is undefined or its binary is missing, so every pod fails;
containerd 1.x without runc, a disabled CRI plugin and configs that cannot be
parsed. The checks are listed in doctor_rules.CATALOGUE.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import (
    describe, finding, instance_evidence, kubelet_evidence, manual_fix, note, runtime_instances, site_fix)
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import CRI_DISABLE_NAMES
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.runtime_views import binary_exists

# Where the toolkit's runtime binary is installed: its packages, and the GPU operator's toolkit container.
TOOLKIT_RUNTIME_BINARIES = ("/usr/bin/nvidia-container-runtime", "/usr/local/nvidia/toolkit/nvidia-container-runtime")


# --- I1 / I2: where the nvidia runtime is -------------------------------------------------------

def check_nvidia_missing(rule, ctx):
    instance = ctx.target()
    if instance is None or ctx.view(instance).get("config_error"):
        return []
    name = ctx.runtime_name
    view = ctx.view(instance)
    runtimes, source = ctx.runtimes(instance)
    if name in runtimes:
        return []
    in_file = name in (view.get("runtimes") or {})
    evidence = [kubelet_evidence(ctx)] + instance_evidence(instance)
    evidence.append(ctx.file_evidence(instance["config_path"], note="%s read from %s" % (
        "the daemon's CRI status" if source == "cri" else "effective config", source)))
    if source == "cri":
        evidence.append({"kind": "cri", "socket": instance["socket"],
                         "text": "runtimes loaded: %s" % (", ".join(sorted(runtimes)) or "none")})
    if in_file:
        origin = view["runtimes"][name].get("origin") or {}
        evidence.append(ctx.file_evidence(origin.get("path") or instance["config_path"], origin.get("line"),
                                          "defined here, but the running daemon has not loaded it"))
        command = (instance.get("restart") or {}).get("command")
        return [finding(rule, "%s defines runtime \"%s\" in its config, but the running daemon has not loaded it: "
                        "it was not restarted after the edit." % (describe(instance), name), evidence,
                        manual_fix("Restart the runtime so it loads its config%s." % (
                            " (%s)" % instance["restart"]["note"] if (instance.get("restart") or {}).get("note")
                            else ""), [command] if command else []))]
    if instance["platform"] in ("k3s", "rke2") and ctx.node.isfile("/usr/bin/nvidia-container-runtime"):
        return [finding(rule, "%s has no runtime \"%s\"; %s adds it by itself at its next start, since "
                        "/usr/bin/nvidia-container-runtime exists." % (describe(instance), name, instance["platform"]),
                        evidence, manual_fix("Restart %s so it regenerates its containerd config." % instance["platform"],
                                             [(instance.get("restart") or {}).get("command")]))]
    role = "the runtime kubelet uses" if ctx.kubelet_selected() else "the node's runtime"
    return [finding(rule, "%s, %s, has no runtime \"%s\" in its effective config: GPU pods fail with 'no runtime "
                    "for \"%s\" is configured'." % (describe(instance), role, name, name), evidence,
                    site_fix(instance, "Add the \"%s\" runtime to %s and restart it." % (
                        name, instance.get("edit_path") or instance["config_path"]), name))]


def usable_nvidia(ctx, instance):
    runtimes, _source = ctx.runtimes(instance)
    runtime = runtimes.get(ctx.runtime_name)
    if not runtime:
        return False
    exists, _where = binary_exists(ctx.node, runtime.get("binary"))
    return exists is not False


def check_nvidia_elsewhere(rule, ctx):
    target = ctx.target()
    if target is None or not ctx.kubelet_selected():
        return []
    found = []
    target_ok = usable_nvidia(ctx, target)
    for instance in ctx.instances:
        if instance["id"] == target["id"] or instance["platform"] == "docker-managed":
            continue
        runtimes, source = ctx.runtimes(instance)
        if ctx.runtime_name not in runtimes:
            continue
        origin = runtimes[ctx.runtime_name].get("origin") or {}
        evidence = [ctx.file_evidence(origin.get("path") or instance["config_path"], origin.get("line"),
                                      "runtime \"%s\" configured here (%s)" % (ctx.runtime_name, source))]
        evidence += instance_evidence(instance) + [kubelet_evidence(ctx)] + instance_evidence(target)
        if target_ok:
            message = ("%s also defines runtime \"%s\", but kubelet uses %s, which has a working one: the "
                       "other instance's runtime is not used by Kubernetes."
                       % (describe(instance), ctx.runtime_name, describe(target)))
            found.append(finding(rule, message, evidence, manual_fix(
                "Nothing to do for Kubernetes; remove the runtime from %s if it is a leftover."
                % instance["config_path"]), severity="info"))
            continue
        message = ("The \"%s\" runtime was configured in %s (%s), but kubelet uses %s (%s), which has no "
                   "usable \"%s\" runtime." % (ctx.runtime_name, describe(instance), instance["config_path"],
                                               describe(target), target.get("edit_path") or target["config_path"],
                                               ctx.runtime_name))
        found.append(finding(rule, message, evidence, site_fix(
            target, "Configure the runtime in the instance kubelet uses: %s." % describe(target), ctx.runtime_name)))
    return found


# --- I5 and the runtime table itself ------------------------------------------------------------

def check_runc_dropped(rule, ctx):
    found = []
    for instance in runtime_instances(ctx):
        view = ctx.view(instance)
        if not _runc_dropped(view):
            continue
        first = next((r.get("origin") for r in view["runtimes"].values() if r.get("origin")), None) or {}
        evidence = [ctx.file_evidence(first.get("path") or instance["config_path"], first.get("line"),
                                      "this file lists runtimes (%s) but not runc" % ", ".join(sorted(view["runtimes"])))]
        default = view.get("default_origin")
        evidence.append(ctx.file_evidence(default["path"], default["line"]) if default
                        else note("default_runtime_name is not set: containerd defaults to runc"))
        evidence += instance_evidence(instance)
        if view.get("source") == "config-dump":
            evidence.append({"kind": "command", "text": view["dump"]["command"],
                             "note": "the effective config has no runc runtime"})
        found.append(finding(rule, "%s: the config defines runtimes but no runc while the default runtime is runc; "
                             "containerd 1.x then has no runc at all and its CRI plugin fails to load." % describe(instance),
                             evidence, site_fix(instance, "Write the runc runtime out in the file (the role's "
                                                          "containerd_runtime module does when it edits a 1.x config).",
                                                ctx.runtime_name), severity=_sev(ctx, instance)))
    return found


def _runc_dropped(view):
    if view.get("kind") != "containerd" or view.get("config_error") or (view.get("major") or 1) >= 2:
        return False
    runtimes = view.get("runtimes") or {}
    return bool(runtimes) and "runc" not in runtimes and view.get("default_runtime") == "runc"


def _sev(ctx, instance):
    """critical for the instance kubelet uses, warning for others."""
    return "critical" if ctx.is_target(instance) else "warning"


def check_default_undefined(rule, ctx):
    found = []
    for instance in runtime_instances(ctx):
        view = ctx.view(instance)
        default = view.get("default_runtime")
        if not default or view.get("config_error") or default in (view.get("runtimes") or {}) or _runc_dropped(view):
            continue
        origin = view.get("default_origin") or {}
        evidence = [ctx.file_evidence(origin.get("path") or instance["config_path"], origin.get("line"),
                                      "runtimes defined: %s" % ", ".join(sorted(view.get("runtimes") or {})))]
        evidence += instance_evidence(instance)
        found.append(finding(rule, "%s: the default runtime \"%s\" is not defined; every pod on the node fails, not "
                             "only GPU pods." % (describe(instance), default), evidence,
                             site_fix(instance, "Define the runtime \"%s\" (or set the default back to the runtime pods "
                                                "used before)." % default, ctx.runtime_name,
                                      {"container_runtime_set_as_default": default == ctx.runtime_name}),
                             severity=_sev(ctx, instance)))
    return found


def _binary_problem(ctx, instance, name):
    runtime = (ctx.view(instance).get("runtimes") or {}).get(name)
    if not runtime or runtime.get("builtin"):
        return None
    exists, where = binary_exists(ctx.node, runtime.get("binary"))
    if exists is not False:
        return None
    return runtime, where


def missing_binary_fix(ctx, instance, missing, extra_vars=None):
    """Point the runtime at a toolkit binary the node has, else install the toolkit: never the missing path again."""
    installed = next((path for path in TOOLKIT_RUNTIME_BINARIES if path != missing and ctx.node.isfile(path)), None)
    variables = dict(extra_vars or {})
    if installed:
        variables["container_runtime_binary"] = installed
        summary = "Point the runtime at the toolkit's binary that is installed, %s." % installed
    else:
        # The toolkit stage installs the toolkit and hands its binary to the runtime stage of the same run.
        variables["gpunode_toolkit_stage"] = True
        summary = ("Install the NVIDIA container toolkit: the toolkit stage installs it and the runtime stage then "
                   "points the runtime at the binary it installed (remove any container_runtime_binary=%s from the "
                   "inventory)." % missing)
    return site_fix(instance, summary, ctx.runtime_name, variables)


def _missing_binary_evidence(ctx, instance, runtime, where):
    """The config line that names the missing binary, and the instance."""
    origin = runtime.get("origin") or {}
    return [ctx.file_evidence(origin.get("path") or instance["config_path"], origin.get("line"),
                              "BinaryName %s does not exist" % where)] + instance_evidence(instance)


def check_default_binary(rule, ctx):
    found = []
    for instance in runtime_instances(ctx):
        default = ctx.view(instance).get("default_runtime")
        problem = _binary_problem(ctx, instance, default) if default else None
        if not problem:
            continue
        runtime, where = problem
        evidence = _missing_binary_evidence(ctx, instance, runtime, where)
        found.append(finding(rule, "%s: the default runtime \"%s\" runs %s, which does not exist: every pod on the node "
                             "fails, not only GPU pods." % (describe(instance), default, where), evidence,
                             missing_binary_fix(ctx, instance, where, {
                                 "container_runtime_set_as_default": default == ctx.runtime_name}),
                             severity=_sev(ctx, instance)))
    return found


def check_nvidia_binary(rule, ctx):
    found = []
    for instance in runtime_instances(ctx):
        name = ctx.runtime_name
        if ctx.view(instance).get("default_runtime") == name:
            continue  # reported by default-runtime-binary-missing
        problem = _binary_problem(ctx, instance, name)
        if not problem:
            continue
        runtime, where = problem
        evidence = _missing_binary_evidence(ctx, instance, runtime, where)
        found.append(finding(rule, "%s: runtime \"%s\" runs %s, which does not exist: every GPU pod fails." % (
            describe(instance), name, where), evidence, missing_binary_fix(ctx, instance, where),
            severity=_sev(ctx, instance)))
    return found


def check_cri_disabled(rule, ctx):
    instance = ctx.target()
    if instance is None or instance["kind"] != "containerd":
        return []
    view = ctx.view(instance)
    disabled = [p for p in view.get("disabled_plugins") or [] if p in CRI_DISABLE_NAMES]
    if not disabled:
        return []
    origin = view.get("disabled_origin") or {}
    evidence = [ctx.file_evidence(origin.get("path") or instance["config_path"], origin.get("line"))]
    evidence += instance_evidence(instance) + [kubelet_evidence(ctx)]
    return [finding(rule, "%s, the runtime kubelet uses, disables its CRI plugin (%s): Kubernetes cannot use it at "
                    "all." % (describe(instance), ", ".join(disabled)), evidence, manual_fix(
                        "Remove %s from disabled_plugins in %s, then restart it." % (
                            ", ".join('"%s"' % p for p in disabled), origin.get("path") or instance["config_path"]),
                        [(instance.get("restart") or {}).get("command")]))]


def check_config_unreadable(rule, ctx):
    found = []
    for instance in ctx.instances:
        error = ctx.view(instance).get("config_error")
        if not error:
            continue
        evidence = [ctx.file_evidence(error["path"], error.get("line"), error.get("by"))] + instance_evidence(instance)
        found.append(finding(rule, "%s cannot be read: %s%s. %s." % (
                             error["path"], "line %s: " % error["line"] if error.get("line") else "", error["message"],
                             error.get("effect") or "The daemon fails to start (or, if running, to restart) with it"),
                             evidence, manual_fix(
                                 "Fix the file (keep a copy), then check it with `containerd --config %s config dump`."
                                 % error["path"] if instance["kind"] == "containerd" else "Fix the file."),
                             severity=_sev(ctx, instance)))
    return found


# (id, severity, incident, title, check) of each rule, as in every rule module of this package: rules.py runs them.
RULES = (
    ("nvidia-runtime-missing", "critical", "I1", "The runtime kubelet uses has no nvidia runtime",
     check_nvidia_missing),
    ("nvidia-in-other-instance", "critical", "I2", "nvidia runtime configured in a runtime instance kubelet does not use",
     check_nvidia_elsewhere),
    ("default-runtime-undefined", "critical", "I5", "The default runtime is not defined", check_default_undefined),
    ("default-runtime-binary-missing", "critical", "I5", "The default runtime's binary does not exist",
     check_default_binary),
    ("nvidia-runtime-binary-missing", "critical", None, "The nvidia runtime's binary does not exist",
     check_nvidia_binary),
    ("containerd-runc-dropped", "critical", None, "Runtimes defined without runc while the default is runc (1.x)",
     check_runc_dropped),
    ("cri-plugin-disabled", "critical", None, "disabled_plugins contains the CRI plugin", check_cri_disabled),
    ("config-unreadable", "critical", None, "A runtime config cannot be parsed", check_config_unreadable),
)
