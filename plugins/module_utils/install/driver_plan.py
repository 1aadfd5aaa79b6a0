# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Plan the NVIDIA driver installation of one node.

Everything the role needs to decide before it changes anything, computed from
what the node holds (read through ``root``, like gpu_node_facts; see
node_os.py) and from the operator's request:

* the distribution, its package manager and which setup path applies;
* install, upgrade, keep (incident I6: a pre-baked or loaded driver is left
  alone) or skip (no GPU); the packages, the repository, the dnf module
  stream, the kernels DKMS must build for, Secure Boot, nouveau and whether a
  reboot is still needed.

The plan is data: the role carries it out with Ansible's own package and
repository modules, and the unit tests check it for every distribution,
including those whose archives cannot be reached from the test machines.
The container toolkit's plan is toolkit_plan.py.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.driver_drift import node_drift
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.guards import kernel_hold_packages
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_os import (
    PlanError, apt_candidates, apt_components, distribution, kernels, mok_key, module_files, module_version,
    offline_files, read_os_release, secure_boot)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import (
    DEB_FILE_RE, branch_of, install_command, lockstep_version, upstream, version_key)
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.secure_boot import (
    DKMS_SIGNING_CONF, SIGNING_CERT, SIGNING_CERT_PEM, SIGNING_KEY, choose_strategy, dkms_signing_conf,
    missing_precompiled_message, precompiled_packages, simulated_kernel, certificate_serial, dkms_builds_to_sign)
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.version_lock import lock_plan

CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Debian: the open kernel module is in contrib, the driver in non-free, the GSP firmware in
# non-free-firmware. The kernel module package sets the version every other package follows.
DEBIAN_COMPONENTS = ("contrib", "non-free", "non-free-firmware")
DEBIAN_MODULE_PACKAGE = {"open": "nvidia-open-kernel-dkms", "proprietary": "nvidia-kernel-dkms"}
DRIVER_APT_PIN_PATH = "/etc/apt/preferences.d/nvidia-driver"

NOUVEAU_BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
NOUVEAU_CONTENT = ("# Managed by gpunode.nvidia: the NVIDIA driver needs nouveau out of the way.\n"
                   "blacklist nouveau\n"
                   "options nouveau modeset=0\n")
# First PCI device id of the Turing generation: open kernel modules need Turing or newer.
TURING_FIRST_DEVICE_ID = 0x1E00
OPEN_MODULES_FIRST_BRANCH = 515


def choose_flavour(requested, gpus, branch):
    """('open'|'proprietary', why). Open modules need a Turing or newer GPU and branch 515+."""
    if requested in ("open", "proprietary"):
        return requested, "asked for"
    if branch and int(branch) < OPEN_MODULES_FIRST_BRANCH:
        return "proprietary", "branch %s predates the open kernel modules (515)" % branch
    older = [g["pci_address"] for g in gpus if _device_id(g) is not None and _device_id(g) < TURING_FIRST_DEVICE_ID]
    if older:
        return "proprietary", "GPU %s is older than Turing: the open modules do not support it" % ", ".join(older)
    if gpus:
        return "open", "every GPU is Turing or newer: open modules are NVIDIA's default from 560"
    return "open", ("no GPU seen (image bake): open modules, NVIDIA's default from 560 "
                    "(set the flavour for pre-Turing fleets)")


def _device_id(gpu):
    try:
        return int(gpu.get("device_id") or "", 16)
    except ValueError:
        return None


def installed_driver(node, driver_facts, kernel_facts):
    """What driver is on the node: loaded module, packages, module files."""
    packages = driver_facts.get("packages") or {}
    branches = sorted(set(b for b in (branch_of(v) for v in packages.values()) if b))
    files = module_files(node, sorted(set(kernel_facts["installed"] + [kernel_facts["running"]])))
    package_version = None
    for name in sorted(packages):
        if branch_of(packages[name]):
            package_version = upstream(packages[name])
            break
    file_versions = [v for v in (module_version(node.local(f)) for f in files) if v]
    if package_version is None and file_versions:
        package_version = max(file_versions, key=version_key)  # a .run install: no package records it
    return {
        "present": bool(driver_facts.get("loaded") or packages or files),
        "loaded": bool(driver_facts.get("loaded")),
        "loaded_version": driver_facts.get("version"),
        "loaded_flavour": driver_facts.get("flavour"),
        "packages": packages,
        "package_version": package_version,
        "module_files": files,
        "branch": branch_of(driver_facts.get("version")) or (branches[-1] if branches else None)
        or branch_of(package_version),
        "nouveau_loaded": bool(driver_facts.get("nouveau_loaded")),
    }


