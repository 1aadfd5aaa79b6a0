# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The NVIDIA node services a GPU node needs after its driver: one implementation for
site.yml, bake.yml and the image's first boot.

``ensure_node_services()`` makes sure that

* the persistence daemon (``nvidia-persistenced``) is enabled, and started once the driver is loaded;
* on NVSwitch systems (PCI vendor 0x10de, class 0x0680 in sysfs) fabric manager is installed at exactly
  the driver's version (and NVLSM is installed where the NVSwitch generation needs it, fourth generation
  on), and started after the kernel module is loaded (NVIDIA Fabric Manager User Guide). With
  ``install_fabricmanager`` a missing or mismatched one is not an error: the package specs that install it
  at the loaded driver's version are returned (``fabricmanager.install``) for the caller's package
  manager task (the role's apt/dnf task), and a fabric manager running at another version is stopped;
* the CDI spec exists and describes the running driver, refreshed through the toolkit's own
  ``nvidia-cdi-refresh.service`` when it is installed (``reset-failed``, then a synchronous restart), else
  with ``nvidia-ctk cdi generate``; the refresh unit is never left failed.

Without a GPU nothing is started and the result says so (``gpu: false``, not failed). A bake
(``start=False``) only enables units: the image's first boot starts them where a GPU exists.

Standard library only, Python 3.6+, no Ansible import: a first-boot program imports this file as is.
Files are read (and the spec written) under ``root``; commands go through ``runner(argv) -> (rc, out, err)``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import node_paths
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import in_root
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import run_command

NVIDIA_VENDOR = "0x10de"
NVSWITCH_CLASS = "0x0680"  # PCI "other bridge": how NVSwitch devices enumerate
# NVSwitch device ids from the fourth generation on (HGX B200/B100): NVLSM runs beside fabric manager.
NVLSM_NVSWITCH_IDS = ("0x2901",)
PCI_DEVICES = "/sys/bus/pci/devices"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRICMANAGER_UNIT = "nvidia-fabricmanager.service"
CDI_REFRESH_UNIT = "nvidia-cdi-refresh.service"
CDI_REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
CDI_SPEC = "/var/run/cdi/nvidia.yaml"
CDI_SPEC_PATHS = (CDI_SPEC, "/etc/cdi/nvidia.yaml")
OPERATOR_TOOLKIT_DIR = "/usr/local/nvidia/toolkit"
OPERATOR_RUNTIMES = ("nvidia-cdi", "nvidia-legacy")
OPERATOR_DROPINS = ("/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.d/99-nvidia.toml")
FABRICMANAGER_PACKAGES = re.compile(r"^(nvidia-fabricmanager(-\d+)?|nvidia-fabric-manager|cuda-drivers-fabricmanager"
                                    r"(-\d+)?)$")
NVLSM_PACKAGES = ("nvlsm",)
# NVIDIA's Debian/Ubuntu packages carry the branch in their names up to 580 (nvidia-fabricmanager-570);
# from branch 590 on the names have no branch and versions are pinned instead.
UNVERSIONED_NAMES_FROM_BRANCH = 590
DRIVER_VERSION = re.compile(r"(\d{3}\.\d+(?:\.\d+)?)")


def default_runner(argv, timeout=120):
    """(rc, stdout, stderr) of argv; systemctl restarts may take a while, hence the longer timeout."""
    return run_command(argv, timeout=timeout)


# --- reading the node ---------------------------------------------------------------------------

def read(root, path):
    try:
        with open(in_root(root, path), "rb") as handle:
            return handle.read(16 * 1024 * 1024).decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def pci_devices(root="/"):
    """NVIDIA PCI functions from sysfs: [{address, device_id, class}]."""
    base = in_root(root, PCI_DEVICES)
    try:
        addresses = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for address in addresses:
        device = PCI_DEVICES + "/" + address
        if (read(root, device + "/vendor") or "").strip().lower() != NVIDIA_VENDOR:
            continue
        found.append({"address": address, "device_id": (read(root, device + "/device") or "").strip().lower(),
                      "class": (read(root, device + "/class") or "").strip().lower()})
    return found


def gpus_and_switches(root="/"):
    devices = pci_devices(root)
    gpus = [d for d in devices if d["class"].startswith("0x03")]
    switches = [d for d in devices if d["class"].startswith(NVSWITCH_CLASS)]
    return gpus, switches


def driver_version(root="/"):
    """The loaded kernel module's version, or None when no NVIDIA module is loaded."""
    text = read(root, "/proc/driver/nvidia/version")
    if text:
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text.splitlines()[0])
        if match:
            return match.group(1)
    return (read(root, "/sys/module/nvidia/version") or "").strip() or None


