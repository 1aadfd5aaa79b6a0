# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Read-only discovery of a GPU node: GPUs, driver, toolkit, glibc, container
runtimes, kubelet, and the runtime instance kubelet really uses.

Incident I2 is the reason for this module: a snap-packaged Kubernetes ran its
own containerd beside the distribution's ``containerd.service`` and the
toolkit configured the wrong one. Nobody asked kubelet. Here kubelet is asked
first (its running command line, its flag files, its config file), and its
runtime endpoint is matched against every runtime instance found on the node.

Everything is read through ``root`` (``/`` for the live node, a mounted image
or a test tree otherwise). Nothing is written; nothing inside ``root`` is run
except ``BINARY --version`` on the live node (``root`` = ``/``).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json
import os
import re
import shlex
import struct
import subprocess

from ansible_collections.gpunode.nvidia.plugins.module_utils.elf import (
    HostLibraries, check_glibc, in_root, resolve_in_root, ElfError)

SECTIONS = ("gpus", "driver", "toolkit", "glibc", "runtimes", "kubelet", "target")

NVIDIA_VENDOR = "0x10de"
DEFAULT_CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
DEFAULT_CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
DEFAULT_CRIO_SOCKET = "/var/run/crio/crio.sock"
KUBELET_DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/lib/systemd/system", "/usr/lib/systemd/system")
MICROK8S_DATA = "/var/snap/microk8s/current"
MICROK8S_COMMON = "/var/snap/microk8s/common"
K8S_SNAP_ARGS = "/var/snap/k8s/common/args"
RANCHER = {"k3s": "/var/lib/rancher/k3s", "rke2": "/var/lib/rancher/rke2"}
K3S_SOCKET = "/run/k3s/containerd/containerd.sock"
K0S_SOCKET = "/run/k0s/containerd.sock"

TOOLKIT_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/toolkit")
TOOLKIT_NAMES = ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-toolkit",
                 "nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-cli",
                 "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy")
VERSIONED_TOOLS = ("nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime")
TOOLKIT_PACKAGE_OF = {"nvidia-ctk": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime.cdi": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime.legacy": "nvidia-container-toolkit-base",
                      "nvidia-cdi-hook": "nvidia-container-toolkit-base",
                      "nvidia-container-cli": "libnvidia-container-tools"}
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1")
DRIVER_PACKAGE_RE = re.compile(
    r"^(nvidia-driver|nvidia-kernel|nvidia-dkms|nvidia-open|nvidia-utils|nvidia-compute-utils|"
    r"libnvidia-compute|libnvidia-gl|nvidia-headless|nvidia-fabricmanager|cuda-drivers|kmod-nvidia|"
    r"nvidia-kmod|nvidia-tesla|xserver-xorg-video-nvidia|firmware-nvidia)")
RUNTIME_PACKAGES = {"containerd": ("containerd", "containerd.io"),
                    "dockerd": ("docker.io", "docker-ce", "moby-engine", "docker"),
                    "crio": ("cri-o",)}

VERSION_RE = re.compile(r"\bv?(\d+\.\d+(?:\.\d+)?(?:[-+~][0-9A-Za-z.+~-]*)?)")
TOML_VERSION_RE = re.compile(r"^\s*version\s*=\s*(\d+)\s*(?:#.*)?$", re.M)
TOML_TABLE_RE = re.compile(r"^\s*\[", re.M)
TOML_IMPORTS_RE = re.compile(r"^\s*imports\s*=\s*\[(.*?)\]", re.M | re.S)
TOML_DISABLED_RE = re.compile(r"^\s*disabled_plugins\s*=\s*\[(.*?)\]", re.M | re.S)
QUOTED_RE = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'([^']*)'")
YAML_OR_JSON_KEY = r"""^\s*"?%s"?\s*:\s*["']?([^"'\s,}#]+)"""


# --- reading the node ---------------------------------------------------------

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
        except ElfError:
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
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
    count, size = struct.unpack(">II", blob[:8])
    data = blob[8 + 16 * count:]
    for index in range(count):
        tag, kind, offset, _count = struct.unpack(">IIII", blob[8 + 16 * index:24 + 16 * index])
        if tag in wanted and kind == 6 and offset < len(data):
            found[tag] = data[offset:data.index(b"\0", offset)].decode("utf-8", "replace")
    return found


# --- GPUs and driver --------------------------------------------------------------

def gpus(node):
    """NVIDIA display/3D PCI functions from sysfs: no lspci needed."""
    found = []
    base = "/sys/bus/pci/devices"
    for address in node.listdir(base):
        device = base + "/" + address
        if (node.read(device + "/vendor") or "").strip().lower() != NVIDIA_VENDOR:
            continue
        pci_class = (node.read(device + "/class") or "").strip().lower()
        if not pci_class.startswith("0x03"):
            continue  # the GPU's audio or USB functions share the vendor id
        driver_link = node.readlink(device + "/driver")
        found.append({
            "pci_address": address,
            "vendor_id": NVIDIA_VENDOR,
            "device_id": (node.read(device + "/device") or "").strip().lower() or None,
            "class": pci_class,
            "driver": os.path.basename(driver_link) if driver_link else None,
        })
    return found


def loaded_modules(node):
    text = node.read("/proc/modules") or ""
    return set(line.split(" ", 1)[0] for line in text.splitlines() if line)


