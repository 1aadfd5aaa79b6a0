# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.role_variables: the run's gpunode.nvidia variables, checked on the controller before any stage.

One task per host, no module run: a name with a role's or the collection's prefix that nothing reads is a warning
naming the closest documented one; a value a role's argument spec refuses fails the host in one line per variable.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.playbook import variables
from ansible_collections.gpunode.nvidia.plugins.modules.role_variables import ARGUMENT_SPEC

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        task_vars = task_vars or {}
        known = variables.catalog(COLLECTION_ROOT)
        ours = [name for name in task_vars if known.is_ours(name)]
        unknown = variables.unknown_names(ours, known)
        refused = variables.refused_values(self._templated(task_vars, ours, known), known)
        result.update(changed=False, unknown=[name for name, _closest in unknown],
                      warnings=[variables.unknown_name_warning(name, closest) for name, closest in unknown])
        if args["unknown_names"] == "fail" and unknown:
            refused = [variables.unknown_name_warning(name, closest) for name, closest in unknown] + refused
        if refused:
            result.update(failed=True, msg=variables.refusal_message(refused))
        return result

    def _templated(self, task_vars, names, known):
        """{name: value as the role would see it} of the variables a role's argument spec judges; one that cannot
        be templated here (it names a fact of a later task) is left to the role."""
        values = {}
        self._templar.available_variables = task_vars
        for name in names:
            if name in known.specs:
                try:
                    values[name] = self._templar.template(task_vars[name])
                except Exception:  # pylint: disable=broad-except
                    continue
        return values
