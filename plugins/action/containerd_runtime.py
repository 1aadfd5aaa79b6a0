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
import copy
import fnmatch
import posixpath

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
# One argument spec, documented with the module: the action validates with it before anything runs.
from ansible_collections.gpunode.nvidia.plugins.modules.containerd_runtime import ARGUMENT_SPEC
from ansible_collections.gpunode.nvidia.plugins.module_utils.masking import mask_data, mask_text
from ansible_collections.gpunode.nvidia.plugins.module_utils.runtime_binary import missing_binary_warning
from ansible_collections.gpunode.nvidia.plugins.module_utils.safe_exit import HOW_TO_REPORT
from ansible_collections.gpunode.nvidia.plugins.plugin_utils import containerd_effective as effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils import containerd_imports as imports_mod
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd_toml import (
    BOM, CREATED_COMMENT, ConfigError, get_path, parse, pick_source_runtime, plan_runtime_edit, set_value)

NODE_MODULE = "gpunode.nvidia.config_file"
FACTS_MODULE = "gpunode.nvidia.gpu_node_facts"
LOCK_MODULE = "gpunode.nvidia.node_lock"
DEFAULT_PATH = "/etc/containerd/config.toml"
DROPIN_NAME = "99-nvidia.toml"


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
        target, path = self._resolve_target(args, task_vars)
        self._edit_path = path
        if args["path"] is None and _platform_writes_config(target):
            return self._platform_managed(target)
        dump_cmd = [self._containerd_binary(args, target, path), "--config", "%s", "config", "dump"]
        args = dict(args, path=path, containerd_binary=dump_cmd[0])
        if self._lock is None:
            return self._finish(args, target, self._plan(args, task_vars, dump_cmd), task_vars, dump_cmd)
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
        result = self._finish(args, target, plan, task_vars, dump_cmd)
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
        _check_loaded_files(files, dump)
        if args["drop_in"] and files.get(args["drop_in"]) is None:
            self._refuse_unimported_drop_in(args, files, task_vars)
        edit = plan_edit(args, files, current, dump)
        _refuse_unchecked_drop_in(args, edit, files, current)
        edit.default_runtime = _effective_default(edit, files, globs)
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
            target=_target_summary(target),
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
        """(runtime instance kubelet uses or None, file to edit): incident I2 is why this exists."""
        if args["discovered"] is not None:
            node = discovered_node(args["discovered"])
        else:
            facts = self._execute_module(module_name=FACTS_MODULE, task_vars=task_vars,
                                         module_args={"gather": ["runtimes", "kubelet", "target"]})
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
        if target is not None and not args["allow_path_mismatch"] and _not_read_by(target, args["path"]):
            raise ConfigError(self._path_mismatch_message(args["path"], target))
        return target, args["path"]

    @staticmethod
    def _path_mismatch_message(path, target):
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
    def _refuse_missing_default_binary(args, edit, current):
        """Incident I5: a default runtime whose binary is missing breaks every pod on the node."""
        if args["state"] != "present" or edit.default_runtime != args["name"] or args["allow_missing_binary"]:
            return
        if not current["paths"].get(args["binary"]):
            raise ConfigError(
                "%s: refusing to make %r the default runtime: its binary %s does not exist on this node, "
                "so every pod (not only GPU pods) would fail to start. Install the NVIDIA container toolkit "
                "first (role gpunode.nvidia.nvidia_container_toolkit), or set allow_missing_binary: true "
                "if it is installed later in the same image bake." % (args["path"], args["name"], args["binary"])
            )

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
        content, companions = candidate_files(edit, files, globs, current.get("binary_version"))
        if not companions:
            content = _absolute_imports(content, files, args["path"])
        candidate = self._node(task_vars, op="check", path=args["path"], content=content, command=dump_cmd,
                               command_failure="report", companions=companions)
        if candidate["command_rc"] != 0:
            raise ConfigError(
                "%s: containerd %s rejects the edited files, so nothing was written: %s"
                % (", ".join(edit.changes), current.get("binary_version"),
                   mask_text(candidate["command_stderr"].strip()))
            )
        after = effective.load_dump(candidate["command_stdout"])
        intended, unintended = effective.compare(_without_imports(before), _without_imports(after), args["name"],
                                                 args["state"])
        problems = effective.check_effect(after, edit.plan, args["binary"], args["set_as_default"], args["state"])
        if unintended or problems:
            raise effective.GuardError(self._guard_message(args, edit, files, unintended, problems))
        return True, intended, []

    @staticmethod
    def _guard_message(args, edit, files, unintended, problems):
        lines = ["%s: the edit would not do only what was asked in containerd's effective config "
                 "(`containerd config dump`), so nothing was written." % ", ".join(edit.changes)]
        if unintended:
            lines.append("Settings that would be lost or changed:")
            lines.extend("  - " + mask_text(item) for item in unintended[:40])
        if problems:
            lines.append("The change would not take effect:")
            lines.extend("  - " + item for item in problems)
        if args["drop_in"] and files.semantics.replaces_plugin_tables and args["state"] == "present":
            lines.append(
                "containerd 1.x lets an imported file REPLACE the whole CRI plugin table of the files read before "
                "it, so a drop-in holding only the %r runtime would take sandbox_image, SystemdCgroup, runc and "
                "registry settings away. This module does not copy the whole table into %s (later edits of %s "
                "would then silently stop working). Leave drop_in unset to add the runtime to %s in place, or "
                "upgrade to containerd 2.x, which merges drop-ins key by key."
                % (args["name"], args["drop_in"], files.root.path, files.root.path))
        else:
            lines.append(_guard_cause(files, unintended))
        return "\n".join(lines)