def requested_branch(request, dist):
    """The branch to install: nvidia_driver_branch, else the branch of nvidia_driver_version, else Ubuntu's
    default branch (other distributions: the newest offered). A version outside the branch is refused."""
    branch = request.get("branch") or None
    version = request.get("version") or None
    if version and not re.match(r"^\d{3,}\.\d+(\.\d+)?$", version):
        raise PlanError("nvidia_driver_version is %r, which is not an NVIDIA driver version: give the upstream "
                        "version the driver reports (for example 535.261.03), or leave it empty to install the newest "
                        "of nvidia_driver_branch." % version)
    if version and branch and branch_of(version) != branch:
        raise PlanError("nvidia_driver_version %s is not in nvidia_driver_branch %s: set one of them to match the "
                        "other (or leave nvidia_driver_branch empty: the version names its branch)." % (version, branch))
    if version:
        return branch_of(version)
    if not branch and dist["family"] == "ubuntu":
        return request.get("default_branch") or None
    return branch


def driver_action(request, gpus, installed, flavour):
    """(action, reason): skip, keep, install or upgrade."""
    branch = request.get("branch") or None
    if not gpus and not request.get("install_without_gpu"):
        return "skip", ("no NVIDIA GPU in /sys/bus/pci/devices: nothing to install. For an image bake on a machine "
                        "without a GPU set nvidia_driver_install_without_gpu: true")
    if not installed["present"]:
        return "install", "no NVIDIA driver installed"
    on_node = installed["loaded_version"] or installed["package_version"]
    what = "driver %s (%s)" % (on_node or "of unknown version", "loaded" if installed["loaded"] else "installed, not loaded")
    changes = []
    if request.get("version") and on_node and on_node != request["version"]:
        changes.append("version %s is asked for, %s is on the node" % (request["version"], on_node))
    elif branch and installed["branch"] and installed["branch"] != branch:
        changes.append("branch %s is asked for, %s is on the node" % (branch, installed["branch"]))
    if (request.get("flavour") in ("open", "proprietary") and installed["loaded_flavour"]
            and installed["loaded_flavour"] != request.get("flavour")):
        changes.append("%s modules are asked for, %s are loaded"
                       % (request.get("flavour"), installed["loaded_flavour"]))
    if not changes:
        return "keep", "%s is left alone (pre-installed drivers are never reinstalled)" % what
    if request.get("allow_upgrade"):
        return "upgrade", "%s: %s, and upgrades are allowed" % (what, "; ".join(changes))
    return "keep", ("%s is left alone: %s, but upgrades are not allowed (set nvidia_driver_allow_upgrade: true)"
                    % (what, "; ".join(changes)))