def installed_packages(root="/"):
    """{name: version} from dpkg's status file (rpm hosts: the binaries' --version is used instead)."""
    text = read(root, "/var/lib/dpkg/status") or ""
    packages = {}
    for stanza in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in stanza.splitlines() if ":" in line and line[:1] not in " \t")
        if fields.get("Status", "").strip().endswith(" installed") and fields.get("Package"):
            packages[fields["Package"].strip()] = fields.get("Version", "").strip()
    return packages


def unit_path(root, unit):
    return node_paths.unit_path(lambda path: os.path.lexists(in_root(root, path)), unit)


def find_tool(root, name):
    """The node path of a tool under ROOT (a node tree or an image being baked), searched as a service's PATH."""
    return find_binary(name, env_path=False, usable=lambda path: os.path.isfile(in_root(root, path)))


def version_in(text):
    match = DRIVER_VERSION.search(text or "")
    return match.group(1) if match else None


def spec_matches_driver(text, version):
    """A spec written by nvidia-ctk names the driver's libraries (libcuda.so.VERSION): a spec without the
    running version describes another driver."""
    return bool(text and version and re.search(r"\.so\.%s\b" % re.escape(version), text))


def operator_toolkit(root="/"):
    """Evidence that NVIDIA's GPU operator manages the toolkit on this node ([] when it does not)."""
    evidence = []
    if os.path.isdir(in_root(root, OPERATOR_TOOLKIT_DIR)):
        evidence.append("install directory %s" % OPERATOR_TOOLKIT_DIR)
    for path in OPERATOR_DROPINS:
        text = read(root, path) or ""
        named = [name for name in OPERATOR_RUNTIMES if re.search(r"runtimes\.[\"']?%s[\"']?\]" % name, text)]
        if named or OPERATOR_TOOLKIT_DIR in text:
            evidence.append("drop-in %s (%s)" % (path, ", ".join(named) or OPERATOR_TOOLKIT_DIR))
    return evidence


# --- systemd --------------------------------------------------------------------------------------

class Services(object):
    """systemctl through the runner, recording what was (or would be) done."""

    def __init__(self, runner, check_mode):
        self.run = runner
        self.check_mode = check_mode
        self.actions = []

    def state(self, unit, verb):
        rc, out, _err = self.run(["systemctl", verb, unit])
        return rc == 0, out.strip()

    def change(self, verb, unit):
        self.actions.append("systemctl %s %s" % (verb, unit))
        if self.check_mode:
            return True, ""
        rc, out, err = self.run(["systemctl", verb, unit])
        return rc == 0, (err or out).strip()

    def enable(self, unit):
        enabled, _state = self.state(unit, "is-enabled")
        if enabled:
            return {"enabled": True, "changed": False}
        ok, why = self.change("enable", unit)
        return {"enabled": ok, "changed": True, "error": None if ok else why}

    def start(self, unit):
        active, _state = self.state(unit, "is-active")
        if active:
            return {"active": True, "changed": False}
        ok, why = self.change("start", unit)
        return {"active": ok, "changed": True, "error": None if ok else why}

    def stop(self, unit):
        active, _state = self.state(unit, "is-active")
        if not active:
            return {"active": False, "changed": False}
        ok, why = self.change("stop", unit)
        return {"active": not ok, "changed": True, "error": None if ok else why}


