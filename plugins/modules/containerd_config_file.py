#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_config_file
short_description: Read, validate and atomically replace a runtime configuration file
version_added: 0.1.0
description:
  - The node-side half of M(gpunode.nvidia.containerd_runtime), whose TOML editing runs on the
    controller. Also usable on its own.
  - C(op=read) returns the file, its checksum and attributes, and optionally the output of a
    command run on it (for example C(containerd --config %s config dump)).
notes:
  - C(op=check) writes a candidate into a private temporary directory (never beside O(path), so
    that check mode writes nothing under C(/etc)), runs O(command) on it as if it were O(path) and
    removes the directory; the node's real file is never touched. Relative C(imports) of the candidate
    would resolve from that directory, so the caller gives them as absolute paths.
  - C(op=read) with O(include) also returns the files that a containerd C(imports) list names
    (entries resolved by the caller to absolute paths or patterns; expanded as containerd does).
  - C(op=check) with O(companions) writes the companion files into the same private directory (the
    caller points the candidate's imports at them).
  - C(op=remove) deletes O(path) (with the same O(expected_sha256) and O(backup) rules as a write).
  - C(op=write) replaces O(path) atomically (temp file in the same directory, fsync, rename),
    keeping owner, mode and SELinux context, optionally with a backup; it refuses to write when the
    file changed since it was read (O(expected_sha256)).
  - C(op=record) writes, at O(path), the node's record of a run of M(gpunode.nvidia.containerd_runtime) that
    found nothing to change. O(content) is the controller's proposal, JSON with C(key), C(result), C(files)
    (path to SHA-256, null for absent), C(patterns) (C(imports) pattern to the paths it matched) and
    C(binaries) (paths); the record is written (mode C(0600)) only when every file and pattern is still
    what the controller read, with the binaries' size and modification time beside them.
    M(gpunode.nvidia.gpu_node_facts) reads it back (O(gpunode.nvidia.gpu_node_facts#module:runtime_record)).
  - With O(lock), the call takes the node lock first (the lock of M(gpunode.nvidia.node_lock)), so
    that reading a config and planning its change costs no round trip of its own for the lock.
  - Needs only the Python standard library on the node.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  path:
    description: The configuration file.
    type: path
    required: true
  op:
    description: What to do.
    type: str
    choices: [read, check, write, remove, record]
    default: read
  content:
    description: The candidate text for O(op=check) and O(op=write); the record's proposal for O(op=record).
    type: str
  command:
    description:
      - Command (argv list) to run on the file (O(op=read)) or on the candidate (O(op=check)); C(%s)
        is replaced by the file name. With O(op=read) and a missing file it runs on an empty file.
      - The first element is looked up on C(PATH) and in the usual sbin directories.
    type: list
    elements: str
  command_failure:
    description:
      - What a non-zero exit status of O(command) does.
      - V(fail) fails the task with nothing changed, naming the command, its status and the end of its
        error output (credentials masked).
      - V(report) returns the status in RV(command_rc) and the output in RV(command_stdout) and
        RV(command_stderr), for the caller to judge (the gpunode.nvidia.containerd_runtime action does, since
        a candidate that containerd rejects is a refusal it explains).
    type: str
    choices: [fail, report]
    default: fail
  binary:
    description: An executable to locate and report the C(--version) of (for example C(containerd)).
    type: str
  include:
    description:
      - With O(op=read), files to return beside O(path), as C(included), in the order given.
      - An entry containing C(*) is expanded as containerd expands an import (Go's C(filepath.Glob), where
        C(*) also matches names starting with a dot, results sorted per directory); any other entry
        is one file, reported with C(exists=false) when missing.
    type: list
    elements: str
    default: []
  companions:
    description:
      - With O(op=check), extra files written into the same private temporary directory as the
        candidate, each C({name, path, content}); C(name) is the file name there, C(path) the real
        file it stands for (its name replaces the temporary one in the command's output).
    type: list
    elements: dict
    default: []
  exists:
    description: Paths whose existence to report (for example the runtime binary a config points at).
    type: list
    elements: str
    default: []
  expected_sha256:
    description:
      - With O(op=write), the checksum the file had when it was read (empty string for "did not
        exist"). The write fails if the file changed in between, so a concurrent edit is never lost.
    type: str
  backup:
    description: With O(op=write), keep a timestamped copy of the previous file.
    type: bool
    default: false
  mode:
    description: Mode of a file that does not exist yet. An existing file keeps its mode.
    type: raw
    default: "0644"
  keep_lock:
    description:
      - With O(lock), keep holding the lock when the call succeeds (RV(lock_held)), for a write and a restart
        that follow; give it back later with O(gpunode.nvidia.node_lock#module:state=released).
    type: bool
    default: false
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.node_lock
attributes:
  check_mode:
    support: partial
    details: O(op=read) and O(op=check) change nothing and run in check mode; O(op=write), O(op=remove) and
      O(op=record) report and skip.
  diff_mode:
    support: none
    details: The calling action plugin builds the diff, with credentials masked.
"""

EXAMPLES = r"""
- name: Read containerd's config and its effective form
  gpunode.nvidia.containerd_config_file:
    path: /etc/containerd/config.toml
    binary: containerd
    command: [containerd, --config, "%s", config, dump]
  register: current
"""

RETURN = r"""
exists:
  description: Whether O(path) exists.
  returned: always
  type: bool
content:
  description: The file's text (O(op=read)); empty when missing.
  returned: op=read
  type: str
sha256:
  description: Checksum of the file's bytes; empty string when missing.
  returned: always
  type: str
command_rc:
  description: Exit status of O(command).
  returned: when O(command) was given
  type: int
command_stdout:
  description: Its standard output, with the temporary file name replaced by O(path).
  returned: when O(command) was given
  type: str
command_stderr:
  description: Its standard error, same replacement.
  returned: when O(command) was given
  type: str
binary_path:
  description: Where O(binary) was found, or null.
  returned: when O(binary) was given
  type: str
binary_version:
  description: First line of C(O(binary) --version), or null.
  returned: when O(binary) was given
  type: str
file_mode:
  description: Permission bits of O(path) in octal (for example C(0600)), or null when missing.
  returned: always
  type: str
included:
  description:
    - For each entry of O(include), in order, C({pattern, files}); C(files) lists C({path, exists,
      content, sha256}) in containerd's order.
  returned: when O(include) was given
  type: list
  elements: dict
paths:
  description: For each of O(exists), whether it exists (a bare name is looked up on C(PATH)).
  returned: always
  type: dict
backup_file:
  description: The backup made by O(op=write).
  returned: when a backup was made
  type: str
recorded:
  description: Whether the record at O(path) now holds the proposal (O(op=record)).
  returned: op=record
  type: bool
record_reason:
  description: Why the proposal was not recorded (a file changed since the controller read it).
  returned: op=record, when RV(recorded) is false
  type: str
lock_held:
  description: Whether the owner of O(lock) holds the node lock after the call (true with O(keep_lock=true) when the
    call succeeded, and when the owner held it before the call).
  returned: when O(lock) was given
  type: bool
lock_waited:
  description: Seconds spent waiting for another owner's lock.
  returned: when O(lock) was given
  type: float
lock_taken_over:
  description: The owner of a stale lock that was taken over.
  returned: when a stale lock was taken over
  type: str
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import goglob
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import (
    atomic_write,
    clear_debris,
    decode_utf8,
    editing,
    faults_named,
    read_bytes,
    remove_file,
    sha256_bytes,
)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import runtime_record
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import LOCK_OPTIONS, run_holding
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import run_and_exit


def run_on(module, command, target, shown_as):
    binary = find_binary(command[0])
    if binary is None:
        return {"command_rc": 127, "command_stdout": "", "command_stderr": "%s: not found" % command[0]}
    argv = [binary] + [arg.replace("%s", target) for arg in command[1:]]
    # From `/`, as a service runs: containerd 1.6 expands a relative import glob from its working directory.
    rc, out, err = module.run_command(argv, cwd="/")
    renames = shown_as if isinstance(shown_as, list) else [(target, shown_as)]
    for temp, real in renames:
        out, err = out.replace(temp, real), err.replace(temp, real)
    return {"command_rc": rc, "command_stdout": out, "command_stderr": err}


def run_on_content(module, command, path, data):
    """The command on DATA as if it were PATH, from a private directory: nothing is written beside PATH
    (check mode writes nothing under /etc). The caller gives the candidate's imports as absolute paths."""
    return run_with_companions(module, command, path, data, [])


def run_with_companions(module, command, path, data, companions):
    """Candidate and companions in a private directory (beyond any glob of the real config), then the command."""
    directory = tempfile.mkdtemp(prefix="gpunode-config-check-")
    try:
        candidate = os.path.join(directory, os.path.basename(path))
        renames = []
        for companion in companions:
            name = os.path.basename(companion["name"])
            if name != companion["name"] or name == os.path.basename(path):
                module.fail_json(msg="companion name %r must be a plain file name other than %s"
                                 % (companion["name"], os.path.basename(path)))
            _write_plain(os.path.join(directory, name), to_bytes(companion["content"]))
            renames.append((os.path.join(directory, name), companion["path"]))
        _write_plain(candidate, data)
        return run_on(module, command, candidate, renames + [(candidate, path)])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_plain(path, data):
    with open(path, "wb") as handle:
        handle.write(data)


def read_included(patterns):
    """[{pattern, files}] for op=read's include: containerd's rule, `*` means a glob."""
    included = []
    for pattern in patterns:
        try:
            paths = goglob.glob(pattern) if "*" in pattern else [pattern]
        except goglob.BadPattern as exc:
            included.append({"pattern": pattern, "files": [], "error": str(exc)})
            continue
        files = []
        for name in paths:
            data = read_bytes(name) if not os.path.isdir(name) else None
            files.append({
                "path": name, "exists": data is not None,
                "content": decode_utf8(name, data or b"", "containerd"),
                "sha256": sha256_bytes(data) if data is not None else "",
            })
        included.append({"pattern": pattern, "files": files})
    return included


def file_mode(path):
    try:
        return "%04o" % (os.stat(path).st_mode & 0o7777)
    except OSError:
        return None


def binary_facts(module, name):
    path = find_binary(name)
    version = None
    if path:
        rc, out, err = module.run_command([path, "--version"])
        lines = (out or err).strip().splitlines()
        version = lines[0] if rc == 0 and lines else None
    return {"binary_path": path, "binary_version": version}


def path_exists(module, name):
    return bool(find_binary(name)) if "/" not in name else os.path.exists(name)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            op=dict(type="str", choices=["read", "check", "write", "remove", "record"], default="read"),
            content=dict(type="str"),
            command=dict(type="list", elements="str"),
            binary=dict(type="str"),
            include=dict(type="list", elements="str", default=[]),
            companions=dict(type="list", elements="dict", default=[]),
            command_failure=dict(type="str", choices=["fail", "report"], default="fail"),
            exists=dict(type="list", elements="str", default=[]),
            expected_sha256=dict(type="str", no_log=False),
            backup=dict(type="bool", default=False),
            mode=dict(type="raw", default="0644"),
            lock=dict(type="dict", options=LOCK_OPTIONS),
            keep_lock=dict(type="bool", default=False),
        ),
        required_if=[("op", "check", ["content", "command"]), ("op", "write", ["content"]), ("op", "record", ["content"])],
        supports_check_mode=True,
    )
    # Not masked: the controller edits the bytes this returns, and masks whatever it shows.
    run_and_exit(module, "containerd_config_file", module.params["path"], run_locked, masked=False)


def run_locked(module):
    """run() under the node lock when the controller passed one."""
    if module.params["lock"]:
        return run_holding(module, module.params["lock"], run, lambda _result: module.params["keep_lock"])
    return run(module)


def run(module):
    params = module.params
    path = params["path"]
    if params["op"] == "record":
        return write_record(module, path, params["content"])
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory; give the configuration file itself" % path)
    current = read_bytes(path)
    result = {
        "changed": False,
        "exists": current is not None,
        "sha256": sha256_bytes(current) if current is not None else "",
        "paths": dict((p, path_exists(module, p)) for p in params["exists"]),
        "file_mode": file_mode(path),
    }
    if params["binary"]:
        result.update(binary_facts(module, params["binary"]))

    if params["op"] == "read":
        clear_debris(module, path)
        result["content"] = decode_utf8(path, current or b"", "containerd")
        if params["command"]:
            if current is None:
                result.update(run_on_content(module, params["command"], path, b""))
            else:
                result.update(run_on(module, params["command"], path, path))
        if params["include"]:
            result["included"] = read_included(params["include"])
    elif params["op"] == "check" and params["companions"]:
        result.update(run_with_companions(module, params["command"], path, to_bytes(params["content"]),
                                          params["companions"]))
    elif params["op"] == "check":
        result.update(run_on_content(module, params["command"], path, to_bytes(params["content"])))
    elif params["op"] == "remove":
        with editing(module, path):
            remove(module, params, read_again(path, result), result)
    else:
        with editing(module, path):
            write(module, params, read_again(path, result), result)
    if result.get("command_rc", 0) != 0 and params["command_failure"] == "fail":
        fail_on_command(module, params, result)
    return result


def fail_on_command(module, params, result):
    """A command that failed fails the task (as the sibling editors do), unless the caller judges it."""
    output = mask_text((result["command_stderr"] or result["command_stdout"]).strip())
    tail = "\n".join(output.splitlines()[-5:])
    module.fail_json(
        msg="%s: %s exited with status %d on it%s. Nothing was changed; fix what it reports (or the command), "
            "and run again." % (params["path"], params["command"][0], result["command_rc"],
                                ": " + tail if tail else ""),
        **dict((key, value) for key, value in result.items() if key not in ("content", "command_stdout", "command_stderr")))


def read_again(path, result):
    """The file's bytes read under its edit lock: the compare with expected_sha256 and the rename are then one step."""
    current = read_bytes(path)
    result.update(exists=current is not None, sha256=sha256_bytes(current) if current is not None else "")
    return current


def write(module, params, current, result):
    expected = params["expected_sha256"]
    if expected is not None and expected != result["sha256"]:
        module.fail_json(
            msg="%s changed on the node while this task was preparing its edit; nothing was written. "
                "Run again." % params["path"], **result)
    data = to_bytes(params["content"])
    if current == data:
        return
    result["changed"] = True
    if module.check_mode:
        return
    mode = params["mode"]
    mode = int(mode, 8) if isinstance(mode, str) else mode
    backup_file = atomic_write(module, params["path"], data, backup=params["backup"], mode=mode)
    if backup_file:
        result["backup_file"] = backup_file
    result["sha256"] = sha256_bytes(data)


def write_record(module, path, content):
    """op=record: the proposal written at PATH when the node is still what the controller read."""
    try:
        proposal = json.loads(content)
    except ValueError as exc:
        module.fail_json(msg="%s: the record's proposal is not JSON (%s); nothing was written" % (path, exc))
    problem = runtime_record.proposal_problem(proposal)
    if problem:
        module.fail_json(msg="%s: %s; nothing was written" % (path, problem))
    record, why_not = runtime_record.make(proposal)
    if record is None:
        return {"changed": False, "recorded": False, "record_reason": why_not}
    data = to_bytes(runtime_record.dumps(record))
    if read_bytes(path) == data:
        return {"changed": False, "recorded": True}
    if not module.check_mode:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            with faults_named(directory, "create the directory"):
                os.makedirs(directory, 0o755)
        # No edit lock (it would leave a lock file per path in /run/lock): two runs that record at once write
        # the same answer, and the rename is atomic.
        atomic_write(module, path, data, mode=0o600)
    return {"changed": True, "recorded": not module.check_mode}


def remove(module, params, current, result):
    expected = params["expected_sha256"]
    if expected is not None and expected != result["sha256"]:
        module.fail_json(
            msg="%s changed on the node while this task was preparing its edit; nothing was removed. "
                "Run again." % params["path"], **result)
    if current is None:
        return
    result["changed"] = True
    if module.check_mode:
        return
    backup_file = remove_file(module, params["path"], backup=params["backup"])
    if backup_file:
        result["backup_file"] = backup_file
    result["sha256"] = ""


if __name__ == "__main__":
    main()
