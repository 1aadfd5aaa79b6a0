"""Molecule `install`: site.yml installed the driver and the toolkit from the local signed
repository (STAND-IN packages) and containerd serves the nvidia runtime the toolkit installed."""
SOCKET = "/run/containerd/containerd.sock"
TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")
DRIVER = ("nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "libnvidia-ml1")


def test_toolkit_packages_at_the_pinned_version(host):
    for name in TOOLKIT:
        package = host.package(name)
        assert package.is_installed and package.version == "1.17.8-1", name
    assert "Pin: version 1.17.8-1" in host.file("/etc/apt/preferences.d/nvidia-container-toolkit").content_string


def test_driver_packages_of_the_pinned_branch(host):
    for name in DRIVER:
        package = host.package(name)
        assert package.is_installed and package.version.startswith("535."), name
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string


def test_repositories_are_signed_by_their_own_keyrings(host):
    for name in ("nvidia-container-toolkit", "nvidia-driver-debian"):
        sources = host.file("/etc/apt/sources.list.d/%s.sources" % name).content_string
        assert "Signed-By: /etc/apt/keyrings/%s.asc" % name in sources
        assert host.file("/etc/apt/keyrings/%s.asc" % name).is_file
    assert not host.file("/etc/apt/trusted.gpg").exists


def test_live_containerd_runs_the_installed_runtime(host):
    assert host.service("containerd").is_running
    result = host.ansible("gpunode.nvidia.cri_info", "socket=%s" % SOCKET, check=False)
    assert result["ready"] is True
    assert result["runtimes"]["nvidia"]["binary_name"] == "/usr/bin/nvidia-container-runtime"
    runtime = host.file("/usr/bin/nvidia-container-runtime")
    assert runtime.is_file and runtime.mode & 0o111
    owner = host.run("dpkg -S /usr/bin/nvidia-container-runtime").stdout
    assert owner.startswith("nvidia-container-toolkit-base:")  # installed by the toolkit stage, not by prepare


def test_verification_workload_went_through_the_packaged_runtime(host):
    log = host.file("/var/log/nvidia-container-runtime-standin.log")
    assert log.exists and " create " in log.content_string
