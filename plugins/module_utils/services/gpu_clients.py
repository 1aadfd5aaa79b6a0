# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Stop and restart the host's GPU clients, and unload the NVIDIA kernel modules without ever forcing them.

Standard library only: this runs on managed nodes (module gpunode.nvidia.gpu_clients).

Stopping records the units that were active in a state file (default /run/gpunode/gpu-clients.json, gone at
reboot as the stopped state is) before it stops them, so `started` restarts exactly those, also after a run
killed half-way. Unloading is planned from /sys/module first (`refcnt` and `holders/` of each module) and done
only when every module can go: a module held by a module outside the NVIDIA set, or by open handles, leaves
everything loaded and returns reboot_required with the evidence. The caller decides to reboot. The modules
unloaded are recorded too, and `started` loads them again (modprobe, the driver installed meanwhile) before
it starts the services that need them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpunode.nvidia.plugins.module_utils.services.node_services import Services, unit_path

# Most dependent first: exporters before DCGM, DCGM and IMEX before fabric manager, the persistence daemon last.
GPU_CLIENT_UNITS = ("nvidia-dcgm-exporter", "nvidia-dcgm", "dcgm", "nvidia-imex", "nvidia-mps",
                    "nvidia-fabricmanager", "nv-fabricmanager", "nvidia-persistenced")
# Dependency order: each module's users before it (nvidia_drm uses nvidia_modeset, which uses nvidia).
MODULE_ORDER = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia")
STATE_FILE = "/run/gpunode/gpu-clients.json"


class ClientsError(Exception):
    """A service could not be stopped or started; the message says which and why."""


def unit_name(name):
    return name if name.endswith(".service") else name + ".service"


def present_units(root, wanted=None):
    """The GPU client units installed on the node, in stop order; WANTED restricts them (and must all exist)."""
    if wanted:
        missing = [name for name in wanted if not unit_path(root, unit_name(name))]
        if missing:
            raise ClientsError("not installed on this node: %s (no unit file in the systemd directories); give "
                               "only services that exist, or leave services out to take the GPU clients found"
                               % ", ".join(unit_name(name) for name in missing))
        order = [u for u in GPU_CLIENT_UNITS if u in [n.replace(".service", "") for n in wanted]]
        others = [n.replace(".service", "") for n in wanted if n.replace(".service", "") not in GPU_CLIENT_UNITS]
        return order + others
    return [name for name in GPU_CLIENT_UNITS if unit_path(root, unit_name(name))]


def recorded(text, key="stopped"):
    """What a previous stop recorded under KEY (units stopped, modules unloaded), from the state file's text."""
    if not text:
        return []
    try:
        return [str(name) for name in json.loads(text).get(key, [])]
    except (ValueError, AttributeError):
        return []


def save_record(store, stopped, unloaded):
    record = {"stopped": stopped}
    if unloaded:
        record["unloaded"] = unloaded
    store.write(json.dumps(record, indent=2) + "\n")


def stop_clients(services, root, wanted, store):
    """Stop the active units among WANTED (present ones by default); record them first. A result dict."""
    units = present_units(root, wanted)
    active = [name for name in units if services.state(unit_name(name), "is-active")[0]]
    text = store.read()
    already = recorded(text)
    record = already + [name for name in active if name not in already]
    if active and not services.check_mode:
        save_record(store, record, recorded(text, "unloaded"))
    failures = []
    for name in active:
        ok, why = services.change("stop", unit_name(name))
        if not ok:
            failures.append("%s: %s" % (unit_name(name), why or "systemctl stop failed"))
    if failures:
        raise ClientsError("could not stop %s; what was stopped is recorded in %s and state=started restarts it"
                           % ("; ".join(failures), store.path))
    return {"changed": bool(active), "stopped": active, "recorded": record}


def start_clients(services, runner, store):
    """Load the modules and start the units the last stop recorded, persistence daemon first; then forget it."""
    text = store.read()
    record, modules = recorded(text), recorded(text, "unloaded")
    loads = load_modules(runner, modules, services.check_mode, store.path)
    order = [name for name in reversed(GPU_CLIENT_UNITS) if name in record]
    order += [name for name in record if name not in order]
    failures, started = [], []
    for name in order:
        if services.state(unit_name(name), "is-active")[0]:
            continue
        ok, why = services.change("start", unit_name(name))
        if ok:
            started.append(name)
        else:
            failures.append("%s: %s" % (unit_name(name), why or "systemctl start failed"))
    if failures:
        raise ClientsError("could not start %s; the record in %s is kept: fix the unit (journalctl -u UNIT) and run "
                           "again" % ("; ".join(failures), store.path))
    if (record or modules) and not services.check_mode:
        store.remove()
    loaded, would_load = ([], loads) if services.check_mode else (loads, [])
    return {"changed": bool(record or modules), "started": started, "recorded": record, "loaded": loaded,
            "would_load": would_load}


def record_unload(store, modules):
    """Record the modules about to be unloaded (before rmmod: a run killed half-way still loads them again)."""
    text = store.read()
    already = recorded(text, "unloaded")
    save_record(store, recorded(text), already + [name for name in modules if name not in already])


def load_modules(runner, modules, check_mode, record_path):
    """modprobe the recorded modules, each before its users (the reverse of the unload order): their names."""
    order = [name for name in reversed(MODULE_ORDER) if name in modules]
    if check_mode:
        return order
    for name in order:
        rc, out, err = runner(["modprobe", name])
        if rc != 0:
            raise ClientsError(
                "could not load %s: modprobe %s exited with status %d: %s. The driver installed since the modules "
                "were unloaded does not load on the running kernel (for a DKMS module: dkms status, and under "
                "Secure Boot a module signed by an enrolled key); the record in %s is kept, so state=started "
                "loads it again once that is fixed, or reboot the node." % (
                    name, name, rc, (err or out).strip() or "no output", record_path))
    return order


