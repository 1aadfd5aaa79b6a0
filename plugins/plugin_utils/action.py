# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""A base for the collection's action plugins (arguments checked like a module's), and their local writes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase


class ValidatedAction(ActionBase):
    """Set ARGUMENT_SPEC (the module's argument_spec); `validated_args()` returns the checked task args."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    ARGUMENT_SPEC = {}

    def validated_args(self):
        validation = ArgumentSpecValidator(self.ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail("; ".join(validation.error_messages))
        return validation.validated_parameters


def write_atomically(path, text):
    """Write a file on the controller: readers see the old file or the new one, never half of it."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    handle, temp = tempfile.mkstemp(prefix=".gpunode-", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(temp, 0o644)
        os.rename(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
