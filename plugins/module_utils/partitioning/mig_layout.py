# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""MIG layouts in nvidia-mig-parted's format: check them against the GPUs, decide, apply.

A layout is the list mig-parted selects by name from ``mig-configs``::

    [{"devices": "all" | [0, 1], "mig-enabled": true, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]

``named_layout`` builds the shipped layouts (``all-disabled``, ``all-enabled``, ``all-<profile>``,
``all-balanced``) for the GPU models of the node, as mig-parted's example config names them.
``check_layout`` validates a layout against what each GPU offers (``nvidia-smi mig -lgip`` where MIG
is on; the profile table below where it is off, since ``-lgip`` lists nothing then) BEFORE anything
changes. ``MigNode`` runs the tools: ``nvidia-mig-parted assert`` decides changed/unchanged,
``apply --mode-only --skip-reset`` then ``nvidia-smi -r`` only for the GPUs whose mode changes, then
``apply`` and ``assert`` again.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# GPU instance profiles and their maximum instance counts per model (NVIDIA MIG user guide,
# "Supported MIG Profiles"); used while MIG is off, when `nvidia-smi mig -lgip` lists nothing.
KNOWN_PROFILES = {
    "NVIDIA A100-SXM4-40GB": {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2,
                              "4g.20gb": 1, "7g.40gb": 1},
    "NVIDIA A100-SXM4-80GB": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
                              "4g.40gb": 1, "7g.80gb": 1},
    "NVIDIA H100 80GB HBM3": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
                              "4g.40gb": 1, "7g.80gb": 1},
    "NVIDIA B200": {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1,
                    "7g.180gb": 1},
}
COMPUTE_SLICES = 7
MEMORY_SLICES = 8
PROFILE_NAME = re.compile(r"^(\d)g\.(\d+)gb(\+me)?$")
LGIP_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s")
QUERY = "index,name,pci.bus_id,mig.mode.current,mig.mode.pending,compute_mode"
ASSERT_FAILURE = "Assertion failure"


class LayoutError(Exception):
    """A layout that cannot be applied; the message names what and why."""


# --- the layout as the inventory gives it ------------------------------------------------------------

def normalize(layout, where="the MIG layout"):
    """The layout as a list of entries with devices, mig-enabled and mig-devices; LayoutError on bad input."""
    if not isinstance(layout, list) or not layout:
        raise LayoutError("%s must be a non-empty list of entries (devices, mig-enabled, mig-devices), got %r"
                          % (where, layout))
    return [_entry(entry, "%s, entry %d" % (where, number)) for number, entry in enumerate(layout, 1)]


def _entry(entry, where):
    if not isinstance(entry, dict):
        raise LayoutError("%s must be a mapping, got %r" % (where, entry))
    unknown = sorted(str(key) for key in set(entry) - {"devices", "mig-enabled", "mig-devices"})
    if unknown:
        raise LayoutError("%s: unknown key %s (mig-parted's keys are devices, mig-enabled, mig-devices)"
                          % (where, ", ".join(unknown)))
    devices = entry.get("devices", "all")
    if devices != "all" and not (isinstance(devices, list) and devices
                                 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)):
        raise LayoutError("%s: devices must be 'all' or a list of GPU indexes, got %r" % (where, devices))
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise LayoutError("%s: mig-enabled must be true or false, got %r" % (where, enabled))
    wanted = entry.get("mig-devices") or {}
    if not isinstance(wanted, dict):
        raise LayoutError("%s: mig-devices must map a profile to a count, got %r" % (where, wanted))
    for profile, count in wanted.items():
        if not isinstance(profile, str):  # YAML reads `7: 1` as a number
            raise LayoutError("%s: mig-devices names the profile %r, which is no profile name (such as 1g.10gb)"
                              % (where, profile))
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise LayoutError("%s: the count of %s must be a whole number of at least 1, got %r"
                              % (where, profile, count))
    if wanted and not enabled:
        raise LayoutError("%s: mig-devices are given but mig-enabled is false" % where)
    return {"devices": devices, "mig-enabled": enabled, "mig-devices": dict(wanted)}


def targets(layout, gpus):
    """(gpu, entry) pairs: the entry that applies to each GPU; LayoutError for an index the node lacks."""
    indexes = [gpu["index"] for gpu in gpus]
    pairs = []
    for entry in layout:
        if entry["devices"] != "all":
            missing = [d for d in entry["devices"] if d not in indexes]
            if missing:
                raise LayoutError("The MIG layout names GPU %s, but this node has GPU(s) %s"
                                  % (", ".join(str(d) for d in missing), ", ".join(str(i) for i in indexes) or "none"))
        pairs.extend((gpu, entry) for gpu in gpus if entry["devices"] == "all" or gpu["index"] in entry["devices"])
    return pairs


# --- shipped layouts ---------------------------------------------------------------------------------

