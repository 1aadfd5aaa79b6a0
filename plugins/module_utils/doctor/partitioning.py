# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules for partitioned and shared GPUs: MIG, time-slicing/MPS, DRA-ready nodes.

Each entry of ``RULES`` is ``(id, severity, incident, title, check)`` as in every rule module of this package. The
checks read ``nvidia-smi --query-gpu`` and ``nvidia-smi -L`` on the live node, the MIG layout the
partitioning stage recorded (/etc/gpunode/mig-parted.yaml, asserted with ``nvidia-mig-parted``), the CDI
spec, the device plugin's MPS directory and the DRA driver's kubelet plugin directories. Nothing is changed.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import dra_readiness

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import gpu_sharing

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import mig_layout

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import finding, note, playbook_fix
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.health import command, unit_state

MIG_CONFIG = "/etc/gpunode/mig-parted.yaml"
DRA_PLUGIN_DIRS = ("/var/lib/kubelet/plugins/gpu.nvidia.com", "/var/lib/kubelet/plugins/compute-domain.nvidia.com")
COMPUTE_DOMAIN_PLUGIN = DRA_PLUGIN_DIRS[1]
IMEX_UNIT = "nvidia-imex.service"
QUERY = ["nvidia-smi", "--query-gpu=" + mig_layout.QUERY, "--format=csv,noheader"]
PARTITIONING_VARS = {"gpunode_partitioning_stage": True}


def smi_gpus(ctx):
    result = command(ctx, QUERY)
    return mig_layout.parse_query(result[1]) if result and result[0] == 0 else []


def smi_evidence(text):
    return {"kind": "command", "text": text, "source": " ".join(QUERY)}


def check_mig_pending(rule, ctx):
    pending = mig_layout.pending(smi_gpus(ctx))
    if not pending:
        return []
    names = ", ".join("GPU %d (%s)" % (g["index"], g["name"]) for g in pending)
    return [finding(rule, "The MIG mode of %s waits for a GPU reset: until then the GPU runs in its old mode and a "
                    "MIG layout cannot be applied." % names,
                    [smi_evidence("GPU %(index)d: mig.mode.current %(mig_current)s, mig.mode.pending %(mig_pending)s" % g)
                     for g in pending],
                    playbook_fix("Rerun the partitioning stage: it stops the GPU clients, unloads nvidia_drm and resets "
                                 "only these GPUs (or reboot the node).", PARTITIONING_VARS))]


def recorded_layout(ctx):
    """(name, text) of the layout the partitioning stage wrote, or None."""
    text = ctx.node.read(MIG_CONFIG)
    try:
        names = list((json.loads(text or "") or {}).get("mig-configs") or {})
    except ValueError:
        return None
    return (names[0], text) if len(names) == 1 else None


def check_mig_drift(rule, ctx):
    recorded = recorded_layout(ctx)
    if recorded is None:
        return []
    name = recorded[0]
    result = command(ctx, ["nvidia-mig-parted", "assert", "-f", ctx.node.local(MIG_CONFIG), "-c", name])
    if not result or result[0] == 0 or mig_layout.ASSERT_FAILURE not in result[1] + result[2]:
        return []
    return [finding(rule, "The GPUs no longer have the MIG layout %s the inventory asked for (something changed the "
                    "MIG devices or mode since): pods get other MIG resources than planned." % name,
                    [ctx.file_evidence(MIG_CONFIG, note="the layout the partitioning stage applied"),
                     {"kind": "command", "text": " ".join((result[1] + result[2]).split())[:300],
                      "source": "nvidia-mig-parted assert -c %s" % name}],
                    playbook_fix("Rerun the partitioning stage to apply the inventory's layout again.", PARTITIONING_VARS))]


def mig_devices(ctx):
    result = command(ctx, ["nvidia-smi", "-L"])
    return [line.strip() for line in (result[1] if result and result[0] == 0 else "").splitlines()
            if line.strip().startswith("MIG ")]


