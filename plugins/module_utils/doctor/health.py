# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Health rules of gpu_doctor: what makes a node whose runtime is wired correctly still fail GPU jobs.

Each entry of ``RULES`` is ``(id, severity, incident, title, check)``, as in every rule module of this package;
``doctor_rules`` turns them into ``Rule`` objects of its catalogue. A check reads the node through the diagnosis context (``ctx.node``
files, ``ctx.facts`` from discovery, and on the live node ``ctx.node.run`` for ``journalctl``,
``nvidia-smi -q -x`` and ``systemctl``) and returns findings in the catalogue's format. The sources of
every check are listed in docs/health.md.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from xml.etree import ElementTree

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import (
    finding, manual_fix, note, playbook_fix)
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.guards import TOOLKIT_CVE_MINIMUM, older_than, version_key

CONTAINERD_CDI_MINIMUM = "1.7"  # enable_cdi exists in the CRI plugin from containerd 1.7
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")
# Common Xids and what an operator does about them (NVIDIA's Xid catalogue, docs.nvidia.com/deploy/xid-errors).
XID_MEANINGS = {
    13: ("Graphics engine exception", "warning", "usually the application (illegal address, bad kernel); rerun "
         "it, and check the GPU with DCGM diagnostics if it repeats on other workloads"),
    31: ("GPU memory page fault", "warning", "usually the application accessed invalid memory; a driver or "
         "hardware fault when it repeats across workloads"),
    43: ("GPU stopped processing (channel reset)", "warning", "the application hit a fault and was stopped; "
         "the GPU is usable"),
    45: ("Preemptive cleanup after an earlier error", "warning", "follows another Xid or a killed process; read "
         "the Xid before it"),
    48: ("Double-bit ECC error (uncorrectable)", "critical", "drain the node and reset the GPU (or reboot); "
         "contact support if it repeats"),
    61: ("Internal micro-controller breakpoint/warning", "critical", "reset the GPU (or reboot); contact support "
         "if it repeats"),
    62: ("Internal micro-controller halt", "critical", "reset the GPU (or reboot); contact support if it "
         "repeats"),
    63: ("ECC page retirement or row remapping recorded", "warning", "reset the GPU when convenient so that the "
         "retirement or remap takes effect"),
    64: ("ECC page retirement or row remapping failed", "critical", "drain the node; the memory could not be "
         "retired: reset the GPU and contact support"),
    74: ("NVLink error", "critical", "check the NVLink/NVSwitch fabric (fabric manager log), reset the GPUs; "
         "hardware service if it repeats"),
    79: ("GPU has fallen off the bus", "critical", "drain the node and reboot; check PCIe, power and thermals; "
         "hardware service if it repeats"),
    92: ("High single-bit ECC error rate", "warning", "watch the GPU; reset it and run DCGM diagnostics if it "
         "continues"),
    94: ("Contained ECC error", "warning", "the affected application was stopped; reset the GPU so that the "
         "faulty row is remapped"),
    95: ("Uncontained ECC error", "critical", "every application on the GPU is affected: drain the node and "
         "reset the GPU (or reboot)"),
    119: ("GSP RPC timeout", "critical", "reset the GPU (or reboot); update the driver if it repeats"),
    120: ("GSP error", "critical", "reset the GPU (or reboot); update the driver if it repeats"),
}


# --- helpers ---------------------------------------------------------------------------------------

def command(ctx, argv):
    """(rc, out, err) of argv on the node; None where nothing can be run (an image or a test tree)."""
    if ctx.node.run is None:
        return None
    cache = ctx.__dict__.setdefault("_health_commands", {})
    key = tuple(argv)
    if key not in cache:
        cache[key] = ctx.node.run(list(argv))
    return cache[key]


def driver_loaded(ctx):
    return (ctx.facts.get("driver") or {}).get("version")


def gpu_node(ctx):
    return bool(ctx.facts.get("gpus"))


def processes_named(ctx, name):
    found = []
    for pid in ctx.node.listdir("/proc"):
        if pid.isdigit():
            argv = (ctx.node.read("/proc/%s/cmdline" % pid) or "").split("\0")
            if argv and argv[0].rsplit("/", 1)[-1] == name:
                found.append(int(pid))
    return found