def driver(node):
    version_text = node.read("/proc/driver/nvidia/version")
    modules = loaded_modules(node)
    version, flavour = parse_nvidia_version(version_text)
    if version is None:
        version = (node.read("/sys/module/nvidia/version") or "").strip() or None
    packages = node.packages()
    installed = dict((name, ver) for name, ver in packages["packages"].items()
                     if DRIVER_PACKAGE_RE.match(name))
    return {
        "loaded": version_text is not None or "nvidia" in modules,
        "version": version,
        "flavour": flavour,
        "module_loaded": "nvidia" in modules,
        "nouveau_loaded": "nouveau" in modules,
        "packages": installed,
        "package_db": packages["db"],
    }


def parse_nvidia_version(text):
    """('535.129.03', 'proprietary'|'open') from /proc/driver/nvidia/version."""
    if not text:
        return None, None
    first = text.splitlines()[0]
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    flavour = "open" if "Open Kernel Module" in first else "proprietary"
    return (match.group(1) if match else None), flavour


# --- toolkit and glibc --------------------------------------------------------------

def toolkit_files(node):
    """(binaries, libraries): node paths of NVIDIA container toolkit files."""
    binaries = []
    for directory in TOOLKIT_DIRS:
        if directory == "/usr/local/nvidia/toolkit":
            names = [n for n in node.listdir(directory) if n.startswith("nvidia-")]
        else:
            names = [n for n in TOOLKIT_NAMES if node.isfile(directory + "/" + n)]
        binaries.extend(directory + "/" + n for n in names if node.isfile(directory + "/" + n))
    libraries = []
    for directory in _library_search_dirs():
        libraries.extend(p for p in node.glob(directory, "libnvidia-container*.so*") if node.isfile(p))
    return binaries, libraries


def _library_search_dirs():
    return ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/nvidia/toolkit")


def glibc(node, files=None):
    """Host glibc and, per toolkit binary and library, the highest GLIBC_x.y it needs."""
    binaries, libraries = files or toolkit_files(node)
    host = HostLibraries(node.root)
    checks, seen = [], set()
    for path in binaries + libraries:
        real = node.local(path) if not node.live else os.path.realpath(path)
        if real in seen:
            continue  # libnvidia-container.so.1 and .so.1.17.8 are one file
        seen.add(real)
        checks.append(check_glibc(node.root, path, host))
    result = dict(host.glibc)
    result["checks"] = checks
    result["ok"] = all(c["ok"] is not False for c in checks)
    result["failures"] = [c["message"] for c in checks if c["ok"] is False]
    return result


def toolkit(node, glibc_facts=None):
    binaries, libraries = toolkit_files(node)
    if glibc_facts is None:
        glibc_facts = glibc(node, (binaries, libraries))
    by_path = dict((c["path"], c) for c in glibc_facts["checks"])
    packages = node.packages()["packages"]
    pkg_versions = dict((p, packages[p]) for p in TOOLKIT_PACKAGES if p in packages)
    entries = [_toolkit_binary(node, path, by_path.get(path), pkg_versions) for path in binaries]
    runtime_paths = [b["path"] for b in entries if b["name"] == "nvidia-container-runtime"]
    return {
        "installed": bool(entries),
        "runtime_path": runtime_paths[0] if runtime_paths else None,
        "binaries": entries,
        "libraries": libraries,
        "packages": pkg_versions,
        "version": pkg_versions.get("nvidia-container-toolkit") or _first_version(entries),
        "glibc_ok": all(b["glibc_ok"] is not False for b in entries)
        and all(c["ok"] is not False for p, c in by_path.items() if p in libraries),
    }


def _toolkit_binary(node, path, check, pkg_versions):
    name = os.path.basename(path)
    entry = {"name": name, "path": path, "elf": bool(check and check["elf"]),
             "requires_glibc": check["requires"] if check else None,
             "glibc_ok": check["ok"] if check else None, "version": None, "version_source": None}
    package = TOOLKIT_PACKAGE_OF.get(name, "nvidia-container-toolkit") if path.startswith("/usr/bin/") else None
    if package not in pkg_versions and package:
        package = "nvidia-container-toolkit"  # the packages are pinned to one version together
    if package and package in pkg_versions:
        entry.update(version=pkg_versions[package], version_source="package " + package)
    elif node.run and entry["elf"] and entry["glibc_ok"] and name in VERSIONED_TOOLS:
        entry.update(version=binary_version(node, path), version_source="--version")
    return entry


def _first_version(entries):
    for entry in entries:
        if entry["version"]:
            return entry["version"]
    return None


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

INTERESTING = ("containerd", "dockerd", "crio", "cri-dockerd", "kubelet", "kubelite", "k3s", "rke2", "k0s")


