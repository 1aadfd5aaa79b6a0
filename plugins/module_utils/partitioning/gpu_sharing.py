# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Node preflight for shared GPUs (the device plugin's time-slicing or MPS): can this node serve the config?

* time-slicing interleaves processes of several containers on a GPU: a GPU in compute mode
  Exclusive_Process or Prohibited admits one process or none;
* MPS: the device plugin starts its own control daemon (state under /run/nvidia/mps) and sets
  EXCLUSIVE_PROCESS itself; a host MPS daemon would hold the GPUs, MIG GPUs cannot be shared with MPS,
  and a Prohibited GPU runs nothing.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

MPS_DIR = "/run/nvidia/mps"
MPS_DAEMONS = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")


def host_mps_daemons(root="/"):
    """(pid, name) of MPS daemons running on the host, from /proc/*/comm."""
    found = []
    proc = os.path.join(root, "proc")
    for pid in sorted(os.listdir(proc)) if os.path.isdir(proc) else []:
        if not pid.isdigit():
            continue
        try:
            with open(os.path.join(proc, pid, "comm")) as handle:
                name = handle.read().strip()
        except (IOError, OSError):
            continue  # the process ended while we looked
        if name in MPS_DAEMONS:
            found.append((int(pid), name))
    return found


def problems(strategy, gpus, root="/"):
    """What keeps this node from serving the sharing strategy; [] when it can."""
    found = []
    for gpu in gpus:
        label = "GPU %d (%s)" % (gpu["index"], gpu["name"])
        mode = gpu["compute_mode"]
        if strategy == "time-slicing" and mode in ("Exclusive_Process", "Prohibited"):
            found.append("%s is in compute mode %s, which admits %s process: time-slicing needs Default "
                         "(nvidia-smi -i %d -c DEFAULT)" % (label, mode, "one" if mode == "Exclusive_Process" else "no",
                                                            gpu["index"]))
        if strategy == "mps" and mode == "Prohibited":
            found.append("%s is in compute mode Prohibited: no process can run on it (nvidia-smi -i %d -c DEFAULT; "
                         "the device plugin's MPS daemon sets EXCLUSIVE_PROCESS itself)" % (label, gpu["index"]))
        if strategy == "mps" and "Enabled" in (gpu["mig_current"], gpu["mig_pending"]):
            found.append("%s has MIG enabled: MPS shares full GPUs only; use time-slicing of its MIG resources, or "
                         "the MIG layout all-disabled" % label)
    if strategy == "mps":
        found.extend("a host MPS daemon runs (%s, pid %d): the device plugin starts its own; stop and disable the "
                     "host one first" % (name, pid) for pid, name in host_mps_daemons(root))
        mps_dir = os.path.join(root, MPS_DIR.lstrip("/"))
        if os.path.lexists(mps_dir) and not os.path.isdir(mps_dir):
            found.append("%s exists but is not a directory: the device plugin keeps its MPS state (pipes, logs, "
                         "shared memory) there; remove it" % MPS_DIR)
    return found