class Edit(object):
    """What the task changes: path -> new text (None: remove the file), in planning order."""

    def __init__(self, plan, defined_in, warnings):
        self.plan = plan
        self.defined_in = defined_in
        self.warnings = warnings
        self.changes = {}
        self.order = []
        self.runtime = plan.runtime
        self.default_runtime = plan.default_runtime

    def set(self, path, original, text):
        if text == original:
            return
        if path not in self.changes:
            self.order.append(path)
        self.changes[path] = text

    @property
    def changed(self):
        return bool(self.changes)

    def write_order(self, root_path):
        """Imported files first (the root never names a missing file), removals after the root."""
        kept = [(p, self.changes[p]) for p in self.order if p != root_path and self.changes[p] is not None]
        root = [(root_path, self.changes[root_path])] if self.changes.get(root_path) is not None else []
        removed = [(p, None) for p in self.order if self.changes[p] is None]
        return kept + root + removed


def plan_edit(args, files, current, dump):
    """Which files change and how: the runtime is edited where containerd reads it."""
    if args["drop_in"]:
        _check_drop_in(args, files, current)
    if args["state"] == "present":
        return _plan_present(args, files, dump)
    return _plan_absent(args, files, dump)


def _check_drop_in(args, files, current):
    if not posixpath.isabs(args["drop_in"]):
        raise ConfigError("drop_in %s must be an absolute path (containerd resolves a relative import against the "
                          "importing file's directory, and only from 1.7 on for globs)." % args["drop_in"])
    if args["drop_in"] == files.root.path:
        example = posixpath.join(posixpath.dirname(files.root.path), "conf.d", DROPIN_NAME)
        raise ConfigError("drop_in %s is the root config file itself; give a separate file (for example "
                          "%s)." % (args["drop_in"], example))
    if args["state"] == "present" and not current["exists"]:
        raise ConfigError("%s does not exist, so nothing would import drop_in %s. Create the root config first "
                          "(or leave drop_in unset)." % (files.root.path, args["drop_in"]))


def _plan_kwargs(args, files, dump):
    return dict(name=args["name"], binary=args["binary"], set_as_default=args["set_as_default"], cdi=args["cdi"],
                state=args["state"], containerd_version=files.containerd_version, effective=dump)


def _plan_present(args, files, dump):
    name, root = args["name"], files.root
    defined = files.defined_in(name)
    warnings = _version_warnings(files)
    if defined is not None:
        target_path = defined.path
        if args["drop_in"] and defined.path != args["drop_in"]:
            warnings.append("drop_in %s was not used: runtime %r is already defined in %s, which was updated "
                            "instead (a second definition would shadow the first). To move it, remove it first "
                            "(state: absent without drop_in)." % (args["drop_in"], name, defined.path))
    elif args["drop_in"]:
        target_path = args["drop_in"]
    elif files.semantics.replaces_plugin_tables and files.effective_cri_file() not in (None, root):
        target_path = files.effective_cri_file().path  # containerd 1.x reads only that file's CRI table
    else:
        target_path = root.path
    for ignored in files.ignored_definitions(name):
        if ignored.path != target_path:
            warnings.append("%s also defines runtime %r, but containerd 1.x ignores it: %s, loaded later, replaces "
                            "its whole CRI plugin table." % (ignored.path, name, files.effective_cri_file().path))
    target = files.get(target_path)
    _refuse_version_mismatch(files, target_path, target)
    original = target.text if target is not None else None
    text = original if original is not None else _new_drop_in(root)
    kwargs = _plan_kwargs(args, files, dump)
    if target_path != root.path and not files.semantics.replaces_plugin_tables:
        kwargs["source"] = _merged_source(files, name)
    plan = plan_runtime_edit(text, target_path, **kwargs)
    text = plan.text
    edit = Edit(plan, target_path, warnings + list(plan.warnings))
    edit.set(target_path, original, text)
    if args["set_as_default"]:
        _set_default_where_read(edit, files, target_path, name)
    data = parse(text, target_path)
    edit.runtime = get_path(data, plan.cri_path + ("containerd", "runtimes", name))
    if target is None and not files.covers(target_path):
        edit.set(root.path, root.text, imports_mod.add_import(root.text, target_path, root.path))
    return edit


