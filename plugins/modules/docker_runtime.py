#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_runtime
short_description: Add, update or remove an OCI runtime in Docker's daemon.json without losing a setting
version_added: 0.1.0
description:
  - Edits C(runtimes.<name>) (and optionally C(default-runtime) and C(features.cdi)) in Docker's
    C(daemon.json) in place. Every other key keeps its bytes, its order and the file's
    indentation, so C(log-opts), C(registry-mirrors), C(insecure-registries), C(exec-opts) and the
    rest come through untouched. New keys copy the layout of their neighbours.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  path:
    description: The daemon configuration file dockerd reads (its C(--config-file)).
    type: path
    default: /etc/docker/daemon.json
  name:
    description:
      - Runtime name, as used by C(docker run --runtime NAME) and by a Kubernetes RuntimeClass
        handler through cri-dockerd.
      - C(runc), C(io.containerd.runc.v2) and C(io.containerd.runtime.v1.linux) are reserved by
        dockerd and refused.
    type: str
    default: nvidia
  binary:
    description:
      - The runtime executable, written as C(runtimes.<name>.path). A bare name is looked up on
        dockerd's C(PATH) when a container starts.
      - The same default as the containerd and CRI-O editors (earlier versions of this module wrote the bare
        name C(nvidia-container-runtime); a file that names it is updated to the path once).
    type: str
    default: /usr/bin/nvidia-container-runtime
  runtime_args:
    description:
      - Written as C(runtimes.<name>.runtimeArgs) when not empty, or when the runtime already has
        C(runtimeArgs) (then an empty list empties it).
    type: list
    elements: str
    default: []
  set_as_default:
    description:
      - Make the runtime dockerd's C(default-runtime), so every container uses it.
      - Refused when O(binary) cannot be found on the node (every container would fail to start),
        unless O(allow_missing_binary=true).
      - C(false) leaves C(default-runtime) as it is.
    type: bool
    default: false
  allow_missing_binary:
    description: Accept O(set_as_default=true) even though O(binary) is not on the node (yet).
    type: bool
    default: false
  cdi:
    description:
      - Set C(features.cdi) to C(true), leaving every other feature flag as it is.
      - C(false) leaves C(features) alone; so does O(state=absent), since CDI serves every runtime.
    type: bool
    default: false
  state:
    description: Whether the runtime should be present or absent.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description: Keep a timestamped copy of the previous file when it changes.
    type: bool
    default: false
  validate:
    description: Check the candidate with C(dockerd --validate) before writing, when that is available.
    type: bool
    default: true
  dockerd_binary:
    description:
      - The dockerd executable used for validation and reported in RV(dockerd_version).
      - A bare name is looked up on C(PATH) and in the sbin directories; when it is not found
        (an image built before Docker is installed) the module goes on with RV(validated=false).
        An absolute path that does not exist is an error.
    type: str
    default: dockerd
  systemd_root:
    description:
      - Directory that stands for C(/) when reading the docker service's systemd unit, its
        drop-ins and environment files for conflicting flags (for a mounted image, or tests).
    type: path
    default: /
