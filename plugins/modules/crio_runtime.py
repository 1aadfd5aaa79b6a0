#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: crio_runtime
short_description: Add or remove an OCI runtime for CRI-O with a drop-in file the collection owns
version_added: 0.1.0
description:
  - Writes a CRI-O drop-in (default C(/etc/crio/crio.conf.d/99-nvidia.toml)) holding
    C([crio.runtime.runtimes.<name>]) with C(runtime_path), C(runtime_type = "oci") and
    C(runtime_root), plus C([crio.runtime] default_runtime) with O(set_as_default=true).
    C(/etc/crio/crio.conf) and the other drop-ins are never edited.
notes:
  - The drop-in belongs to this module entirely and is rewritten whole. A file already at O(path)
    that this module did not write (for example one from C(nvidia-ctk)) is backed up before it is
    replaced or removed, whatever O(backup) says.
  - Reads C(/etc/crio/crio.conf) and every file of the drop-in directory, whatever its name and in its
    subdirectories too (CRI-O applies them in name order; the last one wins), and warns, in RV(overrides)
    and as task warnings, when a later drop-in redefines the runtime or another C(default_runtime); with
    O(state=absent), when a remaining C(default_runtime) would still name the removed runtime.
  - The write is atomic (temporary file, fsync, rename) and keeps owner, mode and SELinux context of an
    existing file. CRI-O reads every file of its drop-in directory, so the temporary file and the backup are
    written in the directory above it (C(/etc/crio/99-nvidia.toml.PID.DATE~)), where CRI-O never reads them;
    a killed run's temporary file is removed by the next run.
  - A drop-in that is a symbolic link is edited in its target (the link stays); filesystem faults (full,
    read-only, immutable) fail naming the file, the cause and the fix; concurrent runs on the same file
    take turns. See docs/faults.md.
  - CRI-O must be restarted to use a new runtime for new pods (a runtime added by SIGHUP is not
    usable for new sandboxes).
  - Credentials in a file being replaced, and in every message and returned value, are masked.
    An unexpected error fails naming the file and asking for a bug report, with no traceback.
  - Needs only the Python standard library on the node.
  - CRI-O is not installable on the machines this collection is tested on; this module is
    covered by unit tests only.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  path:
    description: The drop-in file. Its directory is CRI-O's drop-in directory (C(--config-dir)).
    type: path
    default: /etc/crio/crio.conf.d/99-nvidia.toml
  main_config:
    description: CRI-O's main configuration file (C(--config)), read only, for override warnings.
    type: path
    default: /etc/crio/crio.conf
  name:
    description: Runtime handler name (a Kubernetes RuntimeClass C(handler)).
    type: str
    default: nvidia
  binary:
    description: The runtime executable, written as C(runtime_path).
    type: str
    default: /usr/bin/nvidia-container-runtime
  runtime_root:
    description: Root directory for the runtime's container state (C(runtime_root)); default C(/run/<name>).
    type: path
  set_as_default:
    description:
      - Also write C([crio.runtime] default_runtime = "<name>"), so every pod uses the runtime.
      - Refused when O(binary) does not exist on the node, unless O(allow_missing_binary=true).
    type: bool
    default: false
  allow_missing_binary:
    description: Accept O(set_as_default=true) even though O(binary) is not on the node (yet).
    type: bool
    default: false
  state:
    description: C(present) writes the drop-in, C(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Keep a timestamped copy of the previous drop-in when it changes or is removed, in the directory above
        the drop-in directory (in it, CRI-O would apply the copy after the new drop-in).
    type: bool
    default: false
extends_documentation_fragment:
  - gpunode.nvidia.node_lock
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
seealso:
  - module: gpunode.nvidia.docker_runtime
  - module: gpunode.nvidia.containerd_runtime
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime with CRI-O
  gpunode.nvidia.crio_runtime:
    binary: /usr/bin/nvidia-container-runtime
  register: crio_nvidia

- name: Restart CRI-O so new pods can use it
  ansible.builtin.systemd_service:
    name: crio
    state: restarted
  when: crio_nvidia is changed

- name: Make it the default runtime of every pod
  gpunode.nvidia.crio_runtime:
    set_as_default: true
"""

RETURN = r"""
changed:
  description: Whether the drop-in changed (or would, in check mode).
  returned: always
  type: bool
path:
  description: The drop-in file.
  returned: always
  type: str
diff:
  description: Before and after text of the drop-in, credentials masked.
  returned: always
  type: dict
backup_file:
  description: The backup made (outside the drop-in directory), or null.
  returned: always
  type: str
runtime:
  description: The runtime table as written, or null with O(state=absent).
  returned: always
  type: dict
  sample: {"runtime_path": "/usr/bin/nvidia-container-runtime", "runtime_type": "oci", "runtime_root": "/run/nvidia"}
overrides:
  description: Settings in other files that defeat this drop-in, each with C(file), C(line) and C(message).
  returned: always
  type: list
  elements: dict
replaced_foreign_file:
  description: Whether O(path) held a file this module did not write.
  returned: always
  type: bool
lock_held:
  description: Whether the owner of O(lock) holds the node lock after the task (true when the file was written, not in
    check mode).
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

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import crio_config
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import (
    DEFAULT_BINARY, binary_problem, request_problem)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import (
    atomic_write,
    check_unchanged,
    editing,
    read_bytes,
    remove_file,
)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import LOCK_OPTIONS, under_lock_option
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit, warn


def check_request(module):
    params = module.params
    problem = request_problem(params)
    if problem:
        fail(module, problem)
    refusal, warning = binary_problem(params, params["path"], find_binary(params["binary"]) is not None)
    if refusal:
        fail(module, refusal)
    if warning:
        warn(module, warning)


def temp_dir(path):
    """Where the temporary file and the backup of a write go: CRI-O reads every file of its drop-in directory, so
    not there but in the directory above (the temporary file: same filesystem, else beside the file after all).
    None: beside the file, which is a link's target elsewhere."""
    target_dir = os.path.dirname(os.path.realpath(path))
    if target_dir != os.path.realpath(os.path.dirname(os.path.abspath(path))):
        return None
    return os.path.dirname(target_dir)


def run_module(module):
    check_request(module)
    # Read, compare and write under the file's edit lock, so a concurrent run plans on this one's result.
    path = module.params["path"]
    with editing(module, path, temp_dir(path)):
        return edit(module)


def edit(module):
    params = module.params
    path = params["path"]
    before_bytes = read_bytes(path)
    before = before_bytes.decode("utf-8", "replace") if before_bytes is not None else ""
    foreign = before_bytes is not None and not crio_config.is_managed(before)
    present = params["state"] == "present"
    after = crio_config.render_dropin(params["name"], params["binary"], params["runtime_root"],
                                      params["set_as_default"]) if present else ""
    changed = after.encode("utf-8") != before_bytes if present else before_bytes is not None

    overrides = crio_config.find_overrides(path, params["main_config"], params["name"],
                                           params["set_as_default"], params["state"])
    for issue in overrides:
        warn(module, issue["message"])
    if foreign and changed:
        warn(module, "%s was not written by this module; it is backed up before being %s."
             % (path, "replaced" if present else "removed"))

    backup_file = None
    if changed and not module.check_mode:
        keep = params["backup"] or foreign
        check_unchanged(path, before_bytes)
        outside = temp_dir(path)  # CRI-O would read a backup in its drop-in directory, after ours
        if present:
            backup_file = atomic_write(module, path, after.encode("utf-8"), backup=keep, mode=0o644,
                                       temp_dir=outside, backup_dir=outside)
        else:
            backup_file = remove_file(module, path, keep, backup_dir=outside)

    return dict(
        changed=changed,
        path=path,
        diff={"before": mask_text(before), "after": mask_text(after), "before_header": path, "after_header": path},
        backup_file=backup_file,
        runtime=crio_config.runtime_table(params["name"], params["binary"], params["runtime_root"]) if present else None,
        overrides=overrides,
        replaced_foreign_file=foreign and changed,
    )


ARGUMENT_SPEC = dict(
    path=dict(type="path", default="/etc/crio/crio.conf.d/99-nvidia.toml"),
    main_config=dict(type="path", default="/etc/crio/crio.conf"),
    name=dict(type="str", default="nvidia"),
    binary=dict(type="str", default=DEFAULT_BINARY),
    runtime_root=dict(type="path"),
    set_as_default=dict(type="bool", default=False),
    allow_missing_binary=dict(type="bool", default=False),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    backup=dict(type="bool", default=False),
    lock=dict(type="dict", options=LOCK_OPTIONS),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_and_exit(module, "crio_runtime", module.params["path"], under_lock_option(run_module))


if __name__ == "__main__":
    main()