def processes(node):
    """Runtime-related processes: [{pid, argv, name, exe, service, ppid}] from /proc.

    On the live node, processes whose root directory is not the node's `/` run inside a container
    (a kind node, a Molecule node, docker-in-docker): their sockets and files are not the node's, so
    they are left out.
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
        if host_root and _root_identity("/proc/%s/root" % pid) not in (None, host_root):
            continue
        cgroup = node.read("/proc/%s/cgroup" % pid)
        found.append({"pid": int(pid), "argv": argv, "name": name,
                      "exe": node.readlink("/proc/%s/exe" % pid),
                      "service": service_from_cgroup(cgroup), "cgroup_read": cgroup is not None,
                      "ppid": _ppid(node.read("/proc/%s/status" % pid))})
    return found


def _root_identity(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
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


def _read_unit(node, name):
    main = None
    for directory in UNIT_DIRS:
        if node.exists(directory + "/" + name) or node.readlink(directory + "/" + name):
            main = directory + "/" + name
            break
    if main is None:
        return None
    files = [main]
    for directory in UNIT_DIRS:
        files.extend(sorted(node.glob(directory + "/" + name + ".d", "*.conf")))
    env, exec_start, listen, sources = {}, None, None, []
    masked = node.readlink(main) == "/dev/null"
    for path in files:
        text = node.read(path)
        if text is None:
            continue
        sources.append(path)
        for key, value in _unit_lines(text):
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


def _unit_lines(text):
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        yield key.strip(), value.strip()


def read_env_file(node, path):
    env = {}
    for line in (node.read(path) or "").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _sep, value = line.partition("=")
            env[key.strip()] = unquote(value.strip())
    return env


# --- runtime instances ----------------------------------------------------------------

def new_instance(kind, platform, **fields):
    instance = {
        "id": None, "kind": kind, "platform": platform, "service": None, "running": False,
        "pid": None, "binary": None, "version": None, "version_source": None,
        "socket": None, "cri_socket": None, "config_path": None, "config_exists": False,
        "config_version": None, "imports": [], "dropin_dir": None, "disabled_plugins": [],
        "edit_path": None, "edit_mode": "main", "regenerated_by": None, "platform_config": None,
        "nvidia_autodetect": False, "used_by": [], "sources": [], "enabled": None,
        "restart": None, "notes": [], "is_target": False, "used_by_kubelet": False,
        "containerd_socket": None,
    }
    instance.update(fields)
    return instance


def toml_top_version(text):
    """`version = N` before the first table; a containerd file without it is version 1."""
    if text is None:
        return None
    table = TOML_TABLE_RE.search(text)
    head = text[:table.start()] if table else text
    match = TOML_VERSION_RE.search(head)
    return int(match.group(1)) if match else 1


def toml_string_list(regex, text):
    match = regex.search(text or "")
    if not match:
        return []
    return [a or b for a, b in QUOTED_RE.findall(match.group(1))]


def toml_section_string(text, section, key):
    """Value of `key = "..."` inside [section] (a regex, not a TOML parser)."""
    current = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[] ")
            continue
        if current == section:
            match = re.match(r"%s\s*=\s*[\"']([^\"']*)[\"']" % re.escape(key), stripped)
            if match:
                return match.group(1)
    return None


def containerd_instance(node, argv, platform, defaults=None):
    """A containerd instance from its arguments (process, unit or args file)."""
    defaults = defaults or {}
    config = flag_value(argv, ("--config", "-c")) or defaults.get("config") or DEFAULT_CONTAINERD_CONFIG
    text = node.read(config)
    socket = (flag_value(argv, ("--address", "-a")) or toml_section_string(text, "grpc", "address")
              or defaults.get("socket") or DEFAULT_CONTAINERD_SOCKET)
    imports = toml_string_list(TOML_IMPORTS_RE, text)
    instance = new_instance(
        "containerd", platform, socket=socket, config_path=config, config_exists=text is not None,
        config_version=toml_top_version(text), imports=imports,
        disabled_plugins=toml_string_list(TOML_DISABLED_RE, text),
        dropin_dir=_dropin_dir(imports), edit_path=config,
        binary=defaults.get("binary") or (argv[0] if argv and argv[0].startswith("/") else None))
    PLATFORM_RULES.get(platform, _no_rule)(node, instance)
    return instance


def _dropin_dir(imports):
    for item in imports:
        if "*" in item:
            return os.path.dirname(item)
    return None


def _no_rule(node, instance):
    return None


def _rule_microk8s(node, instance):
    # Name files through `current`, not a revision: a snap refresh moves to a new revision directory.
    instance["config_path"] = re.sub(r"^/var/snap/microk8s/[^/]+/", MICROK8S_DATA + "/", instance["config_path"])
    instance.update(edit_path=os.path.dirname(instance["config_path"]) + "/containerd-template.toml",
                    edit_mode="template", regenerated_by="microk8s")
    if instance["config_version"] is None:
        instance["config_version"] = toml_top_version(node.read(instance["edit_path"]))
    instance["notes"].append("MicroK8s regenerates %s from containerd-template.toml at every start: "
                             "edit the template." % os.path.basename(instance["config_path"]))


def _rule_rancher(node, instance):
    """k3s / RKE2: config.toml is regenerated at every start; edit the platform's template."""
    name = instance["platform"]
    directory = os.path.dirname(instance["config_path"])
    v3, v2 = directory + "/config-v3.toml.tmpl", directory + "/config.toml.tmpl"
    if node.exists(v3):
        template = v3
    elif node.exists(v2):
        template = v2
    else:
        template = v3 if (instance["config_version"] or 0) >= 3 else v2
    instance.update(edit_path=template, edit_mode="template", regenerated_by=name,
                    nvidia_autodetect=True, platform_config="/etc/rancher/%s/config.yaml" % name)
    instance["notes"].append(
        "%s rewrites config.toml at every start from its built-in template, adding an 'nvidia' runtime by "
        "itself when /usr/bin/nvidia-container-runtime exists; a custom template must start with "
        "'{{ template \"base\" . }}' and is only needed for what auto-detection does not do." % name)