def unit_state(ctx, unit, verb):
    """systemctl VERB UNIT's answer on the live node (is-active, is-failed), else None."""
    result = command(ctx, ["systemctl", verb, unit])
    return result[1].strip() if result and result[0] in (0, 1, 3) else None


# --- the kernel log: Xid errors --------------------------------------------------------------------

def kernel_log(ctx):
    """(lines since boot, source): journalctl -k -b on the live node, dmesg otherwise; for an image or a tree,
    /var/log/kern.log after its last boot banner."""
    for argv in (["journalctl", "-k", "-b", "0", "--no-pager", "-o", "short-iso"], ["dmesg", "-T"]):
        result = command(ctx, argv)
        if result and result[0] == 0 and result[1].strip():
            return result[1].splitlines(), " ".join(argv)
    text = ctx.node.read("/var/log/kern.log") or ""
    lines = text.splitlines()
    boots = [i for i, line in enumerate(lines) if "Linux version " in line]
    return (lines[boots[-1]:] if boots else lines), "/var/log/kern.log (since its last boot banner)"


def check_xid(rule, ctx):
    lines, source = kernel_log(ctx)
    events = {}
    for line in lines:
        match = XID_LINE.search(line)
        if match:
            events.setdefault(int(match.group(2)), []).append((match.group(1), line.strip()))
    if not events:
        return []
    critical = any(XID_MEANINGS.get(code, ("", "critical", ""))[1] == "critical" for code in events)
    summary, evidence, actions = [], [], []
    for code in sorted(events):
        meaning, _severity, action = XID_MEANINGS.get(code, ("see NVIDIA's Xid catalogue", "critical",
                                                             "look the Xid up in NVIDIA's Xid catalogue"))
        devices = sorted(set(device for device, _line in events[code]))
        summary.append("Xid %d (%s) x%d on %s" % (code, meaning, len(events[code]), ", ".join(devices)))
        evidence.append({"kind": "command", "text": events[code][-1][1], "source": source})
        actions.append("Xid %d: %s" % (code, action))
    return [finding(rule, "The NVIDIA driver logged Xid errors since boot: %s." % "; ".join(summary), evidence,
                    manual_fix("What each Xid asks for: " + " | ".join(actions),
                               ["kubectl drain NODE --ignore-daemonsets", "nvidia-smi -r -i GPU (or reboot)",
                                "dcgmi diag -r 2"] if critical else []),
                    severity="critical" if critical else "warning")]


# --- nvidia-smi -q -x: ECC, retired pages, remapped rows, persistence ------------------------------------

def smi_log(ctx):
    """(root element, source) of `nvidia-smi -q -x`, or (None, why)."""
    result = command(ctx, ["nvidia-smi", "-q", "-x"])
    if not result or result[0] != 0:
        return None, "nvidia-smi -q -x not available"
    try:
        return ElementTree.fromstring(result[1].encode("utf-8")), "nvidia-smi -q -x"
    except ElementTree.ParseError as exc:
        return None, "nvidia-smi -q -x printed no XML (%s)" % exc


def _count(gpu, path):
    value = (gpu.findtext(path) or "").strip()
    return int(value) if value.isdigit() else 0


def memory_problems(gpu):
    """[(what, critical)] of one <gpu> element of nvidia-smi's XML."""
    problems = []
    volatile = gpu.find("ecc_errors/volatile")
    uncorrectable = sum(_count(gpu, "ecc_errors/volatile/" + child.tag) for child in
                        (volatile if volatile is not None else []) if "uncorrectable" in child.tag
                        or child.tag == "double_bit")
    uncorrectable += _count(gpu, "ecc_errors/volatile/double_bit/total")
    if uncorrectable:
        problems.append(("%d uncorrectable ECC error(s) since the driver loaded" % uncorrectable, True))
    if (gpu.findtext("remapped_rows/remapped_row_pending") or "").strip() == "Yes":
        problems.append(("a row remap is pending: it takes effect at the next GPU reset", True))
    if (gpu.findtext("remapped_rows/remapped_row_failure") or "").strip() == "Yes":
        problems.append(("a row remap failed: the GPU needs service", True))
    for tag in ("pending_retirement", "pending_blacklist"):
        if (gpu.findtext("retired_pages/" + tag) or "").strip() == "Yes":
            problems.append(("retired pages are pending: they take effect at the next GPU reset", True))
            break
    return problems


