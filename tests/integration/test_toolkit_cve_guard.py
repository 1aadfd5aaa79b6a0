"""The toolkit's CVE-2025-23266 guard with real apt in a Debian 12 node container.

The repository is the local signed STAND-IN repository (tests/testbed/nvidia-repo.sh); its 1.17.7-1
packages stand in for the vulnerable toolkit releases (<= 1.17.7). apt, dpkg and the role are real; after
an allowed install, gpu_doctor reads the real dpkg database and reports the vulnerable toolkit.
"""
import pytest

import nvidia_node

TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")
ROLE = [{"role": "gpunode.nvidia.nvidia_container_toolkit"}]
SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
DOCTOR = [{"name": "Diagnose the node", "gpunode.nvidia.gpu_doctor": {"query_cri": False}}]


@pytest.fixture(scope="module")
def node():
    nvidia_node.ensure_image()
    repo = nvidia_node.ensure_repo()
    container = nvidia_node.NodeContainer(prefix="services-cve")
    try:
        container.start()
        container.serve_repo(repo)
        yield container
    finally:
        container.close()


def toolkit_vars(node, **extra):
    variables = {"nvidia_container_toolkit_repo_url": "%s/libnvidia-container/stable/deb/$(ARCH)" % node.url,
                 "nvidia_container_toolkit_repo_key_url": "%s/keys/nvidia-test.asc" % node.url}
    variables.update(extra)
    return variables


def versions(node):
    return node.packages("^(nvidia-container-toolkit|libnvidia-container)")


def test_vulnerable_version_refused_then_allowed_then_reported_then_upgraded(node):
    refused = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.17.7-1"))
    assert refused.failed
    message = "\n".join(refused.failure_messages())
    assert "would install toolkit 1.17.7-1, older than 1.17.8" in message and "CVE-2025-23266" in message, message
    assert versions(node) == {} and node.read(SOURCES) is None  # refused before any change

    allowed = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.17.7-1",
                                           nvidia_container_toolkit_allow_vulnerable=True), post_tasks=DOCTOR)
    assert not allowed.failed, allowed.failure_messages()
    assert versions(node) == dict((name, "1.17.7-1") for name in TOOLKIT)
    assert any("allowed by nvidia_container_toolkit_allow_vulnerable" in m for m in allowed.messages())
    findings = allowed.result_of("Diagnose the node")["findings"]
    vulnerable = [f for f in findings if f["rule"] == "toolkit-vulnerable"]
    assert vulnerable and "1.17.7-1 is older than 1.17.8" in vulnerable[0]["message"]

    kept = node.play(ROLE, toolkit_vars(node))  # nothing pinned: the installed 1.17.7-1 would be kept
    assert kept.failed
    assert any("the installed toolkit 1.17.7-1 would be kept" in m and "allow_upgrade" in m
               for m in kept.failure_messages()), kept.failure_messages()
    assert versions(node) == dict((name, "1.17.7-1") for name in TOOLKIT)

    upgraded = node.play(ROLE, toolkit_vars(node, nvidia_container_toolkit_version="1.17.8-1",
                                            nvidia_container_toolkit_allow_upgrade=True), post_tasks=DOCTOR)
    assert not upgraded.failed, upgraded.failure_messages()
    assert versions(node) == dict((name, "1.17.8-1") for name in TOOLKIT)
    rules = [f["rule"] for f in upgraded.result_of("Diagnose the node")["findings"]]
    assert "toolkit-vulnerable" not in rules


def test_below_the_security_minimum_refused_when_the_operator_asks(node):
    # The stand-in repository's newest toolkit, 1.18.0-1, is below the table's 1.19.1 (CVE-2026-24260).
    asked = toolkit_vars(node, nvidia_container_toolkit_version="1.18.0-1", nvidia_container_toolkit_allow_upgrade=True,
                         nvidia_container_toolkit_security_minimum="refuse")
    before = versions(node)
    refused = node.play(ROLE, asked)
    assert refused.failed
    message = "\n".join(refused.failure_messages())
    assert "1.18.0-1 is below 1.19.1" in message and "bulletin 5850" in message and "CVE-2026-24260" in message, message
    assert versions(node) == before  # refused before any change