def _rule_k0s(node, instance):
    instance.update(edit_path="/etc/k0s/containerd.d", edit_mode="dropin", dropin_dir="/etc/k0s/containerd.d",
                    regenerated_by="k0s")
    instance["notes"].append("k0s generates its containerd.toml and imports /etc/k0s/containerd.d/*.toml: "
                             "add a drop-in there.")


def _rule_eks_al2023(node, instance):
    instance.update(edit_path=None, edit_mode="none", regenerated_by="nodeadm", nvidia_autodetect=True)
    instance["notes"].append(
        "nodeadm rewrites /etc/containerd/config.toml at every boot and makes 'nvidia' the default runtime "
        "when /usr/bin/nvidia-container-runtime exists; do not edit the file, give extra settings through "
        "the NodeConfig (spec.containerd.config).")


def _rule_eks_al2(node, instance):
    if instance["dropin_dir"] is None:
        instance["dropin_dir"] = "/etc/containerd/config.d"
    instance["notes"].append("EKS AL2 imports /etc/containerd/config.d/*.toml (config.d, not conf.d).")


def _rule_docker_managed(node, instance):
    instance.update(edit_path=None, edit_mode="none", regenerated_by="dockerd")
    instance["notes"].append("dockerd's private containerd: its file is written by dockerd at start; "
                             "configure dockerd (daemon.json) instead.")


PLATFORM_RULES = {"microk8s": _rule_microk8s, "k3s": _rule_rancher, "rke2": _rule_rancher, "k0s": _rule_k0s,
                  "eks-al2023": _rule_eks_al2023, "eks-al2": _rule_eks_al2,
                  "docker-managed": _rule_docker_managed}


def distro_platform(node):
    """distro, eks-al2 or eks-al2023 for a plain containerd.service."""
    if node.exists("/usr/bin/nodeadm") or unit(node, "nodeadm-config.service") or node.isdir("/etc/eks/nodeadm"):
        return "eks-al2023"
    if node.exists("/etc/eks/bootstrap.sh"):
        return "eks-al2"
    return "distro"


def containerd_platform(node, proc, distro):
    """Which platform started this containerd process (from its paths, service or parent)."""
    text = " ".join(proc["argv"] + [proc.get("exe") or "", proc.get("service") or ""])
    parent = proc.get("parent_name") or ""
    for platform, needle in (("k8s-snap", "/snap/k8s/"), ("k8s-snap", "snap.k8s."),
                             ("microk8s", "microk8s"), ("k3s", "/rancher/k3s/"), ("rke2", "/rancher/rke2/"),
                             ("k3s", "k3s"), ("rke2", "rke2"), ("k0s", "k0s"),
                             ("docker-managed", "/run/docker/containerd")):
        if needle in text or needle == parent:
            return platform
    return "docker-managed" if parent == "dockerd" else distro


def k8s_snap_args(node):
    return split_args(node.read(K8S_SNAP_ARGS + "/containerd"))


def microk8s_args(node, name, snap_data=MICROK8S_DATA):
    return split_args(node.read("%s/args/%s" % (snap_data, name)),
                      {"SNAP_DATA": snap_data, "SNAP_COMMON": MICROK8S_COMMON})


def rancher_defaults(name, argv=None):
    data_dir = flag_value(argv or [], ("--data-dir", "-d")) or RANCHER[name]
    return {"config": data_dir + "/agent/etc/containerd/config.toml", "socket": K3S_SOCKET,
            "binary": data_dir + "/data/current/bin/containerd"}


def process_instances(node, procs, distro):
    by_pid = dict((p["pid"], p) for p in procs)
    instances = []
    for proc in procs:
        parent = by_pid.get(proc["ppid"])
        proc["parent_name"] = parent["name"] if parent else None
        instance = None
        if proc["name"] == "containerd":
            platform = containerd_platform(node, proc, distro)
            instance = containerd_instance(node, proc["argv"][1:], platform)
        elif proc["name"] == "dockerd":
            instance = docker_instance(node, proc["argv"][1:])
        elif proc["name"] == "crio":
            instance = crio_instance(node, proc["argv"][1:])
        if instance is None:
            continue
        instance.update(running=True, pid=proc["pid"], sources=["process"],
                        binary=proc.get("exe") or instance["binary"] or proc["argv"][0],
                        service=proc.get("service"))
        # Its cgroup names no service: started by hand or by a non-systemd init, not by a unit.
        instance["outside_service"] = bool(proc.get("cgroup_read") and not proc.get("service"))
        instances.append(instance)
    return instances


