#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_runtime
short_description: Add, update or remove a runtime (such as nvidia) in a containerd config, losing nothing
version_added: 0.1.0
description:
  - Edits a containerd C(config.toml) in place. Comments, key order, blank lines and quoting of every
    untouched line stay byte-identical; only the runtime's own table and the keys asked for change.
notes:
  - The new runtime copies the table of the runtime pods use today (the C(default_runtime_name) runtime
    unless that is itself an nvidia runtime, else C(runc), else C(crun)), including C(SystemdCgroup),
    C(runtime_type) and C(privileged_without_host_devices), then sets C(options.BinaryName). An existing
    runtime of that name is updated, not duplicated.
  - B(Drop-ins.) The files the config C(imports) are resolved and read as containerd of the installed
    version does (globs, relative paths, breadth-first order, later files winning; containerd 1.x letting
    an imported CRI table replace the whole table). An existing runtime is updated in the file whose
    definition containerd uses (for example NVIDIA's C(conf.d/99-nvidia.toml)), never defined a second
    time; C(default_runtime_name) is changed where containerd reads it last. The file is returned as
    RV(defined_in). Imported files whose C(version) differs from the root file's are never written.
  - Config versions 1, 2, 3 and 4. A missing or empty file gets version 3 for containerd 2.x and
    version 2 otherwise (containerd 1.x and 2.x both read version 2).
  - B(Effective-config guard.) Before writing, C(containerd --config OLD config dump) and
    C(containerd --config NEW config dump) are compared; if anything besides the keys the edit changes
    (the runtime's table, and where it sets them C(default_runtime_name), C(enable_cdi) and the deprecated
    C(default_runtime) table's binary) differs, or a key it sets does not show in the effective config with
    its value (containerd 1.x drop-ins replace whole plugin tables; containerd 1.6 drops C(enable_cdi)), the
    task fails, names the keys (and the release that reads a dropped key) and writes nothing.
  - O(state=absent) gives back every file as O(state=present) found it, its comment lines, drop-in and
    C(imports) entry included.
  - TOML editing runs on the controller (requires C(tomlkit) there); the node needs only Python's
    standard library (M(gpunode.nvidia.containerd_config_file) does the node side).
  - Writes are atomic (temporary file in the same directory, fsync, rename) and keep owner, mode and
    SELinux context. Values of credential keys are masked in the diff and in returned values.
  - B(Node lock.) With O(lock), the call that reads the config takes the node lock of
    M(gpunode.nvidia.node_lock) and gives it back in the same call. When the plan changes nothing, or in
    check mode, that is all (one module call in all with O(discovered)). A change is planned again from a
    second read that keeps the lock, then checked and written; the lock stays held (RV(lock_held)) for the
    restart and the checks after it, and is given back with O(gpunode.nvidia.node_lock#module:state=released).
    When the config imports other files, they are read under a held lock too, given back by the task when
    nothing changes. A failing task gives back the lock it took.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  path:
    description:
      - The containerd config file to edit.
      - Unset (the default), the file is the one of the containerd instance kubelet uses, found by
        M(gpunode.nvidia.gpu_node_facts) from kubelet's runtime endpoint (snap-packaged Kubernetes, MicroK8s'
        template, k0s drop-ins, EKS...); with no kubelet, the only containerd on the node; with none,
        C(/etc/containerd/config.toml). Platforms that write the file themselves (k3s/RKE2 auto-detect the
        toolkit, EKS AL2023's nodeadm) are reported and left alone.
      - Set, it wins; but when kubelet uses another containerd the task fails, naming both files (incident
        I2), unless O(allow_path_mismatch=true).
    type: path
  drop_in:
    description:
      - Put the runtime in a file of its own (for example C(/etc/containerd/conf.d/50-nvidia.toml)) and add
        it to the root file's C(imports), edited in place, unless a glob there already covers it. The new
        file gets the root file's C(version) and mode, and the runtime inherits C(SystemdCgroup) and
        C(runtime_type) from the runtime pods use, wherever that one is defined.
      - Not used (with a warning) when the runtime is already defined in another file; that definition is
        updated instead.
      - containerd 1.x lets an imported file replace the whole CRI plugin table, so a runtime-only drop-in
        would drop C(sandbox_image), C(SystemdCgroup), C(runc)...; the effective-config guard refuses it and
        says so (this module does not copy the whole table into the drop-in). Use it with containerd 2.x.
      - With O(state=absent), the runtime is removed; the drop-in file and its C(imports) entry go too when
        the file then sets nothing the other files do not already set.
    type: path
  allow_path_mismatch:
    description: Edit O(path) although kubelet uses a containerd that reads another file.
    type: bool
    default: false
  name:
    description: Runtime name (the RuntimeClass handler).
    type: str
    default: nvidia
  binary:
    description: Value for the runtime's C(options.BinaryName).
    type: str
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - Make the runtime C(default_runtime_name).
      - V(false) never demotes an existing default. With O(state=absent), a default that names the removed
        runtime falls back to the runtime pods used before it, that is the non-nvidia runtime the config
        defines (the old default, C(runc) or C(crun)), else C(runc).
    type: bool
    default: false
  cdi:
    description:
      - Set C(enable_cdi = true) in the CRI runtime plugin, with a comment line above it recording the value it
        had. V(false) leaves the key as it is.
      - With O(state=absent), an C(enable_cdi) this module turned on goes back to that value, unless V(true),
        which keeps CDI on.
    type: bool
    default: false
  state:
    description: Whether the runtime should be present.
    type: str
    choices: [present, absent]
    default: present
  containerd_binary:
    description: The containerd executable used to validate (looked up on the node's C(PATH)).
    type: str
    default: containerd
  validate:
    description:
      - Run the effective-config guard. When the node has no containerd yet (an image bake before
        containerd is installed) the edit is made and C(validated=false) is returned.
    type: bool
    default: true
  backup:
    description: Keep a timestamped copy of the previous file.
    type: bool
    default: false
  allow_missing_binary:
    description:
      - Allow O(set_as_default=true) although O(binary) does not exist on the node. Without it the task
        fails, since a default runtime whose binary is missing breaks every pod (field guide incident I5).
    type: bool
    default: false
  discovered:
    description:
      - The registered result of a M(gpunode.nvidia.gpu_node_facts) task of this run on this node, with
        C(gather) including C(runtimes), C(kubelet) and C(target) (and C(root=/)). The task then uses that
        discovery to pick the containerd instance and its file instead of discovering the node again (one
        module call less).
      - Pass the registered variable, never C(ansible_facts.gpu_node) (facts may come from an earlier run or a
        fact cache). A skipped or failed result, or one of another form, fails the task naming what is wrong.
      - Unset, the task discovers the node itself.
    type: dict
  record:
    description:
      - Where the node keeps its record of this task's last run that found nothing to change (written with
        M(gpunode.nvidia.containerd_config_file)'s O(gpunode.nvidia.containerd_config_file#module:op=record)).
      - When O(discovered) carries M(gpunode.nvidia.gpu_node_facts)'s recall of this record
        (O(gpunode.nvidia.gpu_node_facts#module:runtime_record)), the record still holds (every file containerd
        loads, every C(imports) match and the containerd and runtime binaries as they were) and it was made for
        the same request (its options and the target), the task reports the recorded answer (RV(record) is
        V(reused)) without reading the node again. Anything else is a full run, which records its answer when
        it changes nothing and the discovery read the record (not in check mode; the record is bookkeeping, not
        reported as a change, as M(gpunode.nvidia.gpu_workload_check)'s proof record).
      - An empty string keeps no record.
    type: str
    default: /var/lib/gpunode/containerd-runtime.json
extends_documentation_fragment:
  - gpunode.nvidia.node_lock
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: Credential values are masked.
  action:
    support: full
requirements:
  - tomlkit (controller)
seealso:
  - module: gpunode.nvidia.containerd_config_file
  - module: gpunode.nvidia.cri_info
"""

EXAMPLES = r"""
- name: Add the nvidia runtime, keeping everything else
  gpunode.nvidia.containerd_runtime:
    name: nvidia
    binary: /usr/bin/nvidia-container-runtime
    backup: true
  register: nvidia_runtime

- name: Restart containerd the role's way when it changed (wait for CRI, roll back, bring kubelet back)
  ansible.builtin.include_role:
    name: gpunode.nvidia.container_runtime
    tasks_from: apply
  vars:
    container_runtime_edit: "{{ nvidia_runtime }}"

- name: Make it the default, with CDI, on a k8s-snap containerd
  gpunode.nvidia.containerd_runtime:
    path: /var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml
    set_as_default: true
    cdi: true
    backup: true

- name: The runtime in a drop-in of its own (containerd 2.x)
  gpunode.nvidia.containerd_runtime:
    drop_in: /etc/containerd/conf.d/50-nvidia.toml

- name: Remove it again (the default falls back to runc)
  gpunode.nvidia.containerd_runtime:
    state: absent

- name: Find the runtime kubelet uses
  gpunode.nvidia.gpu_node_facts:
    gather: [runtimes, kubelet, target]
  register: discovery

- name: Name this run's lock owner once (the same owner takes and gives back the lock)
  ansible.builtin.set_fact:
    run_lock_owner: "{{ inventory_hostname }}:{{ now(utc=true).isoformat() }}"

- name: Configure it under the node lock, with that discovery (one module call when nothing changes)
  gpunode.nvidia.containerd_runtime:
    discovered: "{{ discovery }}"
    lock:
      owner: "{{ run_lock_owner }}"
  register: edit

- name: Restart it while the lock is held
  ansible.builtin.include_role:
    name: gpunode.nvidia.container_runtime
    tasks_from: apply
  vars:
    container_runtime_edit: "{{ edit }}"

- name: Give the node lock back
  gpunode.nvidia.node_lock:
    owner: "{{ run_lock_owner }}"
    state: released
  when: edit.lock_held | default(false)
"""

RETURN = r"""
path:
  description: The root config file (the one containerd is started with).
  returned: always
  type: str
defined_in:
  description: The file whose definition of the runtime containerd uses after the task; null with O(state=absent).
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
files:
  description: Each file changed (or, in check mode, to change), in planning order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    created:
      description: Whether the task creates it.
      type: bool
    removed:
      description: Whether the task deletes it (an emptied drop-in).
      type: bool
    backup_file:
      description: The backup made, if any.
      type: str
loaded_files:
  description: The files containerd loads, in the order it merges them (the root file first).
  returned: always
  type: list
  elements: str
backup_file:
  description: The backup of the root file, if one was made (see RV(files) for the others).
  returned: always
  type: str
created:
  description: Whether the root file did not exist before this task wrote it.
  returned: always
  type: bool
config_version:
  description: The config version of the file (after the edit).
  returned: always
  type: int
  sample: 2
cri_plugin:
  description: The CRI plugin table edited for that version.
  returned: always
  type: str
  sample: io.containerd.grpc.v1.cri
runtime:
  description: The runtime table as written (credentials masked); null with O(state=absent).
  returned: always
  type: dict
  sample: {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": true, "BinaryName": "/usr/bin/nvidia-container-runtime"}}
source_runtime:
  description: The runtime whose table was copied (the one pods use today), or null.
  returned: always
  type: str
default_runtime:
  description: C(default_runtime_name) after the edit (C(runc) when unset).
  returned: always
  type: str
validated:
  description: Whether the effective-config guard ran against the node's containerd.
  returned: always
  type: bool
effective_changes:
  description: Dotted keys of containerd's effective config that the edit changes.
  returned: always
  type: list
  elements: str
target:
  description:
    - The containerd instance configured, as discovered (null when nothing was discovered). The role uses
      C(socket), C(service), C(restart_method) and C(restart_command) to restart and check it.
  returned: always
  type: dict
  sample: {"platform": "k8s-snap", "socket": "/run/containerd/containerd.sock", "service": "snap.k8s.containerd",
           "restart_method": "systemd", "edit_mode": "main", "selected_by": "kubelet"}
containerd_version:
  description: C(containerd --version) on the node, or null.
  returned: always
  type: str
diff:
  description: Before and after text of each file changed, credentials masked.
  returned: when changed
  type: list
  elements: dict
record:
  description:
    - What became of the node's record (O(record)) - V(reused) (the recorded answer, nothing was read),
      V(written), V(kept) (the record already said so), or V(not written) with the reason (a file changed while
      the task ran). A run that changes something, or runs in check mode, records nothing.
  returned: when O(record) is set and the task did not change anything
  type: str
  sample: reused
lock_held:
  description:
    - Whether the owner of O(lock) holds the node lock after the task (true when the config was written, not in
      check mode); then give it back after the restart.
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import DEFAULT_BINARY
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import LOCK_OPTIONS

# The same options as the action plugin validates (tests/unit/collection/test_module_docs.py keeps them equal),
# so that the documentation is checked against them.
ARGUMENT_SPEC = dict(
    path=dict(type="path"),
    name=dict(type="str", default="nvidia"),
    binary=dict(type="str", default=DEFAULT_BINARY),
    set_as_default=dict(type="bool", default=False),
    cdi=dict(type="bool", default=False),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    containerd_binary=dict(type="str", default="containerd"),
    validate=dict(type="bool", default=True),
    backup=dict(type="bool", default=False),
    allow_missing_binary=dict(type="bool", default=False),
    allow_path_mismatch=dict(type="bool", default=False),
    drop_in=dict(type="path"),
    discovered=dict(type="dict"),
    record=dict(type="str", default="/var/lib/gpunode/containerd-runtime.json"),
    lock=dict(type="dict", options=LOCK_OPTIONS),
)


def main():
    # The work is done by the action plugin of the same name; running this file directly is a misuse.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="gpunode.nvidia.containerd_runtime runs through its action plugin; "
                         "call it as a task, not as a raw module.")


if __name__ == "__main__":
    main()