def driver_packages(dist, branch, flavour, request, kernel_facts):
    """Package names per distribution: (names, version_pinned, stream, versionlock, notes).

    version_pinned: the branch is held by a version spec on each name (Debian, RHEL 10,
    Amazon Linux 2); Ubuntu names carry the branch, RHEL 8/9 and Amazon Linux 2023 hold
    it with the dnf module stream.
    """
    family, major = dist["family"], dist["major"]
    open_ = flavour == "open"
    notes = []
    if family == "debian":
        names = (["nvidia-open-kernel-dkms", "firmware-nvidia-gsp"] if open_ else ["nvidia-kernel-dkms"])
        return names + ["nvidia-smi", "libcuda1", "libnvidia-ml1"], True, None, [], notes
    if family == "ubuntu":
        if not branch:
            raise PlanError("Ubuntu's driver packages are per branch: set nvidia_driver_branch (e.g. 535, 570, 580)")
        suffix = "-server-open" if open_ else "-server"
        if request.get("ubuntu_modules", "prebuilt") == "prebuilt":
            names = ["nvidia-headless-no-dkms-%s%s" % (branch, suffix), "nvidia-utils-%s-server" % branch]
            names += ["linux-modules-nvidia-%s%s-%s" % (branch, suffix, kernel)
                      for kernel in _ubuntu_module_kernels(kernel_facts)]
            notes.append("prebuilt modules signed by Canonical: no DKMS build, Secure Boot compatible")
        else:
            names = ["nvidia-headless-%s%s" % (branch, suffix), "nvidia-utils-%s-server" % branch]
        return names, False, None, [], notes
    kmod = "kmod-nvidia-open-dkms" if open_ else "kmod-nvidia-latest-dkms"
    if dist["setup"] == "Amazon-2":
        notes.append("Amazon Linux 2 uses NVIDIA's frozen rhel7 repository: newer branches are not published there")
        return ["nvidia-driver-latest-dkms", kmod], True, None, [], notes
    names = ["nvidia-driver-cuda", kmod]
    if family == "redhat" and int(major or 0) >= 10:
        notes.append("RHEL 10 has no driver module streams: the branch is held with dnf versionlock")
        return names, True, None, ["*nvidia*%s*" % branch] if branch else [], notes
    stream = "%s-%s" % (branch or ("open" if open_ else "latest"), "open" if open_ and branch else "dkms")
    return names, False, "nvidia-driver:%s" % stream, [], notes


def _ubuntu_module_kernels(kernel_facts):
    """Kernel flavour metapackage (generic, aws ...) plus every DKMS target kernel by release."""
    releases = kernel_facts["dkms_targets"] or [kernel_facts["running"]]
    flavours = sorted(set(r.rsplit("-", 1)[-1] for r in releases if r and "-" in r))
    return flavours + [r for r in releases if r]


def version_spec(manager, name, version_glob):
    """apt `name=535.*` / dnf and yum `name-535.*`: the form each package manager reads."""
    if not version_glob:
        return name
    return "%s%s%s" % (name, "=" if manager == "apt" else "-", version_glob)


def driver_repository(dist, request, node):
    """The repository the packages come from, or None (already enabled / offline)."""
    if request["source"] == "offline":
        return None
    family = dist["family"]
    if family == "debian":
        mirror = request.get("debian_mirror") or DEBIAN_MIRROR
        suites = request.get("debian_suites") or [dist["codename"], dist["codename"] + "-updates"]
        if mirror == DEBIAN_MIRROR and set(DEBIAN_COMPONENTS) <= apt_components(node, dist["codename"]):
            return None
        return {"kind": "deb822", "name": "nvidia-driver-debian", "types": ["deb"], "uris": [mirror],
                "suites": suites, "components": list(DEBIAN_COMPONENTS),
                "signed_by": request.get("debian_signed_by") or DEBIAN_KEYRING}
    if family == "ubuntu":
        return None  # restricted is enabled on Ubuntu by default
    return {"kind": "yum", "name": "cuda-nvidia-driver", "description": "NVIDIA CUDA repository (driver packages)",
            "baseurl": _cuda_repo_url(dist, request), "gpgkey": _cuda_key_url(dist, request),
            "gpgcheck": True, "enabled": True}


def _cuda_repo_path(dist):
    arch = "sbsa" if dist["arch"] == "aarch64" else dist["arch"]
    if dist["id"] == "amzn":
        name = "amzn2023" if dist["major"] == "2023" else "rhel7"
    else:
        name = "rhel%s" % dist["major"]
    return "%s/%s" % (name, arch)


def _cuda_repo_url(dist, request):
    if request.get("repo_url"):
        return request["repo_url"]
    return "%s/%s" % ((request.get("repo_base") or CUDA_REPO_BASE).rstrip("/"), _cuda_repo_path(dist))


def _cuda_key_url(dist, request):
    if request.get("repo_key_url"):
        return request["repo_key_url"]
    key = "CDF6BA43.pub" if dist["family"] == "redhat" and int(dist["major"] or 0) >= 10 else "D42D0685.pub"
    return "%s/%s" % (_cuda_repo_url(dist, request).rstrip("/"), key)