def unit_instances(node, distro):
    """Runtime instances declared by installed services (running or not)."""
    found = []
    svc = unit(node, "containerd.service")
    if svc:
        found.append(_with_unit(containerd_instance(node, svc["exec_argv"][1:], distro), svc))
    svc = unit(node, "snap.k8s.containerd.service")
    if svc or node.exists(K8S_SNAP_ARGS + "/containerd"):
        instance = containerd_instance(node, k8s_snap_args(node), "k8s-snap",
                                       {"binary": "/snap/k8s/current/bin/containerd"})
        found.append(_with_unit(instance, svc or {"name": "snap.k8s.containerd.service"}))
    svc = unit(node, "snap.microk8s.daemon-containerd.service")
    if svc or node.exists(MICROK8S_DATA + "/args/containerd"):
        instance = containerd_instance(node, microk8s_args(node, "containerd"), "microk8s",
                                       {"config": MICROK8S_DATA + "/args/containerd.toml",
                                        "socket": MICROK8S_COMMON + "/run/containerd.sock",
                                        "binary": "/snap/microk8s/current/bin/containerd"})
        found.append(_with_unit(instance, svc or {"name": "snap.microk8s.daemon-containerd.service"}))
    for name in ("k3s", "rke2"):
        for svc_name in ("%s.service" % name, "%s-agent.service" % name, "%s-server.service" % name):
            svc = unit(node, svc_name)
            if svc and not _external_runtime(node, name, svc["exec_argv"]):
                found.append(_with_unit(containerd_instance(
                    node, [], name, rancher_defaults(name, svc["exec_argv"])), svc))
    for svc_name in ("k0sworker.service", "k0scontroller.service"):
        svc = unit(node, svc_name)
        if svc and (svc_name == "k0sworker.service" or
                    set(svc["exec_argv"]) & set(("--enable-worker", "--single"))):
            found.append(_with_unit(containerd_instance(
                node, [], "k0s", {"config": "/etc/k0s/containerd.toml", "socket": K0S_SOCKET,
                                  "binary": "/var/lib/k0s/bin/containerd"}), svc))
    svc = unit(node, "docker.service")
    if svc:
        found.append(_with_unit(docker_instance(node, svc["exec_argv"][1:]), svc))
    svc = unit(node, "crio.service")
    if svc:
        found.append(_with_unit(crio_instance(node, svc["exec_argv"][1:]), svc))
    return found


def _external_runtime(node, name, argv):
    """k3s/RKE2 told to use another runtime do not run their embedded containerd."""
    config = node.read("/etc/rancher/%s/config.yaml" % name) or ""
    return bool(flag_value(argv, ("--container-runtime-endpoint",)) or "--docker" in argv
                or re.search(r"^\s*container-runtime-endpoint\s*:", config, re.M)
                or re.search(r"^\s*docker\s*:\s*true", config, re.M))


def _with_unit(instance, svc):
    instance.update(service=svc["name"], enabled=svc.get("enabled"), sources=["unit"] if svc.get("path")
                    else ["args-file"])
    if svc.get("masked"):
        instance["notes"].append("service %s is masked" % svc["name"])
    if svc.get("path") and not instance["binary"] and svc.get("exec_argv"):
        instance["binary"] = svc["exec_argv"][0]
    return instance


def docker_instance(node, argv):
    config = flag_value(argv, ("--config-file",)) or "/etc/docker/daemon.json"
    text = node.read(config)
    data = _json_or_empty(text)
    hosts = [flag_value(argv, ("-H", "--host"))] + list(data.get("hosts") or [])
    socket = next((h for h in hosts if h and h.startswith("unix://")), None)
    if socket is None and any(h and h.startswith("fd://") for h in hosts):
        svc = unit(node, "docker.socket")
        socket = svc["listen"] if svc and svc["listen"] else DEFAULT_DOCKER_SOCKET
    instance = new_instance("docker", "docker", socket=(socket or DEFAULT_DOCKER_SOCKET).replace("unix://", ""),
                            config_path=config, config_exists=text is not None, edit_path=config,
                            binary="/usr/bin/dockerd")
    instance["containerd_socket"] = flag_value(argv, ("--containerd",)) or data.get("containerd")
    if text is not None and not data:
        instance["notes"].append("%s is not valid JSON" % config)
    return instance


def _json_or_empty(text):
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def crio_instance(node, argv):
    config = flag_value(argv, ("--config",)) or "/etc/crio/crio.conf"
    dropins = flag_value(argv, ("--config-dir",)) or "/etc/crio/crio.conf.d"
    socket = flag_value(argv, ("--listen",))
    texts = [node.read(config)] + [node.read(p) for p in node.glob(dropins, "*.conf")]
    for text in texts:  # drop-ins in name order override the main file
        socket = toml_section_string(text, "crio.api", "listen") or socket
    return new_instance("crio", "crio", socket=socket or DEFAULT_CRIO_SOCKET, config_path=config,
                        config_exists=texts[0] is not None, dropin_dir=dropins, edit_path=dropins,
                        edit_mode="dropin", binary="/usr/bin/crio")


def cri_dockerd_socket(node, procs):
    for proc in procs:
        if proc["name"] == "cri-dockerd":
            endpoint = flag_value(proc["argv"], ("--container-runtime-endpoint",))
            if endpoint and endpoint.startswith("unix://"):
                return endpoint[len("unix://"):]
    for name in ("cri-docker.socket", "cri-dockerd.socket"):
        svc = unit(node, name)
        if svc and svc["listen"]:
            return svc["listen"]
    if any(p["name"] == "cri-dockerd" for p in procs) or unit(node, "cri-docker.service"):
        return "/run/cri-dockerd.sock"
    return None


def merge_instances(from_processes, from_units):
    """One entry per (kind, socket): a running process joins the service that declares the same socket.

    The process's own arguments are the truth for files and socket; the unit adds the service name
    (when the process's cgroup did not give it), whether it is enabled, and its source.
    """
    merged = list(from_processes)
    for declared in from_units:
        key = (declared["kind"], normalize_socket(declared["socket"]))
        same = [i for i in from_processes if (i["kind"], normalize_socket(i["socket"])) == key
                and len(i["sources"]) == 1]
        if not same:
            merged.append(declared)
            continue
        running = same[0]
        running["sources"] = running["sources"] + declared["sources"]
        if running.get("outside_service"):
            running["notes"].append("%s declares this socket, but the running process (pid %d) was not started "
                                    "by it: restarting the service will not restart this process"
                                    % (declared["service"], running["pid"]))
            continue
        running["service"] = running["service"] or declared["service"]
        running["enabled"] = declared["enabled"]
    return merged


