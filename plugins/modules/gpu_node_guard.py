#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_guard
short_description: Guards the driver and toolkit stages run before they change a node
version_added: "0.2.0"
description:
  - O(check=toolkit) fails when the toolkit version this run would leave on the node is older than 1.17.8
    (CVE-2025-23266 affects the NVIDIA container toolkit up to 1.17.7), unless O(allow_vulnerable). The version is
    the pinned one, else apt's candidate (C(apt-cache policy)) for an install, else the installed one.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
options:
  check:
    description: Which guard to run.
    type: str
    required: true
    choices: [toolkit, kernel, transitional, operator]
  package_manager:
    description: C(apt), C(dnf) or C(yum).
    type: str
    default: apt
    choices: [apt, dnf, yum]
  action:
    description: The toolkit plan's action (C(install), C(change), C(keep)); O(check=toolkit) only.
    type: str
    default: keep
  version:
    description: The pinned toolkit version, empty when none; O(check=toolkit) only.
    type: str
    default: ""
  installed:
    description: The installed C(nvidia-container-toolkit) version, empty when none; O(check=toolkit) only.
    type: str
    default: ""
  allow_vulnerable:
    description: Allow a toolkit older than 1.17.8 (reported, not refused); O(check=toolkit) only.
    type: bool
    default: false
  kernel_hold:
    description: C(hold) or C(release) the kernel packages; O(check=kernel) only.
    type: str
    choices: [hold, release]
    default: hold
  running_kernel:
    description: The running kernel release (C(ansible_facts.kernel)); O(check=kernel) only.
    type: str
    default: ""
  module_path:
    description: How the NVIDIA module is installed, C(prebuilt) or C(dkms) (the driver plan's); O(check=kernel).
    type: str
    default: dkms
  branch:
    description: The driver branch (C(580)); O(check=kernel) for prebuilt modules, and O(check=transitional).
    type: str
    default: ""
  flavour:
    description: C(open) or C(proprietary), for the prebuilt module package name; O(check=kernel) only.
    type: str
    default: open
  secure_boot:
    description: Secure Boot is on, so O(kernel_hold=release) needs a signed module for the new kernel; O(check=kernel).
    type: bool
    default: false
  packages:
    description: Package names or C(name=version) specs about to be installed; O(check=transitional) only.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Decides as a real run would and reports the kernel hold or release it would make; holds, releases and
      DKMS builds are not run.
  diff_mode:
    support: none
notes:
  - O(check=kernel) holds the kernel (O(kernel_hold=hold)), with C(apt-mark hold) of the installed kernel
    metapackages or C(dnf versionlock add) of the kernel packages, so the NVIDIA module keeps matching it; or
    releases it (O(kernel_hold=release)) only when the NVIDIA module exists for the kernel an upgrade would
    install, a prebuilt module package (Ubuntu's C(linux-modules-nvidia-BRANCH-KERNEL)) or the DKMS module
    listed as installed for that kernel by C(dkms status -k KERNEL), built first when it is not (its headers
    are installed, then C(dkms autoinstall -k KERNEL); its exit status alone is not trusted, it is 0 when
    a C(BUILD_EXCLUSIVE_KERNEL) skips the module). With O(secure_boot) that DKMS module must also be signed
    (C(modinfo -k KERNEL -F signer nvidia)); Ubuntu's prebuilt packages are signed by Canonical. Otherwise the
    kernel stays held and the task fails with why, naming the kernel.
  - O(check=transitional) reads C(apt-cache show) of the packages about to be installed and fails when one named
    for the requested driver branch depends on another branch's packages (Ubuntu turns the packages of a branch
    at its end of life into transitional packages of a newer one).
  - O(check=operator) never fails; it reports in RV(operator_toolkit) whether NVIDIA's GPU operator manages the
    toolkit here (its install directory C(/usr/local/nvidia/toolkit), its containerd drop-in with the
    C(nvidia-cdi)/C(nvidia-legacy) runtimes), so that the roles leave it alone.
  - Supports check mode; the kernel hold and release are then only reported, and no headers are installed and
    no DKMS build runs (a release that needs one is reported as it would be tried).
seealso:
  - module: gpunode.nvidia.gpu_install_plan
"""

EXAMPLES = r"""
- name: Refuse a toolkit with CVE-2025-23266
  gpunode.nvidia.gpu_node_guard:
    check: toolkit
    action: install
    version: 1.17.7-1

- name: Hold the kernel so the NVIDIA module keeps matching it
  gpunode.nvidia.gpu_node_guard:
    check: kernel
    kernel_hold: hold

- name: Refuse an Ubuntu transitional package that jumps the branch
  gpunode.nvidia.gpu_node_guard:
    check: transitional
    branch: "535"
    packages: [nvidia-headless-no-dkms-535-server, nvidia-utils-535-server]
"""

RETURN = r"""
ok:
  description: Whether the guard lets the stage go on (the task fails when not).
  returned: always
  type: bool
msg:
  description: What the guard decided and why.
  returned: always
  type: str
version:
  description: The toolkit version this run would leave on the node.
  returned: when O(check=toolkit)
  type: str
candidate_kernel:
  description: The kernel release an upgrade would install, null when none is newer or it cannot be told.
  returned: when O(check=kernel)
  type: str
packages:
  description: The kernel packages held (or released).
  returned: when O(check=kernel)
  type: list
  elements: str
held:
  description: Kernel packages on hold after the task.
  returned: when O(check=kernel)
  type: list
  elements: str
jumps:
  description: One message per package that would move the driver to another branch.
  returned: when O(check=transitional)
  type: list
  elements: str
operator_toolkit:
  description: Evidence that the GPU operator manages the toolkit (empty when it does not).
  returned: when O(check=operator)
  type: list
  elements: str
"""

import functools

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import guards

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services


def run(module, argv, check_rc=False):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if check_rc and rc != 0:
        module.fail_json(msg="%s failed (rc %s): %s" % (" ".join(argv), rc, (err or out).strip()[-800:]))
    return rc, out, err


def toolkit(module):
    params = module.params
    candidate = None
    if params["action"] in ("install", "change") and not params["version"] and params["package_manager"] == "apt":
        candidate = guards.apt_candidate(run(module, ["apt-cache", "policy", "nvidia-container-toolkit"])[1])
    result = guards.toolkit_guard(params["action"], params["version"] or None, params["installed"] or None,
                                  candidate, params["allow_vulnerable"])
    msg = result["reason"] or "toolkit %s is at or above %s" % (result["version"] or "(none)", result["minimum"])
    return dict(ok=result["ok"], msg=msg, version=result["version"], changed=False)


def installed_names(module):
    if module.params["package_manager"] == "apt":
        out = run(module, ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n"], check_rc=True)[1]
        # "ii" installed, "hi" installed and held: the second letter is the package's state
        return [line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1][1:2] == "i"]
    out = run(module, ["rpm", "-qa", "--qf", "%{NAME}\n"], check_rc=True)[1]
    return out.split()


def candidate_kernel(module, packages):
    if module.params["package_manager"] == "apt":
        images = [p for p in packages if p.startswith("linux-image-")]
        for image in images:
            found = guards.candidate_kernel_apt(run(module, ["apt-cache", "depends", "--important", image])[1])
            if found:
                return found
        return None
    return guards.candidate_kernel_rpm(run(module, [module.params["package_manager"], "-q", "list", "--available",
                                                    "kernel"])[1])


def held(module):
    if module.params["package_manager"] == "apt":
        return guards.held_apt(run(module, ["apt-mark", "showhold"])[1])
    out = run(module, [module.params["package_manager"], "-q", "versionlock", "list"])[1]
    return sorted(name for name in guards.KERNEL_RPM if any(line.startswith(name + "-") for line in out.split()))


def set_hold(module, names, hold):
    if module.params["package_manager"] == "apt":
        run(module, ["apt-mark", "hold" if hold else "unhold"] + names, check_rc=True)
    else:
        run(module, [module.params["package_manager"], "-y", "versionlock", "add" if hold else "delete"] + names,
            check_rc=True)


def dkms_installed(module, dkms, kernel):
    rc, out, _err = run(module, [dkms, "status", "-k", kernel])
    return rc == 0 and guards.dkms_module_installed(out, kernel)


def module_signature(module, kernel):
    """(signer, what modinfo said) of the NVIDIA module installed for KERNEL; None with Secure Boot off."""
    if not module.params["secure_boot"]:
        return None
    modinfo = find_binary("modinfo")
    if not modinfo:
        return "", "there is no modinfo command on this node (install kmod)"
    rc, out, err = run(module, [modinfo, "-k", kernel, "-F", "signer", "nvidia"])
    return (out.strip() if rc == 0 else ""), (err or out or "no signer").strip()


def release_allowed(module, candidate):
    """(decision, changed): changed when kernel headers were installed or DKMS built for the candidate."""
    params = module.params
    decide = functools.partial(guards.kernel_release_decision, candidate, params["running_kernel"],
                               params["module_path"])
    if params["module_path"] == "prebuilt" and candidate:
        name = "linux-modules-nvidia-%s%s-%s" % (params["branch"], "-server-open" if params["flavour"] == "open"
                                                 else "-server", candidate)
        rc, out, _err = run(module, ["apt-cache", "show", name])
        return decide(prebuilt_available=rc == 0 and bool(out.strip())), False
    if params["module_path"] != "dkms" or not candidate or candidate == params["running_kernel"]:
        return decide(), False
    dkms = find_binary("dkms")
    if not dkms:
        return decide(dkms_result=(127, "there is no dkms command on this node")), False
    if dkms_installed(module, dkms, candidate):
        return decide(dkms_installed=True, signature=module_signature(module, candidate)), False
    if module.check_mode:
        return decide(check_mode=True, signature=(None, None) if params["secure_boot"] else None), False
    headers = ("linux-headers-" if params["package_manager"] == "apt" else "kernel-devel-") + candidate
    installer = (["apt-get", "install", "-y", "--no-install-recommends"] if params["package_manager"] == "apt"
                 else [params["package_manager"], "install", "-y"])
    rc, out, err = run(module, installer + [headers])
    if rc != 0:
        return decide(dkms_result=(rc, err or out)), False
    # autoinstall exits 0 when it skips a module (BUILD_EXCLUSIVE_KERNEL): dkms status has the last word.
    rc, out, err = run(module, [dkms, "autoinstall", "-k", candidate])
    output = "\n".join(part.strip() for part in (out, err) if part.strip())
    built = rc == 0 and dkms_installed(module, dkms, candidate)
    return decide(dkms_result=(rc, output), dkms_installed=built,
                  signature=module_signature(module, candidate) if built else None), True


def kernel(module):
    names = guards.kernel_hold_packages(module.params["package_manager"], installed_names(module))
    before = held(module)
    candidate = candidate_kernel(module, names)
    result = dict(packages=names, candidate_kernel=candidate, ok=True, changed=False)
    if module.params["kernel_hold"] == "hold":
        missing = [n for n in names if n not in before]
        if missing and not module.check_mode:
            set_hold(module, missing, True)
        result.update(changed=bool(missing), held=sorted(set(before) | set(names)),
                      msg="kernel packages held: %s" % (", ".join(names) or "(none installed)"))
        return result
    holding = [n for n in names if n in before]
    if not holding:
        result.update(held=before, msg="the kernel is not held")
        return result
    decision, built = release_allowed(module, candidate)
    if not decision["ok"]:
        result.update(ok=False, held=before, msg=decision["reason"], changed=built)
        return result
    if not module.check_mode:
        set_hold(module, holding, False)
    result.update(changed=True, held=sorted(set(before) - set(holding)),
                  msg="kernel released (%s): %s" % (", ".join(holding), decision["reason"]))
    return result


def transitional(module):
    names = sorted(set(spec.split("=", 1)[0] for spec in module.params["packages"]))
    records = []
    for name in names:
        rc, out, _err = run(module, ["apt-cache", "show", "--no-all-versions", name])
        if rc == 0:
            records.extend(guards.parse_apt_show(out))
    jumps = guards.transitional_jumps(records, module.params["branch"])
    msg = (guards.transitional_message(jumps, module.params["branch"]) if jumps
           else "no package jumps from branch %s" % module.params["branch"])
    return dict(ok=not jumps, msg=msg, jumps=jumps, changed=False)


def operator(module):
    evidence = node_services.operator_toolkit("/")
    msg = ("NVIDIA's GPU operator manages the container toolkit here (%s)" % "; ".join(evidence) if evidence
           else "no GPU operator toolkit on this node")
    return dict(ok=True, msg=msg, operator_toolkit=evidence, changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            check=dict(type="str", required=True, choices=["toolkit", "kernel", "transitional", "operator"]),
            package_manager=dict(type="str", default="apt", choices=["apt", "dnf", "yum"]),
            action=dict(type="str", default="keep"),
            version=dict(type="str", default=""),
            installed=dict(type="str", default=""),
            allow_vulnerable=dict(type="bool", default=False),
            kernel_hold=dict(type="str", default="hold", choices=["hold", "release"]),
            running_kernel=dict(type="str", default=""),
            module_path=dict(type="str", default="dkms"),
            branch=dict(type="str", default=""),
            flavour=dict(type="str", default="open"),
            secure_boot=dict(type="bool", default=False),
            packages=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    checks = {"toolkit": toolkit, "kernel": kernel, "transitional": transitional, "operator": operator}
    result = checks[module.params["check"]](module)
    if not result["ok"]:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
