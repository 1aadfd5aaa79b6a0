# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Controller half of gpunode.nvidia.containerd_runtime.

The node sends its config file and containerd's view of it; TOML editing
(tomlkit) happens here; the node dumps the candidate's effective config; the
guard compares; only then does the node write, atomically.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.module_utils.masking import mask_data, mask_text
from ansible_collections.gpunode.nvidia.plugins.plugin_utils import containerd_effective as effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd_toml import ConfigError, plan_runtime_edit

ARGUMENT_SPEC = dict(
    path=dict(type="path"),
    name=dict(type="str", default="nvidia"),
    binary=dict(type="str", default="/usr/bin/nvidia-container-runtime"),
    set_as_default=dict(type="bool", default=False),
    cdi=dict(type="bool", default=False),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    containerd_binary=dict(type="str", default="containerd"),
    validate=dict(type="bool", default=True),
    backup=dict(type="bool", default=False),
    allow_missing_binary=dict(type="bool", default=False),
    allow_path_mismatch=dict(type="bool", default=False),
)
NODE_MODULE = "gpunode.nvidia.config_file"
FACTS_MODULE = "gpunode.nvidia.gpu_node_facts"
DEFAULT_PATH = "/etc/containerd/config.toml"
DROPIN_NAME = "99-nvidia.toml"


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    _edit_path = None  # the file being edited, once known (named in unexpected failures)
    _written = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        try:
            result.update(self._run(args, task_vars))
        except (ConfigError, effective.GuardError) as exc:
            result.update(failed=True, msg=str(exc), changed=False)
        except AnsibleActionFail:
            raise
        except Exception as exc:  # a bug must become a clear failure, never a traceback or a wrong write
            message = unexpected_error_message(self._edit_path or args["path"], exc, self._written)
            result.update(failed=True, changed=False, msg=message)
        return result

    def _node(self, task_vars, **module_args):
        res = self._execute_module(module_name=NODE_MODULE, module_args=module_args, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail(res.get("msg", "%s failed" % NODE_MODULE), result=res)
        return res

    def _run(self, args, task_vars):
        target, path = self._resolve_target(args, task_vars)
        self._edit_path = path
        if args["path"] is None and _platform_writes_config(target):
            return self._platform_managed(target)
        dump_cmd = [self._containerd_binary(args, target, path), "--config", "%s", "config", "dump"]
        args = dict(args, path=path, containerd_binary=dump_cmd[0])
        validate = args["validate"]
        current = self._node(
            task_vars, op="read", path=path, binary=dump_cmd[0],
            command=dump_cmd if validate else None, exists=[args["binary"]],
        )
        dump = None
        if validate and current.get("command_rc") == 0:
            dump = effective.load_dump(current["command_stdout"])
        plan = plan_runtime_edit(
            current["content"], path, name=args["name"], binary=args["binary"],
            set_as_default=args["set_as_default"], cdi=args["cdi"], state=args["state"],
            containerd_version=current.get("binary_version"), effective=dump,
        )
        self._refuse_missing_default_binary(args, plan, current)
        validated, effective_changes, warnings = self._guard(args, plan, current, dump, task_vars, dump_cmd)
        backup_file = None
        if plan.changed and not self._task.check_mode:
            written = self._node(
                task_vars, op="write", path=path, content=plan.text,
                expected_sha256=current["sha256"], backup=args["backup"],
            )
            backup_file = written.get("backup_file")
            self._written = True
        result = dict(
            changed=plan.changed,
            path=path,
            target=_target_summary(target),
            backup_file=backup_file,
            created=plan.changed and not current["exists"],
            config_version=plan.version,
            cri_plugin=plan.cri_plugin,
            runtime=mask_data(plan.runtime),
            default_runtime=plan.default_runtime,
            source_runtime=plan.source_runtime,
            validated=validated,
            effective_changes=effective_changes,
            containerd_version=current.get("binary_version"),
        )
        if warnings:
            result["warnings"] = warnings
        if plan.changed:
            result["diff"] = dict(
                before_header=path, after_header=path,
                before=mask_text(plan.original), after=mask_text(plan.text),
            )
        return result

    def _resolve_target(self, args, task_vars):
        """(runtime instance kubelet uses or None, file to edit): incident I2 is why this exists."""
        facts = self._execute_module(module_name=FACTS_MODULE, module_args={"gather": ["runtimes", "kubelet", "target"]},
                                     task_vars=task_vars)
        if facts.get("failed"):
            raise AnsibleActionFail(facts.get("msg", "%s failed" % FACTS_MODULE), result=facts)
        node = facts["ansible_facts"]["gpu_node"]
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
        if (target is not None and target.get("selected_by") == "kubelet" and target["kind"] == "containerd"
                and posixpath.dirname(args["path"]) != target.get("dropin_dir")
                and args["path"] not in (target.get("edit_path"), target.get("config_path"))
                and not args["allow_path_mismatch"]):
            raise ConfigError(
                "%s is not the config of the containerd kubelet uses: kubelet talks to %s, served by the %s "
                "containerd that reads %s (edit %s). Editing %s would leave GPU pods failing with "
                "'no runtime for \"nvidia\" is configured' (incident I2). Leave path unset to configure the right "
                "instance, or set allow_path_mismatch: true to edit %s anyway."
                % (args["path"], target.get("socket"), target.get("platform"), target.get("config_path"),
                   target.get("edit_path"), args["path"], args["path"]))
        return target, args["path"]

    @staticmethod
    def _containerd_binary(args, target, path):
        """Validate with the instance's own containerd (its version decides import semantics)."""
        if (args["containerd_binary"] == "containerd" and target and target["kind"] == "containerd"
                and target.get("binary") and path in (target.get("edit_path"), target.get("config_path"))):
            return target["binary"]
        return args["containerd_binary"]

    @staticmethod
    def _platform_managed(target):
        """The platform writes this containerd's config itself: say how, change nothing."""
        return dict(changed=False, skipped=True, target=_target_summary(target), path=target.get("edit_path"),
                    managed_by=target.get("regenerated_by"),
                    msg=" ".join(target.get("notes") or ["%s manages this config" % target.get("regenerated_by")]))

    @staticmethod
    def _refuse_missing_default_binary(args, plan, current):
        """Incident I5: a default runtime whose binary is missing breaks every pod on the node."""
        if args["state"] != "present" or plan.default_runtime != args["name"] or args["allow_missing_binary"]:
            return
        if not current["paths"].get(args["binary"]):
            raise ConfigError(
                "%s: refusing to make %r the default runtime: its binary %s does not exist on this node, "
                "so every pod (not only GPU pods) would fail to start. Install the NVIDIA container toolkit "
                "first (role gpunode.nvidia.nvidia_container_toolkit), or set allow_missing_binary: true "
                "if it is installed later in the same image bake." % (args["path"], args["name"], args["binary"])
            )

    def _guard(self, args, plan, current, before, task_vars, dump_cmd):
        """Return (validated, effective_changes, warnings); raise when the edit would do harm."""
        if not args["validate"]:
            return False, [], []
        if not current.get("binary_path"):
            return False, [], ["%s not found on the node: the edit was not validated against containerd's "
                               "effective config (validated: false)." % args["containerd_binary"]]
        if current["command_rc"] != 0:
            raise ConfigError("%s: containerd cannot load the current file, so it cannot be edited safely: %s"
                              % (args["path"], current["command_stderr"].strip()))
        if not plan.changed:
            return True, [], []
        candidate = self._node(task_vars, op="check", path=args["path"], content=plan.text, command=dump_cmd)
        if candidate["command_rc"] != 0:
            raise ConfigError(
                "%s: containerd %s rejects the edited file, so nothing was written: %s"
                % (args["path"], current.get("binary_version"), mask_text(candidate["command_stderr"].strip()))
            )
        after = effective.load_dump(candidate["command_stdout"])
        intended, unintended = effective.compare(before, after, args["name"])
        problems = effective.check_effect(after, plan, args["binary"], args["set_as_default"], args["state"])
        if unintended or problems:
            raise effective.GuardError(self._guard_message(args, unintended, problems))
        return True, intended, []

    @staticmethod
    def _guard_message(args, unintended, problems):
        lines = ["%s: the edit would not do only what was asked in containerd's effective config "
                 "(`containerd config dump`), so nothing was written." % args["path"]]
        if unintended:
            lines.append("Settings that would be lost or changed:")
            lines.extend("  - " + mask_text(item) for item in unintended[:40])
        if problems:
            lines.append("The change would not take effect:")
            lines.extend("  - " + item for item in problems)
        lines.append(
            "With containerd 1.x an imported file replaces the whole CRI plugin table of the main file. "
            "Check `imports` in this file and the drop-ins it loads, then edit the file that holds the "
            "CRI plugin table (or merge the drop-in into the main file)."
        )
        return "\n".join(lines)


def unexpected_error_message(path, exc, written=False):
    """Name the file and the bug, never the file's content (it may hold credentials)."""
    state = "the checked edit was written" if written else "the file was left unchanged"
    return ("%s: unexpected %s while editing the containerd config; %s. This is a bug in "
            "gpunode.nvidia.containerd_runtime: please report it with the task's arguments and the containerd "
            "version (the file itself may hold credentials: attach it only with secrets removed)."
            % (path or DEFAULT_PATH, type(exc).__name__, state))


def _platform_writes_config(target):
    """k3s/RKE2 (auto-detection of the toolkit), EKS AL2023 (nodeadm): no file of ours to edit."""
    if target is None:
        return False
    return target.get("edit_mode") == "none" or (target.get("edit_mode") == "template" and target.get("nvidia_autodetect"))


def _target_summary(target):
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