def runtimes(node, procs=None):
    """Every container runtime instance on the node, running or installed."""
    procs = processes(node) if procs is None else procs
    distro = distro_platform(node)
    instances = merge_instances(process_instances(node, procs, distro), unit_instances(node, distro))
    cri_docker = cri_dockerd_socket(node, procs)
    for instance in instances:
        instance.pop("outside_service", None)
        instance["id"] = "%s:%s" % (instance["kind"], instance["socket"])
        if instance["kind"] == "docker":
            instance["cri_socket"] = cri_docker
            _mark_docker_backend(instances, instance)
        instance["restart"] = restart_hint(instance)
        _add_version(node, instance)
    return instances


def _mark_docker_backend(instances, docker):
    backend = normalize_socket(docker.get("containerd_socket"))
    for instance in instances:
        if instance["kind"] != "containerd":
            continue
        if instance["platform"] == "docker-managed" or (backend and normalize_socket(instance["socket"]) == backend):
            if "docker" not in instance["used_by"]:
                instance["used_by"].append("docker")


def _add_version(node, instance):
    binary = instance["binary"] or ""
    program = {"containerd": "containerd", "docker": "dockerd", "crio": "crio"}[instance["kind"]]
    packages = node.packages()["packages"]
    if binary.startswith(("/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/")):
        for package in RUNTIME_PACKAGES[program]:
            if package in packages:
                instance.update(version=packages[package], version_source="package " + package)
                return
    if node.run and binary.startswith("/") and node.isfile(binary):
        instance.update(version=binary_version(node, binary), version_source="--version")


# --- restart hints ---------------------------------------------------------------------

def restart_hint(instance):
    """How this instance picks up a changed config, and what else that restarts."""
    service, platform = instance["service"], instance["platform"]
    hint = {"method": "systemd", "service": service, "command": None, "also_restarts": [], "note": None}
    if platform == "k8s-snap":
        hint.update(method="snap", service="snap.k8s.containerd.service", command="snap restart k8s.containerd")
    elif platform == "microk8s":
        hint.update(method="snap", service="snap.microk8s.daemon-containerd.service",
                    command="snap restart microk8s.daemon-containerd")
    elif platform in ("k3s", "rke2"):
        unit_name = service or ("%s.service" % platform if platform == "k3s" else "rke2-server.service")
        hint.update(service=unit_name, command="systemctl restart %s" % unit_name[:-len(".service")],
                    also_restarts=["kubelet"],
                    note="the embedded kubelet restarts too; config.toml is regenerated from the template")
    elif platform == "docker-managed":
        hint.update(method="none", note="restart dockerd instead; this containerd belongs to it")
    elif instance["kind"] == "docker" and not service and instance["pid"]:
        hint.update(method="signal", command="kill -s HUP %d" % instance["pid"],
                    note="dockerd is not run by a service here; it re-reads runtimes on SIGHUP")
    elif instance["kind"] == "docker":
        hint.update(command="systemctl reload %s" % _short(service or "docker.service"), method="systemd-reload",
                    note="dockerd re-reads runtimes on SIGHUP (ExecReload)")
    elif service:
        hint["command"] = "systemctl restart %s" % _short(service)
        if platform == "k0s":
            hint["note"] = "k0s regenerates containerd.toml from the drop-ins when the worker restarts"
    else:
        hint.update(method="manual", note="not started by a service: restart it the way it was started")
    return hint


def _short(service):
    return service[:-len(".service")] if service.endswith(".service") else service


# --- kubelet ----------------------------------------------------------------------------

def kubelet(node, procs=None):
    """Is kubelet running, which runtime endpoint does it use, and where was that set?"""
    procs = processes(node) if procs is None else procs
    facts = {"running": False, "pid": None, "binary": None, "installed": False, "platform": None,
             "embedded_in": None, "endpoint": None, "endpoint_socket": None, "endpoint_source": None,
             "endpoint_origin": None, "config_path": None, "config_dir": None, "cgroup_driver": None,
             "legacy_container_runtime": None, "flag_sources": [], "service": None}
    sources = _running_kubelet(node, procs, facts) or _installed_kubelet(node, facts)
    facts["installed"] = facts["installed"] or facts["running"] or bool(sources)
    _apply_flags(facts, sources)
    _apply_config_file(node, facts)
    if facts["endpoint"] is None and facts["installed"]:
        _apply_default_endpoint(facts)
    facts["endpoint_socket"] = normalize_socket(facts["endpoint"])
    return facts


