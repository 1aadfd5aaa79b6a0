"""Secure Boot signing and the driver's locked version set, with Debian's real tools in a node container.

Real: Debian's dkms 3.0, openssl, kmod's modinfo, the kernel's scripts/sign-file from Debian's
linux-headers-amd64, mokutil and unattended-upgrades (image local/gpunode-dkms:bookworm,
tests/testbed/dkms-image.sh), apt and dpkg. STAND-INS: the NVIDIA driver packages (tests/testbed/nvidia-repo.sh:
named and versioned like Debian's, 535.261.03-1 and the 535.309.01-0+deb12u1 update of the non-free side) and
the Secure Boot firmware (a container has no EFI variables; the firmware's answers are unit-tested from fake
trees in tests/unit/plugins/module_utils/install/test_driver_integrity.py). The signed test module is built, never loaded (a container
shares the host's kernel).
"""
import json
import os
import re
import subprocess
import sys

import pytest

import nvidia_node

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import secure_boot

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import version_lock

DKMS_IMAGE = "local/gpunode-dkms:bookworm"
DRIVER = [{"role": "gpunode.nvidia.nvidia_driver"}]
OPEN_SET = ("nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "libnvidia-ml1")
OLD = "535.261.03-1"
# Debian 12's archive carries no 550: the stand-in archive's 550 packages are kept out of this node, so the only
# upgrade is the non-free side's 535.309.01 update (the open kernel module stays at 535.261.03).
NO_550 = "Package: nvidia-* libnvidia-* libcuda1 firmware-nvidia-gsp\nPin: version 550.*\nPin-Priority: -1\n"
UNATTENDED_TEST_CONF = """// Test only: let unattended-upgrades take anything from the stand-in archive.
Unattended-Upgrade::Origins-Pattern { "origin=gpunode test (stand-in for Debian)"; };
"""
TEST_MODULE_C = r"""#include <linux/module.h>
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpunode.nvidia signing test module");
static int __init signtest_init(void) { return 0; }
static void __exit signtest_exit(void) { }
module_init(signtest_init);
module_exit(signtest_exit);
"""
TEST_MODULE_DKMS = """PACKAGE_NAME="gpunode-signtest"
PACKAGE_VERSION="1.0"
BUILT_MODULE_NAME[0]="gpunode_signtest"
DEST_MODULE_LOCATION[0]="/updates/dkms"
MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build modules"
CLEAN="true"
AUTOINSTALL="yes"
"""


@pytest.fixture(scope="module")
def dkms_image():
    nvidia_node.ensure_image()
    subprocess.run([nvidia_node.TESTBED + "/dkms-image.sh"], check=True, timeout=1800)
    return DKMS_IMAGE


@pytest.fixture
def node(dkms_image):
    container = nvidia_node.NodeContainer(prefix="gpunode-sb-node", image=dkms_image)
    try:
        container.start()
        yield container
    finally:
        container.close()


def write(node, path, text):
    node.sh("mkdir -p \"$(dirname %s)\" && cat > %s <<'GPUNODE_EOF'\n%sGPUNODE_EOF" % (path, path, text))


def add_test_module(node):
    """The test module's source registered with DKMS; returns the kernel it is built for and its installed path."""
    kernel = node.sh("ls /lib/modules").stdout.split()[0]
    write(node, "/usr/src/gpunode-signtest-1.0/gpunode_signtest.c", TEST_MODULE_C)
    write(node, "/usr/src/gpunode-signtest-1.0/Makefile", "obj-m := gpunode_signtest.o\n")
    write(node, "/usr/src/gpunode-signtest-1.0/dkms.conf", TEST_MODULE_DKMS)
    return kernel, "/lib/modules/%s/updates/dkms/gpunode_signtest.ko" % kernel


def test_real_dkms_signs_a_module_with_the_organisation_key_it_is_configured_with(node):
    # The organisation's key and certificate, where the role installs them, and the role's DKMS configuration.
    node.sh("mkdir -p /var/lib/gpunode/secure-boot && cd /var/lib/gpunode/secure-boot && "
            "openssl req -new -x509 -newkey rsa:2048 -nodes -days 30 -subj '/CN=Example Corp GPU fleet signing/' "
            "-keyout signing.key -out signing.pem 2>/dev/null && openssl x509 -in signing.pem -outform DER "
            "-out signing.der")
    write(node, secure_boot.DKMS_SIGNING_CONF, secure_boot.dkms_signing_conf())
    kernel, module = add_test_module(node)
    built = node.sh("dkms install gpunode-signtest/1.0 -k %s 2>&1" % kernel, timeout=600)
    assert "Signing module" in built.stdout or "sign" in built.stdout.lower(), built.stdout
    signer = node.sh("modinfo -F signer %s" % module).stdout.strip()
    print("modinfo -F signer %s: %s" % (module, signer))
    print(node.sh("modinfo %s | grep -E '^(signer|sig_key|sig_hashalgo|vermagic)'" % module).stdout)
    assert signer == "Example Corp GPU fleet signing"
    tail = node.sh("tail -c %d %s" % (len(secure_boot.MODULE_SIGNATURE), module)).stdout
    assert tail.encode() == secure_boot.MODULE_SIGNATURE  # what the doctor rules read without modinfo
    # Real mokutil in a container: no EFI variables, so no enrollment can be read or queued here.
    answer = node.sh("mokutil --test-key /var/lib/gpunode/secure-boot/signing.der 2>&1", check=False).stdout
    assert secure_boot.enrollment_state(answer) != "enrolled", answer


def unattended_dry_run(node):
    """Packages unattended-upgrades would upgrade now (its own dry run)."""
    out = node.sh("unattended-upgrade --dry-run --debug 2>&1", timeout=600).stdout
    match = re.search(r"^Packages that will be upgraded: (.*)$", out, re.M)
    return sorted(match.group(1).split()) if match else [], out


def test_unattended_upgrades_leave_the_locked_set_alone(node):
    repo = nvidia_node.ensure_repo()
    node.serve_repo(repo)
    node.sh("rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources")
    write(node, "/etc/apt/keyrings/stand-in-debian.asc",
          node.sh("python3 -c 'import urllib.request as u; print(u.urlopen(\"%s/keys/nvidia-test.asc\")"
                  ".read().decode())'" % node.url).stdout)
    write(node, "/etc/apt/sources.list.d/stand-in-debian.sources",
          "Types: deb\nURIs: %s/debian\nSuites: bookworm\nComponents: main contrib non-free non-free-firmware\n"
          "Signed-By: /etc/apt/keyrings/stand-in-debian.asc\n" % node.url)
    write(node, "/etc/apt/apt.conf.d/52gpunode-test-origins", UNATTENDED_TEST_CONF)
    write(node, "/etc/apt/preferences.d/gpunode-test-no-550", NO_550)
    node.sh("apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends %s"
            % " ".join("%s=%s" % (name, OLD) for name in OPEN_SET), timeout=600)

    before, before_log = unattended_dry_run(node)
    print("unattended-upgrade --dry-run before the lock: %s" % before)
    assert set(before) & set(OPEN_SET) == {"libcuda1", "libnvidia-ml1", "nvidia-smi"}, before_log[-3000:]

    bake = {"nvidia_driver_install_without_gpu": True, "nvidia_driver_branch": "535",
            "nvidia_driver_debian_mirror": node.url + "/debian", "nvidia_driver_debian_suites": ["bookworm"],
            "nvidia_driver_debian_signed_by": node.url + "/keys/nvidia-test.asc"}
    checked = node.play(DRIVER, bake, check=True)
    assert not checked.failed, checked.failure_messages()
    assert node.read(version_lock.APT_UNATTENDED) is None and node.sh("apt-mark showhold").stdout == ""
    split = [m for m in checked.messages() if m.startswith("NVIDIA driver version set:")]
    assert split and "the next upgrade would move libcuda1 from 535.261.03-1 to 535.309.01-0+deb12u1" in split[0], \
        checked.messages()

    locked = node.play(DRIVER, bake)
    assert not locked.failed, locked.failure_messages()
    assert sorted(node.sh("apt-mark showhold").stdout.split()) == sorted(OPEN_SET)
    blacklist = node.read(version_lock.APT_UNATTENDED)
    assert '"libnvidia\\-ml1$";' in blacklist, blacklist
    assert "Pin: version 535.261.03-1" in node.read(version_lock.APT_PREFERENCES)

    after, after_log = unattended_dry_run(node)
    print("unattended-upgrade --dry-run after the lock: %s" % after)
    assert not set(after) & set(OPEN_SET), after_log[-3000:]
    assert node.packages() == dict((name, OLD) for name in OPEN_SET)
    assert not set(re.findall(r"^Inst (\S+)", node.sh("apt-get -s dist-upgrade").stdout, re.M)) & set(OPEN_SET)

    again = node.play(DRIVER, bake)
    assert not again.failed and again.changed == 0, again.changed_tasks()


SUMMARY = [{"name": "Summary",
            "ansible.builtin.include_role": {"name": "gpunode.nvidia.nvidia_driver", "tasks_from": "summary"}}]
ONE_TIME_PASSWORD = "0tp-S3NTINEL-4711"


ENROLLMENT_LABEL = "gpunode.nvidia/secure-boot-enrollment-pending"


@pytest.fixture
def cluster(node, tmp_path):
    """The Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py) with the node container as a node."""
    standin = KubeApiStandin([Node(node.name)]).start()
    standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield standin
    standin.stop()


def node_labels(cluster, name):
    return cluster.node(name)["metadata"]["labels"]


def test_dkms_sign_installs_the_key_queues_the_certificate_and_never_prints_a_secret(node, cluster):
    """The role's dkms_sign path. STAND-INS: mokutil (tests/testbed/stand-ins/mokutil: the enrollment state in
    files), the Secure Boot state (nvidia_driver_secure_boot: enabled; a container has no EFI variables) and the
    Kubernetes API the node label is written to."""
    node.serve_repo(nvidia_node.ensure_repo())
    subprocess.run(["docker", "cp", nvidia_node.TESTBED + "/stand-ins/mokutil", node.name + ":/usr/local/sbin/mokutil"],
                   check=True, timeout=60)
    node.sh("cd /tmp && openssl req -new -x509 -newkey rsa:2048 -nodes -days 30 -subj '/CN=Example Corp GPU fleet "
            "signing/' -keyout org.key -out org.pem 2>/dev/null")
    key, cert = node.read("/tmp/org.key"), node.read("/tmp/org.pem")
    node.sh("rm /tmp/org.key")
    variables = {"nvidia_driver_install_without_gpu": True, "nvidia_driver_branch": "535",
                 "nvidia_driver_debian_mirror": node.url + "/debian", "nvidia_driver_debian_suites": ["bookworm"],
                 "nvidia_driver_debian_signed_by": node.url + "/keys/nvidia-test.asc",
                 "nvidia_driver_secure_boot": "enabled", "nvidia_driver_secure_boot_strategy": "dkms_sign",
                 "nvidia_driver_signing_key": key, "nvidia_driver_signing_certificate": cert,
                 "nvidia_driver_mok_password": ONE_TIME_PASSWORD, "gpunode_kubeconfig": cluster.kubeconfig}
    key_body = key.strip().splitlines()[1]
    # A module DKMS built before the role gave it the organisation's key: Debian's DKMS signed it with its own
    # (/var/lib/dkms/mok.key, never enrolled). STAND-IN: the kernel image file, so that the headers' kernel counts
    # as installed (a container boots none).
    kernel, module = add_test_module(node)
    node.sh("dkms install gpunode-signtest/1.0 -k %s && touch /boot/vmlinuz-%s" % (kernel, kernel), timeout=600)
    signer_before = node.sh("modinfo -F signer %s" % module).stdout.strip()
    print("before dkms_sign, modinfo -F signer %s: %s" % (module, signer_before))
    assert signer_before != "Example Corp GPU fleet signing"

    checked = node.play(DRIVER, variables, check=True)
    assert not checked.failed, checked.failure_messages()
    assert checked.result_of("Label the node with its Secure Boot key enrollment state")["would"] == (
        "set %s=true on node %s" % (ENROLLMENT_LABEL, node.name))
    assert ENROLLMENT_LABEL not in node_labels(cluster, node.name) and node.read(secure_boot.SIGNING_KEY) is None

    first = node.play(DRIVER, variables, post_tasks=SUMMARY)
    assert not first.failed, first.failure_messages()
    output = json.dumps(first.report) + first.stderr
    assert key_body not in output and ONE_TIME_PASSWORD not in output
    assert "Secure Boot strategy: dkms_sign (asked for (nvidia_driver_secure_boot_strategy))" in first.messages()
    assert first.result_of("Record that the enrollment waits for the console")["ansible_facts"] == {
        "nvidia_driver_enrollment_pending": True}
    assert any(m.startswith("SECURE BOOT KEY ENROLLMENT PENDING") for m in first.messages()), first.messages()
    assert node.read(secure_boot.DKMS_SIGNING_CONF) == secure_boot.dkms_signing_conf()
    assert node.sh("stat -c %a " + secure_boot.SIGNING_KEY).stdout.strip() == "600"
    assert node.sh("mokutil --list-new").stdout.strip()  # queued once, with the password given twice
    assert sorted(node.sh("apt-mark showhold").stdout.split()) == sorted(OPEN_SET)
    assert node_labels(cluster, node.name)[ENROLLMENT_LABEL] == "true"
    assert first.result_of("Rebuild the DKMS modules of the installed kernels not signed with the organisation's "
                           "key")["changed"]
    signer_after = node.sh("modinfo -F signer %s" % module).stdout.strip()
    print("after dkms_sign, modinfo -F signer %s: %s" % (module, signer_after))
    assert signer_after == "Example Corp GPU fleet signing"

    again = node.play(DRIVER, variables)
    assert not again.failed and again.changed == 0, again.changed_tasks()
    assert again.result_of("Record that the enrollment waits for the console")["ansible_facts"] == {
        "nvidia_driver_enrollment_pending": True}  # still waiting for the console: not queued again

    node.sh("d=/var/lib/gpunode-standin/mok; mv $d/new/* $d/enrolled/")  # confirmed in MokManager
    # Enrolled: no one-time password is needed any more, and none is given.
    enrolled = node.play(DRIVER, dict(variables, nvidia_driver_mok_password=""), post_tasks=SUMMARY)
    assert not enrolled.failed, enrolled.failure_messages()
    assert enrolled.changed_tasks() == ["Label the node with its Secure Boot key enrollment state"]  # removed
    assert not any("ENROLLMENT PENDING" in m for m in enrolled.messages())
    assert ENROLLMENT_LABEL not in node_labels(cluster, node.name)