# --- the three services --------------------------------------------------------------------------

def persistenced(root, services, start, enable, loaded):
    result = {"unit": PERSISTENCED_UNIT, "present": bool(unit_path(root, PERSISTENCED_UNIT)),
              "enabled": None, "active": None, "changed": False, "error": None, "warning": None}
    if not result["present"]:
        # Not fatal: GPUs work without it, only slower to open and without state between jobs.
        result["warning"] = ("%s is not installed, persistence mode stays off: install the driver's persistence "
                             "daemon (Debian and RHEL: package nvidia-persistenced; Ubuntu: "
                             "nvidia-compute-utils-BRANCH-server)" % PERSISTENCED_UNIT)
        return result
    _apply(result, services, PERSISTENCED_UNIT, start and loaded, enable)
    return result


def _apply(result, services, unit, start, enable):
    for wanted, step in ((enable, services.enable), (start, services.start)):
        if not wanted:
            continue
        outcome = step(unit)
        result["changed"] = result["changed"] or outcome.pop("changed")
        result["error"] = result["error"] or outcome.pop("error", None)
        result.update(outcome)


def fabricmanager_version(root, runner, packages):
    """(version, source) of the installed fabric manager, or (None, None)."""
    binary = find_tool(root, "nv-fabricmanager")
    if binary and os.path.realpath(root or "/") == "/":
        rc, out, err = runner([binary, "--version"])
        if rc == 0 and version_in(out or err):
            return version_in(out or err), binary + " --version"
    for name in sorted(packages):
        if FABRICMANAGER_PACKAGES.match(name) and version_in(packages[name]):
            return version_in(packages[name]), "package " + name
    return None, None


def package_manager(root):
    """apt, dnf or yum: the node's package manager, None when none of them is found."""
    if os.path.isfile(in_root(root, "/var/lib/dpkg/status")):
        return "apt"
    for name in ("dnf", "yum"):
        if find_tool(root, name):
            return name
    return None


def fabricmanager_packages(manager, driver, fabricmanager=True, nvlsm=False):
    """The package specs that install fabric manager at exactly the driver's version (and NVLSM, which has
    versions of its own): apt 'nvidia-fabricmanager-570=570.172.08-*', dnf/yum 'nvidia-fabric-manager-570.172.08'."""
    specs = []
    if fabricmanager:
        branch = driver.split(".")[0]
        if manager == "apt":
            name = ("nvidia-fabricmanager" if int(branch) >= UNVERSIONED_NAMES_FROM_BRANCH
                    else "nvidia-fabricmanager-%s" % branch)
            specs.append("%s=%s-*" % (name, driver))
        else:
            specs.append("nvidia-fabric-manager-%s" % driver)
    if nvlsm:
        specs.extend(NVLSM_PACKAGES)
    return specs


def _specs_text(driver):
    if not driver:
        return "(the driver is not loaded: its version is not known yet)"
    return "apt: %s, dnf: %s" % (" ".join(fabricmanager_packages("apt", driver)),
                                 " ".join(fabricmanager_packages("dnf", driver)))