def check_memory_errors(rule, ctx):
    log, source = smi_log(ctx)
    if log is None:
        return []
    found = []
    for gpu in log.findall("gpu"):
        problems = memory_problems(gpu)
        if not problems:
            continue
        address = gpu.get("id")
        evidence = [{"kind": "command", "text": "%s: %s" % (address, what), "source": source} for what, _c in problems]
        evidence.append({"kind": "version", "name": gpu.findtext("product_name") or "GPU",
                         "version": gpu.findtext("uuid"), "source": source})
        found.append(finding(rule, "GPU %s: %s. Jobs on it fail or may read corrupted memory until the GPU is "
                             "reset." % (address, "; ".join(what for what, _c in problems)), evidence,
                             manual_fix("Drain the node, reset the GPU (nvidia-smi -r, or reboot) so that pending "
                                        "remaps/retirements take effect, then check it with DCGM diagnostics; a "
                                        "remap failure or repeated uncorrectable errors need hardware service.",
                                        ["kubectl drain NODE --ignore-daemonsets", "nvidia-smi -r -i %s" % address,
                                         "dcgmi diag -r 3"])))
    return found


def check_persistence(rule, ctx):
    """nvidia-smi's persistence_mode per GPU; without nvidia-smi, an installed persistence daemon that does not run
    (legacy persistence mode cannot be seen from files, so nothing is concluded without either)."""
    if not gpu_node(ctx) or not driver_loaded(ctx):
        return []
    unit = node_services.unit_path(ctx.node.root, node_services.PERSISTENCED_UNIT)
    log, source = smi_log(ctx)
    if log is not None:
        off = [g.get("id") for g in log.findall("gpu") if (g.findtext("persistence_mode") or "") == "Disabled"]
        evidence = [{"kind": "command", "text": "%s: persistence_mode Disabled" % gpu, "source": source} for gpu in off]
    elif unit and ctx.booted and not processes_named(ctx, "nvidia-persistenced"):
        off = [g["pci_address"] for g in ctx.facts["gpus"]]
        evidence = [note("%s is installed but no nvidia-persistenced process runs" % node_services.PERSISTENCED_UNIT)]
    else:
        return []
    if not off:
        return []
    evidence.append(ctx.file_evidence(unit) if unit else note("%s is not installed" % node_services.PERSISTENCED_UNIT))
    return [finding(rule, "Persistence mode is off on %s: the driver is torn down whenever no process holds the "
                    "GPU, so every container start pays the initialisation and GPU state (clocks, ECC "
                    "counters) is lost between jobs." % ", ".join(off), evidence,
                    playbook_fix("Enable and start nvidia-persistenced (role node_services does).",
                                 {"gpunode_services_stage": True}))]


# --- NVSwitch systems: fabric manager ---------------------------------------------------------------