def _running_kubelet(node, procs, facts):
    """Flag sources [(origin, argv)] of a running kubelet (or of the process that embeds it)."""
    for proc in procs:
        if proc["name"] == "kubelet":
            facts.update(running=True, pid=proc["pid"], binary=proc.get("exe") or proc["argv"][0],
                         service=proc.get("service"),
                         platform=_kubelet_platform(proc["argv"][0], proc.get("service")))
            sources = [("/proc/%d/cmdline" % proc["pid"], proc["argv"][1:])]
            if facts["platform"] == "k8s-snap":
                sources.insert(0, (K8S_SNAP_ARGS + "/kubelet", split_args(node.read(K8S_SNAP_ARGS + "/kubelet"))))
            return sources
    for proc in procs:
        if proc["name"] == "kubelite":
            args_file = flag_value(proc["argv"], ("--kubelet-args-file",)) or MICROK8S_DATA + "/args/kubelet"
            facts.update(running=True, pid=proc["pid"], binary=proc["argv"][0], platform="microk8s",
                         embedded_in="kubelite")
            return [(args_file, microk8s_args(node, "kubelet", os.path.dirname(os.path.dirname(args_file))))]
    for proc in procs:
        if proc["name"] in ("k3s", "rke2") and len(proc["argv"]) > 1 and proc["argv"][1] in ("server", "agent"):
            facts.update(running=True, pid=proc["pid"], binary=proc["argv"][0], platform=proc["name"],
                         embedded_in=proc["name"])
            return [("/proc/%d/cmdline" % proc["pid"], proc["argv"][1:])] + _rancher_config(node, proc["name"])
    return None


def _kubelet_platform(binary, service=None):
    if "/snap/k8s/" in binary or (service or "").startswith("snap.k8s."):
        return "k8s-snap"
    if "/k0s/" in binary:
        return "k0s"
    return None


def _rancher_config(node, name):
    """container-runtime-endpoint from /etc/rancher/NAME/config.yaml, as a flag source."""
    path = "/etc/rancher/%s/config.yaml" % name
    match = re.search(r"^\s*container-runtime-endpoint\s*:\s*[\"']?([^\"'\s#]+)", node.read(path) or "", re.M)
    return [(path, ["--container-runtime-endpoint=" + match.group(1)])] if match else []


def _installed_kubelet(node, facts):
    """Flag sources of a kubelet that is installed but not running (an image bake, a stopped node)."""
    if node.exists(K8S_SNAP_ARGS + "/kubelet"):
        facts.update(platform="k8s-snap", installed=True)
        return [(K8S_SNAP_ARGS + "/kubelet", split_args(node.read(K8S_SNAP_ARGS + "/kubelet")))]
    if node.exists(MICROK8S_DATA + "/args/kubelet"):
        facts.update(platform="microk8s", installed=True, embedded_in="kubelite")
        return [(MICROK8S_DATA + "/args/kubelet", microk8s_args(node, "kubelet"))]
    for name in ("k3s", "rke2"):
        for svc_name in ("%s.service" % name, "%s-agent.service" % name, "%s-server.service" % name):
            svc = unit(node, svc_name)
            if svc:
                facts.update(platform=name, installed=True, embedded_in=name)
                return [(svc["path"], svc["exec_argv"][1:])] + _rancher_config(node, name)
    if unit(node, "k0sworker.service"):
        facts.update(platform="k0s", installed=True)
        return []
    return _kubelet_unit_sources(node, facts)


def _kubelet_unit_sources(node, facts):
    svc = unit(node, "kubelet.service")
    sources = []
    if svc:
        facts["installed"] = True
        sources.append((svc["path"], svc["exec_argv"][1:]))
    for path in ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet"):
        env = read_env_file(node, path)
        args = [arg for value in env.values() for arg in split_args(value)]
        if args:
            sources.append((path, args))
    if svc:
        # EKS AL2 keeps flags in drop-ins as Environment=KUBELET_ARGS=...; they are in ExecStart already
        # when ExecStart names the variable, but an origin file is more useful to the operator.
        for path in svc["files"][1:]:
            for key, value in _unit_lines(node.read(path) or ""):
                if key == "Environment":
                    args = [a for pair in split_args(value) for a in split_args(pair.partition("=")[2])]
                    if args:
                        sources.append((path, args))
    if node.isfile("/usr/bin/kubelet") or node.isfile("/usr/local/bin/kubelet"):
        facts["installed"] = True
    return sources


def _apply_flags(facts, sources):
    for origin, argv in sources:
        facts["flag_sources"].append(origin)
        endpoint = flag_value(argv, ("--container-runtime-endpoint",))
        if endpoint:
            facts.update(endpoint=endpoint, endpoint_source="flag", endpoint_origin=origin)
        for key, names in (("config_path", ("--config",)), ("legacy_container_runtime", ("--container-runtime",)),
                           ("cgroup_driver", ("--cgroup-driver",))):
            value = flag_value(argv, names)
            if value:
                facts[key] = value
        facts["config_dir"] = flag_value(argv, ("--config-dir",)) or facts["config_dir"]
    if facts["legacy_container_runtime"] == "remote":
        facts["legacy_container_runtime"] = None


def _apply_config_file(node, facts):
    """containerRuntimeEndpoint (unless a flag set it) and cgroupDriver from the KubeletConfiguration
    file and its --config-dir drop-ins (later files win)."""
    candidates = [facts["config_path"]] if facts["config_path"] else [
        "/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet/config.json",
        "/etc/kubernetes/kubelet/kubelet-config.json"]
    files = [p for p in candidates if p and node.isfile(p)][:1]
    if facts["config_dir"]:
        files += sorted(node.glob(facts["config_dir"], "*.conf")) + sorted(node.glob(facts["config_dir"], "*.json"))
    config_cgroup = None
    for path in files:
        if facts["config_path"] is None:
            facts["config_path"] = path
        text = node.read(path) or ""
        endpoint = _config_key(text, "containerRuntimeEndpoint")
        if endpoint and facts["endpoint_source"] in (None, "config"):  # flags win
            facts.update(endpoint=endpoint, endpoint_source="config", endpoint_origin=path)
        config_cgroup = _config_key(text, "cgroupDriver") or config_cgroup
    facts["cgroup_driver"] = facts["cgroup_driver"] or config_cgroup  # a --cgroup-driver flag wins
    if files:
        facts["installed"] = True


