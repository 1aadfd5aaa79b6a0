# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""How the config-editing modules leave: results masked, and never with a traceback.

Standard library only: this runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys
import traceback

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import bug_message
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import FileFault
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_data, mask_text


def fail(module, msg, **extra):
    """Every failure leaves through here: credentials masked in the message and the result."""
    module.fail_json(**mask_data(dict(extra, msg=msg)))


def warn(module, msg):
    module.warn(mask_text(msg))


def unexpected_error(module_name, path):
    """The message for a bug: its type and where it happened, never its text (that may quote the file)."""
    kind, _value, trace = sys.exc_info()
    frames = traceback.extract_tb(trace)
    where = "%s:%d" % (os.path.basename(frames[-1][0]), frames[-1][1]) if frames else "unknown place"
    return bug_message(module_name, path, kind.__name__ if kind else "error", where)


def run_and_exit(module, module_name, path, run, masked=True):
    """exit_json with run(module)'s result (masked unless MASKED is false); a filesystem fault or any
    unexpected exception becomes a failure."""
    try:
        result = run(module)
    except FileFault as exc:
        fail(module, str(exc))
    except Exception:  # pylint: disable=broad-except  # no traceback ever reaches the user
        fail(module, unexpected_error(module_name, path))
    module.exit_json(**(mask_data(result) if masked else result))