def balanced(profiles):
    """mig-parted's all-balanced: two of the smallest, one 2g and one 3g profile of the model."""
    smallest = {}
    for name in profiles:
        match = PROFILE_NAME.match(name)
        if match and not match.group(3):
            compute, memory = int(match.group(1)), int(match.group(2))
            if compute not in smallest or memory < smallest[compute][0]:
                smallest[compute] = (memory, name)
    if not all(c in smallest for c in (1, 2, 3)):
        return None
    return {smallest[1][1]: 2, smallest[2][1]: 1, smallest[3][1]: 1}


def named_layout(name, gpus):
    """The shipped layout NAME for these GPUs (one entry per model); LayoutError naming the model that lacks it."""
    if name == "all-disabled":
        return [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]
    if name == "all-enabled":
        return [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    if not name.startswith("all-"):
        raise LayoutError("%s is not a shipped MIG layout (shipped: %s); give the layout itself instead"
                          % (name, ", ".join(shipped_names(gpus))))
    entries = []
    for model, indexes in _by_model(gpus):
        profiles = gpu_profiles(next(g for g in gpus if g["index"] == indexes[0]))
        wanted = balanced(profiles) if name == "all-balanced" else _single(name[4:], profiles)
        if wanted is None:
            raise LayoutError("The shipped MIG layout %s does not fit GPU %s (%s): it offers %s"
                              % (name, ", ".join(str(i) for i in indexes), model, _offer(profiles)))
        entries.append({"devices": indexes, "mig-enabled": True, "mig-devices": wanted})
    return entries


def _single(profile, profiles):
    return {profile: profiles[profile]} if profile in profiles else None


def _by_model(gpus):
    models = []
    for gpu in gpus:
        for model, indexes in models:
            if model == gpu["name"]:
                indexes.append(gpu["index"])
                break
        else:
            models.append((gpu["name"], [gpu["index"]]))
    return models


def shipped_names(gpus):
    names = ["all-disabled", "all-enabled", "all-balanced"]
    for gpu in gpus:
        names.extend("all-" + p for p in sorted(gpu_profiles(gpu)) if "all-" + p not in names)
    return names


# --- what the GPUs offer -----------------------------------------------------------------------------

def parse_query(text):
    """GPUs from `nvidia-smi --query-gpu=QUERY --format=csv,noheader`."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6 or not fields[0].isdigit():
            continue
        gpus.append({"index": int(fields[0]), "name": fields[1], "pci": fields[2], "mig_current": fields[3],
                     "mig_pending": fields[4], "compute_mode": fields[5]})
    return gpus


def parse_lgip(text):
    """{gpu index: {profile: total instances}} from `nvidia-smi mig -lgip`."""
    found = {}
    for line in text.splitlines():
        match = LGIP_ROW.match(line)
        if match:
            found.setdefault(int(match.group(1)), {})[match.group(2)] = int(match.group(5))
    return found


def gpu_profiles(gpu):
    """The GPU's profiles: what -lgip listed for it, else the known table for its model ({} when unknown)."""
    if gpu.get("lgip"):
        return gpu["lgip"]
    return dict(KNOWN_PROFILES.get(gpu["name"], {}))


def _offer(profiles):
    return ", ".join("%s (up to %d)" % (p, n) for p, n in sorted(profiles.items())) or "no MIG profile"


def slices(profile, profiles):
    """(compute slices, memory slices) of a profile, from its name relative to the model's smallest 1g profile."""
    match = PROFILE_NAME.match(profile)
    smallest = min(int(PROFILE_NAME.match(p).group(2)) for p in profiles if PROFILE_NAME.match(p)
                   and PROFILE_NAME.match(p).group(1) == "1")
    return int(match.group(1)), int(round(float(match.group(2)) / smallest))


def check_layout(layout, gpus):
    """Problems of the layout on these GPUs, each naming the GPU model and the profile; [] when it fits."""
    problems = []
    for gpu, entry in targets(layout, gpus):
        if not entry["mig-enabled"]:
            continue
        profiles = gpu_profiles(gpu)
        label = "GPU %d (%s)" % (gpu["index"], gpu["name"])
        if not profiles:
            problems.append("%s has no known MIG profiles (not a MIG-capable model, or one this collection does not "
                            "know while MIG is off: enable MIG mode with the all-enabled layout first)" % label)
            continue
        lacking = sorted(p for p in entry["mig-devices"] if p not in profiles)
        if lacking:
            problems.append("%s has no MIG profile %s; it offers %s" % (label, ", ".join(lacking), _offer(profiles)))
            continue
        problems.extend(_capacity(label, entry["mig-devices"], profiles))
    return problems


def _capacity(label, wanted, profiles):
    problems = ["%s offers at most %d instance(s) of %s, the layout asks for %d" % (label, profiles[p], p, n)
                for p, n in sorted(wanted.items()) if n > profiles[p]]
    compute = sum(slices(p, profiles)[0] * n for p, n in wanted.items())
    memory = sum(slices(p, profiles)[1] * n for p, n in wanted.items())
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        problems.append("%s cannot hold %s: it needs %d compute and %d memory slices, the GPU has %d and %d"
                        % (label, ", ".join("%d x %s" % (n, p) for p, n in sorted(wanted.items())), compute, memory,
                           COMPUTE_SLICES, MEMORY_SLICES))
    return problems


def mode_changes(layout, gpus):
    """Indexes of the GPUs whose MIG mode (current or pending) differs from the layout's."""
    changes = []
    for gpu, entry in targets(layout, gpus):
        wanted = "Enabled" if entry["mig-enabled"] else "Disabled"
        if gpu["mig_current"] != wanted or gpu["mig_pending"] != wanted:
            changes.append(gpu["index"])
    return sorted(set(changes))


def pending(gpus):
    """GPUs whose MIG mode waits for a reset."""
    return [g for g in gpus if g["mig_current"] != g["mig_pending"]]


def render(name, layout):
    """mig-parted's config file holding one layout (YAML in its JSON form, which mig-parted reads)."""
    return json.dumps({"version": "v1", "mig-configs": {name: layout}}, indent=2, sort_keys=True) + "\n"


def expected_allocatable(layout, gpus, strategy="mixed"):
    """Extended resources the device plugin advertises after the layout (MIG strategy mixed or single)."""
    counts = {}
    for gpu, entry in targets(layout, gpus):
        if not entry["mig-enabled"]:
            counts["nvidia.com/gpu"] = counts.get("nvidia.com/gpu", 0) + 1
            continue
        for profile, count in entry["mig-devices"].items():
            resource = "nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-" + profile
            counts[resource] = counts.get(resource, 0) + count
    return counts


# --- the tools on the node ---------------------------------------------------------------------------

class MigNode(object):
    """nvidia-smi and nvidia-mig-parted through runner(argv) -> (rc, stdout, stderr)."""

    def __init__(self, runner, nvidia_smi="nvidia-smi", mig_parted="nvidia-mig-parted"):
        self.run = runner
        self.nvidia_smi = nvidia_smi
        self.mig_parted = mig_parted

    def gpus(self):
        rc, out, err = self.run([self.nvidia_smi, "--query-gpu=" + QUERY, "--format=csv,noheader"])
        if rc != 0:
            raise LayoutError("nvidia-smi could not list the GPUs (exit %d): %s" % (rc, _text(out, err)))
        gpus = parse_query(out)
        if any(g["mig_current"] == "Enabled" for g in gpus):
            rc, out, _err = self.run([self.nvidia_smi, "mig", "-lgip"])
            listed = parse_lgip(out) if rc == 0 else {}
            for gpu in gpus:
                gpu["lgip"] = listed.get(gpu["index"], {})
        return gpus

    def applied(self, config_path, name, mode_only=False):
        """True when mig-parted asserts the layout is applied; LayoutError when it cannot tell."""
        argv = [self.mig_parted, "assert", "-f", config_path, "-c", name] + (["--mode-only"] if mode_only else [])
        rc, out, err = self.run(argv)
        if rc == 0:
            return True
        if ASSERT_FAILURE in out + err:
            return False
        raise LayoutError("nvidia-mig-parted assert failed (exit %d): %s" % (rc, _text(out, err)))

    def apply(self, config_path, name, mode_only=False):
        argv = [self.mig_parted, "apply", "-f", config_path, "-c", name]
        argv += ["--mode-only", "--skip-reset"] if mode_only else []
        rc, out, err = self.run(argv)
        if rc != 0:
            raise LayoutError("nvidia-mig-parted apply failed (exit %d): %s" % (rc, _text(out, err)))

    def reset(self, gpus):
        """Reset the GPUs (dicts as read before the change); on failure set their pending mode back first."""
        indexes = ",".join(str(g["index"]) for g in gpus)
        rc, out, err = self.run([self.nvidia_smi, "-r", "-i", indexes])
        if rc == 0:
            return
        restored = all(self.set_mode(g["index"], g["mig_current"]) for g in gpus)
        raise LayoutError(
            "The GPU reset that makes the new MIG mode effective failed on GPU %s (nvidia-smi exit %d): %s. %s "
            "Stop every GPU client first (nvidia-persistenced, fabric manager, DCGM, IMEX, the device plugin) and "
            "unload nvidia_drm, then run again; or reboot the node." % (
                indexes, rc, _text(out, err), "The MIG mode change was withdrawn: the GPUs are as before." if restored
                else "The new MIG mode stays pending and takes effect at the next reset or reboot."))

    def set_mode(self, index, mode):
        rc, _out, _err = self.run([self.nvidia_smi, "-i", str(index), "-mig", "1" if mode == "Enabled" else "0"])
        return rc == 0


def _text(out, err):
    return " ".join(((out or "") + " " + (err or "")).split()) or "no output"