def headers_packages(dist, kernel_facts, module_path):
    if module_path != "dkms":
        return []
    if dist["package_manager"] == "apt":
        return ["linux-headers-%s" % k for k in kernel_facts["dkms_targets"]]
    return ["kernel-devel-%s" % k for k in kernel_facts["dkms_targets"]]


def initramfs_command(node, dist):
    if dist["package_manager"] == "apt":
        if node.isfile("/usr/sbin/update-initramfs"):
            return ["update-initramfs", "-u", "-k", "all"]
        return None
    if node.isfile("/usr/bin/dracut") or node.isfile("/usr/sbin/dracut"):
        return ["dracut", "-f", "--regenerate-all"]
    return None


def secure_boot_plan(dist, module_path, sb, mok, request):
    """Does Secure Boot block this install, and which strategy gets the modules signed (secure_boot.py)?"""
    choice = choose_strategy(request.get("secure_boot_strategy") or "auto", sb["enabled"], module_path,
                             bool(request.get("signing_key_given")), mok["enrolled"])
    signed = module_path == "prebuilt" or mok["enrolled"] or bool(request.get("signing_key_given"))
    message = strategy_refusal(choice["strategy"], dist, module_path, sb, mok, request)
    blocks = bool(request.get("secure_boot_check", True) and sb["enabled"] and message)
    return {"enabled": sb["enabled"], "source": sb["source"], "strategy": choice["strategy"],
            "strategy_reason": choice["reason"], "module_signed": signed, "mok_key": mok["path"],
            "mok_enrolled": mok["enrolled"], "blocks_install": blocks, "message": message if blocks else None,
            "precompiled": None, "signing": signing_paths() if choice["strategy"] == "dkms_sign" else None,
            "dkms_to_sign": []}


def strategy_refusal(strategy, dist, module_path, sb, mok, request):
    """Why the chosen strategy cannot give the kernel a signed module, None when it can."""
    if strategy == "precompiled" and module_path != "prebuilt":
        return ("Secure Boot strategy precompiled uses the distribution's signed module packages, which this "
                "collection installs on Ubuntu (nvidia_driver_ubuntu_modules: prebuilt); %s %s builds its modules "
                "with DKMS. Nothing was installed. Use nvidia_driver_secure_boot_strategy: dkms_sign with your "
                "organisation's key (docs/secure-boot.md)." % (dist["id"], dist["major"]))
    if strategy == "dkms_sign" and module_path != "dkms":
        return ("Secure Boot strategy dkms_sign signs modules DKMS builds, but the plan installs Ubuntu's prebuilt "
                "modules (already signed by Canonical). Nothing was installed. Set nvidia_driver_ubuntu_modules: "
                "dkms, or use nvidia_driver_secure_boot_strategy: precompiled.")
    if strategy == "dkms_sign" and not request.get("signing_key_given") and not mok["enrolled"]:
        return ("Secure Boot strategy dkms_sign needs the organisation's signing key and certificate: set "
                "nvidia_driver_signing_key and nvidia_driver_signing_certificate (PEM, from a vault). Nothing was "
                "installed.")
    if strategy != "refuse" or module_path == "prebuilt" or mok["enrolled"]:
        return None
    key = mok["path"] or "/var/lib/dkms/mok.pub"
    return (
        "Secure Boot is enabled (%s) and the NVIDIA kernel modules would be built by DKMS and signed with no "
        "enrolled key: the kernel would refuse to load them and the GPU would stay unusable. Nothing was "
        "installed. Do one of: (1) sign them with your organisation's key: nvidia_driver_secure_boot_strategy: "
        "dkms_sign with nvidia_driver_signing_key and nvidia_driver_signing_certificate (docs/secure-boot.md), or "
        "enroll the key DKMS signs with: `mokutil --import %s` (create it with `dkms generate_mok` if missing), "
        "reboot, confirm the enrolment in MokManager at the console, then run again; %s(3) disable Secure Boot in "
        "the firmware; (4) if your modules are signed another way, set nvidia_driver_secure_boot_check: false." % (
            sb["source"], key,
            "(2) use Canonical's signed prebuilt modules: nvidia_driver_ubuntu_modules: prebuilt; "
            if dist["family"] == "ubuntu" else "(2) install a driver whose modules are already signed; "))


