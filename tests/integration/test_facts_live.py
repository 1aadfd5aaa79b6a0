"""gpu_node_facts on this machine's real /proc with incident I2 re-created by real daemons.

Two real containerd processes (Debian's builds, fetched by debian-archive.sh):
* "snap-like": containerd 2.1.9 under TMP/var/lib/k8s-containerd/k8s-containerd/..., told its file
  and socket by --config/--address, as the k8s snap's args file does;
* "default-like": containerd 1.6.20 started with --config only; its socket comes from `[grpc] address`
  in its file, as a distribution containerd.service does.
A stand-in kubelet (python3 sleeping, argv[0] set to `kubelet`; no kubelet binary exists here) has
`--container-runtime-endpoint=unix://SNAP_SOCKET` on its command line. The facts, read from the real
/proc, must pick the snap-like instance and report the other one with its own file and socket.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from daemons import host_kubelets
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FETCH = os.path.join(REPO, "tests", "testbed", "debian-archive.sh")
TESTBED = os.path.join(REPO, ".cache", "testbed")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="private containerd daemons need root")


def containerd_binary(release):
    tree = os.path.join(TESTBED, "containerd-%s" % release)
    if not os.path.exists(os.path.join(tree, ".done")):
        subprocess.run([FETCH, "containerd", release], check=True)
    return os.path.join(tree, "usr", "bin", "containerd")


def wait_for_socket(path, process, log, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            with open(log, "rb") as handle:
                tail = handle.read()[-3000:].decode("utf-8", "replace")
            raise AssertionError("containerd exited with %s:\n%s" % (process.returncode, tail))
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(path)
                return
            except OSError:
                pass
            finally:
                probe.close()
        time.sleep(0.05)
    raise AssertionError("no socket %s after %ss" % (path, timeout))


def config_text(version, base, address=None):
    lines = ["version = %d" % version, 'root = "%s/var/lib/containerd"' % base, 'state = "%s/run/containerd"' % base,
             "", "[grpc]"]
    if address:
        lines.append('  address = "%s"' % address)
    lines += ["", "[plugins]"]
    if version >= 3:
        lines.append("  [plugins.'io.containerd.nri.v1.nri']\n    disable = true")  # one machine-wide socket
    lines.append('  [plugins."io.containerd.internal.v1.opt"]\n    path = "%s/opt"' % base)
    return "\n".join(lines) + "\n"


class Daemons(object):
    """Processes started by this module's fixture; stopped and removed at the end."""

    def __init__(self, base):
        self.base = base
        self.processes = []

    def start(self, argv, log_name, **kwargs):
        log = open(os.path.join(self.base, log_name), "wb")
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, **kwargs)
        log.close()
        self.processes.append(process)
        return process

    def close(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture(scope="module")
def i2_node():
    # A short base: the snap layout is deep and a unix socket path (plus containerd's ".ttrpc")
    # must stay under 108 bytes.
    base = tempfile.mkdtemp(prefix="gpn-i2-")
    daemons = Daemons(base)
    try:
        snap_base = base + "/var/lib/k8s-containerd/k8s-containerd"
        snap_config = snap_base + "/etc/containerd/config.toml"
        snap_socket = snap_base + "/run/containerd/containerd.sock"
        os.makedirs(os.path.dirname(snap_config))
        # The k8s snap writes version 2 files whatever its containerd version.
        with open(snap_config, "w") as handle:
            handle.write(config_text(2, snap_base))
        snap = daemons.start([containerd_binary("sid"), "--config", snap_config, "--address", snap_socket,
                              "--root", snap_base + "/var/lib/containerd", "--state", snap_base + "/run/containerd"],
                             "snap-containerd.log")

        distro_base = base + "/distro"
        distro_config = distro_base + "/etc/containerd/config.toml"
        distro_socket = distro_base + "/run/containerd/containerd.sock"
        os.makedirs(os.path.dirname(distro_config))
        with open(distro_config, "w") as handle:
            handle.write(config_text(2, distro_base, address=distro_socket))
        distro = daemons.start([containerd_binary("bookworm"), "--config", distro_config], "distro-containerd.log")

        wait_for_socket(snap_socket, snap, base + "/snap-containerd.log")
        wait_for_socket(distro_socket, distro, base + "/distro-containerd.log")
        # Stand-in kubelet: no kubelet binary exists here; what discovery reads is the command line.
        kubelet = daemons.start(["kubelet", "-c", "import time; time.sleep(600)",
                                 "--config=%s/var/lib/kubelet/config.yaml" % base,
                                 "--container-runtime-endpoint=unix://" + snap_socket],
                                "kubelet.log", executable=sys.executable)
        yield {"snap": snap, "snap_config": snap_config, "snap_socket": snap_socket, "distro": distro,
               "distro_config": distro_config, "distro_socket": distro_socket, "kubelet": kubelet}
    finally:
        daemons.close()
        shutil.rmtree(base, ignore_errors=True)


def gather_beside(ours):
    """discovery.gather("/") with OURS the only kubelet of this machine, and its wall time. Another kubelet
    found before gathering skips the test; a kubelet other than ours, or none, found by gathering alone came
    and went in between (a node container's process, say, while the container was created or removed), and
    the facts are gathered again."""
    for _attempt in range(5):
        if host_kubelets(ours=(ours,)):
            pytest.skip("another kubelet (or stand-in) is running on this machine; the test needs the only one")
        started = time.time()
        facts = discovery.gather("/")
        if facts["kubelet"]["pid"] == ours:
            break
        time.sleep(0.5)
    return facts, time.time() - started


def test_facts_pick_the_snap_instance_kubelet_uses(i2_node):
    ours = i2_node["kubelet"]
    facts, wall = gather_beside(ours.pid)
    kubelet = facts["kubelet"]
    assert kubelet["running"] and kubelet["pid"] == ours.pid, (
        "found %s; ours (pid %d) %s; other kubelets now: %s" % (
            dict((k, kubelet[k]) for k in ("running", "pid", "binary", "platform")), ours.pid,
            "still runs" if ours.poll() is None else "exited with %s" % ours.returncode,
            host_kubelets(ours=(ours.pid,))))
    assert kubelet["endpoint_source"] == "flag"
    assert kubelet["endpoint_origin"] == "/proc/%d/cmdline" % i2_node["kubelet"].pid

    target = facts["target"]
    assert target is not None, facts["target_reason"]
    assert target["pid"] == i2_node["snap"].pid
    assert target["socket"] == i2_node["snap_socket"]
    assert target["config_path"] == i2_node["snap_config"]
    assert target["edit_path"] == i2_node["snap_config"]
    assert target["config_version"] == 2
    assert target["version"].startswith("2.1.9") and target["version_source"] == "--version"
    assert target["selected_by"] == "kubelet"

    other = next(i for i in facts["runtimes"] if i["pid"] == i2_node["distro"].pid)
    assert other["socket"] == i2_node["distro_socket"]  # read from [grpc] address, no --address flag
    assert other["config_path"] == i2_node["distro_config"]
    assert other["version"].startswith("1.6.20")
    assert not other["is_target"] and not other["used_by_kubelet"]
    sys.stderr.write("\ngpu_node_facts live, I2 re-created: %.3fs wall, %d runtime instances\n" % (
        wall, len(facts["runtimes"])))
    assert wall < 10