def _plan_absent(args, files, dump):
    name, root = args["name"], files.root
    warnings = _version_warnings(files)
    definitions = files.definitions(name) or [root]
    edit = None
    for config in definitions:
        if config is not root:
            _refuse_version_mismatch(files, config.path, config)
        plan = plan_runtime_edit(config.text, config.path, **_plan_kwargs(args, files, dump))
        if edit is None:
            edit = Edit(plan, None, warnings)
        edit.plan = plan
        edit.runtime = None
        edit.set(config.path, config.text, plan.text)
    for config in files.files:
        if config.default_runtime() == name and config.runtime(name) is None:
            fallback = pick_source_runtime(files.merged_runtimes(), "runc", name) or "runc"
            edit.set(config.path, config.text, set_value(config.text, config.default_runtime_path(), fallback))
    drop_in = files.get(args["drop_in"]) if args["drop_in"] else None
    if drop_in is not None and _holds_nothing_else(files, drop_in, edit.changes.get(drop_in.path, drop_in.text),
                                                   name):
        edit.set(drop_in.path, drop_in.text, None)
        edit.set(root.path, root.text, imports_mod.remove_import(edit.changes.get(root.path, root.text),
                                                                 drop_in.path, root.path))
    if edit.changes.get(root.path) is not None and _holds_nothing(edit.changes[root.path], root.path):
        edit.set(root.path, root.text, None)  # containerd reads no file as it reads one that sets nothing
    return edit


def _holds_nothing(text, path):
    """Whether a file this module created sets nothing but `version` (and holds no other comment)."""
    if not text.startswith(CREATED_COMMENT + "\n"):
        return False
    data = parse(text, path)
    data.pop("version", None)
    return "#" not in text[len(CREATED_COMMENT):] and all(value == {} for value in effective.flatten(data).values())


def _set_default_where_read(edit, files, target_path, name):
    """containerd 2.x reads default_runtime_name from the last file that sets it: change it there too."""
    setter = files.default_set_in()
    if (setter is None or setter.path == target_path or files.semantics.replaces_plugin_tables
            or files.get(target_path) is None or files.index(setter.path) < files.index(target_path)):
        return
    _refuse_version_mismatch(files, setter.path, setter)
    edit.set(setter.path, setter.text, set_value(setter.text, setter.default_runtime_path(), name))


def _new_drop_in(root):
    """A new drop-in: same `version` as the root file (containerd 2.3.0-2.3.4 refuse a higher one)."""
    return ("# The container runtime added by gpunode.nvidia.containerd_runtime, imported by %s.\n"
            "version = %d\n" % (root.path, root.version))


def _refuse_version_mismatch(files, path, config):
    root_version = files.root.version
    if config is None or config is files.root or config.version == root_version:
        return
    reason = ""
    if config.version > root_version:
        reason = (" containerd 2.3.0 to 2.3.4 refuse to start when an imported file has a higher version than the "
                  "root file.")
    raise ConfigError(
        "%s: refusing to edit this imported file: its `version = %s` differs from the root file %s "
        "(`version = %s`), and this module never writes a drop-in whose version differs from the root's.%s "
        "Migrate the two files to the same version (`containerd config migrate` prints a file in the newest "
        "version), or merge the drop-in into %s, and run again. The files were left unchanged."
        % (path, config.version, files.root.path, root_version, reason, files.root.path))


