#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: config_file
short_description: Read, validate and atomically replace a runtime configuration file
version_added: 0.1.0
description:
  - The node-side half of M(gpunode.nvidia.containerd_runtime), whose TOML editing runs on the
    controller. Also usable on its own.
  - C(op=read) returns the file, its checksum and attributes, and optionally the output of a
    command run on it (for example C(containerd --config %s config dump)).
  - C(op=check) writes a candidate into a temporary file beside O(path), runs O(command) on it and
    removes it; the node's real file is never touched.
  - C(op=write) replaces O(path) atomically (temp file in the same directory, fsync, rename),
    keeping owner, mode and SELinux context, optionally with a backup; it refuses to write when the
    file changed since it was read (O(expected_sha256)).
  - Needs only the Python standard library on the node.
author:
  - gpunode.nvidia contributors
options:
  path:
    description: The configuration file.
    type: path
    required: true
  op:
    description: What to do.
    type: str
    choices: [read, check, write]
    default: read
  content:
    description: The candidate text for O(op=check) and O(op=write).
    type: str
  command:
    description:
      - Command (argv list) to run on the file (O(op=read)) or on the candidate (O(op=check)); C(%s)
        is replaced by the file name. With O(op=read) and a missing file it runs on an empty file.
      - The first element is looked up on C(PATH) and in the usual sbin directories.
    type: list
    elements: str
  binary:
    description: An executable to locate and report the C(--version) of (for example C(containerd)).
    type: str
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
attributes:
  check_mode:
    support: partial
    details: O(op=read) and O(op=check) change nothing and run in check mode; O(op=write) reports and skips.
  diff_mode:
    support: none
    details: The calling action plugin builds the diff, with credentials masked.
"""

EXAMPLES = r"""
- name: Read containerd's config and its effective form
  gpunode.nvidia.config_file:
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
paths:
  description: For each of O(exists), whether it exists (a bare name is looked up on C(PATH)).
  returned: always
  type: dict
backup_file:
  description: The backup made by O(op=write).
  returned: when a backup was made
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpunode.nvidia.plugins.module_utils.filewrite import (
    atomic_write,
    read_bytes,
    sha256_bytes,
    write_temp_beside,
)

SBIN_DIRS = ["/usr/local/sbin", "/usr/sbin", "/sbin"]


def find_binary(module, name):
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    return module.get_bin_path(name, opt_dirs=SBIN_DIRS)


def run_on(module, command, target, shown_as):
    binary = find_binary(module, command[0])
    if binary is None:
        return {"command_rc": 127, "command_stdout": "", "command_stderr": "%s: not found" % command[0]}
    argv = [binary] + [arg.replace("%s", target) for arg in command[1:]]
    rc, out, err = module.run_command(argv)
    return {
        "command_rc": rc,
        "command_stdout": out.replace(target, shown_as),
        "command_stderr": err.replace(target, shown_as),
    }


def run_on_content(module, command, path, data):
    tmp = write_temp_beside(path, data)
    try:
        return run_on(module, command, tmp, path)
    finally:
        os.unlink(tmp)


def binary_facts(module, name):
    path = find_binary(module, name)
    version = None
    if path:
        rc, out, err = module.run_command([path, "--version"])
        lines = (out or err).strip().splitlines()
        version = lines[0] if rc == 0 and lines else None
    return {"binary_path": path, "binary_version": version}


def path_exists(module, name):
    return bool(find_binary(module, name)) if "/" not in name else os.path.exists(name)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            op=dict(type="str", choices=["read", "check", "write"], default="read"),
            content=dict(type="str"),
            command=dict(type="list", elements="str"),
            binary=dict(type="str"),
            exists=dict(type="list", elements="str", default=[]),
            expected_sha256=dict(type="str", no_log=False),
            backup=dict(type="bool", default=False),
            mode=dict(type="raw", default="0644"),
        ),
        required_if=[("op", "check", ["content", "command"]), ("op", "write", ["content"])],
        supports_check_mode=True,
    )
    try:
        run(module)
    except Exception as exc:  # a bug must not reach the user as a traceback (nor show file content)
        module.fail_json(msg="%s: unexpected %s in gpunode.nvidia.config_file; the file was left unchanged. "
                             "This is a bug: please report it with the task's arguments (not the file content)."
                             % (module.params["path"], type(exc).__name__))


def run(module):
    params = module.params
    path = params["path"]
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory; give the configuration file itself" % path)
    current = read_bytes(path)
    result = {
        "changed": False,
        "exists": current is not None,
        "sha256": sha256_bytes(current) if current is not None else "",
        "paths": dict((p, path_exists(module, p)) for p in params["exists"]),
    }
    if params["binary"]:
        result.update(binary_facts(module, params["binary"]))

    if params["op"] == "read":
        result["content"] = to_text(current or b"", errors="surrogate_or_strict")
        if params["command"]:
            if current is None:
                result.update(run_on_content(module, params["command"], path, b""))
            else:
                result.update(run_on(module, params["command"], path, path))
    elif params["op"] == "check":
        result.update(run_on_content(module, params["command"], path, to_bytes(params["content"])))
    else:
        write(module, params, current, result)
    module.exit_json(**result)


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


if __name__ == "__main__":
    main()