def fabricmanager(root, services, runner, switches, start, enable, driver, install=False):
    generation4 = [s["address"] for s in switches if s["device_id"] in NVLSM_NVSWITCH_IDS]
    packages = installed_packages(root)
    version, source = fabricmanager_version(root, runner, packages)
    result = {"required": bool(switches), "nvswitches": [s["address"] for s in switches],
              "unit": FABRICMANAGER_UNIT, "version": version, "version_source": source,
              "driver_version": driver, "nvlsm_required": bool(generation4),
              "nvlsm_installed": any(p in packages for p in NVLSM_PACKAGES) or bool(find_tool(root, "nvlsm")),
              "install": [], "package_manager": None,
              "enabled": None, "active": None, "changed": False, "error": None}
    if not switches:
        return result
    missing = version is None or not unit_path(root, FABRICMANAGER_UNIT)
    mismatch = not missing and bool(driver) and version != driver
    nvlsm_missing = bool(generation4) and not result["nvlsm_installed"]
    manager = package_manager(root) if install and driver else None
    if manager and (missing or mismatch or nvlsm_missing):
        result["package_manager"] = manager
        result["install"] = fabricmanager_packages(manager, driver, missing or mismatch, nvlsm_missing)
        if mismatch:  # a fabric manager at another version than the driver must not stay up
            outcome = services.stop(FABRICMANAGER_UNIT)
            result.update(changed=outcome["changed"], active=outcome["active"], error=outcome.get("error"))
        return result
    if missing:
        result["error"] = ("NVSwitch system (%d NVSwitch devices) without fabric manager: install "
                           "nvidia-fabricmanager at the driver's version %s (%s); GPUs stay unusable for CUDA "
                           "until it runs" % (len(switches), driver or "(driver not loaded)", _specs_text(driver)))
        return result
    if mismatch:
        result["error"] = ("fabric manager %s (%s) differs from the loaded driver %s: fabric manager must be at "
                           "exactly the driver's version, or it refuses to start; install fabric manager %s (%s)"
                           % (version, source, driver, driver, _specs_text(driver)))
        return result
    if nvlsm_missing:
        result["error"] = ("fourth-generation NVSwitch system (%s): NVLSM (the NVLink subnet manager) is needed "
                           "beside fabric manager; install package nvlsm from NVIDIA's repository"
                           % ", ".join(generation4))
        return result
    _apply(result, services, FABRICMANAGER_UNIT, start and bool(driver), enable)
    return result


def cdi(root, services, runner, driver, refresh, check_mode):
    spec_path = next((p for p in CDI_SPEC_PATHS if os.path.isfile(in_root(root, p))), None)
    text = read(root, spec_path) if spec_path else None
    result = {"spec": spec_path or CDI_SPEC, "exists": spec_path is not None,
              "matches_driver": spec_matches_driver(text, driver), "method": None,
              "refreshed": False, "changed": False, "error": None, "reason": None}
    if spec_path and result["matches_driver"] and not refresh:
        result["reason"] = "the spec describes the running driver %s" % driver
        return result
    result["reason"] = ("asked to refresh (driver or toolkit changed in this run)" if refresh and spec_path and
                        result["matches_driver"] else "no CDI spec" if not spec_path
                        else "the spec does not describe the running driver %s" % driver)
    if unit_path(root, CDI_REFRESH_UNIT):
        result["method"] = CDI_REFRESH_UNIT
        _refresh_with_unit(result, services)
    else:
        ctk = find_tool(root, "nvidia-ctk")
        if ctk is None:
            result["error"] = ("no nvidia-ctk and no %s: install the NVIDIA container toolkit (1.17.8 or newer) "
                               "before the node services" % CDI_REFRESH_UNIT)
            return result
        result["method"] = "nvidia-ctk cdi generate"
        output = CDI_SPEC if os.path.realpath(root or "/") == "/" else in_root(root, CDI_SPEC)
        argv = [ctk, "cdi", "generate", "--output=" + output]
        services.actions.append(" ".join(argv))
        if not check_mode:
            try:
                os.makedirs(os.path.dirname(in_root(root, CDI_SPEC)))
            except OSError:
                pass  # already there
            rc, out, err = runner(argv)
            if rc != 0:
                result["error"] = "nvidia-ctk cdi generate failed (rc %s): %s" % (rc, (err or out).strip()[-600:])
                return result
        result["spec"] = CDI_SPEC
    result["refreshed"] = result["changed"] = result["error"] is None
    return result


def _refresh_with_unit(result, services):
    """reset-failed first (a unit failed by a boot race refuses nothing but stays listed as failed), then a
    synchronous restart; a failed refresh is reset again so that the unit is never left failed."""
    services.change("reset-failed", CDI_REFRESH_UNIT)
    ok, why = services.change("restart", CDI_REFRESH_UNIT)
    if not ok:
        services.change("reset-failed", CDI_REFRESH_UNIT)
        result["error"] = ("%s failed (%s); it was reset so it is not left failed: see journalctl -u %s"
                           % (CDI_REFRESH_UNIT, why or "no output", CDI_REFRESH_UNIT))