def _version_warnings(files):
    """Warnings about the loaded files as they are: hidden 1.x settings, drop-ins 2.3.0-2.3.4 refuse."""
    higher = ["%s has `version = %s`, higher than the root file %s (`version = %s`): containerd 2.3.0 to "
              "2.3.4 refuse to start with it. Give both files the same version."
              % (config.path, version, files.root.path, files.root.version)
              for config, version in files.version_conflicts() if version > files.root.version]
    return _hidden_settings_warning(files) + higher


def _guard_cause(files, unintended):
    """The likeliest reason containerd reads the edited files otherwise than planned, from what is known."""
    lost_runtimes = sorted(set(item.split(".runtimes.")[1].split(".")[0] for item in unintended
                               if ".containerd.runtimes." in item and "(would be lost" in item))
    if files.semantics.replaces_plugin_tables and len(files.files) > 1:
        return ("With containerd 1.x an imported file replaces the whole CRI plugin table of the files read before "
                "it; %s loads %s. Edit the file that holds the CRI plugin table (or merge the drop-ins into %s)."
                % (files.root.path, ", ".join(files.paths()), files.root.path))
    if files.semantics.replaces_plugin_tables and lost_runtimes:
        return ("containerd 1.x drops its built-in runtimes (%s) from a file that lists any runtime, and this edit "
                "did not write them out. Define them in %s as `config dump` shows them, and run again."
                % (", ".join(lost_runtimes), files.root.path))
    conflicts = files.version_conflicts()
    if conflicts:
        return ("The loaded files have different `version` headers (%s: %s; %s), which containerd migrates "
                "separately. Give them the same version and run again."
                % (files.root.path, files.root.version,
                   ", ".join("%s: %s" % (config.path, version) for config, version in conflicts)))
    return ("containerd %s reads %s (config version %s) otherwise than this module planned. Compare "
            "`containerd --config %s config dump` with the file, and report the file (credentials removed) if it "
            "is valid." % (files.semantics.name(), ", ".join(files.paths()), files.root.version, files.root.path))


def _merged_source(files, name):
    """containerd 2.x, runtime in a drop-in: (name, table) of the runtime pods use, wherever that one is
    defined (the drop-in alone does not hold it), or None."""
    merged = files.merged_runtimes()
    default = files.default_set_in()
    source_name = pick_source_runtime(merged, default.default_runtime() if default else "runc", name)
    return (source_name, merged[source_name]) if source_name is not None else None


def _holds_nothing_else(files, drop_in, text, name):
    """Whether a drop-in, once the runtime is gone, sets nothing the other files do not already set.
    A default it named `name` and now names a fallback is ours: without the file, the others' default
    (the one pods used before) applies again."""
    data = parse(text, drop_in.path)
    data.pop("version", None)
    if drop_in.default_runtime() == name:
        for plugin in (data.get("plugins") or {}).values():
            if isinstance(plugin, dict) and isinstance(plugin.get("containerd"), dict):
                plugin["containerd"].pop("default_runtime_name", None)
    others = [config for config in files.files if config is not drop_in]
    merged = {}
    for config in others:
        merged = imports_mod.deep_merge(merged, config.data)
    for key, value in effective.flatten(data).items():
        if value == {}:
            continue
        if get_path(merged, key) != value and not (key[-1] == "default_runtime_name" and value == "runc"
                                                   and get_path(merged, key) is None):
            return False
    return True


def candidate_files(edit, files, globs, containerd_version):
    """(root text, companions) for the guard: the root's imports list every file of the edited state in
    containerd's order; changed files (and files with imports of their own, their imports emptied: the root's
    list already holds what they import, in order) become companions in the node's private directory."""
    contents = _edited_contents(edit, files)
    if len(files.files) == 1 and set(edit.changes) <= set([files.root.path]):
        return contents[files.root.path], []
    candidate = imports_mod.from_contents(files.root.path, contents, containerd_version, globs)
    entries, companions = [], []
    for index, config in enumerate(candidate.files[1:]):
        if config.path in edit.changes or config.imports():
            name = "%02d-%s" % (index, posixpath.basename(config.path))
            companions.append(dict(name=name, path=config.path,
                                   content=imports_mod.replace_imports(config.text, [], config.path)))
            entries.append(name)
        else:
            entries.append(config.path)
    return imports_mod.replace_imports(candidate.root.text, entries, files.root.path), companions


def _edited_contents(edit, files):
    """path -> text of the edited state (None: a removed drop-in; a removed root file reads as empty)."""
    contents = dict((config.path, config.text) for config in files.files)
    contents.update(edit.changes)
    if contents[files.root.path] is None:
        contents[files.root.path] = ""
    return contents


