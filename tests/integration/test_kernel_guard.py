"""The driver stage's kernel guard (nvidia_driver_kernel_hold) with real apt in a Debian 12 node container.

The local signed STAND-IN repository (tests/testbed/nvidia-repo.sh) carries, in its Debian archive's main
component, linux-image-amd64 / linux-headers-amd64 at 6.1.190-1 (kernel 6.1.0-90-amd64) and 6.1.191-1
(kernel 6.1.0-91-amd64), each kernel's image and headers packages, and a STAND-IN `dkms`
(tests/testbed/stand-ins/dkms: no compiler; it honours BUILD_EXCLUSIVE_KERNEL like the real one). The node
image has no kernel package: the test installs the older one, so that an upgrade would bring 6.1.0-91.

apt, apt-mark, dpkg and the role (nvidia_driver, whose kernel step runs even without a GPU) are real; the
NVIDIA module source is a dkms.conf under /usr/src written by the test, as a driver package leaves it.
"""
import pytest

import nvidia_node

DRIVER = [{"role": "gpunode.nvidia.nvidia_driver"}]
KERNEL_META = ("linux-headers-amd64", "linux-image-amd64")
OLD, NEW = "6.1.190-1", "6.1.191-1"
CANDIDATE = "6.1.0-91-amd64"
MODULE_SOURCE = "/usr/src/nvidia-current-535.261.03"
# The installed driver's module source, a dkms.conf as a driver package ships it; in (b) a BUILD_EXCLUSIVE_KERNEL
# limits it to the 6.1.0-90 kernels (a driver too old for the new kernel).
DKMS_CONF = 'PACKAGE_NAME="nvidia-current"\nPACKAGE_VERSION="535.261.03"\n'
APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q"


@pytest.fixture(scope="module")
def node():
    nvidia_node.ensure_image()
    repo = nvidia_node.ensure_repo()
    container = nvidia_node.NodeContainer(prefix="kernel-guard")
    try:
        container.start()
        container.serve_repo(repo)
        # Only the stand-in archive: the image's deb.debian.org entry would offer Debian's real kernels.
        container.sh("rm -f /etc/apt/sources.list")
        write(container, "/etc/apt/keyrings/stand-in-debian.asc",
              container.sh("python3 -c 'import urllib.request as u; print(u.urlopen(\"%s/keys/nvidia-test.asc\")"
                           ".read().decode())'" % container.url).stdout)
        write(container, "/etc/apt/sources.list.d/stand-in-debian.sources",
              "Types: deb\nURIs: %s/debian\nSuites: bookworm\nComponents: main\n"
              "Signed-By: /etc/apt/keyrings/stand-in-debian.asc\n" % container.url)
        container.sh("apt-get update -q && %s install linux-image-amd64=%s linux-headers-amd64=%s dkms"
                     % (APT, OLD, OLD))
        yield container
    finally:
        container.close()


def write(node, path, text):
    node.sh("mkdir -p \"$(dirname %s)\" && cat >%s <<'END_OF_FILE'\n%sEND_OF_FILE" % (path, path, text))


def kernel_versions(node):
    """{package: version} of the installed kernel packages, held ones included ("hi")."""
    out = node.sh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n' 'linux-*'").stdout
    return dict(line.split()[:2] for line in out.splitlines() if line.endswith(" installed"))


def held(node):
    return node.sh("apt-mark showhold").stdout.split()


def guard(result):
    return result.result_of("Hold or release the kernel")


