#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_doctor
short_description: Diagnose a Kubernetes GPU node, read-only, and say how to fix what is wrong
version_added: "0.1.0"
description:
  - Reads the node the way C(gpunode.nvidia.gpu_node_facts) does (kubelet, every container runtime instance, GPUs,
    driver, toolkit, glibc), works out what each runtime instance really runs, and returns one finding per problem,
    each with its evidence (file and line, process, socket, version) and its fix (the collection variables to set
    and the playbook to run; for clusters whose toolkit is managed by NVIDIA's GPU operator, the Helm values too).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.read_only
options:
  root:
    description:
      - Directory where the node's C(/) is. C(/) diagnoses the live node.
      - Any other directory diagnoses a machine image mounted there (or a test tree); nothing inside it is run,
        no daemon is asked, and kubelet not running is not a finding when I(root)C(/proc) is empty (an image).
    type: path
    default: /
  query_cri:
    description:
      - Ask each running containerd over its CRI socket which runtimes it loaded (C(Status) with C(verbose)).
      - Defaults to V(true) when O(root) is C(/), else V(false).
    type: bool
  kubelet_healthz_url:
    description:
      - kubelet's health endpoint. Default on the live node C(http://127.0.0.1:10248/healthz), with the port and
        address taken from kubelet's config file (C(healthzPort), C(healthzBindAddress)) when it sets them.
      - Only probed when kubelet runs.
    type: str
  runtime_name:
    description: The runtime (and RuntimeClass handler) GPU pods use.
    type: str
    default: nvidia
  cri_timeout:
    description: Seconds to wait for each CRI call.
    type: float
    default: 5.0
notes:
  - "What a containerd runs is read from three sources, each named in RV(sources): its files (the config and every
    import, merged the way containerd 1.x and 2.x merge them; always, for file and line), C(containerd --config FILE
    config dump) (live node only: the daemon's own reading of the file), and the running daemon over CRI
    (O(query_cri): what it loaded, which shows edits never followed by a restart)."
  - Never changes the node, and never fails on a half-broken node. containerd down, kubelet dead, a malformed
    config file are findings; a rule that cannot finish is reported as the finding C(doctor-rule-error) while the
    other rules still run.
  - The rules, their severities and how each is tested are listed in C(docs/diagnose.md) of the collection.
  - Standard library only on the managed node (Python 3.6+).
  - Supports check mode; the module never changes anything, so check mode and normal mode return the same.
  - Docker's and CRI-O's effective runtimes are read from their files only (no C(config dump) or CRI query).
seealso:
  - module: gpunode.nvidia.gpu_node_facts
  - module: gpunode.nvidia.gpu_doctor_cluster
"""

EXAMPLES = r"""
- name: Diagnose the node
  gpunode.nvidia.gpu_doctor:
  register: doctor

- name: Stop when something critical is wrong
  ansible.builtin.assert:
    that: doctor.summary.critical == 0
    fail_msg: "{{ doctor.findings | selectattr('severity', 'eq', 'critical') | map(attribute='message') | list }}"

- name: Check a machine image mounted at /mnt/image before it ever boots
  gpunode.nvidia.gpu_doctor:
    root: /mnt/image
"""

RETURN = r"""
findings:
  description: One entry per problem found, most severe first.
  returned: always
  type: list
  elements: dict
  contains:
    rule: {description: "Stable rule id (see C(docs/diagnose.md)).", type: str, sample: nvidia-runtime-missing}
    severity: {description: "C(critical), C(warning) or C(info).", type: str}
    incident: {description: "The field guide's incident (C(I1) to C(I7)) or null.", type: str, sample: I1}
    title: {description: "The rule's one-line title.", type: str}
    message: {description: "What is wrong on this node, naming the files, sockets and services involved.", type: str}
    evidence:
      description: >-
        What shows it. Each entry has a C(kind): C(file) (C(path), C(line), C(text) of that line, C(note)),
        C(process) (C(pid), C(command), C(service)), C(socket) (C(path), C(state)), C(version) (C(name),
        C(version), C(source)), C(cri) (C(socket), C(text)), C(command) (C(text)) or C(note) (C(text)).
      type: list
      elements: dict
    fix:
      description: How to fix it.
      type: dict
      contains:
        summary: {description: "What to do.", type: str}
        playbook: {description: "The collection playbook that fixes it by its fully qualified name (C(gpunode.nvidia.site)) or null.", type: str}
        vars: {description: "Collection variables to set for that playbook run.", type: dict}
        commands: {description: "Commands to run on the node when no playbook does it.", type: list, elements: str}
        gpu_operator:
          description: >-
            Present when the NVIDIA GPU operator manages the toolkit and the runtime's paths are not the defaults:
            C(helm_values) (C(toolkit.env) with C(CONTAINERD_CONFIG), C(CONTAINERD_SOCKET), C(RUNTIME_CONFIG_SOURCE))
            and a C(note).
          type: dict
summary:
  description: Number of findings per severity and C(status) (C(critical), C(warning) or C(ok)).
  returned: always
  type: dict
  sample: {critical: 1, warning: 0, info: 0, status: critical}
rules:
  description: Ids of every rule evaluated.
  returned: always
  type: list
  elements: str
target:
  description: The runtime instance kubelet uses (C(id), C(selected_by)), or null.
  returned: always
  type: dict
target_reason:
  description: Why that instance (or none) was chosen.
  returned: always
  type: str
kubelet:
  description: kubelet's C(installed), C(running), C(endpoint), C(endpoint_source), C(cgroup_driver).
  returned: always
  type: dict
kubelet_health:
  description: C(url), C(ok) and C(detail) of the health probe; null when not probed.
  returned: always
  type: dict
sources:
  description: >-
    Per runtime instance, where its effective config came from: C(source) (C(cri) is reported per finding;
    C(config-dump) or C(files)), C(reader) (C(tomllib) or C(lines)), C(files) read, the C(dump) command or why it
    did not run, and the C(cri) answer.
  returned: always
  type: list
  elements: dict
elapsed_s:
  description: Seconds the diagnosis took on the node.
  returned: always
  type: float
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.rules import diagnose_safely


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            query_cri=dict(type="bool"),
            kubelet_healthz_url=dict(type="str"),
            runtime_name=dict(type="str", default="nvidia"),
            cri_timeout=dict(type="float", default=5.0),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory: give the directory where the node's / is mounted" % root)
    result = diagnose_safely(root, query_cri=module.params["query_cri"],
                             given_healthz_url=module.params["kubelet_healthz_url"],
                             runtime_name=module.params["runtime_name"], cri_timeout=module.params["cri_timeout"],
                             run=None)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