def _config_key(text, key):
    match = re.search(YAML_OR_JSON_KEY % key, text, re.M)
    return match.group(1) if match else None


def _apply_default_endpoint(facts):
    if facts["legacy_container_runtime"] == "docker":
        facts.update(endpoint="unix://" + DEFAULT_DOCKER_SOCKET, endpoint_source="legacy-dockershim")
        return
    platform_default = {"k3s": K3S_SOCKET, "rke2": K3S_SOCKET, "k0s": K0S_SOCKET,
                        "microk8s": MICROK8S_COMMON + "/run/containerd.sock"}.get(facts["platform"])
    if platform_default:
        facts.update(endpoint="unix://" + platform_default, endpoint_source="platform-default")
    else:
        facts.update(endpoint=KUBELET_DEFAULT_ENDPOINT, endpoint_source="kubelet-default")


# --- the target ---------------------------------------------------------------------------

def choose_target(instances, kubelet_facts):
    """(instance or None, selected_by, reason). Marks used_by_kubelet/is_target on instances."""
    socket = kubelet_facts.get("endpoint_socket") if kubelet_facts else None
    if socket:
        matches = [i for i in instances
                   if socket in (normalize_socket(i["socket"]), normalize_socket(i["cri_socket"]))]
        for instance in matches:
            instance["used_by_kubelet"] = True
        source = "%s (%s%s)" % (kubelet_facts["endpoint"], kubelet_facts["endpoint_source"],
                                ", " + kubelet_facts["endpoint_origin"] if kubelet_facts["endpoint_origin"] else "")
        chosen, why = _pick(matches)
        if chosen:
            return _mark(chosen, "kubelet", "kubelet's runtime endpoint %s is served by %s%s" % (
                source, _describe(chosen), why))
        if matches:
            return None, None, "kubelet's runtime endpoint %s matches several instances: %s; set the path " \
                               "explicitly" % (source, ", ".join(_describe(i) for i in matches))
        if kubelet_facts["endpoint_source"] != "kubelet-default":
            return None, None, "kubelet uses %s but no runtime instance on this node serves that socket " \
                               "(found: %s)" % (source, ", ".join(_describe(i) for i in instances) or "none")
        return _target_without_kubelet(instances, "kubelet is installed but has no runtime endpoint configured "
                                                  "and nothing serves its default %s" % kubelet_facts["endpoint"])
    return _target_without_kubelet(instances, "no kubelet configuration found")


def _target_without_kubelet(instances, why):
    """Image bakes and plain Docker hosts: the one instance no other daemon uses, or the one running."""
    candidates = [i for i in instances if not i["used_by"]]
    chosen, _running = _pick(candidates)
    if chosen and len(candidates) == 1:
        return _mark(chosen, "only-instance", "%s; %s is the only runtime instance" % (why, _describe(chosen)))
    if chosen:
        return _mark(chosen, "only-running", "%s; %s is the only running one of %d runtime instances" % (
            why, _describe(chosen), len(candidates)))
    if not candidates:
        return None, None, "no container runtime found on this node"
    return None, None, "%s and %d runtime instances could be meant: %s; set the path explicitly" % (
        why, len(candidates), ", ".join(_describe(i) for i in candidates))


def _pick(instances):
    if len(instances) == 1:
        return instances[0], ""
    running = [i for i in instances if i["running"]]
    if len(running) == 1:
        return running[0], " (the only one of them running)"
    return None, ""


def _mark(instance, selected_by, reason):
    instance["is_target"] = True
    return instance, selected_by, reason


def _describe(instance):
    return "%s %s (%s, %s)" % (instance["kind"], instance["socket"], instance["platform"],
                               instance["service"] or "pid %s" % instance["pid"])


# --- everything ------------------------------------------------------------------------------

def gather(root="/", sections=SECTIONS, run=None):
    """The facts for `sections`, read through root."""
    node = Node(root, run)
    wanted = set(sections)
    facts = {"root": node.root}
    if "gpus" in wanted:
        facts["gpus"] = gpus(node)
    if "driver" in wanted:
        facts["driver"] = driver(node)
    if wanted & set(("toolkit", "glibc")):
        glibc_facts = glibc(node)
        if "glibc" in wanted:
            facts["glibc"] = glibc_facts
        if "toolkit" in wanted:
            facts["toolkit"] = toolkit(node, glibc_facts)
    if wanted & set(("runtimes", "kubelet", "target")):
        procs = processes(node)
        instances = runtimes(node, procs)
        kubelet_facts = kubelet(node, procs)
        chosen, selected_by, reason = choose_target(instances, kubelet_facts)
        if "runtimes" in wanted:
            facts["runtimes"] = instances
        if "kubelet" in wanted:
            facts["kubelet"] = kubelet_facts
        if "target" in wanted:
            target = dict(chosen, selected_by=selected_by) if chosen else None
            facts["target"] = target
            facts["target_reason"] = reason
    return facts
