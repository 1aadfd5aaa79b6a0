"""Without the kubernetes package on the controller, gpu_node_maintenance fails with the install line, no traceback."""
from test_missing_controller_deps import run_play, without  # noqa: F401  pylint: disable=unused-import


def test_node_maintenance_without_kubernetes_names_the_package_and_pip_line(tmp_path, without):  # noqa: F811
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    results = run_play(tmp_path, without("kubernetes"), [
        {"name": "cordon", "ignore_errors": True,
         "gpunode.nvidia.gpu_node_maintenance": {"kubeconfig": str(kubeconfig), "node": "gpu-1", "step": "cordon"}},
        {"name": "after", "ansible.builtin.debug": {"msg": "still runs"}},
    ])
    assert results["cordon"]["failed"] is True
    assert "(kubernetes)" in results["cordon"]["msg"] and "for node maintenance" in results["cordon"]["msg"]
    assert "-m pip install kubernetes" in results["cordon"]["msg"]
    assert results["after"]["msg"] == "still runs"


def test_an_unreachable_api_is_a_clear_failure(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text('{"apiVersion": "v1", "kind": "Config", "current-context": "c", "clusters": [{"name": "c", '
                          '"cluster": {"server": "http://127.0.0.1:9"}}], "users": [{"name": "c", "user": {}}], '
                          '"contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}]}')
    (tmp_path / "empty").mkdir()
    results = run_play(tmp_path, str(tmp_path / "empty"), [
        {"name": "cordon", "ignore_errors": True,
         "gpunode.nvidia.gpu_node_maintenance": {"kubeconfig": str(kubeconfig), "node": "gpu-1", "step": "cordon"}}])
    assert results["cordon"]["msg"] == (
        "step cordon on node gpu-1: cannot reach the Kubernetes API of kubeconfig %s (MaxRetryError); the step "
        "stopped there. Check the server address and that it answers from the controller, then run it again"
        % kubeconfig)
