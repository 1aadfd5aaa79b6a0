# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Reading a node through ``root``: files, commands, installed packages, processes and systemd units.

``root`` is ``/`` for the live node, a mounted image or a test tree otherwise.
Nothing is written; nothing inside ``root`` is run except ``BINARY --version``
on the live node (``root`` = ``/``). Also the small parsers every reader
shares: sockets, command-line flags, argument files, unit files and env files.
The facts built on these are in discovery.py, nvidia_facts.py and
runtime_instances.py.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import os
import re
import shlex
import struct
import subprocess

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import (
    in_root, resolve_in_root, unit_dropins, unit_files, unit_path)

VERSION_RE = re.compile(r"\bv?(\d+\.\d+(?:\.\d+)?(?:[-+~][0-9A-Za-z.+~-]*)?)")
INTERESTING = ("containerd", "dockerd", "crio", "cri-dockerd", "kubelet", "kubelite", "k3s", "rke2", "k0s")


class Node(object):
    """The node's file system seen through root, plus an optional command runner.

    `run(argv)` returns (rc, stdout, stderr). It is only set for the live node:
    a binary inside a mounted image may be for another architecture or glibc.
    """

    def __init__(self, root="/", run=None):
        self.root = root or "/"
        self.live = os.path.realpath(self.root) == "/"
        self.run = run if run is not None else (run_command if self.live else None)
        self._packages = None
        self.units = {}
        self.versions = {}

    def local(self, path):
        if self.live:
            return path
        try:
            return in_root(self.root, resolve_in_root(self.root, path))
        except OSError:  # a symlink loop: the path as given
            return in_root(self.root, path)

    def read(self, path, limit=4 * 1024 * 1024):
        try:
            with open(self.local(path), "rb") as handle:
                return handle.read(limit).decode("utf-8", "replace")
        except (IOError, OSError):
            return None

    def exists(self, path):
        return os.path.exists(self.local(path))

    def isfile(self, path):
        return os.path.isfile(self.local(path))

    def isdir(self, path):
        return os.path.isdir(self.local(path))

    def listdir(self, path):
        try:
            return sorted(os.listdir(self.local(path)))
        except OSError:
            return []

    def readlink(self, path):
        try:
            return os.readlink(in_root(self.root, path))
        except OSError:
            return None

    def glob(self, directory, pattern):
        return [directory.rstrip("/") + "/" + name for name in self.listdir(directory)
                if fnmatch.fnmatch(name, pattern)]

    def packages(self):
        if self._packages is None:
            self._packages = read_packages(self)
        return self._packages


def run_command(argv, timeout=5):
    """(rc, stdout, stderr) of argv; a missing binary is rc 127, a hang rc 124."""
    try:
        # Not AnsibleModule.run_command, which has no timeout: a program that hangs (nvidia-smi on a wedged GPU,
        # a runtime that does not answer) must fail the read, not the whole play.
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return 124, "", "timed out after %ss" % timeout
    except (OSError, ValueError) as exc:
        return 127, "", str(exc)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def normalize_socket(endpoint):
    """'/run/x.sock' for 'unix:///var/run/x.sock', '/var/run/x.sock' or '/run/x.sock'."""
    if not endpoint:
        return None
    path = endpoint
    if path.startswith("unix://"):
        path = path[len("unix://"):]
    if not path.startswith("/"):
        return None
    path = os.path.normpath(path)
    if path == "/var/run" or path.startswith("/var/run/"):
        path = path[len("/var"):]
    return path


