"""gpu_install_plan: what the driver and toolkit roles would do, per distribution.

Ubuntu, RHEL-compatible and Amazon Linux archives cannot be reached from the test machines:
their paths are checked here, as plans (packages, repository files, module streams, commands),
from node trees that hold what those systems hold (os-release, sysfs, /proc, /boot, efivars).
Debian's path is also run for real with apt (tests/integration).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import lzma
import os
import struct

import pytest
import yaml

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import driver_plan as dp
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_os
from ansible_collections.gpunode.nvidia.plugins.module_utils.common import package_versions
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import toolkit_plan
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
from ansible_collections.gpunode.nvidia.plugins.modules import gpu_install_plan as module

OS_RELEASE = {
    "debian12": dict(ID="debian", VERSION_ID="12", VERSION_CODENAME="bookworm"),
    "debian13": dict(ID="debian", VERSION_ID="13", VERSION_CODENAME="trixie"),
    "ubuntu2204": dict(ID="ubuntu", ID_LIKE="debian", VERSION_ID="22.04", VERSION_CODENAME="jammy"),
    "ubuntu2404": dict(ID="ubuntu", ID_LIKE="debian", VERSION_ID="24.04", VERSION_CODENAME="noble"),
    "rhel8": dict(ID="rhel", ID_LIKE="fedora", VERSION_ID="8.10"),
    "rhel9": dict(ID="rhel", ID_LIKE="fedora", VERSION_ID="9.4"),
    "rocky9": dict(ID="rocky", ID_LIKE="rhel centos fedora", VERSION_ID="9.4"),
    "rhel10": dict(ID="rhel", ID_LIKE="fedora", VERSION_ID="10.0"),
    "al2023": dict(ID="amzn", ID_LIKE="fedora", VERSION_ID="2023"),
    "al2": dict(ID="amzn", ID_LIKE="centos rhel fedora", VERSION_ID="2"),
}
H100, T4, V100 = "0x2330", "0x1eb8", "0x1db4"
EFI_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


# --- node trees -----------------------------------------------------------------------------------

class Tree(object):
    def __init__(self, root, distro):
        self.root = str(root)
        fields = OS_RELEASE[distro]
        self.write("/etc/os-release", "".join('%s="%s"\n' % item for item in sorted(fields.items())))

    def write(self, path, text, mode="w"):
        local = self.root + path
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, mode) as handle:
            handle.write(text)
        return self

    def gpu(self, device_id=H100, address="0000:65:00.0"):
        base = "/sys/bus/pci/devices/" + address
        self.write(base + "/vendor", "0x10de\n").write(base + "/device", device_id + "\n")
        return self.write(base + "/class", "0x030200\n")

    def loaded_driver(self, version="535.129.03", open_modules=False):
        banner = "NVRM version: NVIDIA UNIX %sx86_64 Kernel Module  %s  Tue Oct 10 20:30:19 UTC 2023\n" % (
            "Open Kernel Module for " if open_modules else "", version)
        return self.write("/proc/driver/nvidia/version", banner).write("/proc/modules", "nvidia 1 0 - Live 0x0\n")

    def dpkg(self, packages):
        stanzas = ["Package: %s\nStatus: install ok installed\nVersion: %s\n" % item
                   for item in sorted(packages.items())]
        return self.write("/var/lib/dpkg/status", "\n".join(stanzas))

    def kernel(self, release, where="boot"):
        if where == "boot":
            return self.write("/boot/vmlinuz-" + release, "kernel")
        return self.write("/lib/modules/%s/vmlinuz" % release, "kernel")

    def efi(self, secure_boot, setup_mode=0):
        base = "/sys/firmware/efi/efivars/"
        self.write(base + "SecureBoot-" + EFI_GUID, struct.pack("<IB", 6, secure_boot).decode("latin-1"))
        return self.write(base + "SetupMode-" + EFI_GUID, struct.pack("<IB", 6, setup_mode).decode("latin-1"))

    def node(self):
        return Node(self.root, None)


@pytest.fixture
def tree(tmp_path):
    """tree(distro) -> a new, empty node tree (each call its own directory)."""
    count = []

    def make(distro="debian12"):
        count.append(1)
        return Tree(tmp_path / ("node%d" % len(count)), distro)
    return make


def driver(node_tree, running="6.1.0-28-amd64", arch="x86_64", secure_boot=None, mok_enrolled=None, **request):
    request.setdefault("default_branch", "580")
    env = {"running_kernel": running, "arch": arch, "mok_enrolled": mok_enrolled,
           "secure_boot": None if secure_boot is None else {"enabled": secure_boot, "source": "test"}}
    return dp.plan_driver(node_tree.node(), request, env)


def toolkit(node_tree, **request):
    request.setdefault("source", "nvidia")
    return toolkit_plan.plan_toolkit(node_tree.node(), request, {"running_kernel": "6.1.0-28-amd64", "arch": "x86_64"})


# --- GPU detection and incident I6 -------------------------------------------------------------

def test_no_gpu_is_skipped_unless_asked_to_install_anyway(tree):
    node = tree()
    skipped = driver(node)
    assert skipped["action"] == "skip"
    assert "nvidia_driver_install_without_gpu" in skipped["reason"]
    assert skipped["packages"] == [] and skipped["commands"] == []
    baked = driver(node, install_without_gpu=True)
    assert baked["action"] == "install"
    assert baked["flavour"] == "open"


@pytest.mark.parametrize("prepare", [
    lambda t: t.loaded_driver("535.129.03"),
    lambda t: t.dpkg({"nvidia-driver": "535.216.01-1~deb12u1", "nvidia-kernel-dkms": "535.216.01-1~deb12u1"}),
    lambda t: t.kernel("6.1.0-28-amd64").write("/lib/modules/6.1.0-28-amd64/kernel/drivers/video/nvidia.ko",
                                               "\x7fELF\0license=NVIDIA\0version=535.104.05\0srcversion=AB\0"),
], ids=["loaded", "packaged", "run-file-install"])
def test_preinstalled_driver_is_left_alone(tree, prepare):
    node = tree().gpu()
    prepare(node)
    plan = driver(node, install_without_gpu=True, branch="550")
    assert plan["action"] == "keep"
    assert "upgrades are not allowed" in plan["reason"]
    assert plan["packages"] == [] and plan["commands"] == [] and plan["repository"] is None
    assert driver(node)["action"] == "keep"


def test_different_branch_replaces_the_driver_only_when_allowed(tree):
    node = tree("rhel9").gpu().loaded_driver("535.129.03", open_modules=True)
    plan = driver(node, branch="550", allow_upgrade=True)
    assert plan["action"] == "upgrade"
    assert "dnf -y module switch-to nvidia-driver:550-open --allowerasing" in plan["commands"]
    assert driver(node, branch="535", allow_upgrade=True)["action"] == "keep"


def test_module_files_and_their_version_are_found(tree):
    node = tree().kernel("6.1.0-28-amd64")
    module_path = "/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia-current.ko.xz"
    node.write(module_path, "")
    with lzma.open(node.root + module_path, "wb") as handle:
        handle.write(b"\x7fELF\0license=NVIDIA\0version=550.54.15\0vermagic=6.1.0-28-amd64\0")
    installed = driver(node, install_without_gpu=True)["installed"]
    assert installed["module_files"] == [module_path]
    assert installed["present"] and installed["package_version"] == "550.54.15" and installed["branch"] == "550"


@pytest.mark.parametrize("device,branch,flavour", [
    (H100, "", "open"), (T4, "550", "open"), (V100, "", "proprietary"), (H100, "470", "proprietary")])
def test_flavour_follows_the_gpu_generation_and_branch(tree, device, branch, flavour):
    plan = driver(tree("debian12").gpu(device), branch=branch)
    assert plan["flavour"] == flavour, plan["flavour_reason"]
    assert driver(tree("debian12").gpu(device), flavour="proprietary")["flavour"] == "proprietary"


# --- Debian -------------------------------------------------------------------------------------

def test_debian_plan_pins_the_branch_and_adds_a_signed_non_free_source(tree):
    plan = driver(tree("debian12").gpu(), branch="535")
    assert plan["setup"] == "Debian" and plan["source"] == "distribution"
    assert plan["packages"] == ["nvidia-open-kernel-dkms=535.*", "firmware-nvidia-gsp=535.*", "nvidia-smi=535.*",
                                "libcuda1=535.*", "libnvidia-ml1=535.*"]
    assert plan["repository"] == {
        "kind": "deb822", "name": "nvidia-driver-debian", "types": ["deb"], "uris": ["http://deb.debian.org/debian"],
        "suites": ["bookworm", "bookworm-updates"], "components": ["contrib", "non-free", "non-free-firmware"],
        "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"}
    proprietary = driver(tree("debian13").gpu(V100))
    assert proprietary["packages"] == ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1"]
    assert proprietary["repository"]["suites"] == ["trixie", "trixie-updates"]


def test_debian_components_already_enabled_need_no_source(tree):
    node = tree("debian12").gpu()
    node.write("/etc/apt/sources.list", "deb http://deb.debian.org/debian bookworm main contrib non-free\n")
    assert driver(node)["repository"]["components"] == ["contrib", "non-free", "non-free-firmware"]
    node.write("/etc/apt/sources.list.d/firmware.list",
               "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian "
               "bookworm non-free-firmware\n")
    assert driver(node)["repository"] is None
    deb822 = tree("debian12").gpu().write("/etc/apt/sources.list.d/debian.sources",
                                          "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm "
                                          "bookworm-updates\nComponents: main contrib non-free non-free-firmware\n")
    assert driver(deb822)["repository"] is None
    mirror = driver(node, debian_mirror="http://mirror.example/debian")
    assert mirror["repository"]["uris"] == ["http://mirror.example/debian"]  # an explicit mirror is always used


MADISON = {
    "nvidia-open-kernel-dkms": ["535.261.03-1", "550.163.01-1"],
    "nvidia-kernel-dkms": ["535.309.01-0+deb12u1", "535.261.03-1", "550.163.01-1"],
}


def apt_stub(argv):
    """apt-cache madison as Debian 12 answers it (the open module lags the non-free updates)."""
    if argv[:2] != ["apt-cache", "madison"]:
        return 1, "", "not available in this test"
    lines = [" %s | %s | http://deb.debian.org/debian bookworm/non-free amd64 Packages" % (argv[2], v)
             for v in MADISON.get(argv[2], [])]
    return 0, "\n".join(lines) + "\n", ""


def test_debian_packages_follow_the_kernel_module_version(tree):
    node = tree("debian12").gpu()
    live = Node(node.root, apt_stub)
    plan = dp.plan_driver(live, {"branch": "535"}, {"running_kernel": "6.1.0-28-amd64", "arch": "x86_64"})
    assert plan["driver_version"] == "535.261.03"
    assert plan["packages"] == ["nvidia-open-kernel-dkms=535.261.03-*", "firmware-nvidia-gsp=535.261.03-*",
                                "nvidia-smi=535.261.03-*", "libcuda1=535.261.03-*", "libnvidia-ml1=535.261.03-*"]
    proprietary = dp.plan_driver(live, {"flavour": "proprietary"}, {"running_kernel": "6.1.0-28-amd64",
                                                                    "arch": "x86_64"})
    assert proprietary["driver_version"] == "550.163.01"
    assert package_versions.lockstep_version(MADISON["nvidia-kernel-dkms"], "535") == "535.309.01"
    assert package_versions.lockstep_version(MADISON["nvidia-kernel-dkms"], "470") is None


# apt-cache show of the open set on Debian 12 with bookworm-security: each package in both versions.
APT_SHOW = "".join(
    "Package: %s\nVersion: %s\n%sDescription: x\n with: a continuation line\n\n" % (name, version, source)
    for name, source in (("nvidia-open-kernel-dkms", "Source: nvidia-open-gpu-kernel-modules\n"),
                         ("firmware-nvidia-gsp", "Source: nvidia-graphics-drivers (535.261.03-1)\n"),
                         ("nvidia-smi", "Source: nvidia-graphics-drivers\n"), ("libcuda1", "Source: nvidia-graphics-drivers\n"),
                         ("libnvidia-ml1", "Source: nvidia-graphics-drivers\n"))
    for version in ("535.309.01-0+deb12u1", "535.261.03-1")
    if not (name == "nvidia-open-kernel-dkms" and version.startswith("535.309")))


def apt_show_stub(argv):
    if argv[:2] == ["apt-cache", "show"]:
        return 0, APT_SHOW, ""
    return apt_stub(argv)


def test_debian_pin_holds_every_binary_of_the_driver_sources(tree):
    node = tree("debian12").gpu()
    env = {"running_kernel": "6.1.0-28-amd64", "arch": "x86_64"}
    plan = dp.plan_driver(Node(node.root, apt_show_stub), {"branch": "535"}, env)
    assert plan["apt_pin_path"] == "/etc/apt/preferences.d/nvidia-driver"
    assert ("Package: src:nvidia-graphics-drivers:any src:nvidia-open-gpu-kernel-modules:any\n"
            "Pin: version 535.261.03-*\nPin-Priority: 1001\n") in plan["apt_pin"]
    assert "write /etc/apt/preferences.d/nvidia-driver (Pin: version 535.261.03-*)" in plan["commands"]
    # apt cannot tell the source packages: the planned names themselves are held.
    names_only = dp.plan_driver(Node(node.root, apt_stub), {"branch": "535"}, env)
    assert ("Package: nvidia-open-kernel-dkms:any firmware-nvidia-gsp:any nvidia-smi:any libcuda1:any "
            "libnvidia-ml1:any\nPin: version 535.261.03-*\n") in names_only["apt_pin"]
    # apt does not know the driver source yet (check mode on a fresh node): no version, no pin.
    unknown = dp.plan_driver(Node(node.root, lambda argv: (100, "", "")), {"branch": "535"}, env)
    assert unknown["driver_version"] is None and unknown["apt_pin"] is None
    assert not any("preferences" in c for c in unknown["commands"])


def test_dkms_builds_for_the_kernel_the_image_boots(tree):
    node = tree("debian12").gpu().kernel("6.1.0-27-amd64").kernel("6.1.0-28-amd64")
    plan = driver(node, running="6.1.0-27-amd64")
    assert plan["kernel"]["boot"] == "6.1.0-28-amd64"
    assert plan["kernel"]["dkms_targets"] == ["6.1.0-27-amd64", "6.1.0-28-amd64"]
    assert plan["headers"] == ["linux-headers-6.1.0-27-amd64", "linux-headers-6.1.0-28-amd64"]
    assert plan["commands"][-1] == "dkms autoinstall -k 6.1.0-28-amd64"
    # In a container or a chroot the running kernel is the build host's: nothing is built for it.
    container = driver(tree("debian12").gpu(), running="6.18.44-host")
    assert container["kernel"]["dkms_targets"] == [] and container["headers"] == []


# --- Ubuntu -------------------------------------------------------------------------------------

def test_ubuntu_uses_signed_prebuilt_modules_for_running_and_boot_kernels(tree):
    node = tree("ubuntu2204").gpu().kernel("5.15.0-91-generic").kernel("5.15.0-100-generic").efi(1)
    plan = driver(node, running="5.15.0-91-generic", branch="550")
    assert plan["setup"] == "Ubuntu" and plan["repository"] is None
    assert plan["packages"] == [
        "nvidia-headless-no-dkms-550-server-open", "nvidia-utils-550-server",
        "linux-modules-nvidia-550-server-open-generic",
        "linux-modules-nvidia-550-server-open-5.15.0-91-generic",
        "linux-modules-nvidia-550-server-open-5.15.0-100-generic"]
    assert plan["headers"] == [] and plan["module_path"] == "prebuilt"
    assert plan["apt_pin"] is None  # the branch is in the names
    assert plan["secure_boot"]["enabled"] is True and not plan["secure_boot"]["blocks_install"]
    assert plan["commands"][-1].startswith("apt-get install -y --no-install-recommends nvidia-headless-no-dkms-550")


def test_ubuntu_default_branch_and_dkms_path(tree):
    node = tree("ubuntu2404").gpu(V100).kernel("6.8.0-45-generic")
    plan = driver(node, running="6.8.0-45-generic", ubuntu_modules="dkms")
    assert plan["branch"] == "580"
    assert plan["packages"] == ["nvidia-headless-580-server", "nvidia-utils-580-server"]
    assert plan["headers"] == ["linux-headers-6.8.0-45-generic"]


# --- Secure Boot --------------------------------------------------------------------------------

def test_secure_boot_with_unsigned_dkms_modules_blocks_before_install(tree):
    node = tree("debian12").gpu().efi(1)
    plan = driver(node)
    assert plan["secure_boot"]["enabled"] is True
    assert plan["secure_boot"]["blocks_install"]
    message = plan["secure_boot"]["message"]
    assert "mokutil --import /var/lib/dkms/mok.pub" in message and "Nothing was installed" in message
    node.write("/var/lib/dkms/mok.pub", "key")
    assert not driver(node, mok_enrolled=True)["secure_boot"]["blocks_install"]
    assert driver(node, mok_enrolled=False)["secure_boot"]["blocks_install"]
    assert not driver(node, secure_boot_check=False)["secure_boot"]["blocks_install"]


def test_secure_boot_states_from_efivars(tree):
    assert node_os.secure_boot(tree().node())["enabled"] is False  # no /sys/firmware/efi: BIOS boot
    assert node_os.secure_boot(tree().efi(0).node())["enabled"] is False
    assert node_os.secure_boot(tree().efi(1, setup_mode=1).node())["enabled"] is False  # setup mode: not enforced
    enabled = node_os.secure_boot(tree().efi(1).node())
    assert enabled["enabled"] is True and "efivars" in enabled["source"]
    unknown = tree().write("/sys/firmware/efi/runtime", "")
    assert node_os.secure_boot(unknown.node())["enabled"] is None
    assert node_os.secure_boot(unknown.node(), run=lambda argv: (0, "SecureBoot enabled\n", ""))["enabled"] is True
    assert driver(tree("ubuntu2204").gpu(), branch="550", secure_boot=True,
                  ubuntu_modules="dkms")["secure_boot"]["blocks_install"]


# --- RHEL-compatible and Amazon Linux ------------------------------------------------------------

def test_rhel9_plan_uses_the_cuda_repository_and_the_open_module_stream(tree):
    node = tree("rhel9").gpu().kernel("5.14.0-427.13.1.el9_4.x86_64", where="modules")
    plan = driver(node, running="5.14.0-427.13.1.el9_4.x86_64", branch="550")
    assert plan["setup"] == "RedHat" and plan["package_manager"] == "dnf"
    assert plan["repository"] == {
        "kind": "yum", "name": "cuda-nvidia-driver", "description": "NVIDIA CUDA repository (driver packages)",
        "baseurl": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64",
        "gpgkey": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub",
        "gpgcheck": True, "enabled": True}
    assert plan["module_stream"] == "nvidia-driver:550-open"
    assert plan["packages"] == ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"]
    assert plan["headers"] == ["kernel-devel-5.14.0-427.13.1.el9_4.x86_64"]
    assert plan["commands"] == [
        "write /etc/yum.repos.d/cuda-nvidia-driver.repo (baseurl https://developer.download.nvidia.com/compute/cuda/"
        "repos/rhel9/x86_64, gpgcheck=1, gpgkey https://developer.download.nvidia.com/compute/cuda/repos/rhel9/"
        "x86_64/D42D0685.pub)",
        "write /etc/modprobe.d/blacklist-nouveau.conf; regenerate the initramfs if it changed",
        "dnf install -y kernel-devel-5.14.0-427.13.1.el9_4.x86_64",
        "dnf -y module enable nvidia-driver:550-open",
        "dnf install -y nvidia-driver-cuda kmod-nvidia-open-dkms"]


@pytest.mark.parametrize("distro,request_,stream,packages", [
    ("rhel8", {}, "nvidia-driver:open-dkms", ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"]),
    ("rocky9", {"flavour": "proprietary"}, "nvidia-driver:latest-dkms",
     ["nvidia-driver-cuda", "kmod-nvidia-latest-dkms"]),
    ("rhel9", {"flavour": "proprietary", "branch": "535"}, "nvidia-driver:535-dkms",
     ["nvidia-driver-cuda", "kmod-nvidia-latest-dkms"]),
    ("al2023", {"branch": "570"}, "nvidia-driver:570-open", ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"]),
])
def test_module_streams(tree, distro, request_, stream, packages):
    plan = driver(tree(distro).gpu(), **request_)
    assert plan["module_stream"] == stream
    assert plan["packages"] == packages


def test_rhel10_holds_the_branch_with_versionlock(tree):
    plan = driver(tree("rhel10").gpu(), branch="580")
    assert plan["module_stream"] is None
    assert plan["versionlock"] == ["*nvidia*580*"]
    assert plan["packages"] == ["nvidia-driver-cuda-580.*", "kmod-nvidia-open-dkms-580.*"]
    assert plan["repository"]["gpgkey"].endswith("/rhel10/x86_64/CDF6BA43.pub")
    assert "dnf versionlock add '*nvidia*580*'" in plan["commands"]


def test_amazon_linux_2023_and_2(tree):
    al2023 = driver(tree("al2023").gpu(), arch="aarch64")
    assert al2023["repository"]["baseurl"].endswith("/amzn2023/sbsa")
    al2 = driver(tree("al2").gpu(T4), branch="550", flavour="proprietary")
    assert al2["setup"] == "Amazon-2" and al2["package_manager"] == "yum"
    assert al2["repository"]["baseurl"].endswith("/rhel7/x86_64")
    assert al2["packages"] == ["nvidia-driver-latest-dkms-550.*", "kmod-nvidia-latest-dkms-550.*"]
    assert al2["commands"][-1] == "yum install -y nvidia-driver-latest-dkms-550.* kmod-nvidia-latest-dkms-550.*"


def test_every_repository_url_can_point_at_a_mirror(tree):
    mirror = driver(tree("rhel9").gpu(), repo_base="https://mirror.example/cuda")
    assert mirror["repository"]["baseurl"] == "https://mirror.example/cuda/rhel9/x86_64"
    assert mirror["repository"]["gpgkey"] == "https://mirror.example/cuda/rhel9/x86_64/D42D0685.pub"
    full = driver(tree("rhel9").gpu(), repo_url="http://repo.local/nv", repo_key_url="http://repo.local/key.pub")
    assert (full["repository"]["baseurl"], full["repository"]["gpgkey"]) == (
        "http://repo.local/nv", "http://repo.local/key.pub")


def test_offline_directory(tree):
    node = tree("debian12").gpu()
    for name in ("nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "libnvidia-ml1"):
        for version in ("535.261.03-1", "550.163.01-1") + (() if "open" in name else ("535.309.01-0+deb12u1",)):
            node.write("/srv/nv/%s_%s_amd64.deb" % (name, version), "")
    plan = driver(node, source="offline", offline_dir="/srv/nv", branch="535")
    assert plan["repository"] is None
    assert plan["offline_files"][0] == "/srv/nv/nvidia-open-kernel-dkms_535.261.03-1_amd64.deb"
    assert all("535.261.03-1" in f for f in plan["offline_files"]), plan["offline_files"]
    newest = driver(node, source="offline", offline_dir="/srv/nv")
    assert all("550.163.01" in f for f in newest["offline_files"])
    with pytest.raises(node_os.PlanError,
                       match="offline directory /srv/nv has no package file for .* at version 470.*"):
        driver(node, source="offline", offline_dir="/srv/nv", branch="470")


def test_sources_that_do_not_exist_for_a_distribution_are_refused(tree):
    with pytest.raises(node_os.PlanError, match="no NVIDIA driver packages of its own"):
        driver(tree("rhel9").gpu(), source="distribution")
    with pytest.raises(node_os.PlanError, match="RPM distributions only"):
        driver(tree("debian12").gpu(), source="nvidia")
    alpine = tree("debian12").write("/etc/os-release", 'ID=alpine\nVERSION_ID=3.20\n')
    with pytest.raises(node_os.PlanError, match="unsupported distribution"):
        driver(alpine.gpu())


# --- reboot -------------------------------------------------------------------------------------

def test_reboot_is_required_until_the_installed_driver_runs(tree):
    bake = tree().dpkg({"nvidia-open-kernel-dkms": "535.261.03-1"})
    assert driver(bake, install_without_gpu=True)["reboot"]["required"]
    assert "boots on a GPU node" in driver(bake, install_without_gpu=True)["reboot"]["reasons"][0]
    stale = tree().gpu().loaded_driver("535.129.03").dpkg({"nvidia-open-kernel-dkms": "550.163.01-1"})
    assert driver(stale)["reboot"]["reasons"] == ["driver 535.129.03 is loaded but 550.163.01 is installed"]
    current = tree().gpu().loaded_driver("550.163.01").dpkg({"nvidia-open-kernel-dkms": "550.163.01-1"})
    assert driver(current)["reboot"] == {"required": False, "reasons": []}
    nouveau = tree().gpu().dpkg({"nvidia-kernel-dkms": "535.261.03-1"}).write(
        "/proc/modules", "nouveau 1 0 - Live 0x0\n")
    assert "nouveau is loaded and holds the GPU" in driver(nouveau)["reboot"]["reasons"]


# --- container toolkit --------------------------------------------------------------------------

def test_toolkit_apt_plan_pins_the_four_packages(tree):
    plan = toolkit(tree("ubuntu2204"), version="1.17.8-1")
    assert plan["action"] == "install"
    assert plan["repository"] == {
        "kind": "deb822", "name": "nvidia-container-toolkit", "types": ["deb"],
        "uris": ["https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"], "suites": ["/"],
        "components": [], "signed_by": "https://nvidia.github.io/libnvidia-container/gpgkey"}
    assert plan["packages"] == ["nvidia-container-toolkit=1.17.8-1", "nvidia-container-toolkit-base=1.17.8-1",
                                "libnvidia-container-tools=1.17.8-1", "libnvidia-container1=1.17.8-1"]
    assert "Pin: version 1.17.8-1\nPin-Priority: 1001" in plan["apt_pin"]
    assert plan["apt_pin_path"] == "/etc/apt/preferences.d/nvidia-container-toolkit"
    assert toolkit(tree("debian12"), version="1.17.8")["packages"][0] == "nvidia-container-toolkit=1.17.8-*"


def test_toolkit_rpm_plan_checks_signatures(tree):
    plan = toolkit(tree("rhel9"), version="1.17.8-1")
    assert plan["repository"] == {
        "kind": "yum", "name": "nvidia-container-toolkit", "description": "NVIDIA container toolkit",
        "baseurl": "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
        "gpgkey": "https://nvidia.github.io/libnvidia-container/gpgkey", "gpgcheck": True, "repo_gpgcheck": True,
        "enabled": True}
    assert plan["packages"] == ["nvidia-container-toolkit-1.17.8-1", "nvidia-container-toolkit-base-1.17.8-1",
                                "libnvidia-container-tools-1.17.8-1", "libnvidia-container1-1.17.8-1"]
    assert plan["apt_pin"] is None
    assert plan["commands"][-1] == "dnf install -y " + " ".join(plan["packages"])
    mirror = toolkit(tree("al2"), repo_base="http://mirror.local/nvct", channel="experimental")
    assert mirror["repository"]["baseurl"] == "http://mirror.local/nvct/experimental/rpm/$basearch"
    assert mirror["repository"]["gpgkey"] == "http://mirror.local/nvct/gpgkey"
    assert mirror["commands"][-1].startswith("yum install -y")


FOUR = dict((name, "1.17.8-1") for name in toolkit_plan.TOOLKIT_PACKAGES)


@pytest.mark.parametrize("installed,request_,action", [
    ({}, {"version": "1.17.8-1"}, "install"),
    (FOUR, {"version": "1.17.8-1"}, "keep"),
    (FOUR, {"version": "1.17.8"}, "keep"),
    (FOUR, {}, "keep"),
    (FOUR, {"version": "1.18.0-1"}, "refused"),
    (FOUR, {"version": "1.17.7-1"}, "refused"),
    (FOUR, {"version": "1.18.0-1", "allow_upgrade": True}, "change"),
    ({"nvidia-container-toolkit": "1.17.8-1"}, {"version": "1.17.8-1"}, "install"),
    ({"nvidia-container-toolkit": "1.17.8-1"}, {}, "install"),
])
def test_toolkit_actions(installed, request_, action):
    assert toolkit_plan.toolkit_action(request_, installed)[0] == action


def test_toolkit_mismatched_versions_are_reported():
    mixed = dict(FOUR, **{"libnvidia-container1": "1.18.0-1"})
    action, reason = toolkit_plan.toolkit_action({}, mixed)
    assert action == "keep" and "different versions" in reason and "libnvidia-container1 1.18.0-1" in reason


# --- the module's interface -------------------------------------------------------------------------

def test_documentation_matches_the_argument_spec():
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert set(documented) == set(module.ARGUMENT_SPEC)
    for name, spec in module.ARGUMENT_SPEC.items():
        assert documented[name].get("default") == spec.get("default"), name
        assert documented[name].get("choices") == spec.get("choices"), name
    yaml.safe_load(module.EXAMPLES)
    yaml.safe_load(module.RETURN)


def test_versions():
    assert package_versions.upstream("3:550.54.15-1.el9") == "550.54.15"
    assert package_versions.branch_of("535.216.01-1~deb12u1") == "535"
    assert package_versions.branch_of("1.17.8-1") is None
    ordered = sorted(["550.163.01-1", "535.261.03-1", "1:470.1-1", "535.261.03-1~deb12u1"],
                     key=package_versions.version_key)
    assert ordered == ["535.261.03-1~deb12u1", "535.261.03-1", "550.163.01-1", "1:470.1-1"]


def test_a_branch_the_repositories_do_not_carry_is_refused_at_plan_time(tree):
    node = tree("debian12").gpu()
    bookworm = {"nvidia-open-kernel-dkms": ["535.261.03-1"], "nvidia-kernel-dkms": ["535.309.01-0+deb12u1", "535.261.03-1"]}

    def madison(argv):
        lines = [" %s | %s | http://deb.debian.org/debian bookworm/non-free amd64 Packages" % (argv[2], v)
                 for v in bookworm.get(argv[2], [])]
        return 0, "\n".join(lines) + "\n", ""
    env = {"running_kernel": "6.1.0-28-amd64", "arch": "x86_64"}
    # apt's lists are not yet those of the source the role adds (its first plan): nothing to judge.
    assert dp.plan_driver(Node(node.root, madison), {"branch": "550"}, env)["driver_version"] is None
    # The role added it and refreshed its lists, then plans again.
    node.write("/etc/apt/sources.list.d/nvidia-driver-debian.sources",
               "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
               "Components: contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    with pytest.raises(node_os.PlanError) as refused:
        dp.plan_driver(Node(node.root, madison), {"branch": "550"}, env)
    assert str(refused.value) == (
        "nvidia_driver_branch is 550, but the configured repositories do not carry nvidia-open-kernel-dkms in branch "
        "550 (apt-cache madison nvidia-open-kernel-dkms: 535.261.03-1). Set nvidia_driver_branch to 535 (empty: the "
        "newest offered), or make a repository that carries branch 550 known to apt (nvidia_driver_debian_mirror, "
        "nvidia_driver_debian_suites) or install from nvidia_driver_offline_dir.")
    assert dp.plan_driver(Node(node.root, madison), {"branch": "535"}, env)["driver_version"] == "535.261.03"
    # apt knows no candidate yet (its lists lack the component): nothing to judge, the plan goes on.
    assert dp.plan_driver(Node(node.root, lambda argv: (0, "", "")), {"branch": "550"}, env)["driver_version"] is None


def test_a_branch_the_offline_directory_lacks_names_the_branches_it_holds(tree):
    node = tree("debian12").gpu()
    node.write("/srv/nv/nvidia-open-kernel-dkms_535.261.03-1_amd64.deb", "")
    with pytest.raises(node_os.PlanError, match=r"it holds 535\.261\.03-1\)\. Set nvidia_driver_branch to 535 .*"
                                                r"put branch 550's package files into nvidia_driver_offline_dir"):
        driver(node, source="offline", offline_dir="/srv/nv", branch="550")


def test_an_ubuntu_branch_apt_does_not_carry_is_refused_at_plan_time(tree):
    node = tree("ubuntu2204").gpu().kernel("5.15.0-91-generic")
    names = "nvidia-utils-535-server\nnvidia-utils-570-server\nnvidia-utils-535\nnvidia-utils-580-server\n"

    def pkgnames(argv):
        return (0, names, "") if argv[:2] == ["apt-cache", "pkgnames"] else (1, "", "")
    env = {"running_kernel": "5.15.0-91-generic", "arch": "x86_64"}
    with pytest.raises(node_os.PlanError) as refused:
        dp.plan_driver(Node(node.root, pkgnames), {"branch": "550"}, env)
    assert str(refused.value) == (
        "nvidia_driver_branch is 550, but the configured repositories do not carry nvidia-utils-550-server (apt-cache "
        "pkgnames nvidia-utils-: server branches 535, 570, 580). Set nvidia_driver_branch (or, when it is empty, "
        "nvidia_driver_ubuntu_default_branch) to one of them, or install from nvidia_driver_offline_dir.")
    assert dp.plan_driver(Node(node.root, pkgnames), {"branch": "570"}, env)["branch"] == "570"
    # No package lists yet (a fresh image): nothing to judge.
    assert dp.plan_driver(Node(node.root, lambda argv: (0, "", "")), {"branch": "550"}, env)["branch"] == "550"


# --- an exact version inside a branch (security updates) -------------------------------------------

def test_a_version_inside_the_installed_branch_moves_the_driver_only_when_allowed(tree):
    node = tree("rhel9").gpu().loaded_driver("535.261.03", open_modules=True)
    kept = driver(node, branch="535", version="535.309.01")
    assert kept["action"] == "keep" and kept["packages"] == []
    assert kept["reason"] == ("driver 535.261.03 (loaded) is left alone: version 535.309.01 is asked for, 535.261.03 "
                              "is on the node, but upgrades are not allowed (set nvidia_driver_allow_upgrade: true)")
    moved = driver(node, version="535.309.01", allow_upgrade=True)  # the version names its branch
    assert moved["action"] == "upgrade" and moved["branch"] == "535"
    assert moved["packages"] == ["nvidia-driver-cuda-535.309.01*", "kmod-nvidia-open-dkms-535.309.01*"]
    assert driver(node, version="535.261.03", allow_upgrade=True)["action"] == "keep"


def test_debian_pins_every_package_at_the_asked_version_and_refuses_one_apt_lacks(tree):
    node = tree("debian12").gpu()
    node.write("/etc/apt/sources.list.d/nvidia-driver-debian.sources",
               "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
               "Components: contrib non-free non-free-firmware\n"
               "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    live = Node(node.root, apt_stub)
    env = {"running_kernel": "6.1.0-28-amd64", "arch": "x86_64"}
    older = dp.plan_driver(live, {"flavour": "proprietary", "version": "535.261.03"}, env)
    assert older["driver_version"] == "535.261.03" and older["branch"] == "535"
    assert older["packages"][0] == "nvidia-kernel-dkms=535.261.03-*"
    with pytest.raises(node_os.PlanError) as refused:
        dp.plan_driver(live, {"flavour": "proprietary", "version": "535.274.02"}, env)
    assert str(refused.value).startswith(
        "nvidia_driver_version is 535.274.02, but the configured repositories do not carry nvidia-kernel-dkms at "
        "version 535.274.02 (apt-cache madison nvidia-kernel-dkms: 550.163.01-1, 535.309.01-0+deb12u1, 535.261.03-1).")


@pytest.mark.parametrize("request_,message", [
    ({"version": "535"}, "nvidia_driver_version is '535', which is not an NVIDIA driver version"),
    ({"version": "latest"}, "nvidia_driver_version is 'latest', which is not an NVIDIA driver version"),
    ({"version": "550.163.01", "branch": "535"}, "nvidia_driver_version 550.163.01 is not in nvidia_driver_branch 535"),
])
def test_a_version_that_is_no_version_or_outside_the_branch_is_refused(tree, request_, message):
    with pytest.raises(node_os.PlanError, match=message):
        driver(tree().gpu(), **request_)


def test_ubuntu_prebuilt_module_packages_keep_their_kernel_versions(tree):
    node = tree("ubuntu2204").gpu()
    plan = driver(node, running="5.15.0-91-generic", version="550.163.01")
    assert plan["branch"] == "550"
    assert "nvidia-utils-550-server=550.163.01-*" in plan["packages"]
    assert [p for p in plan["packages"] if p.startswith("linux-modules-nvidia-")] == [
        "linux-modules-nvidia-550-server-open-generic", "linux-modules-nvidia-550-server-open-5.15.0-91-generic"]