def check_fabricmanager(rule, ctx):
    root = ctx.node.root
    _gpus, switches = node_services.gpus_and_switches(root)
    if not switches or not driver_loaded(ctx):
        return []
    driver = driver_loaded(ctx)
    packages = node_services.installed_packages(root)
    version, source = node_services.fabricmanager_version(root, ctx.node.run or (lambda argv: (127, "", "")),
                                                          packages)
    evidence = [{"kind": "file", "path": "/sys/bus/pci/devices/" + switches[0]["address"], "line": None,
                 "text": "%d NVSwitch device(s), class 0x0680" % len(switches)},
                {"kind": "version", "name": "nvidia kernel module", "version": driver,
                 "source": "/proc/driver/nvidia/version"}]
    install = "install fabric manager %s (apt: nvidia-fabricmanager-%s=%s-*; dnf: nvidia-fabric-manager-%s)" % (
        driver, driver.split(".")[0], driver, driver)
    if version is None:
        return [finding(rule, "NVSwitch system without fabric manager: CUDA cannot use the GPUs (they stay in "
                        "'fabric not initialised').", evidence, playbook_fix(install[0].upper() + install[1:] +
                                                                             ", then rerun the node services stage."))]
    evidence.append({"kind": "version", "name": "fabric manager", "version": version, "source": source})
    if version != driver:
        return [finding(rule, "Fabric manager %s is not the driver's version %s: it refuses to start and the "
                        "GPUs are unusable for CUDA." % (version, driver), evidence,
                        playbook_fix(install[0].upper() + install[1:] + " (exactly the driver's version).",
                                     {"gpunode_services_stage": True}))]
    state = unit_state(ctx, node_services.FABRICMANAGER_UNIT, "is-active")
    running = state == "active" if state is not None else bool(processes_named(ctx, "nv-fabricmanager"))
    if running or not ctx.booted:
        return []
    evidence.append(note("%s is %s" % (node_services.FABRICMANAGER_UNIT, state or "not running (no "
                                       "nv-fabricmanager process)")))
    return [finding(rule, "Fabric manager %s is installed but not running on this NVSwitch system: CUDA cannot "
                    "use the GPUs." % version, evidence,
                    playbook_fix("Start it after the driver (role node_services does); see journalctl -u "
                                 "nvidia-fabricmanager for why it stopped.", {"gpunode_services_stage": True}))]


# --- CDI spec ---------------------------------------------------------------------------------------

def check_cdi(rule, ctx):
    driver = driver_loaded(ctx)
    toolkit = ctx.facts.get("toolkit") or {}
    if not gpu_node(ctx) or not driver or not toolkit.get("installed"):
        return []
    if node_services.operator_toolkit(ctx.node.root):
        return []  # the GPU operator writes its own spec
    problems, evidence = [], []
    path = next((p for p in node_services.CDI_SPEC_PATHS if ctx.node.isfile(p)), None)
    refresh_unit = node_services.unit_path(ctx.node.root, node_services.CDI_REFRESH_UNIT)
    asks = [ask for instance in ctx.instances for ask in cdi_in_use(ctx, instance)]
    if path is None and (asks or refresh_unit):
        problems.append("no CDI spec (%s) while %s" % (" or ".join(node_services.CDI_SPEC_PATHS), (
            "%s:%d asks for CDI (%s)" % asks[0] if asks else "the toolkit's %s is installed" % refresh_unit)))
    elif path and not node_services.spec_matches_driver(ctx.node.read(path), driver):
        problems.append("the CDI spec %s does not name the running driver %s (written for another driver)"
                        % (path, driver))
        evidence.append(ctx.file_evidence(path))
    if refresh_unit:
        if unit_state(ctx, node_services.CDI_REFRESH_UNIT, "is-failed") == "failed":
            problems.append("%s is failed (started before the driver was usable)" % node_services.CDI_REFRESH_UNIT)
    if not problems:
        return []
    evidence.append({"kind": "version", "name": "nvidia kernel module", "version": driver,
                     "source": "/proc/driver/nvidia/version"})
    return [finding(rule, "CDI: %s. Pods using CDI devices (GPU operator with CDI, Docker --device nvidia.com/gpu, "
                    "device plugin in CDI mode) fail to start or get the old driver's libraries."
                    % "; ".join(problems), evidence,
                    playbook_fix("Regenerate the spec after the driver is loaded (role node_services: reset-failed and "
                                 "restart of nvidia-cdi-refresh.service, or nvidia-ctk cdi generate).",
                                 {"node_services_refresh_cdi": True}))]


# --- toolkit CVE ----------------------------------------------------------------------------------------