# --- the whole stage -----------------------------------------------------------------------------------

def ensure_node_services(root="/", runner=None, check_mode=False, refresh_cdi=False, start=True, enable=True,
                         install_fabricmanager=False):
    """Persistence daemon, fabric manager (NVSwitch systems) and CDI spec; see the module docstring.

    Returns {gpu, nvswitch, changed, failed, msg, actions, persistenced, fabricmanager, cdi} and gpus,
    driver_version, operator_toolkit, warnings (problems that do not fail the stage).
    """
    runner = runner or default_runner
    services = Services(runner, check_mode)
    gpus, switches = gpus_and_switches(root)
    driver = driver_version(root)
    result = {"gpu": bool(gpus), "nvswitch": bool(switches), "gpus": [g["address"] for g in gpus],
              "driver_version": driver, "changed": False, "failed": False, "msg": "", "actions": services.actions,
              "persistenced": None, "fabricmanager": None, "cdi": None, "operator_toolkit": operator_toolkit(root),
              "warnings": []}
    if not gpus and start:
        result["msg"] = ("No NVIDIA GPU in %s: node services skipped (persistence daemon, fabric manager, CDI spec "
                         "need a GPU)." % in_root(root, PCI_DEVICES))
        return result
    result["persistenced"] = persistenced(root, services, start, enable, bool(driver))
    result["fabricmanager"] = fabricmanager(root, services, runner, switches, start, enable, driver,
                                            install_fabricmanager)
    notes = _cdi_step(result, root, services, runner, driver, refresh_cdi, start, check_mode)
    problems = [part["error"] for part in (result["persistenced"], result["fabricmanager"], result["cdi"])
                if part and part.get("error")]
    result["changed"] = any(part and part.get("changed") for part in
                            (result["persistenced"], result["fabricmanager"], result["cdi"]))
    result["warnings"] = [result["persistenced"]["warning"]] if result["persistenced"]["warning"] else []
    result["failed"] = bool(problems)
    result["msg"] = " ".join(problems) if problems else _summary(result, start, notes)
    return result


def _cdi_step(result, root, services, runner, driver, refresh_cdi, start, check_mode):
    if not start:
        return "CDI spec left to the first boot (it needs the GPU, and /var/run is emptied at boot)."
    if result["operator_toolkit"]:
        return "CDI spec left to NVIDIA's GPU operator, which manages the toolkit here (%s)." % "; ".join(
            result["operator_toolkit"])
    if not driver:
        return "NVIDIA driver not loaded yet (reboot pending?): services enabled, CDI spec after the next boot."
    result["cdi"] = cdi(root, services, runner, driver, refresh_cdi, check_mode)
    return None


def _summary(result, start, note_text):
    parts = []
    for name in ("persistenced", "fabricmanager"):
        part = result[name]
        if part and part.get("enabled") is not None:
            parts.append("%s %s%s" % (part["unit"], "enabled" if part["enabled"] else "not enabled",
                                      ", running" if part.get("active") else ""))
    fabric = result["fabricmanager"]
    if fabric and fabric["install"]:
        parts.append("fabric manager to install at the driver's version %s (%s), then started"
                     % (fabric["driver_version"], ", ".join(fabric["install"])))
    elif fabric and fabric["required"]:
        parts.append("fabric manager %s matches the driver" % fabric["version"])
    if result["cdi"]:
        parts.append("CDI spec %s %s" % (result["cdi"]["spec"], "refreshed (%s)" % result["cdi"]["reason"]
                                         if result["cdi"]["refreshed"] else "up to date"))
    if not result["gpu"]:
        parts.append("no GPU in this image build: units enabled for the first boot")
    if note_text:
        parts.append(note_text)
    return "; ".join(parts) + "."
