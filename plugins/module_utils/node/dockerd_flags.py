# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""dockerd command-line flags that clash with the daemon.json keys docker_runtime writes, read from the
docker service's unit files through node_reader (the one reader of the node).

Standard library only: this runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex
from collections import OrderedDict, namedtuple

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader

# Flags on dockerd's command line that matter for the keys this module writes.
# Seen with dockerd 20.10, 26.1 and 28.5: a key set both by --default-runtime
# (or --feature) and in daemon.json stops dockerd from starting ("specified
# both as a flag and in the configuration file"). --add-runtime does not clash
# with `runtimes`: the two are merged, but a runtime of the same name defined
# both ways silently takes daemon.json's definition and drops the flag's.
FLAG_KEYS = OrderedDict([
    ("--add-runtime", "runtimes"),
    ("--default-runtime", "default-runtime"),
    ("--feature", "features"),
    ("--config-file", None),
])
SYSV_ENV_FILES = ("/etc/default/docker", "/etc/sysconfig/docker")

DockerdFlag = namedtuple("DockerdFlag", "flag value key source")


def _service_command(node, unit):
    """(words of the effective ExecStart, file it came from, {VAR: (value, file)})."""
    exec_start, source, env = None, None, {}
    for key, value, unit_file in node_reader.unit_entries(node, unit, "Service"):
        if key == "ExecStart":
            # An empty ExecStart= resets the list; the last one left is what runs.
            exec_start, source = (value, unit_file) if value else (None, None)
        elif key == "Environment":
            for word in _split(value):
                if "=" in word:
                    var, val = word.split("=", 1)
                    env[var] = (val, unit_file)
        elif key == "EnvironmentFile":
            for name in _split(value):
                env_path = name.lstrip("-")
                for var, val in node_reader.read_env_file(node, env_path).items():
                    env[var] = (val, env_path)
    return exec_start, source, env


def _split(value):
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _expand(words, source, env):
    """Replace `$VAR` / `${VAR}` words by their values; each word keeps the file it came from."""
    for word in words:
        match = re.match(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$", word)
        if not match:
            yield word, source
            continue
        value, env_source = env.get(match.group(1), ("", source))
        for part in _split(value):
            yield part, env_source


def _flags_in(words):
    """(flag, value, source) for each flag of interest, as `--flag value` or `--flag=value`."""
    words = list(words)
    for index, (word, source) in enumerate(words):
        flag, _sep, value = word.partition("=")
        if flag not in FLAG_KEYS:
            continue
        if not _sep:
            value = words[index + 1][0] if index + 1 < len(words) else ""
        yield flag, value, source


def dockerd_flags(root="/", unit="docker.service"):
    """Flags of interest on dockerd's command line, each with the file (a path on the node) that passes it.

    Reads the systemd unit and its drop-ins under root as systemd applies them; without a unit (SysV
    init) reads DOCKER_OPTS from /etc/default/docker or /etc/sysconfig/docker.
    """
    node = node_reader.Node(root, run=False)
    exec_start, source, env = _service_command(node, unit)
    if exec_start is not None:
        words = _expand(_split(exec_start), source, env)
    else:
        words = []
        for env_path in SYSV_ENV_FILES:
            opts = node_reader.read_env_file(node, env_path).get("DOCKER_OPTS")
            if opts:
                words.extend((word, env_path) for word in _split(opts))
    return [DockerdFlag(flag, value, FLAG_KEYS[flag], src) for flag, value, src in _flags_in(words)]


def conflicting_flags(flags, runtime_name, state="present", set_as_default=False, cdi=False):
    """The flags that clash with this edit."""
    found = []
    for flag in flags:
        if state == "absent":
            # Removing the runtime dockerd's command line makes the default leaves it without one.
            clash = flag.flag == "--default-runtime" and flag.value == runtime_name
        elif flag.flag == "--add-runtime":
            clash = flag.value.split("=", 1)[0] == runtime_name
        elif flag.flag == "--default-runtime":
            clash = set_as_default
        elif flag.flag == "--feature":
            clash = cdi
        else:
            clash = False
        if clash:
            found.append(flag)
    return found


def _clash_reason(flag, path, state):
    if state == "absent":
        return ("removing the runtime would leave dockerd's default runtime undefined (dockerd 20.10 "
                "crashed on reload in that state)")
    if flag.flag == "--add-runtime":
        return ("defines the same runtime; with both, dockerd silently uses the definition in %s and "
                "ignores the flag" % path)
    return "dockerd refuses to start when %s is also set in %s" % (flag.key, path)


def conflict_message(conflicts, path, state="present"):
    reasons = ["%s %s (passed by %s): %s" % (c.flag, c.value, c.source, _clash_reason(c, path, state))
               for c in conflicts]
    return (
        "dockerd's command line clashes with this edit. %s. Nothing was written. Remove the flag "
        "from that file (then `systemctl daemon-reload`), or keep managing this runtime on the "
        "command line instead of with this module." % "; ".join(reasons)
    )