def check_toolkit_cve(rule, ctx):
    toolkit = ctx.facts.get("toolkit") or {}
    version = toolkit.get("version")
    if not older_than(version, TOOLKIT_CVE_MINIMUM):
        return []
    evidence = [{"kind": "version", "name": "nvidia-container-toolkit", "version": version,
                 "source": "package" if toolkit.get("packages") else "--version"}]
    fixed = security_minimums.minimum(security_minimums.TOOLKIT)  # past every bulletin, not only this CVE's
    fix = playbook_fix("Upgrade the four toolkit packages together to %s or newer." % fixed,
                       {"nvidia_container_toolkit_version": fixed + "-1",
                        "nvidia_container_toolkit_allow_upgrade": True})
    if node_services.operator_toolkit(ctx.node.root):
        fix["gpu_operator"] = {"helm_values": {"toolkit": {"version": "v%s-ubuntu20.04" % TOOLKIT_CVE_MINIMUM}},
                               "note": "the GPU operator installs this toolkit: upgrade the operator (>= v25.3.1) "
                                       "or its toolkit image"}
    return [finding(rule, "NVIDIA container toolkit %s is older than %s: CVE-2025-23266 lets a container image "
                    "escape to the host as root through the createContainer hook (NVIDIA security bulletin, July "
                    "2025)." % (version, TOOLKIT_CVE_MINIMUM), evidence, fix)]


# --- containerd 1.6 and the GPU operator's CDI default --------------------------------------------------

CDI_EVIDENCE = re.compile(r"^\s*(enable_cdi\s*=\s*true|mode\s*=\s*\"cdi\"|\[.*runtimes\.[\"']?nvidia-cdi[\"']?\])",
                          re.M)
RUNTIME_CONFIGS = ("/etc/nvidia-container-runtime/config.toml",
                   "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml")


def cdi_in_use(ctx, instance):
    """[(path, line, text)] showing that the GPU operator (or the node) asks for CDI."""
    found = []
    paths = [f["path"] for f in (ctx.view(instance).get("files") or []) if f.get("exists")]
    for path in paths + list(node_services.OPERATOR_DROPINS) + list(RUNTIME_CONFIGS):
        text = ctx.node.read(path) or ""
        for match in CDI_EVIDENCE.finditer(text):
            found.append((path, text[:match.start()].count("\n") + 1, match.group(1).strip()))
    return found


def check_containerd_cdi(rule, ctx):
    found = []
    for instance in ctx.instances:
        version = instance.get("version")
        if instance["kind"] != "containerd" or not version or not older_than(version, CONTAINERD_CDI_MINIMUM):
            continue
        asks = cdi_in_use(ctx, instance)
        if not asks:
            continue
        evidence = [{"kind": "version", "name": "containerd", "version": version,
                     "source": instance.get("version_source")}]
        evidence += [{"kind": "file", "path": path, "line": line, "text": text} for path, line, text in asks]
        fix = manual_fix("Run containerd 1.7 or newer (for a Kubernetes snap: a release that ships it), or turn "
                         "CDI off in the GPU operator until then.")
        fix["gpu_operator"] = {"helm_values": {"cdi": {"enabled": False}},
                               "note": "containerd %s cannot serve CDI devices (enable_cdi exists from 1.7)" % version}
        found.append(finding(rule, "containerd %s (%s) has no CDI support, but the GPU operator's toolkit asks for "
                             "CDI: GPU pods fail to create their containers." % (version, instance["socket"]),
                             evidence, fix))
    return found


# --- DKMS and the newest installed kernel -------------------------------------------------------------

def installed_kernels(node):
    """Kernel releases that can boot: /lib/modules/K with /boot/vmlinuz-K (or a vmlinuz inside, RHEL)."""
    found = []
    for release in node.listdir("/lib/modules"):
        if node.isfile("/boot/vmlinuz-" + release) or node.isfile("/lib/modules/%s/vmlinuz" % release):
            found.append(release)
    return sorted(found, key=version_key)


def has_nvidia_module(node, release):
    base = "/lib/modules/" + release
    for directory in ("/updates/dkms", "/updates", "/extra", "/kernel/drivers/video", "/kernel/drivers/gpu/nvidia",
                      "/extra/nvidia", "/weak-updates/nvidia"):
        if any(name.startswith("nvidia.ko") for name in node.listdir(base + directory)):
            return True
    return False


