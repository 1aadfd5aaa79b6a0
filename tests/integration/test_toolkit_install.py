"""The nvidia_container_toolkit role with real apt, inside Debian 12 node containers.

The repository is the local signed test repository (tests/testbed/nvidia-repo.sh): STAND-IN
packages named and versioned like NVIDIA's libnvidia-container packages, served over HTTP on
the node's loopback. apt, deb822 sources, Signed-By keyrings, apt preferences, dpkg and the
ELF glibc check are all real.
"""
import pytest

import nvidia_node

TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")
ROLE = [{"role": "gpunode.nvidia.nvidia_container_toolkit"}]
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
PIN = "/etc/apt/preferences.d/nvidia-container-toolkit"
STABLE = "libnvidia-container/stable/deb"


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


def toolkit_vars(node, channel=STABLE, key="nvidia-test", **extra):
    variables = {"nvidia_container_toolkit_repo_url": "%s/%s/$(ARCH)" % (node.url, channel),
                 "nvidia_container_toolkit_repo_key_url": "%s/keys/%s.asc" % (node.url, key)}
    variables.update(extra)
    return variables


def toolkit_versions(node):
    return node.packages("^(nvidia-container-toolkit|libnvidia-container)")


def local_key(nvidia_repo, name):
    with open("%s/keys/%s.asc" % (nvidia_repo, name)) as handle:
        return handle.read()


def test_pinned_install_idempotence_upgrade_permission_and_cdi(node, nvidia_repo):
    pinned = toolkit_vars(node, nvidia_container_toolkit_version="1.17.8-1")
    first = node.play(ROLE, pinned)
    assert not first.failed, first.failure_messages()
    assert toolkit_versions(node) == dict((name, "1.17.8-1") for name in TOOLKIT)
    assert "Signed-By: %s" % KEYRING in node.read(SOURCES)
    assert node.read(KEYRING) == local_key(nvidia_repo, "nvidia-test")
    assert node.read("/etc/apt/trusted.gpg") is None  # never apt-key
    facts = first.result_of("Expose the runtime binary to the container runtime stage")["ansible_facts"]
    assert facts["nvidia_container_toolkit_runtime_path"] == "/usr/bin/nvidia-container-runtime"
    assert "Pin: version 1.17.8-1" in node.read(PIN)
    # The hold is real: apt itself would not move the packages to the newer 1.18.0-1.
    policy = node.sh("apt-cache policy nvidia-container-toolkit libnvidia-container1").stdout
    assert policy.count("Candidate: 1.17.8-1") == 2, policy

    second = node.play(ROLE, pinned)
    assert not second.failed and second.changed == 0, second.changed_tasks()

    refused = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.18.0-1"))
    assert refused.failed
    assert any("1.17.8-1 is installed and 1.18.0-1 is asked for" in m and "allow_upgrade" in m
               for m in refused.failure_messages()), refused.failure_messages()
    assert toolkit_versions(node) == dict((name, "1.17.8-1") for name in TOOLKIT)
    assert "Pin: version 1.17.8-1" in node.read(PIN)

    allowed = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.18.0-1",
                                           nvidia_container_toolkit_allow_upgrade=True))
    assert not allowed.failed, allowed.failure_messages()
    assert toolkit_versions(node) == dict((name, "1.18.0-1") for name in TOOLKIT)
    assert "Pin: version 1.18.0-1" in node.read(PIN)

    # CDI: skipped without a GPU; generated once by the stand-in nvidia-ctk when forced.
    cdi = toolkit_vars(node, nvidia_container_toolkit_version="1.18.0-1", nvidia_container_toolkit_cdi=True)
    no_gpu = node.play(ROLE, cdi)
    assert not no_gpu.failed and no_gpu.changed == 0, no_gpu.changed_tasks()
    assert node.read("/etc/cdi/nvidia.yaml") is None
    assert any("CDI spec /etc/cdi/nvidia.yaml is not generated" in m for m in no_gpu.messages())
    forced = dict(cdi, nvidia_container_toolkit_cdi_without_gpu=True)
    generated = node.play(ROLE, forced)
    assert generated.changed_tasks() == ["Create the CDI spec directory", "Install the CDI spec"]
    assert "kind: nvidia.com/gpu" in node.read("/etc/cdi/nvidia.yaml")
    again = node.play(ROLE, forced)
    assert again.changed == 0, again.changed_tasks()


