# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""What the three runtime editors (containerd, Docker, CRI-O) share, stated once: the default runtime
binary, the refusal of a name or binary no daemon can use, the refusal
to make a missing binary the default runtime (incident I5), the warning for a binary not installed yet, and the
message for a bug.

Standard library only (runs on managed nodes and on the controller).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DEFAULT_BINARY = "/usr/bin/nvidia-container-runtime"

# Where the editors' reports send the user: the README says what to include and where to send it.
HOW_TO_REPORT = 'please report it as "Reporting a problem" in the collection\'s README.md says'


def missing_binary_warning(binary, name):
    """Added anyway (an image bake may install it later), but every workload that selects it fails until then."""
    return ("Runtime binary %s is not on this node yet: the %r runtime was configured, but every container that "
            "selects it (RuntimeClass handler %s, docker --runtime %s) will fail to start until it is there. "
            "Install the NVIDIA container toolkit (role gpunode.nvidia.nvidia_container_toolkit) or point binary "
            "(role variable container_runtime_binary) at the installed runtime." % (binary, name, name, name))


def missing_default_refusal(path, name, binary):
    """Incident I5: a default runtime whose binary is missing breaks every pod on the node."""
    return ("%s: refusing to make %r the default runtime: its binary %s does not exist on this node, so every "
            "pod (not only GPU pods) would fail to start. Nothing was changed. Install the NVIDIA container "
            "toolkit first (role gpunode.nvidia.nvidia_container_toolkit), or set allow_missing_binary: true if "
            "it is installed later in the same image bake." % (path, name, binary))


def request_problem(params):
    """A refusal for a runtime name or binary no daemon can use (empty, blank, a control character such as a
    line break), or None. A blank binary is the worst: containerd's runc shim then runs plain runc, silently."""
    for option, value in (("name", params["name"]), ("binary", params["binary"])):
        if not value.strip() or any(ord(char) < 32 or ord(char) == 127 for char in value):
            return ("%s %r cannot name a runtime%s: it is empty, blank, or holds a control character such as a line "
                    "break. Nothing was changed. Give %s." % (
                        option, value, "" if option == "name" else " binary",
                        "the name RuntimeClass handlers and `docker --runtime` use, such as nvidia" if option == "name"
                        else "the runtime's path, such as %s" % DEFAULT_BINARY))
    return None


def binary_problem(params, path, binary_found):
    """(refusal or None, warning or None) for the runtime binary of a `present` request."""
    if params["state"] != "present" or binary_found:
        return None, None
    if params["set_as_default"] and not params["allow_missing_binary"]:
        return missing_default_refusal(path, params["name"], params["binary"]), None
    return None, missing_binary_warning(params["binary"], params["name"])


def bug_message(module_name, path, kind, where=None, written=False):
    """The message for a bug: its type and where it happened, never its text (that may quote the file)."""
    state = "the checked edit was written" if written else "nothing was written"
    return ("%s: unexpected %s%s in gpunode.nvidia.%s; %s. This is a bug: %s, with the task's arguments and this "
            "message (attach the file only with its credentials removed)."
            % (path, kind, " at %s" % where if where else "", module_name, state, HOW_TO_REPORT))