def unquote(value):
    if value and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def flag_value(argv, names):
    """Value of the last `--name value` / `--name=value` among argv (pflag: last wins)."""
    value = None
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv) and not argv[index + 1].startswith("-"):
                value = argv[index + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
    return unquote(value)


def split_args(text, variables=None):
    """Arguments from an args file or a shell-like line; ${VAR} expanded from variables."""
    if not text:
        return []
    for name, value in sorted((variables or {}).items(), key=lambda item: -len(item[0])):
        text = text.replace("${%s}" % name, value).replace("$%s" % name, value)
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


# --- packages -------------------------------------------------------------------

def read_packages(node):
    """{name: version} of installed packages from dpkg status, else the rpm sqlite db."""
    status = node.read("/var/lib/dpkg/status", limit=64 * 1024 * 1024)
    if status is not None:
        return {"db": "dpkg", "packages": parse_dpkg_status(status)}
    rpm = read_rpm_sqlite(node.local("/var/lib/rpm/rpmdb.sqlite"))
    if rpm is not None:
        return {"db": "rpm", "packages": rpm}
    return {"db": None, "packages": {}}


def parse_dpkg_status(text):
    packages = {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _sep, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            packages[fields["Package"]] = fields.get("Version")
    return packages


def read_rpm_sqlite(path):
    """Best effort: rpm >= 4.16 keeps headers in sqlite; older Berkeley DB is not read."""
    if not os.path.isfile(path):
        return None
    try:
        import sqlite3
        connection = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        try:
            rows = connection.execute("SELECT blob FROM Packages").fetchall()
        finally:
            connection.close()
    except Exception:  # sqlite3 missing, locked or another schema: not fatal
        return None
    packages = {}
    for (blob,) in rows:
        tags = rpm_header_strings(bytes(blob), (1000, 1001, 1002))
        if 1000 in tags:
            packages[tags[1000]] = "%s-%s" % (tags.get(1001), tags.get(1002))
    return packages


def rpm_header_strings(blob, wanted):
    """String tags of an rpm header blob (index count, data size, entries, data)."""
    found = {}
    if len(blob) < 8:
        return found
    count, _size = struct.unpack(">II", blob[:8])
    if 8 + 16 * count > len(blob):  # a damaged entry: its index runs past the blob
        return found
    data = blob[8 + 16 * count:]
    for index in range(count):
        tag, kind, offset, _count = struct.unpack(">IIII", blob[8 + 16 * index:24 + 16 * index])
        end = data.find(b"\0", offset) if tag in wanted and kind == 6 and offset < len(data) else -1
        if end >= 0:
            found[tag] = data[offset:end].decode("utf-8", "replace")
    return found


def binary_version(node, path):
    """First version number `path --version` prints (run once per binary and per gather)."""
    if path not in node.versions:
        node.versions[path] = _parse_version_output(*node.run([path, "--version"]))
    return node.versions[path]


def _parse_version_output(rc, out, err):
    if rc != 0:
        return None
    for line in (out or err).splitlines():
        match = VERSION_RE.search(line.split(":", 1)[-1] if ":" in line else line)
        if match:
            return match.group(1)
    return None


# --- processes and units ------------------------------------------------------------

def processes(node):
    """Runtime-related processes: [{pid, argv, name, exe, service, ppid}] from /proc.

    On the live node, processes whose root directory is not the node's `/` run inside a container
    (a kind node, a Molecule node, docker-in-docker): their sockets and files are not the node's, so
    they are left out, and so is a process that exited while it was read.
    """
    found = []
    host_root = _root_identity("/") if node.live else None
    for pid in sorted((p for p in node.listdir("/proc") if p.isdigit()), key=int):
        raw = node.read("/proc/%s/cmdline" % pid)
        if not raw:
            continue  # kernel thread or gone
        argv = list(raw.split("\0"))
        while argv and argv[-1] == "":
            argv.pop()
        if len(argv) == 1 and " " in argv[0]:
            argv = argv[0].split()  # a process that rewrote its title
        name = os.path.basename(argv[0]) if argv else ""
        if name not in INTERESTING:
            continue
        cgroup = node.read("/proc/%s/cgroup" % pid)
        process = {"pid": int(pid), "argv": argv, "name": name, "exe": node.readlink("/proc/%s/exe" % pid),
                   "service": service_from_cgroup(cgroup), "cgroup_read": cgroup is not None,
                   "ppid": _ppid(node.read("/proc/%s/status" % pid))}
        # The root is read last: a process that exits while it is read is then left out as gone.
        if host_root and not _has_root(pid, host_root):
            continue
        found.append(process)
    return found


def _root_identity(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _identity(info)


def _has_root(pid, root):
    """Whether process PID has ROOT ((st_dev, st_ino)) as its root directory. A root that cannot be read
    (another user's process, read without privilege) counts as ROOT, as before containers were told apart;
    a process that has exited, or is exiting, does not."""
    try:
        info = os.stat("/proc/%s/root" % pid)
    except OSError as exc:
        return exc.errno not in (errno.ENOENT, errno.ESRCH)
    return _identity(info) == root


def _identity(info):
    """A directory's identity from its stat: two paths are the same directory when these match."""
    return info.st_dev, info.st_ino


def service_from_cgroup(text):
    """'containerd.service' from a /proc/PID/cgroup line such as 0::/system.slice/containerd.service."""
    for line in (text or "").splitlines():
        for part in reversed(line.split(":", 2)[-1].split("/")):
            if part.endswith(".service"):
                return part
    return None


def _ppid(text):
    match = re.search(r"^PPid:\s*(\d+)", text or "", re.M)
    return int(match.group(1)) if match else None


def unit(node, name):
    """A systemd unit with its drop-ins: {name, path, exec_argv, env, listen, enabled, masked}, or None."""
    if name not in node.units:
        node.units[name] = _read_unit(node, name)
    return node.units[name]


def _exists_or_link(node):
    return lambda path: node.exists(path) or node.readlink(path) is not None


def unit_entries(node, name, *sections):
    """(key, value, file) of a unit's settings in SECTIONS ([Service], [Socket]...), from the unit file and
    its drop-ins in the order systemd applies them (a later value wins; an empty ExecStart= resets)."""
    for path in unit_files(_exists_or_link(node), node.listdir, name):
        for key, value in unit_lines(node.read(path) or "", sections):
            yield key, value, path


def _read_unit(node, name):
    main = unit_path(_exists_or_link(node), name)
    if main is None:
        return None
    env, exec_start, listen, sources = {}, None, None, []
    masked = node.readlink(main) == "/dev/null"
    for path in [main] + unit_dropins(node.listdir, name):
        text = node.read(path)
        if text is None:
            continue
        sources.append(path)
        for key, value in unit_lines(text, ("Service", "Socket")):
            if key == "Environment":
                for pair in split_args(value):
                    env_key, _sep, env_value = pair.partition("=")
                    env[env_key] = env_value
            elif key == "EnvironmentFile":
                env.update(read_env_file(node, value.lstrip("-")))
            elif key == "ExecStart":
                exec_start = value.lstrip("-@+!:") or None  # an empty ExecStart= resets
            elif key == "ListenStream":
                listen = value.replace("%t", "/run")
    enabled = any(node.exists("/etc/systemd/system/%s/%s" % (wants, name))
                  for wants in node.listdir("/etc/systemd/system") if wants.endswith(".wants"))
    return {"name": name, "path": main, "files": sources, "env": env, "listen": listen,
            "exec_argv": split_args(exec_start, env) if exec_start else [],
            "enabled": enabled, "masked": masked}


def unit_lines(text, sections=None):
    """(key, value) of a unit file's settings (of SECTIONS only, when given), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    section = None
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        if not line or line[0] in "#;[" or "=" not in line or (sections and section not in sections):
            continue
        key, _sep, value = line.partition("=")
        yield key.strip(), value.strip()


def read_env_file(node, path):
    """KEY=VALUE lines of an environment file (systemd or shell style: `export`, quotes), {} when unreadable."""
    env = {}
    for line in (node.read(path) or "").splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):].strip()
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if match:
            env[match.group(1)] = unquote(match.group(2).strip())
    return env
