"""Paths on the node through its root, and systemd's unit search: the one definition every reader uses."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
from node_trees import NodeTree  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import node_paths  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader  # noqa: E402


def test_resolve_in_root_follows_links_as_the_node_would(tmp_path):
    tree = NodeTree(tmp_path)
    tree.file("/usr/lib/x86_64-linux-gnu/libc.so.6", "x")
    tree.symlink("/lib", "usr/lib")
    tree.symlink("/lib64/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
    tree.symlink("/loop/a", "/loop/b")
    tree.symlink("/loop/b", "/loop/a")
    root = str(tmp_path)
    assert node_paths.resolve_in_root(root, "/lib64/libc.so.6") == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert node_paths.resolve_in_root(root, "/lib64/../lib/x86_64-linux-gnu/./libc.so.6") == \
        "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert node_paths.resolve_in_root(root, "/../../etc/passwd") == "/etc/passwd"  # never above root
    with pytest.raises(OSError, match="symbolic links"):
        node_paths.resolve_in_root(root, "/loop/a")


def files_of(root, name):
    node = node_reader.Node(str(root), run=False)
    return node_paths.unit_files(lambda path: node.exists(path) or node.readlink(path) is not None,
                                 node.listdir, name)


def test_the_unit_comes_from_the_first_directory_that_has_it_and_a_mask_counts(tmp_path):
    tree = NodeTree(tmp_path)
    tree.file("/lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/dockerd\n")
    assert files_of(tmp_path, "docker.service") == ["/lib/systemd/system/docker.service"]
    tree.symlink("/etc/systemd/system/docker.service", "/dev/null")
    assert files_of(tmp_path, "docker.service") == ["/etc/systemd/system/docker.service"]
    assert files_of(tmp_path, "missing.service") == []
    tree.file("/etc/systemd/system/missing.service.d/10-x.conf", "[Service]\n")
    assert files_of(tmp_path, "missing.service") == ["/etc/systemd/system/missing.service.d/10-x.conf"]


def test_dropins_override_by_name_across_directories_and_apply_sorted_by_name(tmp_path):
    """systemd.unit(5): a drop-in in a higher-priority directory replaces one of the same name; all drop-ins are
    applied in lexicographic order of their names, whatever directory they are in."""
    tree = NodeTree(tmp_path)
    tree.file("/lib/systemd/system/containerd.service", "[Service]\n")
    tree.file("/lib/systemd/system/containerd.service.d/10-a.conf", "[Service]\n")
    tree.file("/lib/systemd/system/containerd.service.d/30-c.conf", "[Service]\n")
    tree.file("/etc/systemd/system/containerd.service.d/30-c.conf", "[Service]\n")
    tree.file("/run/systemd/system/containerd.service.d/20-b.conf", "[Service]\n")
    tree.file("/etc/systemd/system/containerd.service.d/notes.txt", "not a drop-in")
    assert files_of(tmp_path, "containerd.service") == [
        "/lib/systemd/system/containerd.service",
        "/lib/systemd/system/containerd.service.d/10-a.conf",
        "/run/systemd/system/containerd.service.d/20-b.conf",
        "/etc/systemd/system/containerd.service.d/30-c.conf",
    ]


def test_a_unit_reads_its_settings_in_that_order_and_only_from_its_sections(tmp_path):
    tree = NodeTree(tmp_path)
    tree.file("/lib/systemd/system/containerd.service",
              "[Unit]\nExecStart=/not/this\n[Service]\nEnvironment=A=1\nExecStart=/usr/bin/containerd\n")
    tree.file("/etc/systemd/system/containerd.service.d/20-late.conf", "[Service]\nExecStart=\n"
              "ExecStart=/usr/bin/containerd --config /etc/late.toml\n")
    tree.file("/run/systemd/system/containerd.service.d/10-early.conf", "[Service]\nEnvironment=A=2\n")
    unit = node_reader.unit(node_reader.Node(str(tmp_path), run=False), "containerd.service")
    assert unit["exec_argv"] == ["/usr/bin/containerd", "--config", "/etc/late.toml"]
    assert unit["env"] == {"A": "2"}


@pytest.mark.parametrize("line,expected", [("export A=1", {"A": "1"}), ('B="two words"', {"B": "two words"}),
                                           ("# C=3", {}), ("not a line", {}), ("D='x'", {"D": "x"})])
def test_environment_files_in_systemd_and_shell_style(tmp_path, line, expected):
    NodeTree(tmp_path).file("/etc/default/docker", line + "\n")
    assert node_reader.read_env_file(node_reader.Node(str(tmp_path), run=False), "/etc/default/docker") == expected
