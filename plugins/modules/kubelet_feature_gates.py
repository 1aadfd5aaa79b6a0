#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubelet_feature_gates
short_description: Set kubelet feature gates in the distribution's own kubelet config place
version_added: "0.3.0"
description:
  - Finds how kubelet runs on the node (the discovery of M(gpunode.nvidia.gpu_node_facts)) and sets O(gates) where
    that distribution's kubelet reads them. kubeadm and plain kubelets - the C(featureGates) mapping of the
    KubeletConfiguration file (C(--config), default C(/var/lib/kubelet/config.yaml)). k3s and RKE2 - a
    C(feature-gates=) item of C(kubelet-arg) in C(/etc/rancher/k3s|rke2/config.yaml). MicroK8s and Canonical
    Kubernetes (snap) - a C(--feature-gates=) line of the kubelet args file.
notes:
  - Gates already set elsewhere in the same value are kept; a gate already set as asked changes nothing. Every other
    line and comment of the file stays byte for byte. The write is atomic and keeps owner, mode and SELinux context.
  - Shapes a line edit could break are refused, naming the file, the line and what to do, with nothing written -
    several YAML documents, flow style, anchors or aliases on the gates, a list written inline, JSON kubelet configs
    (EKS), k0s (its worker profiles are cluster configuration), a running kubelet whose C(--feature-gates) flag
    sets a gate otherwise (flags override the file), and a k3s/RKE2 drop-in (C(config.yaml.d)) that replaces
    C(kubelet-arg).
  - Never restarts anything; RV(restart_service) names the unit to restart when the file changed. k3s and RKE2 embed
    kubelet and containerd in one service, so none is named there and the message says so.
  - With O(kubernetes_minors), writes only where the kubelet's version is one of them (a gate that is beta there and
    GA after, for example C(DynamicResourceAllocation) on 1.32 and 1.33).
  - Needs only the Python standard library on the node.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  gates:
    description:
      - "Feature gates and the value each must have, for example C({DynamicResourceAllocation: true})."
      - A name is letters and digits, as Kubernetes names its gates; any other name is refused before anything is
        written. kubelet does not start with a gate it does not know, so spell the names as your version has them.
    type: dict
    required: true
  kubernetes_minors:
    description:
      - Kubernetes minor versions (C(1.33)) on which the gates are written; on any other version nothing is. Empty
        writes on every version.
      - When the kubelet's version cannot be told (and O(kubernetes_version) is empty), nothing is written and a
        warning says so.
    type: list
    elements: str
    default: []
  kubernetes_version:
    description:
      - The kubelet's version; empty asks the node (C(kubelet --version), C(k3s|rke2 --version), the snap's metadata).
    type: str
    default: ""
  backup:
    description: Keep a timestamped copy of the file before it changes.
    type: bool
    default: false
  root:
    description: Where the node is read and written; anything other than C(/) is for tests with a node tree.
    type: path
    default: /
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Turn DRA on in kubelet where it is beta (1.32, 1.33)
  gpunode.nvidia.kubelet_feature_gates:
    gates: {DynamicResourceAllocation: true}
    kubernetes_minors: ["1.32", "1.33"]
  register: gates

- name: Restart kubelet when its file changed
  ansible.builtin.systemd_service:
    name: "{{ gates.restart_service }}"
    state: restarted
  when: gates is changed and gates.restart_service | length > 0
"""

RETURN = r"""
path:
  description: The file the gates belong in (null when the version ruled the write out).
  returned: always
  type: str
platform:
  description: The kubelet's distribution as discovery names it (null for kubeadm and plain kubelets).
  returned: always
  type: str
kubernetes_version:
  description: The kubelet's version (empty when unknown).
  returned: always
  type: str
restart_service:
  description: The unit to restart for the change to take effect; empty when nothing changed or none can be named.
  returned: always
  type: str
backup_file:
  description: The backup made, when O(backup) and the file changed.
  returned: when a backup was made
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import kubelet_gates
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import (
    atomic_write, check_unchanged, decode_utf8, editing, read_bytes)
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit, warn

KUBEADM_CONFIG = "/var/lib/kubelet/config.yaml"
GATE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def wanted_gates(module):
    try:
        gates = dict((str(name), module.boolean(value)) for name, value in module.params["gates"].items())
    except TypeError:
        fail(module, "gates must map each feature gate to true or false, for example {DynamicResourceAllocation: "
                     "true}; got %s." % module.params["gates"])
    odd = sorted(name for name in gates if not GATE_NAME.match(name))
    if odd:  # a comma, `=` or space would split or break the flag and the YAML line the gate is written into
        fail(module, "%s %s no feature gate name (letters and digits, such as DynamicResourceAllocation); nothing was "
                     "written." % (", ".join(repr(name) for name in odd), "is" if len(odd) == 1 else "are"))
    return gates


