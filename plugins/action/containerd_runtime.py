# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Controller half of gpunode.nvidia.containerd_runtime.

The node sends its config file and containerd's view of it; TOML editing
(tomlkit) happens here; the node dumps the candidate's effective config; the
guard compares; only then does the node write, atomically.

With `lock`, the call that reads the config takes the node lock and gives it
back at once: when the plan is empty (a run that changes nothing) that one call
is all. A change is planned again from a second read that keeps the lock, so
the read, plan, write, restart and checks of a change all happen under it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import json

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
# One argument spec, documented with the module: the action validates with it before anything runs.
from ansible_collections.gpunode.nvidia.plugins.modules.containerd_runtime import ARGUMENT_SPEC
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_data, mask_text
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import (
    bug_message, missing_binary_warning, missing_default_refusal, request_problem)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as imports_mod
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as planning
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import record as records
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import target as targets
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import BOM, ConfigError

NODE_MODULE = "gpunode.nvidia.containerd_config_file"
FACTS_MODULE = "gpunode.nvidia.gpu_node_facts"
LOCK_MODULE = "gpunode.nvidia.node_lock"


# What one read of the node gave, and the edit planned from it.
Plan = collections.namedtuple("Plan", ["current", "dump", "files", "globs", "edit"])


class _NeedsHeldLock(Exception):
    """The plan needs more reads than the first call: read again, keeping the lock."""


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    _edit_path = None  # the file being edited, once known (named in unexpected failures)
    _written = False
    _lock = None  # the `lock` option
    _lock_mode = None  # how the next read takes the lock: "probe" (gives it back in the call) or "hold"
    _lock_held = False  # the node lock is (or, after a failed call, may be) held by this task's owner
    _lock_reentered = False  # its owner held it before this task: not this task's to give back
    _lock_waited = 0.0
    _lock_taken_over = None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        self._lock = args["lock"]
        try:
            result.update(self._run(args, task_vars))
        except (ConfigError, effective.GuardError) as exc:
            result.update(failed=True, msg=str(exc), changed=False)
        except AnsibleActionFail:
            self._give_lock_back(task_vars)
            raise
        except Exception as exc:  # pylint: disable=broad-except  # a bug: a clear failure, never a traceback
            result.update(failed=True, changed=False,
                          msg=unexpected_error_message(self._edit_path or args["path"], exc, self._written))
        if result.get("failed"):
            self._give_lock_back(task_vars)
        if self._lock is not None:
            result.update(lock_held=self._lock_held, lock_waited=round(self._lock_waited, 1))
            if self._lock_taken_over:
                result["lock_taken_over"] = self._lock_taken_over
        return mask_data(result)

    def _node(self, task_vars, **module_args):
        res = self._execute_module(module_name=NODE_MODULE, module_args=module_args, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail(mask_text(res.get("msg", "%s failed" % NODE_MODULE)), result=mask_data(res))
        return res

    def _run(self, args, task_vars):
        problem = request_problem(args)
        if problem:
            raise ConfigError(problem)
        target, path = self._resolve_target(args, task_vars)
        self._edit_path = path
        if args["path"] is None and targets.platform_writes_config(target):
            return self._platform_managed(target)
        dump_cmd = [self._containerd_binary(args, target, path), "--config", "%s", "config", "dump"]
        args = dict(args, path=path, containerd_binary=dump_cmd[0])
        key = records.request_key(args, target)
        answer = records.recorded_answer(args, key)
        if answer is not None:
            return answer
        if self._lock is None:
            plan = self._plan(args, task_vars, dump_cmd)
            return self._record(args, key, plan, self._finish(args, target, plan, task_vars, dump_cmd), task_vars)
        # First read under the lock, given back in the same call: for a run that changes nothing (and for
        # check mode, which writes nothing) that is all. A change is planned again from a read that keeps it.
        self._lock_mode = "probe"
        try:
            plan = self._plan(args, task_vars, dump_cmd)
        except _NeedsHeldLock:
            plan = None
        writes = plan is None or (plan.edit.changed and not self._task.check_mode)
        if writes:
            self._lock_mode = "hold"
            plan = self._plan(args, task_vars, dump_cmd)
        result = self._record(args, key, plan, self._finish(args, target, plan, task_vars, dump_cmd), task_vars)
        if not (result["changed"] and not self._task.check_mode) and not self._give_lock_back(task_vars):
            result.setdefault("warnings", []).append(
                "The node lock %s could not be given back; give it back with %s (owner %s, state: released)."
                % (self._lock["path"], LOCK_MODULE, self._lock["owner"]))
        return result

    def _plan(self, args, task_vars, dump_cmd):
        """Read the config (and what it imports) and plan the edit; nothing is written."""
        path, validate = args["path"], args["validate"]
        current = self._read_current(args, task_vars, dump_cmd)
        dump = None
        if validate and current.get("command_rc") == 0:
            dump = effective.load_dump(current["command_stdout"])
        globs = {}
        files = imports_mod.resolve(path, current["content"], current.get("binary_version"),
                                    lambda patterns: self._read_included(task_vars, path, patterns, globs),
                                    root_sha256=current["sha256"])
        effective.check_loaded_files(files, dump)
        if args["drop_in"] and files.get(args["drop_in"]) is None:
            self._refuse_unimported_drop_in(args, files, task_vars)
        edit = planning.plan_edit(args, files, current, dump)
        planning.refuse_unchecked_drop_in(args, edit, files, current)
        edit.default_runtime = planning.effective_default(edit, files, globs)
        self._refuse_missing_default_binary(args, edit, current)
        return Plan(current, dump, files, globs, edit)

    def _read_current(self, args, task_vars, dump_cmd):
        """The config file, containerd's view of it and the runtime binary's presence: one call."""
        lock = {}
        if self._lock_mode:
            lock = dict(lock=self._lock, keep_lock=self._lock_mode == "hold")
            self._lock_held = True  # until the node says otherwise: a call that fails may have taken it
        current = self._node(
            task_vars, op="read", path=args["path"], binary=dump_cmd[0],
            command=dump_cmd if args["validate"] else None, command_failure="report", exists=[args["binary"]], **lock
        )
        if self._lock_mode:
            self._lock_held = current["lock_held"]
            if self._lock_mode == "probe":
                self._lock_reentered = current["lock_held"]  # held although this call gave its own take back
            self._lock_waited += current.get("lock_waited") or 0.0
            self._lock_taken_over = current.get("lock_taken_over") or self._lock_taken_over
        return current

    def _record(self, args, key, plan, result, task_vars):
        """RESULT, after the node recorded it when it changed nothing and the discovery reads the record back
        (not in check mode); a record that cannot be written only means a full run next time."""
        if result["changed"] or self._task.check_mode or records.recall_of(args) is None:
            return result
        proposal = records.proposal(key, mask_data(result), plan, args)
        try:
            written = self._execute_module(module_name=NODE_MODULE, task_vars=task_vars, module_args=dict(
                op="record", path=args["record"], content=json.dumps(proposal, sort_keys=True)))
        except Exception as exc:  # pylint: disable=broad-except  # the answer stands; only the record is missing
            written = {"failed": True, "msg": str(exc)}
        if written.get("failed"):
            result["record"] = "not written: %s" % mask_text(str(written.get("msg")))
        elif not written.get("recorded"):
            result["record"] = "not written: %s" % written.get("record_reason")
        else:
            result["record"] = "written" if written.get("changed") else "kept"
        return result

    def _give_lock_back(self, task_vars):
        """Give back the lock this task holds (on a failure too); False when that did not work."""
        if not self._lock_held or self._lock_reentered:
            return True
        try:
            released = self._execute_module(module_name=LOCK_MODULE, task_vars=task_vars, module_args=dict(
                path=self._lock["path"], owner=self._lock["owner"], state="released"))
        except Exception:  # pylint: disable=broad-except  # an unreachable node: the role's `always` tries again
            return False
        if released.get("failed"):
            return False
        self._lock_held = False
        return True

    def _finish(self, args, target, plan, task_vars, dump_cmd):
        """Check the planned edit against containerd, write it (not in check mode) and say what was done."""
        path = args["path"]
        current, dump, files, globs, edit = plan
        validated, effective_changes, warnings = self._guard(args, edit, files, globs, current, dump, task_vars,
                                                             dump_cmd)
        written = self._write(args, edit, files, current, task_vars)
        result = dict(
            changed=edit.changed,
            path=path,
            target=targets.target_summary(target),
            backup_file=written.get(path, {}).get("backup_file"),
            created=path in edit.changes and not current["exists"],
            config_version=edit.plan.version,
            cri_plugin=edit.plan.cri_plugin,
            runtime=mask_data(edit.runtime),
            default_runtime=edit.default_runtime,
            source_runtime=edit.plan.source_runtime,
            defined_in=edit.defined_in,
            files=[dict(path=p, created=text is not None and not _existed(files, p), removed=text is None,
                        backup_file=written.get(p, {}).get("backup_file"))
                   for p, text in edit.changes.items()],
            loaded_files=files.paths(),
            validated=validated,
            effective_changes=effective_changes,
            containerd_version=current.get("binary_version"),
        )
        warnings = edit.warnings + warnings
        if args["state"] == "present" and not current["paths"].get(args["binary"]):
            warnings.append(missing_binary_warning(args["binary"], args["name"]))
        if warnings:
            result["warnings"] = warnings
        if edit.changed:
            result["diff"] = [
                dict(before_header=p, after_header=p if text is not None else "%s (removed)" % p,
                     before=mask_text(_text_of(files, p)), after=mask_text(text or ""))
                for p, text in edit.changes.items()]
        return result

    def _read_included(self, task_vars, path, patterns, globs):
        """The node's copies of the files `patterns` name; glob answers are kept for the guard."""
        self._refuse_reads_beyond_probe()
        included = self._node(task_vars, op="read", path=path, include=patterns)["included"]
        for answer in included:
            if "*" in answer["pattern"]:
                globs[answer["pattern"]] = [item["path"] for item in answer["files"]]
        return included

    def _refuse_unimported_drop_in(self, args, files, task_vars):
        """A drop_in file that exists but that containerd does not load is not ours to take over silently."""
        self._refuse_reads_beyond_probe()
        found = self._node(task_vars, op="read", path=files.root.path, include=[args["drop_in"]])["included"]
        if found and found[0]["files"] and found[0]["files"][0]["exists"]:
            raise ConfigError(
                "drop_in %s exists, but %s does not import it (containerd loads: %s). Add it to `imports` or "
                "remove it, and run again. The files were left unchanged."
                % (args["drop_in"], files.root.path, ", ".join(files.paths())))

    def _refuse_reads_beyond_probe(self):
        """Files read after the first call's lock was given back could belong to another run's state."""
        if self._lock_mode == "probe":
            raise _NeedsHeldLock()

    def _write(self, args, edit, files, current, task_vars):
        """Write every changed file (imported files before the root that names them, removals last)."""
        written = {}
        if not edit.changed or self._task.check_mode:
            return written
        for path, text in edit.write_order(files.root.path):
            known = files.get(path)
            expected = known.sha256 if known is not None else ""
            if text is None:
                written[path] = self._node(task_vars, op="remove", path=path, expected_sha256=expected,
                                           backup=args["backup"])
            else:
                written[path] = self._node(task_vars, op="write", path=path, content=text, expected_sha256=expected,
                                           backup=args["backup"], mode=current.get("file_mode") or "0644")
            self._written = True
        return written

    def _resolve_target(self, args, task_vars):
        """(runtime instance kubelet uses or None, file to edit), from this run's discovery."""
        if args["discovered"] is not None:
            node = targets.discovered_node(args["discovered"])
        else:
            facts = self._execute_module(module_name=FACTS_MODULE, task_vars=task_vars,
                                         module_args={"gather": ["runtimes", "kubelet", "target"]})
            if facts.get("failed"):
                raise AnsibleActionFail(facts.get("msg", "%s failed" % FACTS_MODULE), result=facts)
            node = facts["ansible_facts"]["gpu_node"]
        return targets.choose(args, node)

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
        return dict(changed=False, skipped=True, target=targets.target_summary(target), path=target.get("edit_path"),
                    managed_by=target.get("regenerated_by"),
                    msg=" ".join(target.get("notes") or ["%s manages this config" % target.get("regenerated_by")]))

    @staticmethod
    def _refuse_missing_default_binary(args, edit, current):
        """Incident I5, for the default containerd will use after the edit (whichever file sets it)."""
        if args["state"] != "present" or edit.default_runtime != args["name"] or args["allow_missing_binary"]:
            return
        if not current["paths"].get(args["binary"]):
            raise ConfigError(missing_default_refusal(args["path"], args["name"], args["binary"]))

    @staticmethod
    def _bom_hint(args, current):
        """Why containerd 2.x refuses a file that 1.x reads: it starts with a UTF-8 byte order mark."""
        if not current["content"].startswith(BOM):
            return ""
        return (". The file starts with a UTF-8 byte order mark (BOM), which containerd 2.x does not accept (1.x "
                "reads past it). The file was left unchanged; remove the BOM (sed -i '1s/^\\xEF\\xBB\\xBF//' %s) "
                "and run again." % args["path"])

    def _guard(self, args, edit, files, globs, current, before, task_vars, dump_cmd):
        """Return (validated, effective_changes, warnings); raise when the edit would do harm."""
        if not args["validate"]:
            return False, [], []
        if not current.get("binary_path"):
            return False, [], ["%s not found on the node: the edit was not validated against containerd's "
                               "effective config (validated: false)." % args["containerd_binary"]]
        if current["command_rc"] != 0:
            raise ConfigError("%s: containerd cannot load the current file, so it cannot be edited safely: %s%s"
                              % (args["path"], mask_text(current["command_stderr"].strip()),
                                 self._bom_hint(args, current)))
        if not edit.changed:
            return True, [], []
        content, companions = effective.candidate_files(edit, files, globs, current.get("binary_version"))
        if not companions:
            content = effective.absolute_imports(content, files, args["path"])
        candidate = self._node(task_vars, op="check", path=args["path"], content=content, command=dump_cmd,
                               command_failure="report", companions=companions)
        if candidate["command_rc"] != 0:
            raise ConfigError(
                "%s: containerd %s rejects the edited files, so nothing was written: %s"
                % (", ".join(edit.changes), current.get("binary_version"),
                   mask_text(candidate["command_stderr"].strip()))
            )
        after = effective.load_dump(candidate["command_stdout"])
        intended, unintended = effective.compare(effective.without_imports(before), effective.without_imports(after),
                                                 edit.planned_keys, args["state"])
        problems = effective.check_effect(after, edit, args["name"], args["state"], current.get("binary_version"))
        if unintended or problems:
            raise effective.GuardError(effective.guard_message(args, edit, files, unintended, problems))
        return True, intended, []


def _existed(files, path):
    """Whether the file was there before the task (a missing root file is known with an empty checksum)."""
    config = files.get(path)
    return config is not None and bool(config.sha256)


def _text_of(files, path):
    config = files.get(path)
    return config.text if config is not None else ""


def unexpected_error_message(path, exc, written=False):
    """Name the file and the bug, never the file's content (it may hold credentials)."""
    return bug_message("containerd_runtime", path or targets.DEFAULT_PATH, type(exc).__name__, written=written)
