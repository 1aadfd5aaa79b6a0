"""The node services stage installs fabric manager at exactly the driver's version, with real apt and systemd
in a Debian 12 node container.

The packages come from the local signed STAND-IN repository's CUDA-style repository (tests/testbed/
nvidia-repo.sh): nvidia-fabricmanager-535 at 535.261.03-1 and at the newer 535.309.01-1 (binary:
tests/testbed/stand-ins/nv-fabricmanager, which prints its version and sleeps; unit
nvidia-fabricmanager.service), and nvlsm. No GPU, NVSwitch or driver module can exist in a container: the
GPU, four NVSwitches and the loaded driver 535.261.03 come from a fake node tree (node_services_root),
whose dpkg database and unit directory are links to the container's own, so the stage sees what real apt
installed, and systemctl acts on the real units.
"""
import pytest

import nvidia_node

SERVICES = [{"role": "gpunode.nvidia.node_services"}]
FAKE = "/srv/gpunode-fake-node"
DRIVER = "535.261.03"
NEWER = "535.309.01"
PACKAGE = "nvidia-fabricmanager-535"
UNIT = "nvidia-fabricmanager.service"
APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q"
FAKE_TREE = r"""set -eu
pci() {  # ADDRESS DEVICE CLASS
  d=%(fake)s/sys/bus/pci/devices/$1
  mkdir -p $d && echo 0x10de >$d/vendor && echo $2 >$d/device && echo $3 >$d/class
}
pci 0000:65:00.0 0x2330 0x030200
for bus in 05 06 07 08; do pci 0000:$bus:00.0 0x22a3 0x068000; done
mkdir -p %(fake)s/proc/driver/nvidia %(fake)s/var/lib %(fake)s/lib/systemd %(fake)s/usr %(fake)s/var/run/cdi
echo 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %(driver)s  Release Build  (stand-in)' \
  >%(fake)s/proc/driver/nvidia/version
ln -s /var/lib/dpkg %(fake)s/var/lib/dpkg
ln -s /lib/systemd/system %(fake)s/lib/systemd/system
ln -s /usr/bin %(fake)s/usr/bin
printf 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n# libcuda.so.%(driver)s\n' >%(fake)s/var/run/cdi/nvidia.yaml
""" % {"fake": FAKE, "driver": DRIVER}


@pytest.fixture(scope="module")
def node():
    nvidia_node.ensure_image()
    repo = nvidia_node.ensure_repo()
    container = nvidia_node.NodeContainer(prefix="services-fm")
    try:
        container.start()
        container.serve_repo(repo)
        key = container.sh("python3 -c 'import urllib.request as u; print(u.urlopen(\"%s/keys/nvidia-test.asc\")"
                           ".read().decode())'" % container.url).stdout
        # NVIDIA's CUDA repository (stand-in) only: fabric manager is not in Debian's archive.
        container.sh("rm -f /etc/apt/sources.list && mkdir -p /etc/apt/keyrings"
                     " && cat >/etc/apt/keyrings/stand-in-cuda.asc <<'END_OF_KEY'\n%sEND_OF_KEY" % key)
        container.sh("printf 'Types: deb\\nURIs: %s/cuda/repos/debian12/x86_64/\\nSuites: /\\n"
                     "Signed-By: /etc/apt/keyrings/stand-in-cuda.asc\\n' >/etc/apt/sources.list.d/cuda.sources"
                     " && apt-get update -q" % container.url)
        container.sh(FAKE_TREE)
        yield container
    finally:
        container.close()


def play(node, check=False, **extra):
    return node.play(SERVICES, dict({"node_services_root": FAKE}, **extra), check=check)


def unit_state(node):
    """(is-enabled, is-active, MainPID) of fabric manager."""
    out = node.sh("systemctl is-enabled %s; systemctl is-active %s; systemctl show -p MainPID --value %s"
                  % (UNIT, UNIT, UNIT), check=False).stdout.split()
    return out[0], out[1], out[2]


def running_version(node):
    return node.sh("nv-fabricmanager --version").stdout.split()[-1]


def test_fabric_manager_installed_at_the_driver_version_then_replaced_when_it_differs(node):
    checked_only = play(node, node_services_fabricmanager_install=False)
    assert checked_only.failed
    assert any("without fabric manager" in m and "apt: %s=%s-*" % (PACKAGE, DRIVER) in m
               for m in checked_only.failure_messages()), checked_only.failure_messages()
    assert node.packages("fabricmanager|nvlsm") == {}

    checked = play(node, check=True)
    assert not checked.failed, checked.failure_messages()
    assert checked.result_of("Install fabric manager with apt")["changed"]
    assert node.packages("fabricmanager|nvlsm") == {}

    # Missing: installed at the driver's version, not at the repository's newer 535.309.01-1, then started.
    installed = play(node)
    assert not installed.failed, installed.failure_messages()
    assert installed.result_of("Persistence daemon, fabric manager and CDI spec")["fabricmanager"]["install"] == [
        "%s=%s-*" % (PACKAGE, DRIVER)]
    assert node.packages("fabricmanager|nvlsm") == {PACKAGE: DRIVER + "-1"}
    enabled, active, first_pid = unit_state(node)
    assert (enabled, active) == ("enabled", "active") and running_version(node) == DRIVER
    assert any("fabric manager %s matches the driver" % DRIVER in m for m in installed.messages())
    again = play(node)
    assert not again.failed and again.changed == 0, again.changed_tasks()

    # Another version, running: stopped, put back at the driver's version (a downgrade), started again.
    node.sh("%s install %s=%s-1 && systemctl restart %s" % (APT, PACKAGE, NEWER, UNIT))
    assert running_version(node) == NEWER
    replaced = play(node)
    assert not replaced.failed, replaced.failure_messages()
    first = replaced.result_of("Persistence daemon, fabric manager and CDI spec")
    assert "systemctl stop %s" % UNIT in first["actions"]
    assert "systemctl start %s" % UNIT in replaced.result_of("Start fabric manager now that it is installed")[
        "actions"]
    assert node.packages("fabricmanager|nvlsm") == {PACKAGE: DRIVER + "-1"}
    enabled, active, replaced_pid = unit_state(node)
    assert (enabled, active) == ("enabled", "active") and replaced_pid not in (first_pid, "0")
    assert play(node).changed == 0

    # Fourth-generation NVSwitches: NVLSM is installed beside the fabric manager, which is left running.
    node.sh("for bus in 05 06 07 08; do echo 0x2901 >%s/sys/bus/pci/devices/0000:$bus:00.0/device; done" % FAKE)
    with_nvlsm = play(node)
    assert not with_nvlsm.failed, with_nvlsm.failure_messages()
    assert node.packages("fabricmanager|nvlsm") == {PACKAGE: DRIVER + "-1", "nvlsm": "2025.06.1-1"}
    assert unit_state(node) == ("enabled", "active", replaced_pid)
    assert play(node).changed == 0
