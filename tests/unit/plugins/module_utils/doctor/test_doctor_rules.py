"""gpu_doctor's rules over fake node trees: each rule fires on a tree that has the problem and stays
silent on one that does not.

The trees come from tests/unit/node_trees.py (one per platform of the field guide) with the
problem added; their processes are stand-ins (/proc entries, no daemon behind them). Rules that
need a live daemon (cri-unavailable, "defined but not loaded") are tested against real containerd in
tests/integration/test_doctor_live.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import http.server
import json
import os
import re
import sys
import threading
import time

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import toml_reader  # noqa: E402

CRI = 'plugins."io.containerd.grpc.v1.cri"'
STANDIN_BINARY = "#!/bin/sh\n# stand-in nvidia-container-runtime\nexec runc \"$@\"\n"


@pytest.fixture(params=["tomllib", "lines"])
def reader(request, monkeypatch):
    """Run every test with the node's two TOML readers: tomllib (Python 3.11+) and the line reader."""
    if request.param == "lines":
        monkeypatch.setattr(toml_reader, "tomllib", None)
    return request.param


def diagnose(root, **kwargs):
    kwargs.setdefault("query_cri", False)
    result = doctor_rules.diagnose(str(root), **kwargs)
    fired = {}
    for item in result["findings"]:
        fired.setdefault(item["rule"], []).append(item)
    return fired, result


def build(tmp_path, name):
    tree, _expect = node_trees.build(name, tmp_path)
    return tree


def nvidia_table(binary="/usr/bin/nvidia-container-runtime", systemd=True, plugin=CRI):
    lines = ["", "[%s.containerd.runtimes.nvidia]" % plugin, '  runtime_type = "io.containerd.runc.v2"',
             "[%s.containerd.runtimes.nvidia.options]" % plugin, '  BinaryName = "%s"' % binary]
    if systemd is not None:
        lines.append("  SystemdCgroup = %s" % str(systemd).lower())
    return "\n".join(lines) + "\n"


def append(tree, path, text):
    with open(tree.local(path), "a") as handle:
        handle.write(text)


def replace(tree, path, old, new):
    local = tree.local(path)
    with open(local) as handle:
        text = handle.read()
    assert old in text
    with open(local, "w") as handle:
        handle.write(text.replace(old, new))


def kubeadm_with_nvidia(tmp_path, **nvidia):
    """A healthy kubeadm node: containerd 1.6 with runc and a working nvidia runtime."""
    tree = build(tmp_path, "kubeadm-containerd")
    append(tree, "/etc/containerd/config.toml", nvidia_table(**nvidia))
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    return tree


def remove_process(tree, argv0):
    base = tree.local("/proc")
    for pid in os.listdir(base):
        path = os.path.join(base, pid, "cmdline")
        if os.path.exists(path) and open(path).read().split("\0")[0] == argv0:
            for name in os.listdir(os.path.join(base, pid)):
                os.unlink(os.path.join(base, pid, name))
            os.rmdir(os.path.join(base, pid))
            return
    raise AssertionError("no process %s" % argv0)


def assert_finding_shape(item):
    assert item["severity"] in ("critical", "warning", "info")
    assert item["incident"] in (None, "I1", "I2", "I3", "I4", "I5", "I6", "I7")
    assert item["message"] and item["title"] and item["evidence"]
    assert item["fix"]["summary"]
    for evidence in item["evidence"]:
        assert evidence["kind"] in ("file", "process", "socket", "version", "cri", "command", "note")


# --- the healthy node: nothing fires --------------------------------------------------------------

def test_healthy_kubeadm_node_has_no_finding(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path)
    fired, result = diagnose(tmp_path)
    assert fired == {}, fired
    assert result["summary"] == {"critical": 0, "warning": 0, "info": 0, "status": "ok"}
    assert result["sources"][0]["reader"] == reader
    assert set(result["rules"]) == set(r.id for r in doctor_rules.CATALOGUE)


# --- I1 / I2 ---------------------------------------------------------------------------------------

def test_i1_fires_when_kubelets_runtime_has_no_nvidia(tmp_path, reader):
    build(tmp_path, "kubeadm-containerd")
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["nvidia-runtime-missing"]
    assert_finding_shape(item)
    assert item["incident"] == "I1" and item["severity"] == "critical"
    assert item["fix"]["playbook"] == "gpunode.nvidia.site"
    assert item["fix"]["vars"] == {"container_runtime_engine": "containerd",
                                   "container_runtime_containerd_config": "/etc/containerd/config.toml",
                                   "container_runtime_containerd_socket": "/run/containerd/containerd.sock",
                                   "container_runtime_containerd_service": "containerd"}
    assert "gpu_operator" not in item["fix"]  # default paths: the operator needs no values


def test_i1_silent_when_nvidia_is_configured(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path)
    assert "nvidia-runtime-missing" not in diagnose(tmp_path)[0]