def test_wrong_key_fails_clearly_then_key_rotation_replaces_the_key(node, nvidia_repo):
    wrong = node.play(ROLE, toolkit_vars(node, key="unrelated", nvidia_container_toolkit_version="1.17.8-1"))
    assert wrong.failed
    message = "\n".join(wrong.failure_messages())
    assert "signed with a key other than the one configured" in message, message
    assert "NO_PUBKEY" in message and "keys/unrelated.asc" in message
    assert toolkit_versions(node) == {}

    installed = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.17.8-1"))
    assert not installed.failed, installed.failure_messages()
    assert node.read(KEYRING) == local_key(nvidia_repo, "nvidia-test")

    # The publisher rotates its signing key: the old key no longer verifies the repository.
    node.rotate_repo_key("%s/amd64" % STABLE)
    upgrade = {"nvidia_container_toolkit_version": "1.18.0-1", "nvidia_container_toolkit_allow_upgrade": True}
    stale = node.play(ROLE, toolkit_vars(node, **upgrade))
    assert stale.failed
    assert any("NO_PUBKEY" in m for m in stale.failure_messages()), stale.failure_messages()
    assert toolkit_versions(node) == dict((name, "1.17.8-1") for name in TOOLKIT)

    rotated = node.play(ROLE, toolkit_vars(node, key="nvidia-test-rotated", **upgrade))
    assert not rotated.failed, rotated.failure_messages()
    assert "Add NVIDIA's container toolkit repository" in rotated.changed_tasks()
    assert node.read(KEYRING) == local_key(nvidia_repo, "nvidia-test-rotated")  # replaced, not added to
    keys = node.sh("gpg --show-keys --with-colons %s" % KEYRING).stdout
    assert "nvidia-test-rotated@" in keys and "<nvidia-test@" not in keys
    assert toolkit_versions(node) == dict((name, "1.18.0-1") for name in TOOLKIT)


def test_offline_directory_install(node):
    offline = {"nvidia_container_toolkit_source": "offline",
               "nvidia_container_toolkit_offline_dir": nvidia_node.NODE_REPO + "/offline/toolkit",
               "nvidia_container_toolkit_version": "1.17.8-1"}
    first = node.play(ROLE, offline)
    assert not first.failed, first.failure_messages()
    assert toolkit_versions(node) == dict((name, "1.17.8-1") for name in TOOLKIT)
    assert node.read(SOURCES) is None  # no repository configured in offline mode
    again = node.play(ROLE, offline)
    assert again.changed == 0, again.changed_tasks()


def test_an_unreachable_repository_fails_naming_the_mirror_and_offline_settings(node):
    # Stand-in for a node without internet access: the repository and its key on 127.0.0.1 port 9,
    # where nothing listens (connection refused, as behind a firewall that rejects).
    unreachable = {"nvidia_container_toolkit_repo_url": "http://127.0.0.1:9/libnvidia-container/stable/deb/$(ARCH)",
                   "nvidia_container_toolkit_repo_key_url": "http://user:secret@127.0.0.1:9/gpgkey"}
    result = node.play(ROLE, unreachable)
    assert result.failed
    message = result.failure_messages()[-1]
    assert message.startswith("Add NVIDIA's container toolkit repository failed: Could not fetch signed_by key"), message
    assert "http://127.0.0.1:9/libnvidia-container/stable/deb/" in message
    for variable in ("nvidia_container_toolkit_repo_base", "nvidia_container_toolkit_repo_url",
                     "nvidia_container_toolkit_repo_key_url", "nvidia_container_toolkit_source=offline",
                     "nvidia_container_toolkit_offline_dir"):
        assert variable in message, message
    assert message.endswith("The toolkit was not installed."), message
    assert "secret" not in message
    assert toolkit_versions(node) == {} and node.read(SOURCES) is None


def test_glibc_preflight_stops_before_the_runtime_config(node):
    """Incident I4 with real ELF files: the 1.18.1-1 packages carry Debian sid binaries that need
    GLIBC_2.38; the node is Debian 12 (glibc 2.36). The container runtime stage must never run."""
    config = "/etc/containerd/config.toml"
    before = node.read(config)
    result = node.play(ROLE + [{"role": "gpunode.nvidia.container_runtime",
                                "container_runtime_binary": "{{ nvidia_container_toolkit_runtime_path }}"}],
                       toolkit_vars(node, channel="libnvidia-container/newglibc/deb"))
    assert result.failed
    message = "\n".join(result.failure_messages())
    assert "requires GLIBC_2.38, host has 2.36" in message, message
    assert "version 'GLIBC_2.38' not found (required by /usr/bin/nvidia-container-cli)" in message
    assert "No container runtime was configured" in message
    ran = [name for name, _result in result.tasks()]
    assert "Configure the runtime in containerd's config" not in ran
    assert node.read(config) == before
    assert "nvidia" not in (node.read(config) or "")