def test_hold_then_release_only_once_the_module_exists_for_the_new_kernel(node):
    assert kernel_versions(node)["linux-image-amd64"] == OLD and held(node) == []

    # (a) hold: check mode reports it and holds nothing; then held, idempotent, and no upgrade moves them.
    checked = node.play(DRIVER, {"nvidia_driver_kernel_hold": "hold"}, check=True)
    assert not checked.failed, checked.failure_messages()
    assert guard(checked)["changed"] and held(node) == []

    hold = node.play(DRIVER, {"nvidia_driver_kernel_hold": "hold"})
    assert not hold.failed, hold.failure_messages()
    assert guard(hold)["changed"] and guard(hold)["candidate_kernel"] == CANDIDATE
    assert held(node) == list(KERNEL_META)
    again = node.play(DRIVER, {"nvidia_driver_kernel_hold": "hold"})
    assert not again.failed and again.changed == 0, again.changed_tasks()

    node.sh("%s dist-upgrade" % APT)
    refused = node.sh("%s install linux-image-amd64" % APT, check=False)
    assert refused.returncode != 0 and "Held packages were changed" in refused.stderr, refused.stderr
    assert kernel_versions(node) == {"linux-image-amd64": OLD, "linux-headers-amd64": OLD,
                                     "linux-image-6.1.0-90-amd64": OLD, "linux-headers-6.1.0-90-amd64": OLD}

    # (b) release while the driver's module cannot be built for 6.1.0-91: dkms autoinstall skips it (and
    # exits 0); the guard reads dkms status, fails with why, and the kernel stays held.
    write(node, MODULE_SOURCE + "/dkms.conf", DKMS_CONF + 'BUILD_EXCLUSIVE_KERNEL="^6\\.1\\.0-90-"\n')
    blocked = node.play(DRIVER, {"nvidia_driver_kernel_hold": "release"})
    assert blocked.failed, guard(blocked)
    message = guard(blocked)["msg"]
    assert "DKMS lists no NVIDIA module installed for that kernel (dkms status -k %s)" % CANDIDATE in message
    assert "BUILD_EXCLUSIVE directive which does not match" in message and "stays held" in message, message
    assert held(node) == list(KERNEL_META)
    assert "linux-headers-%s" % CANDIDATE in kernel_versions(node)  # installed for the build that was tried
    assert kernel_versions(node)["linux-image-amd64"] == OLD

    # (c) a driver whose module supports the new kernel: DKMS builds it for 6.1.0-91, the kernel is released
    # (with Secure Boot off: the stand-in module is not signed).
    write(node, MODULE_SOURCE + "/dkms.conf", DKMS_CONF)
    checked = node.play(DRIVER, {"nvidia_driver_kernel_hold": "release"}, check=True)
    assert not checked.failed and "check mode" in guard(checked)["msg"], checked.failure_messages()
    assert held(node) == list(KERNEL_META)
    assert node.read("/lib/modules/%s/updates/dkms/nvidia-current.ko" % CANDIDATE) is None
    # With Secure Boot on the module built for 6.1.0-91 must also be signed: the stand-in dkms's is not.
    unsigned = node.play(DRIVER, {"nvidia_driver_kernel_hold": "release", "nvidia_driver_secure_boot": "enabled"})
    assert unsigned.failed and held(node) == list(KERNEL_META), guard(unsigned)
    message = guard(unsigned)["msg"]
    assert message.startswith("Secure Boot is on and the NVIDIA DKMS module is installed for kernel %s but not "
                              "signed (modinfo -k %s -F signer nvidia: " % (CANDIDATE, CANDIDATE)), message
    assert "The kernel stays held." in message and "dkms_sign" in message, message
    released = node.play(DRIVER, {"nvidia_driver_kernel_hold": "release"})
    assert not released.failed, released.failure_messages()
    assert guard(released)["changed"] and "installed for kernel %s" % CANDIDATE in guard(released)["msg"]
    assert held(node) == []
    assert "nvidia-current/535.261.03, %s, x86_64: installed" % CANDIDATE in node.sh("dkms status").stdout
    again = node.play(DRIVER, {"nvidia_driver_kernel_hold": "release"})
    assert not again.failed and again.changed == 0, again.changed_tasks()
    assert "not held" in guard(again)["msg"]

    node.sh("%s dist-upgrade" % APT)  # released: the upgrade now brings the kernel the module was built for
    assert kernel_versions(node)["linux-image-amd64"] == NEW
    assert "linux-image-%s" % CANDIDATE in kernel_versions(node)
