#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_firstboot_code
short_description: Install the collection's node code that a baked image's first boot runs
version_added: "0.2.0"
description:
  - Writes the collection's C(module_utils) files that C(services/firstboot.py) imports, and that file itself,
    under O(dest) as Python packages (C(ansible_collections/gpunode/nvidia/plugins/module_utils/...)), where
    C(gpunode-firstboot) imports them from.
  - Used by the C(image_bake) role (docs/bake.md).
notes:
  - The files are the ones this module's own payload carries, so the set is always exactly what the first boot
    imports, whatever the collection's version; the whole set is written in one task.
  - Each file is written only when its content or mode differs, atomically (written beside, then renamed), with
    mode C(0644); missing directories are created with mode C(0755).
  - Files under O(dest) that the first boot no longer imports are left in place.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  dest:
    description: The directory the first-boot program puts first on its import path.
    type: path
    default: /usr/lib/gpunode
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: The diff names the files that would be written, not their lines.
"""

EXAMPLES = r"""
- name: Install the collection's node code the first boot runs
  gpunode.nvidia.gpu_firstboot_code:
    dest: /usr/lib/gpunode
"""

RETURN = r"""
dest:
  description: The directory the files are under.
  returned: always
  type: str
files:
  description: The files written (in check mode, the files that would be written; after a failure, those written
    before it), relative to O(dest).
  returned: always
  type: list
  elements: str
count:
  description: How many files the first boot needs, written or already in place.
  returned: always
  type: int
"""

import os
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

# What the first boot runs. Imported for its files: Ansible packs this module with everything it imports, and
# the module installs exactly that. The module imports nothing else of the collection, so that the set is the
# first boot's own (which is why it writes with AnsibleModule.atomic_move, not editors/filewrite).
from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot  # noqa: F401 pylint: disable=unused-import

TOP = "ansible_collections.gpunode.nvidia.plugins.module_utils"


def node_code():
    """{path relative to dest: source} of the collection's modules loaded (the first boot's imports), with an
    empty __init__.py in every package directory from ansible_collections down."""
    files = {}
    for name, module in sorted(sys.modules.items()):
        if not (name == TOP or name.startswith(TOP + ".")) or module is None or hasattr(module, "__path__"):
            continue
        parts = name.split(".")
        for depth in range(1, len(parts)):
            files["/".join(parts[:depth] + ["__init__.py"])] = ""
        files["/".join(parts) + ".py"] = module.__loader__.get_source(name)
    return files


def plan(dest, files):
    """The files on the node that differ from the wanted ones, in content or mode (missing included)."""
    stale = []
    for relative in sorted(files):
        path = os.path.join(dest, relative)
        try:
            with open(path, "rb") as handle:
                same = handle.read() == files[relative].encode("utf-8") and os.stat(path).st_mode & 0o7777 == 0o644
        except (IOError, OSError):
            same = False
        if not same:
            stale.append(relative)
    return stale


def make_dirs(directory):
    """The directory and its missing parents, each with mode 0755 whatever the umask."""
    if os.path.isdir(directory):
        return
    make_dirs(os.path.dirname(directory))
    os.mkdir(directory)
    os.chmod(directory, 0o755)


def write(module, dest, relative, text):
    path = os.path.join(dest, relative)
    make_dirs(os.path.dirname(path))
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".gpunode-firstboot-")
    with os.fdopen(handle, "wb") as out:
        out.write(text.encode("utf-8"))
    # atomic_move gives the file the mode of the one it replaces (or the umask's): set it after the move.
    module.atomic_move(temporary, path)
    os.chmod(path, 0o644)


def main():
    module = AnsibleModule(argument_spec=dict(dest=dict(type="path", default="/usr/lib/gpunode")),
                           supports_check_mode=True)
    dest = module.params["dest"]
    files = node_code()
    stale = plan(dest, files)
    result = dict(changed=bool(stale), dest=dest, files=stale, count=len(files))
    if module._diff and stale:
        result["diff"] = {"before_header": dest, "after_header": dest, "before": "",
                          "after": "".join("%s\n" % relative for relative in stale)}
    if not module.check_mode:
        for done, relative in enumerate(stale):
            try:
                write(module, dest, relative, files[relative])
            except (IOError, OSError) as exc:
                result["files"] = stale[:done]
                module.fail_json(msg="cannot write %s: %s. %d of the %d files to write were written; the first boot "
                                     "cannot run from %s until all are: make it a writable directory and run the "
                                     "bake again" % (os.path.join(dest, relative), exc.strerror or exc, done,
                                                     len(stale), dest), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