def signing_paths():
    return {"key": SIGNING_KEY, "certificate_pem": SIGNING_CERT_PEM, "certificate": SIGNING_CERT,
            "dkms_conf_path": DKMS_SIGNING_CONF, "dkms_conf": dkms_signing_conf()}


def precompiled_check(node, kernel_facts, branch, flavour, installed_names):
    """The signed module packages for the running kernel and the one an upgrade of the kernel metapackage would
    install (apt-get -s), and those the archive lacks (apt-cache show)."""
    kernels = [kernel_facts["running"]]
    for meta in kernel_hold_packages("apt", installed_names):
        if meta.startswith("linux-image-"):
            rc, out, _err = node.run(["apt-get", "-s", "-q", "-o", "Debug::NoLocking=1", "install", meta])
            upgrade = simulated_kernel(out) if rc == 0 else None
            if upgrade and upgrade not in kernels:
                kernels.append(upgrade)
    packages = precompiled_packages(branch, flavour, kernels)
    missing = []
    for name in packages:
        rc, out, _err = node.run(["apt-cache", "show", name])
        if rc != 0 or not (out or "").strip():
            missing.append(name)
    return {"kernels": kernels, "packages": packages, "missing": missing}


def reboot_state(gpus, installed):
    """Is a reboot still needed for the installed driver to be the one running?"""
    reasons = []
    if installed["nouveau_loaded"] and (installed["packages"] or installed["module_files"]):
        reasons.append("nouveau is loaded and holds the GPU")
    if installed["loaded"] and installed["package_version"] and installed["loaded_version"] \
            and installed["loaded_version"] != installed["package_version"]:
        reasons.append("driver %s is loaded but %s is installed" % (installed["loaded_version"],
                                                                    installed["package_version"]))
    if not installed["loaded"] and (installed["packages"] or installed["module_files"]):
        if gpus:
            reasons.append("the NVIDIA driver is installed but not loaded")
        else:
            reasons.append("the NVIDIA driver is installed for GPU hardware this machine does not have: it loads "
                           "when the image boots on a GPU node")
    return {"required": bool(reasons), "reasons": reasons}