def _refuse_unchecked_drop_in(args, edit, files, current):
    """Without the guard, a new runtime-only drop-in is written only where containerd is known to merge it."""
    guarded = args["validate"] and current.get("binary_path")
    if (args["drop_in"] and args["drop_in"] in edit.changes and args["state"] == "present" and not guarded
            and files.semantics.replaces_plugin_tables):
        raise ConfigError(
            "drop_in %s: containerd %s is not known to be 2.x and the effective-config guard cannot run here, "
            "so this module cannot prove the drop-in is safe: containerd 1.x lets an imported file replace the "
            "whole CRI plugin table (sandbox_image, SystemdCgroup, runc and registry settings would be lost). "
            "Leave drop_in unset, or run with containerd installed and validate: true."
            % (args["drop_in"], current.get("binary_version") or "(not found)"))


def hidden_settings(files):
    """containerd 1.x: dotted CRI keys of earlier files that a later file's CRI table hides."""
    effective_file = files.effective_cri_file()
    if not files.semantics.replaces_plugin_tables or effective_file in (None, files.root):
        return []
    shown = effective.flatten(effective_file.data.get("plugins", {}))
    hidden = set()
    for config in files.files[:files.index(effective_file.path)]:
        for key, value in effective.flatten(dict((p, t) for p, t in (config.data.get("plugins") or {}).items()
                                                 if p in imports_mod.CRI_1X_PLUGINS)).items():
            if shown.get(key, _ABSENT) != value:
                hidden.add(effective.dotted(("plugins",) + key))
    return sorted(hidden)


_ABSENT = object()


def _hidden_settings_warning(files):
    hidden = hidden_settings(files)
    if not hidden:
        return []
    return ["containerd 1.x reads the CRI plugin table only from %s (a later import replaces the whole table), so "
            "these settings of earlier files have no effect: %s%s. Copy them into %s or remove that file's CRI "
            "table." % (files.effective_cri_file().path, ", ".join(hidden[:10]),
                        " and %d more" % (len(hidden) - 10) if len(hidden) > 10 else "",
                        files.effective_cri_file().path)]


def _check_loaded_files(files, dump):
    """containerd 1.x lists the files it loaded in `config dump`: they must be the ones resolved here."""
    if dump is None or not files.semantics.replaces_plugin_tables or not isinstance(dump.get("imports"), list):
        return
    if sorted(dump["imports"]) != sorted(files.paths()):
        raise ConfigError(
            "%s: containerd loads %s, but this module found %s; it edits only what it can see exactly, so nothing "
            "was written. Please report this with the files attached." % (files.root.path, sorted(dump["imports"]),
                                                                          sorted(files.paths())))


def _without_imports(dump):
    """The effective config minus the informational list of files (it changes with a drop-in)."""
    dump = copy.copy(dump)
    dump.pop("imports", None)
    return dump


def _effective_default(edit, files, globs):
    """default_runtime_name containerd will use after the edit (runc when no file sets it)."""
    if not edit.changed:
        state = files
    else:
        contents = _edited_contents(edit, files)
        state = imports_mod.from_contents(files.root.path, contents, files.containerd_version, globs)
    setter = state.default_set_in()
    return setter.default_runtime() if setter is not None else "runc"


def _existed(files, path):
    """Whether the file was there before the task (a missing root file is known with an empty checksum)."""
    config = files.get(path)
    return config is not None and bool(config.sha256)


def _text_of(files, path):
    config = files.get(path)
    return config.text if config is not None else ""


def _not_read_by(target, path):
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


def _absolute_imports(text, files, path):
    """The candidate is checked from a private directory on the node, not beside PATH: its relative
    `imports` are given as the absolute paths they stand for beside PATH."""
    entries = parse(text, path).get("imports") or []
    absolute = [files.semantics.absolute(entry, path) for entry in entries]
    return imports_mod.replace_imports(text, absolute, path) if absolute != entries else text


def unexpected_error_message(path, exc, written=False):
    """Name the file and the bug, never the file's content (it may hold credentials)."""
    state = "the checked edit was written" if written else "the file was left unchanged"
    return ("%s: unexpected %s while editing the containerd config; %s. This is a bug in "
            "gpunode.nvidia.containerd_runtime: %s, with the task's arguments and the containerd "
            "version (the file itself may hold credentials: attach it only with secrets removed)."
            % (path or DEFAULT_PATH, type(exc).__name__, state, HOW_TO_REPORT))


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