def version_rules_out(module, version):
    """A message when the version rules the write out, else None."""
    minors = module.params["kubernetes_minors"]
    if not minors:
        return None
    if not version:
        warn(module, "The kubelet's version could not be told, so no feature gate was written (they belong only on "
                     "Kubernetes %s): give kubernetes_version." % ", ".join(minors))
        return "No feature gate written: the kubelet's version is unknown."
    if kubelet_gates.minor(version) not in minors:
        return "Kubernetes %s: the gates belong only on %s; nothing to write." % (version, ", ".join(minors))
    return None


def flag_conflict(node, kubelet, gates):
    """Why a running kubelet's own --feature-gates flag would override the file, or None."""
    argv = (node.read("/proc/%d/cmdline" % kubelet["pid"]) or "").split("\0") if kubelet.get("pid") else []
    values = [arg.partition("=")[2] for arg in argv if arg.startswith("--feature-gates=")]
    values += [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--feature-gates"]
    for value in values:
        for item in value.split(","):
            name, _eq, setting = item.partition("=")
            if name.strip() in gates and not kubelet_gates.same(setting.strip(), gates[name.strip()]):
                return ("kubelet runs with --feature-gates=%s, which overrides its config file: remove %s from that "
                        "flag (kubelet.service, /var/lib/kubelet/kubeadm-flags.env or /etc/default/kubelet), and run "
                        "again; nothing was written." % (value, name.strip()))
    return None


def run(module):
    root = module.params["root"]
    node = Node(root)
    gates = wanted_gates(module)
    kubelet = gather(root, ("kubelet",)).get("kubelet") or {}

    def runner(argv):
        # Only a live node's binaries are run: one inside a node tree or an image may not run here.
        return node.run(argv)[:2] if node.run else (1, "")

    version = module.params["kubernetes_version"] or kubelet_gates.kubelet_version(kubelet, runner, node.read)
    result = {"changed": False, "kubernetes_version": version, "platform": kubelet.get("platform"), "path": None,
              "restart_service": ""}
    ruled_out = version_rules_out(module, version)
    if ruled_out:
        return dict(result, msg=ruled_out)
    kind, path, service = kubelet_gates.place(kubelet)
    if kind is None:
        fail(module, kubelet_gates.refusal(kubelet.get("platform"), path), **result)
    conflict = flag_conflict(node, kubelet, gates) if kind == "kubelet_config" else (
        kubelet_gates.rancher_dropin_override(node.read, node.glob, path) if kind == "rancher" else None)
    if conflict:
        fail(module, conflict, **result)
    result["path"] = path
    local = os.path.join(root, path.lstrip("/"))
    with editing(module, local):
        return edit(module, kind, path, local, gates, dict(result, restart_service=service))


def edit(module, kind, path, local, gates, result):
    before_bytes = read_bytes(local)
    if before_bytes is None and kind != "rancher":
        fail(module, "%s does not exist, although kubelet should read it: nothing was written. Check the kubelet's "
                     "installation (or its --config flag), and run again." % path, **result)
    before = decode_utf8(path, before_bytes or b"", "kubelet")
    try:
        after = kubelet_gates.edit(kind, path, before, gates)
    except kubelet_gates.GateError as exc:
        fail(module, "%s Nothing was written." % exc, **result)
    changed = before_bytes is None or after != before
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    if not changed:
        return dict(result, restart_service="", msg="The feature gates are set in %s already." % path)
    if not module.check_mode:
        check_unchanged(local, before_bytes)
        # A new k3s/RKE2 config may later hold the join token: readable by root only.
        backup = atomic_write(module, local, after.encode("utf-8"), backup=module.params["backup"], mode=0o600)
        if backup:
            result["backup_file"] = backup
    return dict(result, changed=True, msg=summary(kind, path, result, module.check_mode))


def summary(kind, path, result, check_mode):
    done = "would be set" if check_mode else "set"
    service = result["restart_service"]
    if not service:
        after = ("restart %s (server or agent) yourself in a maintenance window for kubelet to read them: it also "
                 "restarts the containerd it embeds, so this collection does not." % result["platform"])
    else:
        after = "kubelet reads them when %s restarts." % service
    note = (" kubeadm upgrade node rewrites this file from the kube-system/kubelet-config ConfigMap: set the gates "
            "there too." if path == KUBEADM_CONFIG and kind == "kubelet_config" else "")
    return "The feature gates %s in %s; %s%s" % (done, path, after, note)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gates=dict(type="dict", required=True),
            kubernetes_minors=dict(type="list", elements="str", default=[]),
            kubernetes_version=dict(type="str", default=""),
            backup=dict(type="bool", default=False),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    run_and_exit(module, "kubelet_feature_gates", module.params["root"], run)


if __name__ == "__main__":
    main()
