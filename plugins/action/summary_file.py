# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.summary_file: the run's node summary, written as JSON on the controller.

A local artifact of the run, written by the controller itself: no module runs (the copy
module it replaces ran two on the controller, a second or more per run), written in check
mode too, never reported as a change, left untouched when its content is the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction, write_atomically
# One argument spec, documented with the module.
from ansible_collections.gpunode.nvidia.plugins.modules.summary_file import ARGUMENT_SPEC


def summary_text(nodes):
    """As to_nice_json writes it (indent 4, keys sorted), one object holding the node list."""
    return json.dumps({"nodes": nodes}, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def _current_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError, ValueError):
        return None


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        path = os.path.abspath(args["path"])
        text = summary_text(args["nodes"])
        written = _current_text(path) != text
        if written:
            try:
                write_atomically(path, text)
            except (IOError, OSError) as exc:
                raise AnsibleActionFail("%s: the node summary could not be written (%s). Set gpunode_summary_path "
                                        "to a file the controller user can write, or to \"\" for none."
                                        % (path, exc.strerror or type(exc).__name__))
        result.update(changed=False, path=path, written=written)
        return result