extends_documentation_fragment:
  - gpunode.nvidia.node_lock
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: The candidate is still validated (in a private temporary directory, never beside O(path), removed
      afterwards).
  diff_mode:
    support: full
    details: Credentials (keys such as C(auth), C(password), C(token), also written with JSON escapes,
      whatever the value's type) are masked, as in every message and returned value.
seealso:
  - module: gpunode.nvidia.containerd_runtime
  - module: gpunode.nvidia.crio_runtime
notes:
  - A missing file is created holding only what was asked for.
  - O(state=absent) removes C(runtimes.<name>) but keeps an emptied C(runtimes) object as
    C({}), and turns a C(default-runtime) that named the runtime into C(runc). On SIGHUP dockerd
    reloads only the keys present in the file (seen with 20.10, 26.1 and 28.5), so deleting them
    would leave the runtime registered, and still the default, until a full restart. A file
    that already held other runtimes gets its original bytes back.
  - Before writing, when the installed dockerd has C(--validate) (Docker 23 and later), the
    current file is checked first with C(dockerd --validate --config-file PATH). When dockerd
    already rejects it (for example a registry mirror without C(https://), refused by dockerd 28)
    the module fails saying so, quotes dockerd (credentials masked) and writes nothing. Only then
    is the candidate checked the same way. Without C(--validate) the result says
    RV(validated=false).
  - Any input either gets a clear refusal (file, line and column, what to do) or exactly the
    change asked for; an unexpected error fails naming the file and asking for a bug report,
    with the file untouched and no traceback.
  - Fails before writing when dockerd's command line (systemd unit, drop-in, or C(DOCKER_OPTS)
    in C(/etc/default/docker) / C(/etc/sysconfig/docker)) already sets what this edit writes,
    and names the file that passes the flag. C(--default-runtime) with O(set_as_default=true),
    or C(--feature) with O(cdi=true) (dockerd refuses to start when a key is given both ways).
    C(--add-runtime <name>=...) for the same runtime name (dockerd would silently use the
    file's definition and ignore the flag). C(--add-runtime) for other names is fine (dockerd
    merges them with C(runtimes)). With O(state=absent), C(--default-runtime <name>) (removing
    the runtime would leave dockerd's default undefined).
  - The write is atomic (temporary file in the same directory, fsync, rename), keeps owner, mode
    and SELinux context, and can keep a backup. Credentials are masked in the diff and in every
    returned value.
  - The change is not applied to a running dockerd; reload it (C(systemctl reload docker), i.e.
    SIGHUP), which picks up C(runtimes) and C(default-runtime) without stopping containers.
  - Needs only the Python standard library on the node.
  - Docker docs on runtimes U(https://docs.docker.com/reference/cli/dockerd/#configure-container-runtimes).
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime, keep runc as the default
  gpunode.nvidia.docker_runtime:
    binary: /usr/bin/nvidia-container-runtime
  register: docker_nvidia

- name: Make it the default runtime and enable CDI, with a backup
  gpunode.nvidia.docker_runtime:
    binary: /usr/bin/nvidia-container-runtime
    set_as_default: true
    cdi: true
    backup: true

- name: Apply it without stopping containers
  ansible.builtin.systemd_service:
    name: docker
    state: reloaded
  when: docker_nvidia is changed

- name: Remove it again
  gpunode.nvidia.docker_runtime:
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the file changed (or would change, in check mode).
  returned: always
  type: bool
path:
  description: The file edited.
  returned: always
  type: str
diff:
  description: Before and after text of the file, credentials masked.
  returned: always
  type: dict
backup_file:
  description: The backup made, or null.
  returned: always
  type: str
runtime:
  description: The runtime's object as written (credentials masked), or null when absent.
  returned: always
  type: dict
  sample: {"path": "nvidia-container-runtime"}
default_runtime:
  description: The C(default-runtime) in the resulting file, or null when not set (dockerd then uses runc).
  returned: always
  type: str
validated:
  description: Whether C(dockerd --validate) accepted the candidate. False when nothing changed, when
    O(validate=false), or when dockerd is missing or has no C(--validate) (before Docker 23).
  returned: always
  type: bool
validation_output:
  description: What C(dockerd --validate) printed (for example C(configuration OK)) for the candidate, or
    for the current file when dockerd already rejects it, or why it did not run. Credentials masked.
  returned: always
  type: str
dockerd_version:
  description: Version of O(dockerd_binary) (for example C(26.1.5+dfsg1)), or null when not found.
  returned: always
  type: str
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
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import daemon_json
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import docker_config
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import dockerd_flags
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import (
    atomic_write,
    check_unchanged,
    decode_utf8,
    editing,
    read_bytes,
)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import (
    DEFAULT_BINARY, binary_problem, request_problem)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import LOCK_OPTIONS, under_lock_option
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit, warn


def dockerd_facts(module):
    """(dockerd path or None, version or None, whether it has --validate)."""
    name = module.params["dockerd_binary"]
    binary = find_binary(name)
    if binary is None:
        if os.sep in name:
            fail(module, "dockerd_binary %s does not exist or is not executable." % name)
        return None, None, False
    rc, out, err = module.run_command([binary, "--version"])
    match = re.search(r"version\s+v?([0-9][^\s,]*)", out + err)
    version = match.group(1) if match else None
    rc, out, err = module.run_command([binary, "--help"])
    return binary, version, "--validate" in out + err


def validate(module, dockerd, path, data):
    """(accepted, output) of `dockerd --validate` on data, from a private directory: nothing is written
    beside path (check mode writes nothing under /etc; daemon.json has no paths relative to itself)."""
    directory = tempfile.mkdtemp(prefix="gpunode-docker-check-")
    candidate = os.path.join(directory, os.path.basename(path))
    try:
        with open(candidate, "wb") as handle:
            handle.write(data)
        rc, out, err = module.run_command([dockerd, "--validate", "--config-file", candidate])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    output = (out + err).strip().replace(candidate, path)
    return rc == 0, mask_text(output)


def check_original(module, dockerd, version, path, before_text):
    """Fail when dockerd already rejects the file as it is: the edit is not what broke it."""
    if not before_text.strip():
        return  # nothing there yet: dockerd runs on its defaults
    rc, out, err = module.run_command([dockerd, "--validate", "--config-file", path])
    if rc == 0:
        return
    output = mask_text((out + err).strip())
    fail(module, "dockerd %s already rejects %s as it is, before any edit, so nothing was written: %s. "
                 "Fix that in the file first (dockerd would not start with it either), then run again."
                 % (version, path, output),
         validated=False, validation_output=output, dockerd_version=version)


def check_flags(module, path):
    """Fail when dockerd's command line sets a key this edit writes; warn on another --config-file."""
    try:
        flags = dockerd_flags.dockerd_flags(module.params["systemd_root"])
    except (IOError, OSError) as exc:
        warn(module, "Could not read the docker service's unit files: %s" % exc)
        return
    for flag in flags:
        if flag.flag == "--config-file" and os.path.abspath(flag.value) != os.path.abspath(path):
            warn(module, "dockerd is started with --config-file %s (passed by %s), not %s: this edit "
                         "will not reach that dockerd." % (flag.value, flag.source, path))
    params = module.params
    conflicts = dockerd_flags.conflicting_flags(flags, params["name"], params["state"],
                                                params["set_as_default"], params["cdi"])
    if conflicts:
        fail(module, dockerd_flags.conflict_message(conflicts, path, params["state"]),
             conflicts=[c._asdict() for c in conflicts])


def check_request(module):
    params = module.params
    problem = request_problem(params)
    if problem:
        fail(module, problem)
    if params["name"] in docker_config.RESERVED_RUNTIME_NAMES:
        fail(module, "Runtime name %r is reserved by dockerd; choose another name." % params["name"])
    refusal, warning = binary_problem(params, params["path"], find_binary(params["binary"]) is not None)
    if refusal:
        fail(module, refusal)
    if warning:
        warn(module, warning)


def plan(module, path, before_text):
    params = module.params
    try:
        after_text = docker_config.edit_daemon_json(
            before_text, path, params["name"], params["binary"], params["runtime_args"],
            params["set_as_default"], params["cdi"], params["state"])
        after_data = daemon_json.parse_daemon_json(after_text, path)
    except daemon_json.DockerConfigError as exc:
        fail(module, str(exc))
    return after_text, after_data


def write(module, path, before_bytes, after_bytes):
    # The edit lock keeps this collection's other runs out; anything else may still have edited the file.
    check_unchanged(path, before_bytes)
    return atomic_write(module, path, after_bytes, backup=module.params["backup"], mode=0o644)


def run_module(module):
    check_request(module)
    # Read, plan, validate and write under the file's edit lock: a concurrent run waits, then plans on this one's result.
    with editing(module, module.params["path"]):
        return edit(module)


def edit(module):
    params = module.params
    path = params["path"]
    before_bytes = read_bytes(path)
    before_text = decode_utf8(path, before_bytes, "dockerd") if before_bytes is not None else ""
    after_text, after_data = plan(module, path, before_text)
    changed = after_text != before_text
    check_flags(module, path)

    dockerd, version, can_validate = dockerd_facts(module)
    after_bytes = after_text.encode("utf-8")
    validated, output = False, "no change to validate"
    if changed and not params["validate"]:
        output = "validation turned off (validate=false)"
    elif changed and dockerd is None:
        output = "dockerd not found; candidate not validated"
    elif changed and not can_validate:
        output = "dockerd %s has no --validate (Docker 23 and later have it)" % version
    elif changed:
        check_original(module, dockerd, version, path, before_text)
        validated, output = validate(module, dockerd, path, after_bytes)
        if not validated:
            fail(module, "dockerd rejected the new %s; the file was left untouched: %s" % (path, output),
                 validated=False, validation_output=output, dockerd_version=version,
                 diff=diff(path, before_text, after_text))

    backup_file = None
    if changed and not module.check_mode:
        backup_file = write(module, path, before_bytes, after_bytes)

    runtime = daemon_json.runtime_entry(after_data, params["name"])
    return dict(
        changed=changed,
        path=path,
        diff=diff(path, before_text, after_text),
        backup_file=backup_file,
        runtime=runtime,
        default_runtime=after_data.get("default-runtime"),
        validated=validated,
        validation_output=output,
        dockerd_version=version,
    )


def diff(path, before, after):
    return {"before": mask_text(before), "after": mask_text(after),
            "before_header": path, "after_header": path}


ARGUMENT_SPEC = dict(
    path=dict(type="path", default="/etc/docker/daemon.json"),
    name=dict(type="str", default="nvidia"),
    binary=dict(type="str", default=DEFAULT_BINARY),
    runtime_args=dict(type="list", elements="str", default=[]),
    set_as_default=dict(type="bool", default=False),
    allow_missing_binary=dict(type="bool", default=False),
    cdi=dict(type="bool", default=False),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    backup=dict(type="bool", default=False),
    validate=dict(type="bool", default=True),
    dockerd_binary=dict(type="str", default="dockerd"),
    systemd_root=dict(type="path", default="/"),
    lock=dict(type="dict", options=LOCK_OPTIONS),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_and_exit(module, "docker_runtime", module.params["path"], under_lock_option(run_module))


if __name__ == "__main__":
    main()
