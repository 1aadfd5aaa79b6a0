"""The nvidia_driver role: Debian's package path with real apt in a Debian 12 node container,
and incident I6 (a pre-installed driver is left alone) through a node tree on this machine.

The driver packages are STAND-INs named and versioned like Debian's non-free packages (535 and
550 branches), served from the local signed test repository; there is no GPU, no kernel module
and no DKMS build here, so the node plays an image bake (nvidia_driver_install_without_gpu).
"""
import json
import os
import re
import subprocess
import sys

import pytest

import nvidia_node
import warm_ansible

DRIVER = [{"role": "gpunode.nvidia.nvidia_driver"}]
SUMMARY = [{"name": "Summary",
            "ansible.builtin.include_role": {"name": "gpunode.nvidia.nvidia_driver", "tasks_from": "summary"}}]
OPEN_SET = ("nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "libnvidia-ml1")


@pytest.fixture(scope="session")
def nvidia_repo():
    nvidia_node.ensure_image()
    return nvidia_node.ensure_repo()


@pytest.fixture
def node(nvidia_repo):
    container = nvidia_node.NodeContainer()
    try:
        container.start()
        container.serve_repo(nvidia_repo)
        yield container
    finally:
        container.close()


def driver_vars(node, **extra):
    variables = {"nvidia_driver_debian_mirror": node.url + "/debian", "nvidia_driver_debian_suites": ["bookworm"],
                 "nvidia_driver_debian_signed_by": node.url + "/keys/nvidia-test.asc"}
    variables.update(extra)
    return variables


def summary_of(result):
    return [m for m in result.messages() if "REBOOT REQUIRED" in m or "no reboot required" in m]


def test_debian_bake_install_idempotence_and_branch_upgrade(node):
    skipped = node.play(DRIVER, driver_vars(node, nvidia_driver_branch="535"))
    assert not skipped.failed and skipped.changed == 0, skipped.changed_tasks()
    assert any("no NVIDIA GPU in /sys/bus/pci/devices" in m for m in skipped.messages())

    blocked = node.play(DRIVER, driver_vars(node, nvidia_driver_install_without_gpu=True,
                                            nvidia_driver_secure_boot="enabled"))
    assert blocked.failed
    assert any("Secure Boot is enabled" in m and "mokutil --import" in m for m in blocked.failure_messages())
    assert node.packages() == {} and node.read("/etc/modprobe.d/blacklist-nouveau.conf") is None

    bake = driver_vars(node, nvidia_driver_install_without_gpu=True, nvidia_driver_branch="535")
    first = node.play(DRIVER, bake, post_tasks=SUMMARY)
    assert not first.failed, first.failure_messages()
    # nvidia-smi and libcuda1 have a newer 535.309.01 update; they follow the open module's 535.261.03.
    assert node.packages() == dict((name, "535.261.03-1") for name in OPEN_SET)
    assert "blacklist nouveau" in node.read("/etc/modprobe.d/blacklist-nouveau.conf")
    sources = node.read("/etc/apt/sources.list.d/nvidia-driver-debian.sources")
    assert "Signed-By: /etc/apt/keyrings/nvidia-driver-debian.asc" in sources
    assert "Components: contrib non-free non-free-firmware" in sources
    assert summary_of(first) and summary_of(first)[0].startswith("REBOOT REQUIRED: the NVIDIA driver is installed")

    again = node.play(DRIVER, bake, post_tasks=SUMMARY)
    assert not again.failed and again.changed == 0, again.changed_tasks()
    assert summary_of(again)[0].startswith("REBOOT REQUIRED")  # still true: nothing loaded it yet

    kept = node.play(DRIVER, dict(bake, nvidia_driver_branch="550"))
    assert kept.changed == 0, kept.changed_tasks()
    assert any("upgrades are not allowed" in m for m in kept.messages())
    assert node.packages()["nvidia-smi"] == "535.261.03-1"

    upgraded = node.play(DRIVER, dict(bake, nvidia_driver_branch="550", nvidia_driver_allow_upgrade=True))
    assert not upgraded.failed, upgraded.failure_messages()
    assert node.packages() == dict((name, "550.163.01-1") for name in OPEN_SET)


def node_apt_state(node):
    """What a refused run must leave as it was: apt's sources and keyrings, and /tmp (check mode's scratch lists)."""
    return node.sh("ls -A /etc/apt/sources.list.d /etc/apt/keyrings /tmp 2>&1").stdout


@pytest.mark.parametrize("branch", ["580", "5800"])
def test_a_branch_the_repository_does_not_carry_is_refused_in_check_mode_and_for_real_alike(node, branch):
    """Check mode refuses with the real run's words (it reads the planned source into scratch lists, where it
    used to plan nvidia-driver=5800.*), and neither run leaves the source, its key or its lists on the node."""
    before = node_apt_state(node)
    refusal = ("nvidia_driver_branch is %s, but the configured repositories do not carry nvidia-open-kernel-dkms in "
               "branch %s (apt-cache madison nvidia-open-kernel-dkms: 550.163.01-1, 535.261.03-1). Set "
               "nvidia_driver_branch to 535 or 550" % (branch, branch))
    variables = driver_vars(node, nvidia_driver_install_without_gpu=True, nvidia_driver_branch=branch)
    for check in (True, False):
        refused = node.play(DRIVER, variables, check=check)
        assert refused.failed
        message = refused.failure_messages()[-1]
        assert message.startswith(refusal), (check, message)
        assert "nvidia_driver_debian_mirror, nvidia_driver_debian_suites" in message
        assert node_apt_state(node) == before, check
        assert node.read("/etc/apt/sources.list.d/nvidia-driver-debian.sources") is None
    assert node.packages() == {}  # refused by the plan, not by apt halfway
    assert node.read("/etc/modprobe.d/blacklist-nouveau.conf") is None


def test_debian_offline_directory_proprietary_modules(node):
    offline = {"nvidia_driver_install_without_gpu": True, "nvidia_driver_source": "offline",
               "nvidia_driver_offline_dir": nvidia_node.NODE_REPO + "/offline/driver",
               "nvidia_driver_flavour": "proprietary", "nvidia_driver_branch": "535"}
    first = node.play(DRIVER, offline)
    assert not first.failed, first.failure_messages()
    # Proprietary modules follow the non-free update; every package at the module's version.
    assert node.packages() == dict((name, "535.309.01-0+deb12u1") for name in
                                   ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1"))
    assert node.read("/etc/apt/sources.list.d/nvidia-driver-debian.sources") is None
    assert node.play(DRIVER, offline).changed == 0


# Depends on the live Debian archive. The node has the security suite a real Debian 12 node has:
# it carries a newer non-free driver (535.309.01) while the contrib open module stays at 535.261.03.
SECURITY_SOURCE = """Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_real_debian_driver_packages_from_debian_archive(nvidia_repo):
    """Debian's REAL non-free driver packages (no stand-in), from deb.debian.org, in a node
    container: the package path, the contrib open module and the lockstep version are real.
    The DKMS build is skipped by Debian's own hook: the container has no headers for the
    host's kernel (and no GPU to load a module on)."""
    node = nvidia_node.NodeContainer()
    try:
        node.start()
        node.sh("cat > /etc/apt/sources.list.d/debian-security.sources <<'EOF'\n%sEOF" % SECURITY_SOURCE)
        bake = {"nvidia_driver_install_without_gpu": True, "nvidia_driver_branch": "535"}
        checked = node.play(DRIVER, bake, check=True)
        assert not checked.failed, checked.failure_messages()
        assert node.packages() == {} and node.read("/etc/apt/preferences.d/nvidia-driver") is None
        first = node.play(DRIVER, bake, post_tasks=SUMMARY)
        assert not first.failed, first.failure_messages()
        installed = node.packages()
        # Same-source dependencies (nvidia-alternative, libnvidia-ptxjitcompiler1, ...) follow the module
        # too, although the security suite offers them newer.
        module_version = installed["nvidia-open-kernel-dkms"]
        same_source = ("nvidia-alternative", "libnvidia-ptxjitcompiler1", "nvidia-open-kernel-support")
        assert set(installed[name] for name in OPEN_SET + same_source) == {module_version}, installed
        assert module_version.startswith("535."), installed
        pin = node.read("/etc/apt/preferences.d/nvidia-driver")
        assert "src:nvidia-graphics-drivers:any" in pin and "src:nvidia-open-gpu-kernel-modules:any" in pin, pin
        assert "Pin: version %s-*" % module_version.split("-")[0] in pin, pin
        # ... and `apt upgrade` leaves the driver where it is.
        upgradable = re.findall(r"^Inst (\S+)", node.sh("apt-get -s upgrade").stdout, re.M)
        assert not set(upgradable) & set(installed), upgradable
        assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in node.read(
            "/etc/apt/sources.list.d/nvidia-driver-debian.sources")
        dkms = node.sh("dkms status").stdout
        assert "nvidia-current-open/535." in dkms and "installed" not in dkms, dkms
        assert summary_of(first)[0].startswith("REBOOT REQUIRED")
        again = node.play(DRIVER, bake)
        assert not again.failed and again.changed == 0, again.changed_tasks()
    finally:
        node.close()


# --- incident I6 through a node tree ------------------------------------------------------------

def write(root, path, text):
    local = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(local, "w") as handle:
        handle.write(text)


def run_on_tree(tmp_path, root, extra_vars):
    """ansible-playbook on this machine with nvidia_driver_root pointing at a node tree."""
    play = [{"hosts": "localhost", "gather_facts": False, "roles": DRIVER}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps(dict(extra_vars, nvidia_driver_root=str(root))))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(nvidia_node.REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(nvidia_node.REPO, ".cache", "collections"),
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            str(playbook), "-e", "@%s" % variables, "-e", "ansible_python_interpreter=%s" % sys.executable]
    proc = warm_ansible.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                            timeout=300, check=False)
    return nvidia_node.PlayResult(proc, "localhost")


@pytest.fixture
def preinstalled_tree(tmp_path):
    """A GPU node whose image carries a loaded 535 driver (the pre-baked image of incident I6)."""
    root = tmp_path / "node"
    write(root, "/etc/os-release", 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        write(root, "/sys/bus/pci/devices/0000:65:00.0/" + name, value + "\n")
    write(root, "/proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.129.03  Release Build  Tue Oct 10 2023\n")
    write(root, "/proc/modules", "nvidia_uvm 1 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n")
    return root


@pytest.mark.parametrize("extra", [{}, {"nvidia_driver_install_without_gpu": True},
                                   {"nvidia_driver_branch": "550"}, {"nvidia_driver_flavour": "proprietary"}],
                         ids=["defaults", "install-without-gpu", "other-branch", "other-flavour"])
def test_preinstalled_loaded_driver_gets_no_task_changed(tmp_path, preinstalled_tree, extra):
    result = run_on_tree(tmp_path, preinstalled_tree, extra)
    assert not result.failed, result.failure_messages() or result.stderr[-2000:]
    assert result.changed == 0, result.changed_tasks()
    assert any(m.startswith("NVIDIA driver: keep (driver 535.129.03 (loaded)") for m in result.messages())


def test_a_tree_is_never_installed_into(tmp_path):
    root = tmp_path / "empty-image"
    write(root, "/etc/os-release", 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    result = run_on_tree(tmp_path, root, {"nvidia_driver_install_without_gpu": True})
    assert result.failed
    assert any("installs only on the running system" in m for m in result.failure_messages())
    assert result.changed == 0