def check_cdi_after_mig(rule, ctx):
    devices = mig_devices(ctx)
    path = next((p for p in node_services.CDI_SPEC_PATHS if ctx.node.isfile(p)), None)
    if not devices or path is None:
        return []
    # nvidia-ctk names a MIG device GPU:MIG ("0:1"); a spec without one was written before MIG was set up.
    if _spec_names_mig(ctx.node.read(path) or ""):
        return []
    return [finding(rule, "%d MIG device(s) exist but the CDI spec %s names none of them: pods that get MIG devices "
                    "through CDI fail to start or get a whole GPU." % (len(devices), path),
                    [ctx.file_evidence(path), {"kind": "command", "text": devices[0], "source": "nvidia-smi -L"}],
                    playbook_fix("Regenerate the CDI spec (role node_services with node_services_refresh_cdi).",
                                 {"node_services_refresh_cdi": True}))]


def _spec_names_mig(text):
    for line in text.splitlines():
        value = line.strip()
        if value.startswith("- name:") or value.startswith("name:"):
            name = value.split(":", 1)[1].strip().strip("\"'")
            if ":" in name:
                return True
    return False


def check_sharing(rule, ctx):
    """The device plugin serves MPS here (its state directory exists): can the node serve it?"""
    if not ctx.node.isdir(gpu_sharing.MPS_DIR):
        return []
    gpus = smi_gpus(ctx)
    problems = gpu_sharing.problems("mps", gpus, ctx.node.root)
    if not problems:
        return []
    return [finding(rule, "The device plugin shares GPUs with MPS here, which this node cannot satisfy: %s."
                    % "; ".join(problems),
                    [ctx.file_evidence(gpu_sharing.MPS_DIR, note="the device plugin's MPS state")]
                    + [smi_evidence("GPU %d: compute mode %s, MIG %s" % (g["index"], g["compute_mode"],
                                                                         g["mig_current"])) for g in gpus],
                    playbook_fix("Select a time-slicing config for this node, or disable MIG and stop the host MPS daemon; "
                                 "the partitioning stage checks this before it labels the node.", PARTITIONING_VARS))]


def check_dra(rule, ctx):
    """The DRA driver's kubelet plugin runs here: are its prerequisites met?"""
    present = [d for d in DRA_PLUGIN_DIRS if ctx.node.isdir(d)]
    if not present:
        return []
    compute_domains = COMPUTE_DOMAIN_PLUGIN in present
    problems = dra_readiness.problems(ctx.facts, None, ctx.node.read, compute_domains)
    if compute_domains and unit_state(ctx, IMEX_UNIT, "is-active") == "active":
        problems.append("%s runs on the host while the DRA driver manages ComputeDomains (it runs IMEX daemons of "
                        "its own): disable and mask it" % IMEX_UNIT)
    if not problems:
        return []
    return [finding(rule, "The NVIDIA DRA driver runs here but the node misses prerequisites: %s" % " ".join(
        p if p.endswith(".") else p + "." for p in problems),
        [note("DRA kubelet plugin directory %s" % d) for d in present],
        playbook_fix("Make the node DRA-ready (partitioning stage with gpunode_dra, ComputeDomains with "
                     "gpu_partitioning_dra_compute_domains).", dict(PARTITIONING_VARS, gpunode_dra=True)))]


RULES = (
    ("mig-mode-pending", "warning", None, "A GPU's MIG mode waits for a reset", check_mig_pending),
    ("mig-layout-drift", "warning", None, "The MIG layout differs from the one the inventory asked for",
     check_mig_drift),
    ("cdi-spec-stale-mig", "critical", None, "MIG devices exist that the CDI spec does not name",
     check_cdi_after_mig),
    ("gpu-sharing-unsatisfiable", "critical", None, "The device plugin's MPS sharing cannot be served by this node",
     check_sharing),
    ("dra-prerequisites-missing", "critical", None, "The DRA driver runs on a node that misses its prerequisites",
     check_dra),
)