def plan_driver(node, request, env):
    """The driver plan. request: the role's options; env: running_kernel, arch, secure_boot,
    mok_enrolled overrides (None = read from the node)."""
    dist = distribution(read_os_release(node), env["arch"])
    facts = gather(node.root, ("gpus", "driver"), run=node.run)
    gpus = facts["gpus"]
    kernel_facts = kernels(node, env["running_kernel"])
    installed = installed_driver(node, facts["driver"], kernel_facts)
    branch = requested_branch(request, dist)
    flavour, flavour_reason = choose_flavour(request.get("flavour") or "auto", gpus, branch)
    request = dict(request, branch=branch)
    action, reason = driver_action(request, gpus, installed, flavour)
    source = _driver_source(dist, request)
    request["source"] = source
    module_path = "prebuilt" if (dist["family"] == "ubuntu"
                                 and request.get("ubuntu_modules", "prebuilt") == "prebuilt") else "dkms"
    plan = {"action": action, "reason": reason, "distribution": dist, "setup": dist["setup"],
            "package_manager": dist["package_manager"], "gpus": gpus, "installed": installed,
            "branch": branch, "flavour": flavour, "flavour_reason": flavour_reason, "source": source,
            "module_path": module_path, "kernel": kernel_facts, "repository": None, "module_stream": None,
            "versionlock": [], "packages": [], "offline_files": [], "headers": [], "notes": [],
            "nouveau": {"blacklist_path": NOUVEAU_BLACKLIST, "content": NOUVEAU_CONTENT,
                        "initramfs_command": initramfs_command(node, dist)},
            "reboot": reboot_state(gpus, installed), "driver_version": None, "apt_pin": None,
            "apt_pin_path": None, "commands": []}
    sb = env["secure_boot"] if env.get("secure_boot") is not None else secure_boot(node, node.run)
    mok = mok_key(node, node.run, env.get("mok_enrolled"))
    plan["secure_boot"] = secure_boot_plan(dist, module_path, sb, mok, request)
    if plan["secure_boot"]["strategy"] == "dkms_sign":
        plan["secure_boot"]["dkms_to_sign"] = dkms_builds_to_sign(
            node, kernel_facts["installed"], certificate_serial(request.get("signing_certificate")))
    plan["version_lock"] = lock_plan(dist["package_manager"], node.packages()["packages"], node.run)
    plan["drift"] = node_drift(node, installed["loaded_version"], dist["package_manager"])
    if action not in ("install", "upgrade"):
        return plan
    if plan["secure_boot"]["strategy"] == "precompiled" and module_path == "prebuilt" and node.run is not None:
        refuse_missing_precompiled(plan, node, kernel_facts, branch, flavour, request)
    names, pinned, stream, lock, notes = driver_packages(dist, branch, flavour, request, kernel_facts)
    if dist["family"] == "ubuntu" and source != "offline":
        check_ubuntu_branch(node, branch)
    version_glob = "%s.*" % branch if branch and pinned else None
    if request.get("version"):
        version_glob = request["version"] + ("-*" if dist["package_manager"] == "apt" else "*")
    repository = driver_repository(dist, request, node)
    if dist["family"] == "debian":
        plan["driver_version"] = debian_driver_version(
            node, request, flavour, branch, judge_branch=source_in_place(node, repository, request.get("apt_scratch")))
        if plan["driver_version"]:
            version_glob = plan["driver_version"] + "-*"
    # Ubuntu's prebuilt module packages are versioned by the kernel, not the driver: apt picks the one that matches.
    packages = [n if n.startswith("linux-modules-nvidia-") else version_spec(dist["package_manager"], n, version_glob)
                for n in names]
    if request.get("packages"):
        names = packages = list(request["packages"])
    if plan["driver_version"]:
        sources = debian_driver_sources(node, names, plan["driver_version"]) if source != "offline" else []
        plan.update(apt_pin=driver_apt_pin_file(plan["driver_version"], sources or names),
                    apt_pin_path=DRIVER_APT_PIN_PATH)
    headers = headers_packages(dist, kernel_facts, module_path) if request.get("kernel_headers", True) else []
    plan.update(packages=packages, module_stream=stream, versionlock=lock, notes=notes, headers=headers,
                repository=repository)
    if source == "offline":
        plan["offline_files"] = offline_files(node, request["offline_dir"], names,
                                              version_glob or ("%s.*" % branch if branch else None),
                                              dist["package_manager"])
        plan["module_stream"] = None
    plan["commands"] = driver_commands(plan, action)
    return plan


def refuse_missing_precompiled(plan, node, kernel_facts, branch, flavour, request):
    check = precompiled_check(node, kernel_facts, branch, flavour, node.packages()["packages"])
    plan["secure_boot"]["precompiled"] = check
    if check["missing"] and plan["secure_boot"]["enabled"] and request.get("secure_boot_check", True):
        plan["secure_boot"].update(blocks_install=True,
                                   message=missing_precompiled_message(check["missing"], check["kernels"]))


def check_ubuntu_branch(node, branch):
    """Refuse a branch apt's lists do not carry (Ubuntu names the branch in its package names);
    apt without lists (a fresh image) cannot tell, and nothing is refused."""
    if node.run is None:
        return
    rc, out, _err = node.run(["apt-cache", "pkgnames", "nvidia-utils-"])
    offered = sorted(set(re.findall(r"^nvidia-utils-(\d+)-server$", out or "", re.M)), key=int)
    if rc != 0 or not offered or branch in offered:
        return
    raise PlanError("nvidia_driver_branch is %s, but the configured repositories do not carry nvidia-utils-%s-server "
                    "(apt-cache pkgnames nvidia-utils-: server branches %s). Set nvidia_driver_branch (or, when it "
                    "is empty, nvidia_driver_ubuntu_default_branch) to one of them, or install from "
                    "nvidia_driver_offline_dir." % (branch, branch, ", ".join(offered)))


