"""One binary lookup for the editors, the node services, the runtime views and the modules: its search order
is a service's PATH (as systemd sets it), after the caller's own PATH on the live node and the tool's own
directories."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


from ansible_collections.gpunode.nvidia.plugins.module_utils.common import binaries
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import runtime_views
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services


def _tool(directory, name, mode=0o755):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return str(path)


def test_a_bare_name_is_found_on_path_first_then_where_a_service_finds_it(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    _tool(first, "containerd")
    _tool(second, "containerd")
    monkeypatch.setenv("PATH", "%s:%s" % (first, second))
    assert binaries.find_binary("containerd") == str(first / "containerd")
    monkeypatch.setattr(binaries, "SEARCH_DIRS", (str(second),))
    monkeypatch.setenv("PATH", "")
    assert binaries.find_binary("containerd") == str(second / "containerd")
    assert binaries.find_binary("no-such-binary") is None


def test_a_path_must_be_an_executable_file(tmp_path):
    script = tmp_path / "runtime"
    script.write_text("#!/bin/sh\n")
    assert binaries.find_binary(str(script)) is None
    script.chmod(0o755)
    assert binaries.find_binary(str(script)) == str(script)
    assert binaries.find_binary(str(tmp_path)) is None


def test_the_tools_own_directories_come_before_path_and_path_before_the_service_dirs(tmp_path, monkeypatch):
    own, on_path, service = tmp_path / "nvidia" / "bin", tmp_path / "path", tmp_path / "usr" / "bin"
    for directory in (own, on_path, service):
        _tool(directory, "nvidia-smi")
    monkeypatch.setattr(binaries, "SEARCH_DIRS", (str(service),))
    monkeypatch.setenv("PATH", str(on_path))
    assert binaries.find_binary("nvidia-smi", (str(own),)) == str(own / "nvidia-smi")
    assert binaries.find_binary("nvidia-smi") == str(on_path / "nvidia-smi")
    assert binaries.find_binary("nvidia-smi", env_path=False) == str(service / "nvidia-smi")


def test_search_order_is_systemds_service_path_each_directory_once(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin::/opt/bin")
    assert binaries.search_dirs(binaries.NVIDIA_TOOL_DIRS) == [
        "/usr/local/nvidia/bin", "/usr/bin", "/opt/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/sbin",
        "/bin"]
    assert binaries.search_dirs(env_path=False) == list(binaries.SEARCH_DIRS) == [
        "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


def test_under_a_root_local_comes_before_the_distributions_copy_and_path_is_not_read(tmp_path, monkeypatch):
    """node_services used to look in /usr/bin before /usr/local/bin: a service, and the shell, run the local
    one, so that is the one the lookup names now."""
    _tool(tmp_path / "usr" / "bin", "nvidia-ctk", mode=0o644)
    assert node_services.find_tool(str(tmp_path), "nvidia-ctk") == "/usr/bin/nvidia-ctk"  # a file is enough
    _tool(tmp_path / "usr" / "local" / "bin", "nvidia-ctk")
    assert node_services.find_tool(str(tmp_path), "nvidia-ctk") == "/usr/local/bin/nvidia-ctk"
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    _tool(tmp_path / "elsewhere", "nvlsm")
    assert node_services.find_tool(str(tmp_path), "nvlsm") is None


def test_a_runtime_binary_name_resolves_as_the_shim_does_through_the_node(tmp_path):
    node = Node(str(tmp_path), run=False)
    assert runtime_views.binary_exists(node, "nvidia-container-runtime") == (False, "nvidia-container-runtime")
    _tool(tmp_path / "usr" / "bin", "nvidia-container-runtime")
    assert runtime_views.binary_exists(node, "nvidia-container-runtime") == (
        True, "/usr/bin/nvidia-container-runtime")
    _tool(tmp_path / "usr" / "local" / "bin", "nvidia-container-runtime")
    assert runtime_views.binary_exists(node, "nvidia-container-runtime") == (
        True, "/usr/local/bin/nvidia-container-runtime")
    assert runtime_views.binary_exists(node, "/opt/nvidia-container-runtime") == (False, "/opt/nvidia-container-runtime")
    assert runtime_views.binary_exists(node, "") == (None, None)
