"""Molecule `snap-layout`: incident I2. site.yml, left to discover, configures the containerd
kubelet uses (the snap-like one) and leaves the distro containerd.service alone."""
SNAP_BASE = "/var/lib/k8s-containerd/k8s-containerd"
SNAP_SOCKET = SNAP_BASE + "/run/containerd/containerd.sock"
DISTRO_SOCKET = "/run/containerd/containerd.sock"


def cri(host, socket):
    return host.ansible("gpunode.nvidia.cri_info", "socket=%s" % socket, check=False)


def test_snap_containerd_kubelet_uses_has_nvidia(host):
    result = cri(host, SNAP_SOCKET)
    assert result["ready"] is True
    assert result["runtimes"]["nvidia"]["binary_name"] == "/usr/bin/nvidia-container-runtime"
    assert result["runtimes"]["nvidia"]["systemd_cgroup"] is True  # copied from the snap's runc
    assert "nvidia" in host.file(SNAP_BASE + "/etc/containerd/config.toml").content_string


def test_distro_containerd_left_alone(host):
    assert "nvidia" not in cri(host, DISTRO_SOCKET)["runtimes"]
    assert host.run("sha256sum -c /var/tmp/distro-config.sha256").rc == 0


def test_facts_name_the_snap_instance(host):
    facts = host.ansible("gpunode.nvidia.gpu_node_facts", "gather=runtimes,kubelet,target", check=False)
    target = facts["ansible_facts"]["gpu_node"]["target"]
    assert target["platform"] == "k8s-snap"
    assert target["socket"] == SNAP_SOCKET
    assert target["selected_by"] == "kubelet"


def test_snap_kubelet_brought_back(host):
    assert host.service("snap.k8s.kubelet").is_running


def test_workload_ran_through_the_snap_instance(host):
    # gpu_verify ran the stand-in vector-add through the nvidia handler of the snap containerd.
    log = host.file("/var/log/nvidia-container-runtime-standin.log").content_string
    assert "create" in log
    assert SNAP_BASE in log  # the OCI bundle lives under the snap's state directory