def source_in_place(node, repository, apt_scratch=None):
    """Whether apt's lists already come from the planned source: nothing to add, or its file as planned.
    Before the role adds or changes it (the first plan of such a run) they are stale: no refusal then.
    APT_SCRATCH: the directory where check mode read the planned source (planned.sources) into lists of its own."""
    if repository is None:
        return True
    path = apt_scratch + "/planned.sources" if apt_scratch else "/etc/apt/sources.list.d/%s.sources" % repository["name"]
    text = node.read(path) or ""
    fields = dict((key.strip().lower(), value.split()) for key, _sep, value in
                  (line.partition(":") for line in text.splitlines()))
    return fields.get("uris") == repository["uris"] and fields.get("suites") == repository["suites"]


def debian_driver_version(node, request, flavour, branch, judge_branch=True):
    """The upstream version all Debian driver packages are pinned to, or None when apt (or the
    offline directory) cannot tell yet. Debian updates the non-free driver and the contrib open
    module separately: bookworm carries nvidia-smi 535.309.01 beside nvidia-open-kernel-dkms
    535.261.03, and a per-package `535.*` would mix them."""
    module = DEBIAN_MODULE_PACKAGE[flavour]
    if request["source"] == "offline":
        versions = []
        for name in node.listdir(request["offline_dir"]):
            match = DEB_FILE_RE.match(name)
            if match and match.group(1) == module:
                versions.append(match.group(2))
    elif node.run is not None:
        versions = apt_candidates(node.run, module)
    else:
        return None
    if request.get("version"):
        if versions and request["version"] not in [upstream(v) for v in versions] and judge_branch:
            raise PlanError(version_not_offered(request["version"], module, versions, request))
        return request["version"]
    version = lockstep_version(versions, branch)
    if branch and versions and version is None and judge_branch:
        raise PlanError(branch_not_offered(branch, module, versions, request))
    return version


def version_not_offered(version, package, versions, request):
    """The refusal of an exact version the configured sources do not carry."""
    offered = ", ".join(sorted(set(versions), key=version_key, reverse=True))
    if request["source"] == "offline":
        where = "offline directory %s has no package file for %s at version %s (it holds %s)" % (
            request["offline_dir"], package, version, offered)
    else:
        where = "configured repositories do not carry %s at version %s (apt-cache madison %s: %s)" % (
            package, version, package, offered)
    return ("nvidia_driver_version is %s, but the %s. Set nvidia_driver_version to one of those (or empty: the "
            "newest of the branch), or make the version available to apt (nvidia_driver_debian_mirror, "
            "nvidia_driver_debian_suites, nvidia_driver_offline_dir)." % (version, where))


def branch_not_offered(branch, package, versions, request):
    """The refusal of a branch the configured sources do not carry: apt would fail only at install time."""
    offered = sorted(set(b for b in (branch_of(v) for v in versions) if b), key=int)
    if request["source"] == "offline":
        where = "offline directory %s has no package file for %s at version %s.* (it holds %s)" % (
            request["offline_dir"], package, branch, ", ".join(sorted(versions, key=version_key, reverse=True)))
        elsewhere = "put branch %s's package files into nvidia_driver_offline_dir" % branch
    else:
        where = "configured repositories do not carry %s in branch %s (apt-cache madison %s: %s)" % (
            package, branch, package, ", ".join(versions))
        elsewhere = ("make a repository that carries branch %s known to apt (nvidia_driver_debian_mirror, "
                     "nvidia_driver_debian_suites) or install from nvidia_driver_offline_dir" % branch)
    return ("nvidia_driver_branch is %s, but the %s. Set nvidia_driver_branch to %s (empty: the newest offered), "
            "or %s." % (branch, where, " or ".join(offered), elsewhere))