def dkms_driver(ctx):
    packages = (ctx.facts.get("driver") or {}).get("packages") or {}
    named = [name for name in packages if "dkms" in name]
    return named or (["/var/lib/dkms/nvidia"] if ctx.node.isdir("/var/lib/dkms/nvidia") else [])


def check_dkms_newest_kernel(rule, ctx):
    if not gpu_node(ctx):
        return []
    sources = dkms_driver(ctx)
    kernels = installed_kernels(ctx.node)
    if not sources or not kernels:
        return []
    newest = kernels[-1]
    if has_nvidia_module(ctx.node, newest):
        return []
    running = (ctx.node.read("/proc/sys/kernel/osrelease") or "").strip()
    evidence = [{"kind": "file", "path": "/boot/vmlinuz-" + newest, "line": None, "text": "newest installed kernel"},
                note("no nvidia.ko* under /lib/modules/%s (updates/dkms, extra, kernel/drivers/video)" % newest),
                {"kind": "version", "name": "driver (DKMS)", "version": ", ".join(sources), "source": "package"}]
    if running:
        evidence.append(note("running kernel %s" % running))
    return [finding(rule, "The newest installed kernel %s has no NVIDIA module: the next reboot boots it and the "
                    "node loses its GPU." % newest, evidence,
                    manual_fix("Build the module for that kernel before rebooting (install its headers, then dkms), "
                               "or hold the kernel (role nvidia_driver: nvidia_driver_kernel_hold).",
                               ["apt-get install linux-headers-%s" % newest, "dkms autoinstall -k %s" % newest]))]


# --- GPU operator coexistence ---------------------------------------------------------------------------

def check_operator_toolkit(rule, ctx):
    evidence_text = node_services.operator_toolkit(ctx.node.root)
    if not evidence_text:
        return []
    host_packages = sorted((ctx.facts.get("toolkit") or {}).get("packages") or {})
    evidence = [note(text) for text in evidence_text]
    if host_packages:
        evidence.append(note("host toolkit packages too: %s" % ", ".join(host_packages)))
    fix = manual_fix("Let one owner manage the toolkit. Where the collection owns driver and toolkit, install the "
                     "GPU operator with driver.enabled=false and toolkit.enabled=false; otherwise run site.yml with "
                     "gpunode_toolkit_stage=false (the roles leave an operator-managed toolkit alone).")
    fix["gpu_operator"] = {"helm_values": {"driver": {"enabled": False}, "toolkit": {"enabled": False}},
                           "note": "values when gpunode.nvidia.site owns the driver and the toolkit"}
    return [finding(rule, "NVIDIA's GPU operator manages the container toolkit on this node%s; the collection's "
                    "toolkit and node services stages leave it alone." % (
                        " while host toolkit packages are installed too (two owners)" if host_packages else ""),
                    evidence, fix, severity="warning" if host_packages else None)]


RULES = (
    ("gpu-xid-errors", "critical", None, "The NVIDIA driver logged Xid errors since boot", check_xid),
    ("gpu-memory-errors", "critical", None, "Uncorrectable ECC errors, or row remaps / page retirements pending "
     "a reset", check_memory_errors),
    ("fabricmanager-unhealthy", "critical", None, "Fabric manager missing, stopped or not at the driver's version "
     "(NVSwitch)", check_fabricmanager),
    ("persistence-mode-off", "warning", None, "GPU persistence mode is off", check_persistence),
    ("cdi-spec-stale", "warning", None, "CDI spec missing, stale for the driver, or its refresh unit failed",
     check_cdi),
    ("toolkit-vulnerable", "critical", None, "Container toolkit older than 1.17.8 (CVE-2025-23266)",
     check_toolkit_cve),
    ("containerd-cdi-unsupported", "critical", None, "containerd before 1.7 while the GPU operator uses CDI",
     check_containerd_cdi),
    ("dkms-newest-kernel-missing", "critical", None, "No NVIDIA module for the newest installed kernel",
     check_dkms_newest_kernel),
    ("gpu-operator-toolkit", "info", None, "The GPU operator manages the toolkit here", check_operator_toolkit),
)