def test_i1_on_snap_names_operator_values(tmp_path, reader):
    build(tmp_path, "k8s-snap-base-dir")
    (item,) = diagnose(tmp_path)[0]["nvidia-runtime-missing"]
    base = "/var/lib/k8s-containerd/k8s-containerd"
    env = item["fix"]["gpu_operator"]["helm_values"]["toolkit"]["env"]
    assert {"name": "CONTAINERD_CONFIG", "value": base + "/etc/containerd/config.toml"} in env
    assert {"name": "CONTAINERD_SOCKET", "value": base + "/run/containerd/containerd.sock"} in env
    assert {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"} in env
    assert item["fix"]["vars"]["container_runtime_containerd_service"] == "snap.k8s.containerd"


def test_i2_fires_when_nvidia_went_to_the_distro_containerd(tmp_path, reader):
    tree = build(tmp_path, "i2-snap-and-distro")
    append(tree, "/etc/containerd/config.toml", nvidia_table())
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["nvidia-in-other-instance"]
    assert_finding_shape(item)
    assert item["severity"] == "critical" and item["incident"] == "I2"
    assert "/etc/containerd/config.toml" in item["message"]
    assert "/var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock" in item["message"]
    where = item["evidence"][0]
    assert where["path"] == "/etc/containerd/config.toml" and where["text"].endswith("runtimes.nvidia]")
    assert item["fix"]["vars"]["container_runtime_containerd_config"] == \
        "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml"
    assert "nvidia-runtime-missing" in fired  # and the runtime kubelet uses has none


def test_i2_silent_when_nvidia_is_in_the_snap_containerd(tmp_path, reader):
    tree = build(tmp_path, "i2-snap-and-distro")
    append(tree, "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml", nvidia_table())
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    fired, _unused = diagnose(tmp_path)
    assert "nvidia-in-other-instance" not in fired and "nvidia-runtime-missing" not in fired


def test_i2_is_info_when_both_instances_have_it(tmp_path, reader):
    tree = build(tmp_path, "i2-snap-and-distro")
    append(tree, "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml", nvidia_table())
    append(tree, "/etc/containerd/config.toml", nvidia_table())
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    (item,) = diagnose(tmp_path)[0]["nvidia-in-other-instance"]
    assert item["severity"] == "info"


# --- I3 ---------------------------------------------------------------------------------------------

def test_i3_kubelet_not_running(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    remove_process(tree, "/usr/bin/kubelet")
    (item,) = diagnose(tmp_path)[0]["kubelet-not-running"]
    assert_finding_shape(item)
    assert item["incident"] == "I3"
    assert "systemctl start kubelet" in item["fix"]["commands"]


def test_i3_kubelet_not_running_silent_on_running_kubelet_and_on_an_image(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path / "running")
    assert "kubelet-not-running" not in diagnose(tmp_path / "running")[0]
    build(tmp_path / "image", "kubeadm-containerd2-config-endpoint")  # nothing runs: an image bake
    assert "kubelet-not-running" not in diagnose(tmp_path / "image")[0]


class _Health(http.server.BaseHTTPRequestHandler):
    body = b"ok"

    def do_GET(self):
        self.send_response(200 if self.body == b"ok" else 500)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def healthz():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/healthz" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_i3_kubelet_unhealthy(tmp_path, reader, healthz):
    kubeadm_with_nvidia(tmp_path)
    dead = healthz.rsplit(":", 1)[0] + ":1/healthz"  # nothing listens on port 1
    (item,) = diagnose(tmp_path, given_healthz_url=dead)[0]["kubelet-unhealthy"]
    assert item["incident"] == "I3" and dead in item["message"]
    fired, result = diagnose(tmp_path, given_healthz_url=healthz)
    assert "kubelet-unhealthy" not in fired
    assert result["kubelet_health"]["ok"] is True


def kubeadm_legacy(tree):
    node_trees._distro_containerd(tree)
    tree.package("containerd", "1.6.20~ds1-1+deb12u3")
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/containerd/containerd.sock",
                                extra_args=" --container-runtime=docker")


def test_i3_legacy_docker_flag(tmp_path, reader):
    kubeadm_legacy(node_trees.NodeTree(tmp_path))
    (item,) = diagnose(tmp_path)[0]["kubelet-legacy-docker-flag"]
    assert item["incident"] == "I3"
    assert any(e.get("path") == "/var/lib/kubelet/kubeadm-flags.env" for e in item["evidence"])
    kubeadm_with_nvidia(tmp_path / "clean")
    assert "kubelet-legacy-docker-flag" not in diagnose(tmp_path / "clean")[0]


def test_i3_endpoint_served_by_nobody(tmp_path, reader):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/k3s/containerd/containerd.sock")
    (item,) = diagnose(tmp_path)[0]["kubelet-endpoint-unserved"]
    assert item["incident"] == "I3" and "/run/k3s/containerd/containerd.sock" in item["message"]
    kubeadm_with_nvidia(tmp_path / "clean")
    assert "kubelet-endpoint-unserved" not in diagnose(tmp_path / "clean")[0]


def test_runtime_not_running(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    remove_process(tree, "/usr/bin/containerd")
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["runtime-not-running"]
    assert "systemctl start containerd" in item["fix"]["commands"]
    assert "runtime-not-running" not in diagnose(kubeadm_with_nvidia(tmp_path / "up").root)[0]


def test_no_container_runtime(tmp_path, reader):
    node_trees._kubeadm_kubelet(node_trees.NodeTree(tmp_path))
    assert "no-container-runtime" in diagnose(tmp_path)[0]
    assert "no-container-runtime" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


# --- I4, I6 -----------------------------------------------------------------------------------------

def test_i4_glibc(tmp_path, reader):
    build(tmp_path / "al2", "eks-al2")
    (item,) = diagnose(tmp_path / "al2")[0]["toolkit-glibc-too-old"]
    assert item["incident"] == "I4"
    assert any("GLIBC_2.27" in (e.get("note") or "") for e in item["evidence"])
    tree = build(tmp_path / "newer", "eks-al2")
    tree.libc("2.34", directory="/lib64")
    assert "toolkit-glibc-too-old" not in diagnose(tmp_path / "newer")[0]


def test_i6_gpu_without_driver(tmp_path, reader):
    tree = node_trees.NodeTree(tmp_path)
    tree.gpu(driver=None)
    tree.modules("ext4")
    node_trees._distro_containerd(tree)
    (item,) = diagnose(tmp_path)[0]["gpu-without-driver"]
    assert item["incident"] == "I6" and item["evidence"][0]["path"].endswith("0000:65:00.0")
    assert "gpu-without-driver" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


def test_i6_nouveau(tmp_path, reader):
    tree = node_trees.NodeTree(tmp_path)
    tree.gpu(driver="nouveau")
    tree.modules("nouveau")
    node_trees._distro_containerd(tree)
    fired, _unused = diagnose(tmp_path)
    assert fired["nouveau-loaded"][0]["incident"] == "I6"
    assert fired["nouveau-loaded"][0]["fix"]["playbook"] == "gpunode.nvidia.site"  # installing blacklists it
    assert "nouveau-loaded" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


def test_i6_nouveau_beside_an_installed_driver_is_fixed_by_hand(tmp_path, reader):
    # The driver stage keeps an installed driver and writes no blacklist: the playbook would not fix it.
    tree = node_trees.NodeTree(tmp_path)
    tree.gpu(driver="nouveau")
    tree.modules("nouveau")
    node_trees._distro_containerd(tree)
    tree.file("/var/lib/dpkg/status", "Package: nvidia-kernel-dkms\nStatus: install ok installed\n"
                                      "Version: 535.261.03-1\n\n")
    fired, _unused = diagnose(tmp_path)
    fix = fired["nouveau-loaded"][0]["fix"]
    assert fix["playbook"] is None
    assert fix["commands"][0].endswith("> /etc/modprobe.d/blacklist-nouveau.conf") and fix["commands"][-1] == "reboot"


def test_i6_driver_version_mismatch(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    tree.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.03", "")
    (item,) = diagnose(tmp_path)[0]["driver-version-mismatch"]
    assert "580.178.04" in item["message"] and "580.159.03" in item["message"]
    same = kubeadm_with_nvidia(tmp_path / "same")
    same.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.178.04", "")
    assert "driver-version-mismatch" not in diagnose(same.root)[0]


# --- I5 and the runtime table ----------------------------------------------------------------------

def test_i5_default_runtime_undefined(tmp_path, reader):
    tree = build(tmp_path, "kubeadm-containerd")
    replace(tree, "/etc/containerd/config.toml", 'default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    (item,) = diagnose(tmp_path)[0]["default-runtime-undefined"]
    assert item["incident"] == "I5"
    assert item["evidence"][0]["text"] == 'default_runtime_name = "nvidia"'
    tree = kubeadm_with_nvidia(tmp_path / "ok")
    replace(tree, "/etc/containerd/config.toml", 'default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    assert "default-runtime-undefined" not in diagnose(tree.root)[0]


def test_i5_default_runtime_binary_missing(tmp_path, reader):
    missing = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    tree = kubeadm_with_nvidia(tmp_path, binary=missing)
    replace(tree, "/etc/containerd/config.toml", 'default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["default-runtime-binary-missing"]
    assert item["incident"] == "I5" and missing in item["message"]
    # /usr/bin/nvidia-container-runtime exists: the fix points there, not at the missing path again.
    assert item["fix"]["vars"]["container_runtime_binary"] == "/usr/bin/nvidia-container-runtime"
    assert item["fix"]["vars"]["container_runtime_set_as_default"] is True
    assert "nvidia-runtime-binary-missing" not in fired  # one finding, not two
    tree.file(missing, STANDIN_BINARY, mode=0o755)
    assert "default-runtime-binary-missing" not in diagnose(tmp_path)[0]


def test_nvidia_binary_missing(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path, binary="/opt/nvidia/nvidia-container-runtime")
    (item,) = diagnose(tmp_path)[0]["nvidia-runtime-binary-missing"]
    assert "/opt/nvidia/nvidia-container-runtime" in item["message"]
    assert "nvidia-runtime-binary-missing" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


def test_missing_binary_without_a_toolkit_is_fixed_by_installing_the_toolkit(tmp_path, reader):
    missing = "/usr/bin/nvidia-container-runtime"
    tree = kubeadm_with_nvidia(tmp_path, binary=missing)
    os.unlink(tree.local(missing))
    (item,) = diagnose(tmp_path)[0]["nvidia-runtime-binary-missing"]
    fix = item["fix"]
    assert fix["playbook"] == "gpunode.nvidia.site"
    assert "container_runtime_binary" not in fix["vars"]  # not the same failing setting again
    assert fix["vars"]["gpunode_toolkit_stage"] is True
    assert fix["summary"].startswith("Install the NVIDIA container toolkit")


def test_missing_binary_points_at_the_operators_binary_when_that_one_is_installed(tmp_path, reader):
    missing = "/usr/bin/nvidia-container-runtime"
    operator = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    tree = kubeadm_with_nvidia(tmp_path, binary=missing)
    os.unlink(tree.local(missing))
    tree.file(operator, STANDIN_BINARY, mode=0o755)
    (item,) = diagnose(tmp_path)[0]["nvidia-runtime-binary-missing"]
    assert item["fix"]["vars"]["container_runtime_binary"] == operator


def test_binary_name_without_slash_is_looked_up_on_path(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path, binary="nvidia-container-runtime")  # /usr/bin/nvidia-container-runtime exists
    assert "nvidia-runtime-binary-missing" not in diagnose(tmp_path)[0]


ONLY_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
      BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def test_runc_dropped_on_containerd_1x(tmp_path, reader):
    tree = build(tmp_path, "kubeadm-containerd")  # Debian's containerd 1.6.20
    tree.file("/etc/containerd/config.toml", ONLY_NVIDIA)
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["containerd-runc-dropped"]
    assert item["severity"] == "critical"
    assert item["evidence"][0]["path"] == "/etc/containerd/config.toml" and item["evidence"][0]["line"] == 4
    assert "default-runtime-undefined" not in fired  # the same problem, reported once


def test_runc_kept_on_containerd_2x(tmp_path, reader):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/containerd/containerd.sock")
    tree.package("containerd", "2.1.9~ds1-5")
    tree.file("/etc/containerd/config.toml", ONLY_NVIDIA)
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    fired, _unused = diagnose(tmp_path)
    assert "containerd-runc-dropped" not in fired and "default-runtime-undefined" not in fired


DROPIN = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
    SystemdCgroup = true
"""


def al2_with_dropin(root, containerd_version):
    tree = node_trees.NodeTree(root)
    node_trees.eks_al2(tree)
    tree.libc("2.34", directory="/lib64")
    tree.package("containerd", containerd_version)
    tree.file("/etc/containerd/config.d/99-nvidia.toml", DROPIN)
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY, mode=0o755)
    return tree


def test_dropin_replaces_cri_table_on_1x(tmp_path, reader):
    al2_with_dropin(tmp_path, "1.7.24~ds1-6")
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["containerd-import-replaces-cri"]
    assert item["severity"] == "critical"
    assert item["evidence"][0]["path"] == "/etc/containerd/config.d/99-nvidia.toml"
    for lost in ("sandbox_image", "containerd.runtimes.runc.options.SystemdCgroup",
                 "containerd.default_runtime_name"):
        assert lost in item["message"]
    # What it hides has consequences of its own: the runc runtime is gone.
    assert "containerd-runc-dropped" in fired


def test_dropin_merges_on_2x(tmp_path, reader):
    al2_with_dropin(tmp_path, "2.1.9~ds1-5")
    fired, _unused = diagnose(tmp_path)
    assert "containerd-import-replaces-cri" not in fired and "containerd-runc-dropped" not in fired
    assert "nvidia-runtime-missing" not in fired


def test_full_copy_dropin_on_1x_is_a_warning(tmp_path, reader):
    """nvidia-ctk's 1.x workaround: the drop-in repeats the whole CRI table; nothing is lost today."""
    tree = al2_with_dropin(tmp_path, "1.6.20~ds1-1")
    main = open(tree.local("/etc/containerd/config.toml")).read()
    cri_part = main[main.index("[plugins]"):]
    tree.file("/etc/containerd/config.d/99-nvidia.toml", "version = 2\n" + cri_part + DROPIN.split("\n", 1)[1])
    (item,) = diagnose(tmp_path)[0]["containerd-import-replaces-cri"]
    assert item["severity"] == "warning" and "later edits" in item["message"]


# --- SystemdCgroup -----------------------------------------------------------------------------------

def test_systemd_cgroup_runtime_mismatch(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path, systemd=None)  # runc has SystemdCgroup = true, nvidia none
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["systemd-cgroup-runtime-mismatch"]
    assert item["severity"] == "warning"
    texts = [e.get("note") or e.get("text") for e in item["evidence"]]
    assert "runc: SystemdCgroup = true" in texts and "nvidia: SystemdCgroup = false" in texts
    assert "systemd-cgroup-runtime-mismatch" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


def test_systemd_cgroup_kubelet_mismatch(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path, systemd=False)
    replace(tree, "/etc/containerd/config.toml", "SystemdCgroup = true", "SystemdCgroup = false")
    fired, _unused = diagnose(tmp_path)  # kubelet's config.yaml says cgroupDriver: systemd
    (item,) = fired["systemd-cgroup-kubelet-mismatch"]
    assert '"runc"' in item["message"] and '"nvidia"' in item["message"]
    assert "systemd-cgroup-runtime-mismatch" not in fired  # both false: they agree with each other
    # The role's runtime copies SystemdCgroup from runc: runc itself is set by hand, then the playbook runs.
    assert item["fix"]["playbook"] is None
    assert 'SystemdCgroup = true for runtime "runc"' in item["fix"]["summary"]
    assert "gpunode.nvidia.site" in item["fix"]["summary"]
    assert "systemd-cgroup-kubelet-mismatch" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


def test_systemd_cgroup_kubelet_mismatch_of_the_nvidia_runtime_alone_is_fixed_by_the_playbook(tmp_path, reader):
    kubeadm_with_nvidia(tmp_path, systemd=False)  # runc has SystemdCgroup = true like kubelet
    (item,) = diagnose(tmp_path)[0]["systemd-cgroup-kubelet-mismatch"]
    assert item["fix"]["playbook"] == "gpunode.nvidia.site"


# --- generated files edited by hand -------------------------------------------------------------------

def started_at(tree, pid, epoch):
    """/proc/stat btime and /proc/PID/stat starttime saying that PID started at EPOCH."""
    boot = int(epoch) - 1000
    tree.file("/proc/stat", "cpu  1 2 3\nbtime %d\n" % boot)
    ticks = int(1000 * os.sysconf("SC_CLK_TCK"))
    fields = ["S", "1"] + ["0"] * 17 + [str(ticks)] + ["0"] * 10
    tree.file("/proc/%d/stat" % pid, "%d (containerd) %s\n" % (pid, " ".join(fields)))


def set_mtime(tree, path, epoch):
    os.utime(tree.local(path), (epoch, epoch))


def containerd_pid(tree):
    for pid in os.listdir(tree.local("/proc")):
        path = tree.local("/proc/%s/cmdline" % pid)
        if pid.isdigit() and os.path.exists(path) and "containerd" in open(path).read().split("\0")[0]:
            return int(pid)
    raise AssertionError("no containerd process")


K3S_CONFIG = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
MARKER = "# File generated by k3s. DO NOT EDIT. Use config-v3.toml.tmpl instead.\n"


def test_generated_k3s_without_marker(tmp_path, reader):
    build(tmp_path, "k3s")  # its config.toml has no k3s header: written by someone else
    (item,) = diagnose(tmp_path)[0]["generated-config-edited"]
    assert "lacks the '# File generated by k3s" in item["evidence"][1]["text"]
    assert item["fix"]["vars"]["container_runtime_containerd_config"].endswith("config-v3.toml.tmpl")


def test_generated_k3s_edited_after_start(tmp_path, reader):
    tree = build(tmp_path, "k3s")
    text = open(tree.local(K3S_CONFIG)).read()
    tree.file(K3S_CONFIG, MARKER + text)
    now = time.time()
    started_at(tree, containerd_pid(tree), now - 600)
    set_mtime(tree, K3S_CONFIG, now - 599)  # written by k3s as it started containerd
    assert "generated-config-edited" not in diagnose(tmp_path)[0]
    set_mtime(tree, K3S_CONFIG, now - 60)  # edited ten minutes later
    (item,) = diagnose(tmp_path)[0]["generated-config-edited"]
    assert "after containerd" in item["evidence"][1]["text"]


def test_generated_microk8s_edited(tmp_path, reader):
    tree = build(tmp_path, "microk8s")
    assert "generated-config-edited" not in diagnose(tmp_path)[0]  # renders from the template
    config = "/var/snap/microk8s/6089/args/containerd.toml"
    append(tree, config, nvidia_table(plugin=CRI))
    set_mtime(tree, "/var/snap/microk8s/6089/args/containerd-template.toml", time.time() - 3600)
    (item,) = diagnose(tmp_path)[0]["generated-config-edited"]
    assert "cannot be rendered from" in item["evidence"][1]["text"]
    assert item["fix"]["vars"]["container_runtime_containerd_config"].endswith("containerd-template.toml")


def test_generated_eks_al2023_edited_after_boot(tmp_path, reader):
    tree = build(tmp_path, "eks-al2023")
    now = time.time()
    started_at(tree, containerd_pid(tree), now - 600)
    set_mtime(tree, "/etc/containerd/config.toml", now - 601)  # nodeadm wrote it, then containerd started
    assert "generated-config-edited" not in diagnose(tmp_path)[0]
    set_mtime(tree, "/etc/containerd/config.toml", now - 5)
    (item,) = diagnose(tmp_path)[0]["generated-config-edited"]
    assert "nodeadm" in item["message"] and item["fix"]["playbook"] is None


# --- disabled CRI plugin, unreadable files, rule errors ---------------------------------------------

def test_cri_plugin_disabled(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    text = open(tree.local("/etc/containerd/config.toml")).read()
    disabled = 'disabled_plugins = ["io.containerd.grpc.v1.cri"]'
    tree.file("/etc/containerd/config.toml", text.replace('root = ', disabled + '\nroot = ', 1))
    (item,) = diagnose(tmp_path)[0]["cri-plugin-disabled"]
    assert item["evidence"][0]["text"] == disabled
    # containerd.io's disabled CRI is fine when kubelet talks to cri-dockerd.
    build(tmp_path / "docker", "kubeadm-docker-cri-dockerd")
    assert "cri-plugin-disabled" not in diagnose(tmp_path / "docker")[0]


def test_config_unreadable(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    tree.file("/etc/containerd/config.toml", 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n  x = 1\n')
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["config-unreadable"]
    assert item["severity"] == "critical" and item["evidence"][0]["line"] == 2
    assert "nvidia-runtime-missing" not in fired  # nothing is claimed about a file that cannot be read
    assert "config-unreadable" not in diagnose(kubeadm_with_nvidia(tmp_path / "ok").root)[0]


@pytest.mark.parametrize("text, line", [
    ('\ufeff{"log-driver": "json-file"}\n', None),  # dockerd 26.1 and 28.5 skip the BOM
    ("null\n", None), ("{}", None), ("", None),       # and start with these (no settings)
    ('{\n  "max-concurrent-downloads": NaN\n}\n', 2),  # dockerd refuses NaN and Infinity
    ('{\n  "log-driver": "json-file",\n}\n', 3),
])
def test_daemon_json_is_unreadable_exactly_when_dockerd_cannot_read_it(tmp_path, reader, text, line):
    tree = build(tmp_path, "kubeadm-docker-cri-dockerd")
    tree.file("/etc/docker/daemon.json", text)
    fired, _unused = diagnose(tmp_path)
    if line is None:
        assert "config-unreadable" not in fired
    else:
        (item,) = fired["config-unreadable"]
        assert item["evidence"][0]["line"] == line and "not valid JSON" in item["message"]


@pytest.mark.parametrize("member, reason", [
    ('"hosts": 5', "hosts is a number; dockerd expects a list of strings"),
    ('"hosts": [null, 1]', "hosts[1] is a number; dockerd expects a string"),
    ('"runtimes": {"nvidia": {"path": 5}}', "runtimes.nvidia.path is a number; dockerd expects a string"),
    ('"default-runtime": ["nvidia"]', "default-runtime is an array; dockerd expects a string"),
])
def test_daemon_json_of_a_type_dockerd_cannot_decode_is_unreadable_not_a_crash(tmp_path, reader, member, reason):
    tree = build(tmp_path, "kubeadm-docker-cri-dockerd")
    tree.file("/etc/docker/daemon.json", '{\n  "log-driver": "json-file",\n  %s\n}\n' % member)
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["config-unreadable"]
    assert item["evidence"][0]["line"] == 3 and reason in item["message"]
    assert "doctor-rule-error" not in fired


def test_a_docker_runtime_is_located_at_its_key_not_where_its_name_first_appears(tmp_path, reader):
    tree = build(tmp_path, "kubeadm-docker-cri-dockerd")
    tree.file("/etc/docker/daemon.json", '{\n  "default-runtime": "nvidia",\n  "runtimes": {\n    "nvidia": {\n'
                                         '      "path": "/usr/bin/nvidia-container-runtime-gone"\n    }\n  }\n}\n')
    fired, _unused = diagnose(tmp_path)
    lines = [e.get("line") for items in fired.values() for item in items for e in item["evidence"]
             if "BinaryName" in e.get("note", "")]
    assert lines and set(lines) == {4}


def test_crio_drop_ins_are_every_file_of_the_directory_as_crio_reads_them(tmp_path, reader):
    """CRI-O applies every file of crio.conf.d (Go's filepath.Walk), not only *.conf: crio_runtime's own
    99-nvidia.toml, and an editor's backup sorted after it, which then wins."""
    tree = build(tmp_path, "kubeadm-crio")
    tree.file("/usr/libexec/crio/crun", STANDIN_BINARY)
    tree.file("/usr/bin/nvidia-container-runtime", STANDIN_BINARY)
    tree.file("/etc/crio/crio.conf.d/99-nvidia.toml",
              '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n')
    fired, result = diagnose(tmp_path)
    assert "nvidia-runtime-missing" not in fired, fired
    assert "/etc/crio/crio.conf.d/99-nvidia.toml" in result["sources"][0]["files"]
    tree.file("/etc/crio/crio.conf.d/99-nvidia.toml.1234.2026-11-28@10:00:00~",
              '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime-old"\n')
    fired, result = diagnose(tmp_path)
    (item,) = fired["nvidia-runtime-binary-missing"]
    assert item["evidence"][0]["path"].endswith("~") and item["evidence"][0]["line"] == 1


@pytest.mark.parametrize("text, line, message", [
    ('version = "2"\n', 1, "version is a string; containerd expects an integer there. The daemon fails to start"),
    ("version = 2\nimports = \"/etc/containerd/conf.d/*.toml\"\n", 2, "imports is a string; containerd expects a list"),
    ('version = 2\ndisabled_plugins = [5]\n', 2, "disabled_plugins is an array; containerd expects a list of strings"),
    ('version = 2\n[%s.containerd]\n  default_runtime_name = 5\n' % CRI, 3,
     "default_runtime_name is an integer; containerd expects a string there. The daemon fails to start"),
    ('version = 2\n[%s.containerd.runtimes]\n  nvidia = "x"\n' % CRI, 3, "runtimes.nvidia is a string"),
    ('version = 2\n[%s.containerd.runtimes.nvidia.options]\n  BinaryName = 5\n' % CRI, 3,
     "BinaryName is an integer; containerd expects a string there. containerd starts, but no container"),
    ('version = 2\n[%s.containerd.runtimes.nvidia.options]\n  SystemdCgroup = "true"\n' % CRI, 3,
     "SystemdCgroup is a string; containerd expects a boolean"),
])
def test_containerd_values_of_a_type_containerd_cannot_decode_are_findings_not_rule_errors(
        tmp_path, reader, text, line, message):
    """containerd 1.6, 1.7 and 2.1 exit on such a value (runtime options: each container of the runtime fails)."""
    tree = build(tmp_path, "kubeadm-containerd")
    tree.file("/etc/containerd/config.toml", text)
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["config-unreadable"]
    assert item["evidence"][0]["line"] == line and message in item["message"], item["message"]
    assert "doctor-rule-error" not in fired and "unexpected content" not in item["message"]


def test_crio_values_of_a_type_crio_cannot_decode_are_findings(tmp_path, reader):
    tree = build(tmp_path, "kubeadm-crio")
    tree.file("/etc/crio/crio.conf.d/99-nvidia.toml", "[crio.runtime.runtimes.nvidia]\nruntime_path = 5\n")
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["config-unreadable"]
    assert "99-nvidia.toml cannot be read: line 2: crio.runtime.runtimes.nvidia.runtime_path is an integer; " \
        "CRI-O expects a string there" in item["message"]


def test_imports_load_breadth_first_each_once_with_go_globs(tmp_path, reader):
    """As containerd loads them (and as the editor reads them, containerd_semantics): the root file, then its
    imports in order, then theirs; Go's `*` matches dot files and `[^...]` negates a class."""
    tree = kubeadm_with_nvidia(tmp_path)
    main = open(tree.local("/etc/containerd/config.toml")).read()
    tree.file("/etc/containerd/config.toml", main.replace(
        "version = 2\n", 'version = 2\nimports = ["a.toml", "/etc/containerd/conf.d/[^9]*.toml"]\n', 1))
    tree.file("/etc/containerd/a.toml", 'version = 2\nimports = ["nested.toml", "config.toml"]\n')
    tree.file("/etc/containerd/nested.toml", "version = 2\n")
    tree.file("/etc/containerd/conf.d/10-b.toml", "version = 2\n")
    tree.file("/etc/containerd/conf.d/.hidden.toml", "version = 2\n")
    tree.file("/etc/containerd/conf.d/90-skipped.toml", "version = 2\n")
    _fired, result = diagnose(tmp_path)
    assert result["sources"][0]["files"] == [
        "/etc/containerd/config.toml", "/etc/containerd/a.toml", "/etc/containerd/conf.d/.hidden.toml",
        "/etc/containerd/conf.d/10-b.toml", "/etc/containerd/nested.toml"]


def test_an_import_pattern_go_refuses_is_unreadable_at_the_imports_line(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    main = open(tree.local("/etc/containerd/config.toml")).read()
    tree.file("/etc/containerd/config.toml", main.replace(
        "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/[*.toml"]\n', 1))
    fired, _unused = diagnose(tmp_path)
    (item,) = fired["config-unreadable"]
    assert item["evidence"][0]["line"] == 2 and "not a pattern Go's filepath.Glob accepts" in item["message"]


def test_a_failing_rule_is_a_finding_and_the_others_still_run(tmp_path, reader, monkeypatch):
    build(tmp_path, "kubeadm-containerd")
    broken = doctor_rules.Rule("nouveau-loaded", "critical", "I6", "t", lambda rule, ctx: 1 / 0)
    rules = tuple(broken if r.id == "nouveau-loaded" else r for r in doctor_rules.CATALOGUE)
    monkeypatch.setattr(doctor_rules, "CATALOGUE", rules)
    monkeypatch.setattr(doctor_rules.run_rules, "__defaults__", (rules,))
    fired, _unused = diagnose(tmp_path)
    assert "ZeroDivisionError" in fired["doctor-rule-error"][0]["message"]
    assert "nvidia-runtime-missing" in fired


# --- every platform tree: no crash, findings well formed ---------------------------------------------

@pytest.mark.parametrize("name", sorted(node_trees.PLATFORMS))
def test_every_platform_diagnoses(tmp_path, name, reader):
    build(tmp_path, name)
    fired, result = diagnose(tmp_path)
    assert "doctor-rule-error" not in fired, fired.get("doctor-rule-error")
    for items in fired.values():
        for item in items:
            assert_finding_shape(item)
    assert result["target"] is not None


def test_a_table_where_a_string_belongs_is_a_config_error(tmp_path, reader):
    tree = kubeadm_with_nvidia(tmp_path)
    tree.file("/etc/containerd/config.toml", 'version = 2\nplugins = "oops"\nimports = 3\n')
    fired, _unused = diagnose(tmp_path)
    assert "config-unreadable" in fired and "doctor-rule-error" not in fired


def test_discovery_failure_is_a_critical_finding(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("proc went away")
    monkeypatch.setattr(doctor_rules.discovery, "gather", broken)
    result = doctor_rules.diagnose_safely(str(tmp_path))
    assert result["summary"]["status"] == "critical"
    assert "proc went away" in result["findings"][0]["message"]


# --- fixes: commands an installed collection runs ------------------------------------------------------

def broken_nodes(tmp_path):
    """Node trees on which most node rules fire: every platform, and kubeadm with each runtime fault."""
    for name in sorted(node_trees.PLATFORMS):
        build(tmp_path / name, name)
        yield tmp_path / name
    tree = kubeadm_with_nvidia(tmp_path / "binary", binary="/opt/nvidia/nvidia-container-runtime")
    replace(tree, "/etc/containerd/config.toml", 'default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    yield tree.root
    tree = kubeadm_with_nvidia(tmp_path / "no-toolkit")
    os.unlink(tree.local("/usr/bin/nvidia-container-runtime"))
    yield tree.root
    tree = kubeadm_with_nvidia(tmp_path / "cgroup", systemd=False)
    replace(tree, "/etc/containerd/config.toml", "SystemdCgroup = true", "SystemdCgroup = false")
    yield tree.root


def fix_texts(fix):
    return [fix.get("summary") or ""] + list(fix.get("commands") or []) + [
        json.dumps(fix.get("vars") or {}), json.dumps(fix.get("gpu_operator") or {})]


def test_every_fix_names_playbooks_as_an_installed_collection_runs_them(tmp_path):
    seen = 0
    for root in broken_nodes(tmp_path):
        for item in diagnose(root)[1]["findings"]:
            fix = item["fix"]
            assert fix["playbook"] in (None, "gpunode.nvidia.site", "gpunode.nvidia.upgrade"), (item["rule"], fix)
            for text in fix_texts(fix):
                assert "playbooks/" not in text, (item["rule"], text)  # a checkout path an installed collection lacks
            seen += bool(fix["playbook"])
    assert seen >= 5


def test_no_missing_binary_fix_sets_the_missing_path_again(tmp_path):
    checked = 0
    for root in broken_nodes(tmp_path):
        for item in diagnose(root)[1]["findings"]:
            if item["rule"] in ("nvidia-runtime-binary-missing", "default-runtime-binary-missing"):
                missing = re.search(r"runs (\S+), which does not exist", item["message"]).group(1)
                assert item["fix"]["vars"].get("container_runtime_binary") != missing, item
                checked += 1
    assert checked >= 1


def test_every_doctor_module_exports_rules_in_one_form_and_none_builds_findings_its_own_way():
    """One convention: each module of the doctor package (but the runner and the context) exports RULES, the
    catalogue is their concatenation, and findings come from the context's builder only."""
    directory = os.path.dirname(doctor_rules.__file__)
    names = sorted(n[:-3] for n in os.listdir(directory) if n.endswith(".py"))
    rule_modules = [n for n in names if n not in ("__init__", "rules", "context")]
    assert sorted(m.__name__.rsplit(".", 1)[1] for m in doctor_rules.RULE_MODULES) == rule_modules
    for module in doctor_rules.RULE_MODULES:
        assert all(len(spec) == 5 and callable(spec[4]) for spec in module.RULES), module.__name__
        with open(module.__file__) as handle:
            source = handle.read()
        assert not re.search(r"^def (finding|note|manual_fix|site_fix|playbook_fix)\(", source, re.M), module.__name__
    ids = [rule.id for rule in doctor_rules.CATALOGUE]
    assert len(ids) == len(set(ids))


# --- keys containerd 2.4 removed -------------------------------------------------------------------------

REMOVED_KEYS_CONFIG = ('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n'
                       '[plugins."io.containerd.cri.v1.runtime".cni]\n  bin_dir = "/opt/cni/bin"\n'
                       '[plugins."io.containerd.internal.v1.tracing"]\n  service_name = "containerd"\n')


def containerd_release(root, version):
    tree = node_trees.NodeTree(root)
    node_trees.kubeadm_containerd2_config_endpoint(tree)
    tree.package("containerd", version)
    tree.file("/etc/containerd/config.toml", REMOVED_KEYS_CONFIG)
    return tree


def test_keys_containerd_2_4_removed_are_reported_as_ignored(tmp_path, reader):
    """RELEASES.md "Deprecated features" at containerd v2.4.0-beta.0: `enable_cdi` (deprecated in 2.2),
    `cni.bin_dir` (2.1) of io.containerd.cri.v1.runtime and the tracing plugin's `service_name` (1.6.29) are
    removed in 2.4; CDI is always on."""
    containerd_release(tmp_path, "2.4.0~ds1-1")
    found = {item["message"].split(" sets ")[1].split(" ")[0]: item
             for item in diagnose(tmp_path)[0]["containerd-removed-key"]}
    assert sorted(found) == ["cni.bin_dir", "enable_cdi", "service_name"]
    cdi = found["enable_cdi"]
    assert cdi["severity"] == "warning" and "/etc/containerd/config.toml line 3" in cdi["message"]
    assert "CDI is on whatever it says" in cdi["message"] and "deprecated since 2.2" in cdi["message"]
    assert "CDI is always on" in cdi["fix"]["summary"]
    assert "`bin_dirs`" in found["cni.bin_dir"]["fix"]["summary"] and "line 5" in found["cni.bin_dir"]["message"]
    assert "OTEL_SERVICE_NAME" in found["service_name"]["fix"]["summary"]


@pytest.mark.parametrize("version", ["2.3.4~ds1-1", "2.1.9~ds1-5"])
def test_keys_removed_in_2_4_are_not_findings_where_containerd_still_reads_them(tmp_path, reader, version):
    """internal/cri/config/config.go at v2.3.4: EnableCDI and NetworkPluginBinDir are still read."""
    containerd_release(tmp_path, version)
    assert "containerd-removed-key" not in diagnose(tmp_path)[0]
