#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_install_plan
short_description: Plan the NVIDIA driver or container toolkit installation of a node, changing nothing
version_added: "0.1.0"
description:
  - Reads the node (through I(root), like M(gpunode.nvidia.gpu_node_facts)) and returns what the
    C(nvidia_driver) or C(nvidia_container_toolkit) role must do there, as data - the action, the packages with
    their version pins, the repository, the dnf module stream, the kernels DKMS must build for, the Secure Boot
    verdict, the nouveau blacklist and whether a reboot is still needed.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
options:
  stage:
    description: Which installation to plan.
    type: str
    choices: [driver, toolkit]
    required: true
  root:
    description:
      - Directory where the node's C(/) is. Another directory reads a mounted machine image or a test tree;
        nothing there is executed.
    type: path
    default: /
  branch:
    description:
      - Driver branch to install and hold, C(535), C(550), C(580) ... Empty means the distribution's branch
        (Debian), I(default_branch) (Ubuntu) or the newest (NVIDIA's repository).
    type: str
    default: ""
  default_branch:
    description: Branch used on Ubuntu when I(branch) is empty (Ubuntu's packages are named by branch).
    type: str
    default: "580"
  flavour:
    description:
      - C(open) or C(proprietary) kernel modules. C(auto) picks open when every GPU seen is Turing or newer
        (PCI device id 0x1e00 and up) and the branch is 515 or newer, and when no GPU is seen at all (an image
        bake, where open is NVIDIA's default from 560).
    type: str
    choices: [auto, open, proprietary]
    default: auto
  install_without_gpu:
    description: Plan an install although sysfs shows no NVIDIA GPU (image bakes on build machines).
    type: bool
    default: false
  allow_upgrade:
    description:
      - Allow changing an installed driver branch or flavour (driver), or the installed toolkit version
        in either direction (toolkit).
    type: bool
    default: false
  source:
    description:
      - Where packages come from. C(auto) is C(distribution) on Debian and Ubuntu and C(nvidia) elsewhere for the
        driver, and C(nvidia) for the toolkit. C(offline) installs package files from I(offline_dir).
    type: str
    choices: [auto, distribution, nvidia, offline]
    default: auto
  packages:
    description: Driver packages to install instead of the planned ones (names or version specs).
    type: list
    elements: str
    default: []
  ubuntu_modules:
    description:
      - C(prebuilt) installs Canonical's signed C(linux-modules-nvidia-*) packages (no DKMS, Secure Boot
        compatible); C(dkms) builds the modules on the node.
    type: str
    choices: [prebuilt, dkms]
    default: prebuilt
  debian_mirror:
    description: Debian archive (or mirror) the C(non-free) driver packages come from.
    type: str
    default: http://deb.debian.org/debian
  debian_suites:
    description: Suites of that archive; empty means the release codename and C(CODENAME-updates).
    type: list
    elements: str
    default: []
  debian_signed_by:
    description: Keyring (path or URL) the Debian source is C(Signed-By).
    type: str
    default: /usr/share/keyrings/debian-archive-keyring.gpg
  repo_base:
    description:
      - Base URL of NVIDIA's repositories (a mirror for air-gapped sites). Driver - the CUDA repository
        base, C(https://developer.download.nvidia.com/compute/cuda/repos). Toolkit - the libnvidia-container base,
        C(https://nvidia.github.io/libnvidia-container). Empty means those.
    type: str
    default: ""
  repo_url:
    description: Full repository URL, overriding I(repo_base) and the distribution path.
    type: str
    default: ""
  repo_key_url:
    description: URL (or path) of the repository signing key; empty means the key NVIDIA publishes beside it.
    type: str
    default: ""
  channel:
    description: Toolkit repository channel.
    type: str
    choices: [stable, experimental]
    default: stable
  version:
    description:
      - Toolkit version (C(1.17.8-1) or C(1.17.8)) applied to C(nvidia-container-toolkit),
        C(nvidia-container-toolkit-base), C(libnvidia-container-tools) and C(libnvidia-container1) together.
        Empty installs the newest when missing and leaves an installed toolkit alone.
      - Driver - the exact upstream version (C(535.309.01)) every driver package is installed at; its branch is
        O(branch) (which may be empty, and must match). A node at another version of the same branch is
        changed when O(allow_upgrade) is true. Empty - the newest of the branch, and an installed driver of
        that branch is left alone.
    type: str
    default: ""
  gpgcheck:
    description: RPM toolkit repository - check package signatures.
    type: bool
    default: true
  repo_gpgcheck:
    description: RPM toolkit repository - check the repository metadata signature.
    type: bool
    default: true
  offline_dir:
    description:
      - Directory on the node holding the package files (C(NAME_VERSION_ARCH.deb) or
        C(NAME-VERSION-RELEASE.ARCH.rpm)).
    type: path
  kernel_headers:
    description: Plan the kernel headers (C(linux-headers-K) / C(kernel-devel-K)) of each kernel DKMS builds for.
    type: bool
    default: true
  secure_boot_check:
    description: Let Secure Boot with unsigned modules block the install (I(secure_boot.blocks_install)).
    type: bool
    default: true
  secure_boot_strategy:
    description:
      - How the modules get signed when Secure Boot is on (I(secure_boot.strategy)); see the Secure Boot documentation.
      - C(auto) - the distribution's signed packages where the plan uses them (Ubuntu prebuilt), DKMS signing with the
        organisation's key when O(signing_key_given), else C(refuse).
      - C(precompiled) - the distribution's signed module packages for the running kernel and the kernel an upgrade
        would install; the install is blocked, naming the package, when the archive lacks one.
      - C(dkms_sign) - DKMS signs with the organisation's key. C(refuse) - block unsigned modules.
    type: str
    choices: [auto, precompiled, dkms_sign, refuse]
    default: auto
  signing_key_given:
    description: Whether the operator gave the organisation's module signing key and certificate (never the key itself).
    type: bool
    default: false
  signing_certificate:
    description:
      - The organisation's signing certificate (PEM; public). With C(dkms_sign), DKMS builds whose modules another
        key signed (DKMS's own) are listed for a rebuild (I(secure_boot.dkms_to_sign)).
    type: str
    default: ""
  running_kernel:
    description: Kernel release running (default - this machine's). Set it when planning for a mounted image.
    type: str
  architecture:
    description: Machine architecture, C(x86_64) or C(aarch64) (default - this machine's).
    type: str
  secure_boot:
    description: Secure Boot state to assume instead of reading efivars / mokutil (tests, images).
    type: bool
  mok_enrolled:
    description: Whether the DKMS signing key is enrolled, instead of asking C(mokutil --test-key).
    type: bool
  apt_scratch:
    description:
      - A directory holding the planned Debian source as C(planned.sources) and the apt lists read from it
        (C(lists/)). Every C(apt-cache) and C(apt-get) of the plan reads those instead of apt's own, and the
        source counts as in place. The role's check mode uses it to judge a branch or version against the source
        it would add, without adding it.
    type: path
attributes:
  check_mode:
    support: full
    details: Plans only (reads the node and the package manager's metadata); runs the same in check mode.
  diff_mode:
    support: none
notes:
  - "Driver actions: C(skip) (no NVIDIA GPU in sysfs and I(install_without_gpu) is false), C(keep) (a driver is
    loaded, installed as packages or present as module files: it is left alone, incident I6 of the field guide),
    C(install), and C(upgrade) (a different I(branch) or flavour is asked for and I(allow_upgrade) is true)."
  - "Toolkit actions: C(install), C(keep), C(change) (the installed version differs from I(version) and
    I(allow_upgrade) is true) and C(refused) (it differs and upgrades are not allowed)."
  - Distributions, from C(/etc/os-release) under I(root) - Debian 12/13 (Debian's non-free driver packages),
    Ubuntu 20.04 to 24.04 (the archive's C(-server) driver packages, Canonical's signed prebuilt modules by
    default), RHEL-compatible 8/9/10 and Amazon Linux 2023 (NVIDIA's CUDA repository, the C(nvidia-driver) module
    stream on 8/9 and 2023, dnf versionlock on 10), Amazon Linux 2 (NVIDIA's frozen rhel7 repository).
  - Never changes the node. On the live node (I(root=/)) it may run C(mokutil --sb-state) and
    C(mokutil --test-key) when efivars cannot answer.
  - Standard library only on the managed node.
  - Supports check mode; the module never changes anything.
  - Ubuntu, RHEL and Amazon Linux plans are checked by unit tests only where their archives cannot be reached;
    see the driver documentation for the distribution matrix.
seealso:
  - module: gpunode.nvidia.gpu_node_facts
  - name: Driver documentation
    description: Distribution matrix, variables, Secure Boot and reboots.
    link: https://github.com/gpunode/nvidia/blob/main/docs/driver.md
"""

EXAMPLES = r"""
- name: Plan the driver of this node
  gpunode.nvidia.gpu_install_plan:
    stage: driver
    branch: "550"
  register: plan

- name: Show what would be done
  ansible.builtin.debug:
    msg: "{{ plan.plan.action }}: {{ plan.plan.reason }} {{ plan.plan.commands }}"

- name: Plan the container toolkit, pinned
  gpunode.nvidia.gpu_install_plan:
    stage: toolkit
    version: 1.17.8-1

- name: Plan for a machine image mounted at /mnt/image (nothing executed inside it)
  gpunode.nvidia.gpu_install_plan:
    stage: driver
    root: /mnt/image
    running_kernel: 6.1.0-28-amd64
    install_without_gpu: true
"""

RETURN = r"""
plan:
  description: The plan.
  returned: success
  type: dict
  contains:
    action:
      description: >-
        Driver - C(skip), C(keep), C(install), C(upgrade). Toolkit - C(install), C(keep), C(change), C(refused).
      type: str
      sample: install
    reason:
      description: Why, in words for the operator.
      type: str
    distribution:
      description: >-
        C(id), C(version), C(major), C(codename), C(family) (debian, ubuntu, redhat, amazon), C(setup),
        C(package_manager), C(arch), C(deb_arch).
      type: dict
    setup:
      description: >-
        Setup path of the role - C(Debian), C(Ubuntu), C(RedHat) (RHEL 8/9/10, Amazon Linux 2023) or C(Amazon-2).
      type: str
    package_manager:
      description: C(apt), C(dnf) or C(yum).
      type: str
    source:
      description: C(distribution), C(nvidia) or C(offline).
      type: str
    packages:
      description: >-
        Package names or version specs to install (C(nvidia-smi=535.261.03-*), C(nvidia-container-toolkit=1.17.8-1)).
      type: list
      elements: str
    offline_files:
      description: Package files to install from I(offline_dir), dependencies first.
      type: list
      elements: str
    repository:
      description: >-
        The repository to configure, or null. C(kind=deb822) carries the C(ansible.builtin.deb822_repository)
        options (C(name), C(types), C(uris), C(suites), C(components), C(signed_by)); C(kind=yum) the
        C(ansible.builtin.yum_repository) ones (C(name), C(description), C(baseurl), C(gpgkey), C(gpgcheck),
        C(repo_gpgcheck), C(enabled)).
      type: dict
    commands:
      description: The steps the role runs, in order, in words and commands.
      type: list
      elements: str
    gpus:
      description: NVIDIA GPUs seen in sysfs (as in gpu_node_facts).
      type: list
      elements: dict
    installed:
      description: >-
        Driver - C(present), C(loaded), C(loaded_version), C(loaded_flavour), C(packages), C(package_version),
        C(module_files), C(branch), C(nouveau_loaded). Toolkit - installed package versions by name.
      type: dict
    branch:
      description: Driver branch planned (null - whatever the source's newest is).
      type: str
    flavour:
      description: C(open) or C(proprietary) (driver).
      type: str
    flavour_reason:
      description: Why that flavour.
      type: str
    module_path:
      description: C(prebuilt) (signed packaged modules) or C(dkms) (built on the node).
      type: str
    module_stream:
      description: dnf module stream to enable (RHEL 8/9, Amazon Linux 2023), e.g. C(nvidia-driver:550-open).
      type: str
    versionlock:
      description: dnf versionlock patterns holding the branch (RHEL 10).
      type: list
      elements: str
    kernel:
      description: >-
        C(running), C(installed), C(boot) (the kernel the machine boots next), C(running_installed) and
        C(dkms_targets).
      type: dict
    headers:
      description: Kernel header packages for the DKMS target kernels.
      type: list
      elements: str
    secure_boot:
      description: >-
        C(enabled) (true, false or null), C(source), C(strategy) (C(none), C(precompiled), C(dkms_sign) or
        C(refuse)), C(strategy_reason), C(module_signed), C(mok_key), C(mok_enrolled), C(blocks_install), C(message),
        C(precompiled) (C(kernels), C(packages), C(missing)), C(signing) (the paths of the signing key and
        certificate on the node, and the DKMS configuration file) and C(dkms_to_sign) (with C(dkms_sign), each
        DKMS build for an installed kernel holding a module unsigned or signed by another key - C(module) NAME/VERSION and C(kernel)).
      type: dict
    version_lock:
      description: >-
        The driver's locked version set - C(package_manager), C(packages) (name to installed version), C(names),
        C(preferences_path) and C(preferences), C(unattended_path) and C(unattended) (apt), and C(versionlock) (dnf, yum) - per package its
        C(name) and the C(lock) and C(release) commands - with C(versionlocked), the names C(versionlock list) shows locked now.
      type: dict
    drift:
      description: >-
        C(set_version), C(components) (loaded module, user-space library, fabric manager with their versions) and
        C(splits) - each a C(component), C(package) (the package an upgrade would move, or null), C(version),
        C(set_version) and C(text).
      type: dict
    nouveau:
      description: C(blacklist_path), C(content) and C(initramfs_command) (null when the image has no initramfs tool).
      type: dict
    reboot:
      description: C(required) and C(reasons) - is a reboot still needed for the installed driver to run.
      type: dict
    notes:
      description: Distribution notes.
      type: list
      elements: str
    driver_version:
      description: >-
        Debian - the upstream version every driver package is pinned to, the newest candidate of the kernel module
        package in the branch (apt-cache madison, or the offline directory); null until apt knows the packages.
      type: str
      sample: 535.261.03
    version:
      description: Toolkit version pinned, or null.
      type: str
    apt_pin:
      description: >-
        apt preferences content (apt only, else null). Toolkit - holds the four toolkit packages at I(version).
        Driver (Debian) - holds every binary of the planned packages' source packages (C(src:NAME), from
        C(apt-cache show); the planned names themselves for an offline directory) at I(driver_version), so that
        same-source dependencies resolve to the kernel module's version; null while I(driver_version) is.
      type: str
    apt_pin_path:
      description: Where that file goes (C(/etc/apt/preferences.d/nvidia-container-toolkit) or C(nvidia-driver)).
      type: str
"""

import functools
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node, run_command
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.driver_plan import plan_driver
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_os import PlanError
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.toolkit_plan import plan_toolkit

DRIVER_KEYS = ("branch", "version", "default_branch", "flavour", "install_without_gpu", "allow_upgrade", "source", "packages",
               "ubuntu_modules", "debian_mirror", "debian_suites", "debian_signed_by", "repo_base", "repo_url",
               "repo_key_url", "offline_dir", "kernel_headers", "secure_boot_check", "secure_boot_strategy",
               "signing_key_given", "signing_certificate", "apt_scratch")
TOOLKIT_KEYS = ("version", "allow_upgrade", "source", "repo_base", "repo_url", "repo_key_url", "channel",
                "gpgcheck", "repo_gpgcheck", "offline_dir")


ARGUMENT_SPEC = dict(
    stage=dict(type="str", required=True, choices=["driver", "toolkit"]),
    root=dict(type="path", default="/"),
    branch=dict(type="str", default=""),
    default_branch=dict(type="str", default="580"),
    flavour=dict(type="str", default="auto", choices=["auto", "open", "proprietary"]),
    install_without_gpu=dict(type="bool", default=False),
    allow_upgrade=dict(type="bool", default=False),
    source=dict(type="str", default="auto", choices=["auto", "distribution", "nvidia", "offline"]),
    packages=dict(type="list", elements="str", default=[]),
    ubuntu_modules=dict(type="str", default="prebuilt", choices=["prebuilt", "dkms"]),
    debian_mirror=dict(type="str", default="http://deb.debian.org/debian"),
    debian_suites=dict(type="list", elements="str", default=[]),
    debian_signed_by=dict(type="str", default="/usr/share/keyrings/debian-archive-keyring.gpg"),
    repo_base=dict(type="str", default=""),
    repo_url=dict(type="str", default=""),
    repo_key_url=dict(type="str", default="", no_log=False),
    channel=dict(type="str", default="stable", choices=["stable", "experimental"]),
    version=dict(type="str", default=""),
    gpgcheck=dict(type="bool", default=True),
    repo_gpgcheck=dict(type="bool", default=True),
    offline_dir=dict(type="path"),
    kernel_headers=dict(type="bool", default=True),
    secure_boot_check=dict(type="bool", default=True),
    secure_boot_strategy=dict(type="str", default="auto", choices=["auto", "precompiled", "dkms_sign", "refuse"]),
    signing_key_given=dict(type="bool", default=False),
    signing_certificate=dict(type="str", default=""),
    running_kernel=dict(type="str"),
    architecture=dict(type="str"),
    secure_boot=dict(type="bool"),
    mok_enrolled=dict(type="bool"),
    apt_scratch=dict(type="path"),
)


def with_scratch_lists(run, scratch):
    """RUN, with every apt-cache and apt-get reading the planned source's scratch lists instead of apt's own."""
    options = ["Dir::Etc::SourceList=%s/planned.sources" % scratch, "Dir::Etc::SourceParts=-",
               "Dir::State::Lists=%s/lists" % scratch]

    def scratch_run(argv, *args, **kwargs):
        if argv and os.path.basename(argv[0]) in ("apt-cache", "apt-get"):
            argv = [argv[0]] + [part for option in options for part in ("-o", option)] + list(argv[1:])
        return run(argv, *args, **kwargs)
    return scratch_run


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    params = module.params
    root = params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory: give the directory where the node's / is mounted" % root)
    # apt's simulations (the drift preflight, the precompiled check) take seconds on a busy node.
    run = functools.partial(run_command, timeout=120) if os.path.realpath(root) == "/" else None
    if run and params["apt_scratch"]:
        run = with_scratch_lists(run, params["apt_scratch"])
    node = Node(root, run)
    env = {"running_kernel": params["running_kernel"] or os.uname()[2],
           "arch": params["architecture"] or os.uname()[4],
           "secure_boot": None if params["secure_boot"] is None else {
               "enabled": params["secure_boot"], "source": "given (secure_boot=%s)" % params["secure_boot"]},
           "mok_enrolled": params["mok_enrolled"]}
    try:
        if params["stage"] == "driver":
            request = dict((k, params[k]) for k in DRIVER_KEYS)
            plan = plan_driver(node, request, env)
        else:
            request = dict((k, params[k]) for k in TOOLKIT_KEYS)
            if request["source"] in ("auto", "distribution"):
                request["source"] = "nvidia"
            plan = plan_toolkit(node, request, env)
    except PlanError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, plan=plan)


if __name__ == "__main__":
    main()
