"""The docs say what the code does, and nothing they cite or ask for is missing (issue 44, defect 8)."""
import glob
import os
import re
import subprocess
import sys
import tarfile

import pytest
from unit_paths import REPO, UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery  # noqa: E402

DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")) + glob.glob(os.path.join(REPO, "roles", "*", "README.md"))
              + glob.glob(os.path.join(REPO, "examples", "**", "README.md"), recursive=True)
              + [os.path.join(REPO, "README.md")])
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def read(path):
    with open(path) as handle:
        return handle.read()


@pytest.mark.parametrize("doc", DOCS, ids=[os.path.relpath(d, REPO) for d in DOCS])
def test_every_relative_link_and_citation_of_a_doc_exists(doc):
    text = read(doc)
    missing = [target for target in LINK.findall(text) if "://" not in target
               and not os.path.exists(os.path.join(os.path.dirname(doc), target))]
    assert missing == [], "%s links to files that do not exist: %s" % (doc, missing)
    assert not re.search(r"\(docs: [A-Z]", text), "%s cites a document by a name that is no file" % doc


@pytest.mark.parametrize("doc", DOCS, ids=[os.path.relpath(d, REPO) for d in DOCS])
def test_a_doc_that_says_wiring_only_explains_it_or_links_the_glossary(doc):
    text = read(doc)
    if "wiring-only" in text and not doc.endswith(("glossary.md", "verify.md")):
        assert "glossary.md" in text, "%s says wiring-only without the glossary" % doc
    assert "**wiring-only**" in read(os.path.join(REPO, "docs", "glossary.md"))


def test_k3s_docs_say_what_the_code_does(tmp_path):
    """The runtime stage leaves a k3s containerd alone (the platform writes its file): the docs say so, and tell the
    k3s user what to set and that restarting k3s is theirs."""
    from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import target as targets
    node_trees.build("k3s", tmp_path)
    target = discovery.gather(str(tmp_path), sections=("runtimes", "kubelet", "target"))["target"]
    assert targets.platform_writes_config(target)
    discovery_md = " ".join(read(os.path.join(REPO, "docs", "discovery.md")).split())
    assert "writes the platform's template" not in discovery_md
    for words in ("the runtime stage changes no file of theirs", "default-runtime: nvidia",
                  "Restart the platform yourself", "The collection never restarts k3s or RKE2"):
        assert words in discovery_md, words
    assert "are reported and left alone: no file is written and nothing restarted" in " ".join(
        read(os.path.join(REPO, "docs", "containerd.md")).split())


def test_mig_parted_is_a_listed_prerequisite_and_each_missing_tool_names_its_own_source(monkeypatch):
    from ansible_collections.gpunode.nvidia.plugins.modules import gpu_mig_layout
    assert "`nvidia-mig-parted` on the node" in read(os.path.join(REPO, "docs", "before-you-start.md"))
    messages = {}

    class Module(object):
        def fail_json(self, msg, **_extra):
            raise SystemExit(msg)

    for tool in ("nvidia-smi", "nvidia-mig-parted"):
        monkeypatch.setattr(gpu_mig_layout, "find_binary",
                            lambda name, _dirs, missing=tool: None if name == missing else "/usr/bin/" + name)
        with pytest.raises(SystemExit) as failed:
            gpu_mig_layout.tools(Module())
        messages[tool] = str(failed.value)
    assert messages["nvidia-smi"].startswith("nvidia-smi is not installed on this node: it comes with NVIDIA's driver "
                                             "utilities, which the driver stage installs")
    assert "mig-parted" not in messages["nvidia-smi"]
    assert messages["nvidia-mig-parted"].startswith("nvidia-mig-parted is not installed on this node: install "
                                                    "NVIDIA's mig-parted release package")


def test_every_collection_a_shipped_inventory_connects_with_is_listed_in_the_readme():
    readme = read(os.path.join(REPO, "README.md"))
    inventories = [os.path.join(REPO, "demo", "inventory.yml")]
    connections = set()
    for path in inventories:
        connections |= set(re.findall(r"ansible_connection:\s*([a-z_]+\.[a-z_]+)\.", read(path)))
    assert connections == {"community.docker"}
    for collection in connections:
        assert "ansible-galaxy collection install %s" % collection in readme


def test_the_built_tarball_ships_no_tests(tmp_path):
    galaxy = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), REPO], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                   env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
    (tarball,) = glob.glob(str(tmp_path / "*.tar.gz"))
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert [n for n in names if n == "tests" or n.startswith("tests/")] == []
    assert "roles/container_runtime/tasks/apply.yml" in names and "docs/glossary.md" in names