def debian_driver_sources(node, names, version):
    """Source packages (`src:NAME`) that built the planned packages at version, from
    `apt-cache show`; empty when apt cannot tell. Their other binaries (nvidia-alternative,
    libnvidia-ptxjitcompiler1, ...) are dependencies of the planned ones at exactly that version."""
    if node.run is None:
        return []
    rc, out, _err = node.run(["apt-cache", "show"] + [n.split("=", 1)[0] for n in names])
    if rc != 0:
        return []
    sources = set()
    for stanza in (out or "").split("\n\n"):
        fields = dict(line.split(":", 1) for line in stanza.splitlines() if ":" in line and line[:1].strip())
        fields = dict((k.strip().lower(), v.strip()) for k, v in fields.items())
        if fields.get("package") and upstream(fields.get("version")) == version:
            sources.add("src:" + (fields.get("source") or fields["package"]).split()[0])
    return sorted(sources)


def driver_apt_pin_file(version, packages):
    """apt preferences that hold every package of the driver at the kernel module's version: the
    planned ones and, through their source packages, the same-source dependencies apt would
    otherwise take at a newer candidate (e.g. a security update of the non-free side only)."""
    pinned = [p if p.startswith("src:") else p.split("=", 1)[0] for p in packages]
    return ("# Managed by gpunode.nvidia (nvidia_driver): every package of the NVIDIA driver stays at the\n"
            "# kernel module's version; a newer user-space side alone does not talk to the module.\n"
            "Package: %s\nPin: version %s-*\nPin-Priority: 1001\n" % (" ".join(p + ":any" for p in pinned), version))


def _driver_source(dist, request):
    source = request.get("source") or "auto"
    if source == "auto":
        source = "distribution" if dist["family"] in ("debian", "ubuntu") else "nvidia"
    if source == "offline" and not request.get("offline_dir"):
        raise PlanError("source offline needs nvidia_driver_offline_dir: a directory on the node holding the packages")
    if source == "nvidia" and dist["family"] in ("debian", "ubuntu"):
        raise PlanError("source nvidia (NVIDIA's CUDA repository) is planned for RPM distributions only; on %s use "
                        "the distribution's packages (source: distribution) or offline" % dist["id"])
    if source == "distribution" and dist["family"] not in ("debian", "ubuntu"):
        raise PlanError("%s carries no NVIDIA driver packages of its own: use source nvidia (NVIDIA's CUDA "
                        "repository or a mirror of it) or offline" % dist["id"])
    return source


def driver_commands(plan, action):
    """The commands the role runs, in order, for the operator to read (check mode, docs, tests)."""
    manager = plan["package_manager"]
    commands = []
    repo = plan["repository"]
    if repo and repo["kind"] == "deb822":
        commands.append("write /etc/apt/sources.list.d/%s.sources (%s %s, Signed-By %s)" % (
            repo["name"], " ".join(repo["uris"]), " ".join(repo["suites"]), repo["signed_by"]))
        commands.append("apt-get update")
    elif repo:
        commands.append("write /etc/yum.repos.d/%s.repo (baseurl %s, gpgcheck=1, gpgkey %s)" % (
            repo["name"], repo["baseurl"], repo["gpgkey"]))
    commands.append("write %s; regenerate the initramfs if it changed" % plan["nouveau"]["blacklist_path"])
    if plan["headers"]:
        commands.append(install_command(manager, plan["headers"]))
    if plan["module_stream"]:
        verb = "switch-to" if action == "upgrade" else "enable"
        allow_erasing = " --allowerasing" if verb == "switch-to" else ""
        commands.append("dnf -y module %s %s%s" % (verb, plan["module_stream"], allow_erasing))
    if plan["versionlock"]:
        commands.append("dnf install -y python3-dnf-plugin-versionlock")
        commands.append("dnf versionlock add %s" % " ".join("'%s'" % p for p in plan["versionlock"]))
    if plan["apt_pin"]:
        commands.append("write %s (Pin: version %s-*)" % (plan["apt_pin_path"], plan["driver_version"]))
    if plan["offline_files"]:
        commands.append(install_command(manager, plan["offline_files"]))
    else:
        commands.append(install_command(manager, plan["packages"], allow_change=action == "upgrade"))
    for kernel in plan["kernel"]["dkms_targets"]:
        if plan["module_path"] == "dkms" and kernel != plan["kernel"]["running"]:
            commands.append("dkms autoinstall -k %s" % kernel)
    return commands
