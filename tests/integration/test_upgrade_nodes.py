"""gpunode.nvidia.upgrade through the real node side: the nvidia_driver and node_services roles, gpu_clients and
gpu_node_facts on two systemd node containers, with real apt moving the driver packages from 535.261.03 to the
security update 535.309.01 inside branch 535 (the local signed test repository).

What is real: ansible-playbook running upgrade.yml with its own node task files, apt and dpkg, systemd, the
driver role's plan, version pin and lock, the unload/load record of gpu_clients, the cluster steps and the
Lease against the API.

What is a STAND-IN: the driver packages (named and versioned like Debian's, no kernel module inside), the API
server (tests/testbed/kube_api_standin.py), and the kernel's module loading: a node container cannot load a
module, so `modprobe` and `rmmod` on the nodes are stand-in scripts that write and remove what the kernel
would show under /sys/module (a directory of the test mounted there), with the version of the installed
kernel module package. The loaded version the playbook validates is read from there by gpu_node_facts, as
on a real node when /proc/driver/nvidia/version is absent.
"""
import json
import os
import subprocess
import sys

import pytest

import nvidia_node

sys.path.insert(0, os.path.join(nvidia_node.REPO, "tests", "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402
import warm_ansible  # noqa: E402

OLD, NEW = "535.261.03", "535.309.01"
STATE = "nvidia.com/gpu-driver-upgrade-state"
HOSTS = ("gpu-1", "gpu-2")

# STAND-IN modprobe/rmmod (see the module docstring).
MODPROBE = r"""#!/bin/sh
# STAND-IN modprobe: a container cannot load a kernel module; this writes what the kernel would show.
name=$1
version=$(dpkg-query -W -f '${db:Status-Abbrev} ${Version}\n' nvidia-kernel-dkms nvidia-open-kernel-dkms \
          2>/dev/null | awk '$1 ~ /^[hi]i/ {print $2}' | head -n 1 | sed 's/-.*//')
[ -n "$version" ] || { echo "modprobe: FATAL: Module $name not found (stand-in)" >&2; exit 1; }
mkdir -p /sys/module/$name/holders && echo "$version" >/sys/module/$name/version && echo 0 >/sys/module/$name/refcnt
"""
RMMOD = r"""#!/bin/sh
# STAND-IN rmmod: removes what the stand-in modprobe wrote.
[ -d /sys/module/$1 ] || { echo "rmmod: ERROR: Module $1 is not currently loaded" >&2; exit 1; }
rm -rf /sys/module/$1
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    nvidia_node.ensure_image()
    repo = nvidia_node.ensure_repo()
    containers = []
    try:
        for host in HOSTS:
            sysfs = tmp_path_factory.mktemp("sys-module-%s" % host)
            container = nvidia_node.NodeContainer(prefix="gpunode-upgrade", volumes=["%s:/sys/module" % sysfs])
            containers.append(container)
            container.start()
            container.serve_repo(repo)
            container.sh("cat >/usr/local/sbin/modprobe <<'EOF'\n%sEOF\ncat >/usr/local/sbin/rmmod <<'EOF'\n%sEOF\n"
                         "chmod 0755 /usr/local/sbin/modprobe /usr/local/sbin/rmmod" % (MODPROBE, RMMOD))
        yield dict(zip(HOSTS, containers))
    finally:
        for container in containers:
            container.close()


def inventory(path, nodes):
    """The two nodes by their Kubernetes names, each with its own served repository."""
    lines = ["[gpu_nodes]"]
    for host, container in nodes.items():
        lines.append("%s ansible_host=%s nvidia_driver_debian_mirror=%s/debian nvidia_driver_debian_signed_by=%s"
                     % (host, container.name, container.url, container.url + "/keys/nvidia-test.asc"))
    lines += ["", "[gpu_nodes:vars]", "ansible_connection=community.docker.docker", "ansible_become=false",
              "ansible_python_interpreter=/usr/bin/python3", "",
              "[controller]", "localhost ansible_connection=local ansible_python_interpreter=%s" % sys.executable]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


DRIVER_VARS = {"nvidia_driver_install_without_gpu": True, "nvidia_driver_flavour": "proprietary",
               "nvidia_driver_debian_suites": ["bookworm"]}


def playbook(tmp_path, nodes, name, target, variables):
    extra = tmp_path / ("vars-%s.json" % name)
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(nvidia_node.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(nvidia_node.REPO, ".cache", "collections"))
    argv = [nvidia_node.PLAYBOOK, "-i", inventory(tmp_path / "inventory.ini", nodes), "-f", "10",
            "-e", "@%s" % extra, target]
    proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=1500, check=False)
    return proc.returncode, proc.stdout


def loaded(container):
    return (container.read("/sys/module/nvidia/version") or "").strip()


def test_a_security_update_inside_the_branch_through_the_real_roles(tmp_path, nodes):
    # The nodes as a fleet has them: 535.261.03 installed, held and "loaded" (stand-in modprobe).
    setup = tmp_path / "setup.yml"
    setup.write_text(json.dumps([{"hosts": "gpu_nodes", "gather_facts": False,
                                  "roles": [{"role": "gpunode.nvidia.nvidia_driver"}]}]))
    rc, output = playbook(tmp_path, nodes, "setup", str(setup), dict(DRIVER_VARS, nvidia_driver_version=OLD))
    assert rc == 0, output[-4000:]
    for container in nodes.values():
        assert container.packages("nvidia-kernel-dkms")["nvidia-kernel-dkms"].startswith(OLD + "-")
        container.sh("modprobe nvidia")
        assert loaded(container) == OLD

    with KubeApiStandin([Node(host, driver=OLD) for host in HOSTS], pod_seconds=0.2) as api:
        for host in HOSTS:
            api.add_gpu_pod("ml", "train-%s" % host, host, labels={"app": "train"})
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=2)
        variables = dict(DRIVER_VARS, gpunode_kubeconfig=api.write_kubeconfig(str(tmp_path / "kubeconfig")),
                         gpunode_upgrade_driver=NEW, gpunode_upgrade_max_unavailable=1,
                         # Debian 12 carries R535 alone, which ended 2026-06: the update inside it is allowed
                         # knowingly (without this, upgrade.yml refuses a target on an ended branch).
                         gpunode_upgrade_allow_below_minimum=True,
                         gpunode_upgrade_max_parallel=1, gpunode_upgrade_poll_interval=0.2,
                         gpunode_upgrade_eviction_timeout=20, gpunode_upgrade_validate_pod=False,
                         gpunode_upgrade_validation_timeout=30)
        rc, output = playbook(tmp_path, nodes, "upgrade", "gpunode.nvidia.upgrade", variables)
        assert rc == 0, output[-6000:]
        for host, container in nodes.items():
            node = api.node(host)
            assert node["metadata"]["labels"].get(STATE) == "upgrade-done", (host, output[-3000:])
            assert not node["spec"].get("unschedulable"), host
            versions = container.packages("nvidia-kernel-dkms|nvidia-smi|libcuda1")
            assert set(v.split("-")[0] for v in versions.values()) == {NEW}, versions
            # Unloaded before the install, loaded again after it by gpu_clients (the stand-in modprobe).
            assert loaded(container) == NEW
            assert container.read("/run/gpunode/gpu-clients.json") is None
        assert sorted(api.evictions) == [("ml", "train-gpu-1"), ("ml", "train-gpu-2")]
        print("security update through the real roles: peak of unavailable GPU nodes %d (limit 1)"
              % api.peak_unavailable)
        assert api.peak_unavailable == 1

        rc, output = playbook(tmp_path, nodes, "again", "gpunode.nvidia.upgrade", variables)
        assert rc == 0 and " ".join(output.split()).count("already at the target") == 2, output[-3000:]
