"""Molecule `default`: containerd on a real systemd node serves the nvidia runtime."""
import json

SOCKET = "/run/containerd/containerd.sock"


def test_containerd_is_active(host):
    assert host.service("containerd").is_running


def test_live_containerd_lists_nvidia_runtime(host):
    result = host.ansible("gpunode.nvidia.cri_info", "socket=%s" % SOCKET, check=False)
    assert result["ready"] is True
    assert result["runtimes"]["nvidia"]["binary_name"] == "/usr/bin/nvidia-container-runtime"


def test_config_kept_debian_settings(host):
    config = host.file("/etc/containerd/config.toml").content_string
    assert 'bin_dir = "/usr/lib/cni"' in config
    assert '[plugins."io.containerd.internal.v1.opt"]' in config
    backups = host.run("ls /etc/containerd/").stdout
    assert "config.toml." in backups  # the backup kept beside it