# --- kernel modules -------------------------------------------------------------------------------------------

def read_module(sysfs_root, name):
    """{"refcnt": int, "holders": [names]} of a loaded module, None when it is not loaded."""
    base = os.path.join(sysfs_root, "module", name)
    try:
        with open(os.path.join(base, "refcnt")) as handle:
            refcnt = int(handle.read().strip() or 0)
    except (IOError, OSError, ValueError):
        return None
    try:
        holders = sorted(os.listdir(os.path.join(base, "holders")))
    except OSError:
        holders = []
    return {"refcnt": refcnt, "holders": holders}


def loaded_modules(sysfs_root):
    found = {}
    for name in MODULE_ORDER:
        state = read_module(sysfs_root, name)
        if state is not None:
            found[name] = state
    return found


def unload_plan(modules):
    """(order, blockers) from {module: {refcnt, holders}}: the unload order, and why any module cannot go.

    Each holder adds one to refcnt; a holder outside the NVIDIA set, or a count above the holders (open device
    handles, a running CUDA process) blocks the module and so the whole unload."""
    order = [name for name in MODULE_ORDER if name in modules]
    blockers = []
    for name in order:
        state = modules[name]
        foreign = [holder for holder in state["holders"] if holder not in MODULE_ORDER]
        users = state["refcnt"] - len(state["holders"])
        if foreign:
            blockers.append("%s is held by module %s (/sys/module/%s/holders)" % (name, ", ".join(foreign), name))
        if users > 0:
            blockers.append("%s is in use: refcnt %d with %d holder module(s) (/sys/module/%s/refcnt)"
                            % (name, state["refcnt"], len(state["holders"]), name))
    return order, blockers


def device_holders(proc_root="/proc"):
    """'PID (command)' of each process with a /dev/nvidia* file open."""
    holders = []
    try:
        pids = [entry for entry in os.listdir(proc_root) if entry.isdigit()]
    except OSError:
        return holders
    for pid in sorted(pids, key=int):
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            targets = [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
        except OSError:
            continue  # gone, or not ours to read
        if any(target.startswith("/dev/nvidia") for target in targets):
            holders.append("%s (%s)" % (pid, _command(proc_root, pid)))
    return holders


def _command(proc_root, pid):
    try:
        with open(os.path.join(proc_root, pid, "comm")) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return "?"


def unload_modules(runner, sysfs_root, check_mode, proc_root="/proc", before_unload=None):
    """Unload the NVIDIA modules in dependency order, or none of them; a result dict with reboot_required.

    before_unload(order) is called once the unload is decided, before the first rmmod."""
    modules = loaded_modules(sysfs_root)
    order, blockers = unload_plan(modules)
    result = {"unloaded": [], "would_unload": [], "reboot_required": False, "evidence": [], "modules": modules}
    if blockers:
        processes = device_holders(proc_root)
        if processes:
            blockers.append("processes with /dev/nvidia* open: %s" % ", ".join(processes))
        result.update(reboot_required=True, evidence=blockers)
        return result
    if order and before_unload and not check_mode:
        before_unload(order)
    for name in order:
        if check_mode:
            result["would_unload"].append(name)
            continue
        rc, out, err = runner(["rmmod", name])
        if rc != 0:
            result.update(reboot_required=True, evidence=["rmmod %s: %s" % (name, (err or out).strip())])
            return result
        result["unloaded"].append(name)
    return result


def manage(root, runner, check_mode, state, wanted, store, unload, sysfs_root):
    """The module's work: a result dict (changed, msg, stopped/started, unloaded, reboot_required, would)."""
    services = Services(runner, check_mode)
    if state == "started":
        result = start_clients(services, runner, store)
        result["msg"] = ("started %s" % ", ".join(result["started"]) if result["started"]
                         else "no GPU client to start" if not result["recorded"] else "GPU clients already running")
        if result["loaded"]:
            result["msg"] = "loaded %s; %s" % (", ".join(result["loaded"]), result["msg"])
    else:
        result = stop_clients(services, root, wanted, store)
        result["msg"] = "stopped %s" % ", ".join(result["stopped"]) if result["stopped"] else "no GPU client running"
        if unload:
            modules = unload_modules(runner, sysfs_root, check_mode, before_unload=lambda order: record_unload(store, order))
            result.update(modules)
            result["changed"] = result["changed"] or bool(modules["unloaded"] or modules["would_unload"])
            result["msg"] += "; " + unload_summary(modules)
    result["would"] = (["modprobe %s" % m for m in result.get("would_load", [])] + services.actions
                       + ["rmmod %s" % m for m in result.get("would_unload", [])]) if check_mode else []
    if check_mode:
        result["msg"] = "check mode: would %s" % ("; ".join(result["would"]) or "change nothing")
        if result.get("reboot_required"):
            result["msg"] += "; " + unload_summary(result)
    return result


def unload_summary(modules):
    if modules["reboot_required"]:
        return "kernel modules left loaded, a reboot is required: " + "; ".join(modules["evidence"])
    if not modules["unloaded"]:
        return "no NVIDIA kernel module unloaded"
    return "unloaded " + ", ".join(modules["unloaded"])
