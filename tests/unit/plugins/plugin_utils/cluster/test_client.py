"""The cluster client (plugins/plugin_utils/cluster/client.py), the one way to the Kubernetes API: its messages for
a missing library, a kubeconfig that is not there or cannot be loaded, and an API that does not answer (a real
`kubernetes` client against a closed port: no API server is needed to be refused); and patch_with_version, the one
read-decide-write loop behind every node write (cordon, uncordon, labels, the upgrade state): the write carries the
version it decided on, and only a 409 is retried."""
import os
import sys

import pytest
from unit_paths import UNIT_DIR

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "testbed"))
from kube_api_standin import write_kubeconfig  # noqa: E402

needs_client = pytest.mark.skipif(not client.HAS_KUBERNETES, reason="the kubernetes client is not installed")


def test_without_the_library_the_task_names_the_package_what_for_and_the_pip_line(monkeypatch):
    from ansible.errors import AnsibleActionFail  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(client, "HAS_KUBERNETES", False)
    for call in (lambda: client.require_client("for node maintenance"),
                 lambda: client.connect_task({"kubeconfig": None, "context": None}, "for node maintenance")):
        with pytest.raises(AnsibleActionFail) as exc:
            call()
        message = exc.value.message
        assert "(kubernetes)" in message and "for node maintenance" in message, message
        assert message.endswith("Install it on the controller: %s -m pip install kubernetes" % sys.executable)


@needs_client
def test_a_kubeconfig_that_is_not_there_is_named_as_a_path_that_does_not_exist(tmp_path):
    missing = str(tmp_path / "kubeconfig")
    with pytest.raises(client.KubeconfigError) as exc:
        client.connect(missing)
    assert str(exc.value) == "cannot load kubeconfig %s: the path does not exist" % missing


@needs_client
def test_without_a_kubeconfig_option_the_default_files_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    with pytest.raises(client.KubeconfigError) as exc:
        client.connect(None)
    assert str(exc.value) == ("cannot load kubeconfig (default): %s, %s does not exist (give kubeconfig, or set "
                              "KUBECONFIG)" % (tmp_path / "a", tmp_path / "b"))
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(client.KubeconfigError, match=r"^cannot load kubeconfig \(default\): ~/.kube/config does not"):
        client.connect(None)


@needs_client
@pytest.mark.parametrize("content, cause", [
    ("clusters: [\n", "while parsing"),  # not YAML
    ("apiVersion: v1\nkind: Config\n", "Invalid kube-config file"),  # no context, no cluster
])
def test_a_kubeconfig_that_cannot_be_loaded_gives_the_clients_reason(tmp_path, content, cause):
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(client.KubeconfigError) as exc:
        client.connect(str(path))
    assert str(exc.value).startswith("cannot load kubeconfig %s: " % path) and cause in str(exc.value), str(exc.value)


@needs_client
def test_an_unknown_context_is_a_kubeconfig_error(tmp_path):
    path = write_kubeconfig(str(tmp_path / "kubeconfig"), "http://127.0.0.1:9")
    with pytest.raises(client.KubeconfigError, match="cannot load kubeconfig %s: .*elsewhere" % path):
        client.connect(path, context="elsewhere")


@needs_client
def test_an_api_that_does_not_answer_is_a_transport_error_with_one_message(tmp_path):
    path = write_kubeconfig(str(tmp_path / "kubeconfig"), "http://127.0.0.1:9")  # nothing listens on port 9
    kube = client.connect(path)
    with pytest.raises(client.TransportError) as exc:
        kube.core.list_node(_request_timeout=5)
    assert kube.unreachable(exc.value, "the step stopped there", "run it again") == (
        "cannot reach the Kubernetes API of kubeconfig %s (MaxRetryError); the step stopped there. Check the server "
        "address and that it answers from the controller, then run it again" % path)
    assert client.unreachable(None, exc.value, "nothing was changed", "retry").startswith(
        "cannot reach the Kubernetes API of kubeconfig (default) (MaxRetryError)")


def test_every_action_s_spec_starts_from_the_shared_kube_options():
    spec = client.kube_options(kubeconfig=dict(type="path", required=True), node=dict(type="str"))
    assert spec == {"kubeconfig": dict(type="path", required=True), "context": dict(type="str"),
                    "node": dict(type="str")}
    assert client.KUBE_OPTIONS["kubeconfig"] == dict(type="path")  # the shared spec is not changed by one action


class Node:
    def __init__(self, errors):
        self.version, self.errors, self.written = 0, list(errors), []

    def read(self):
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}}

    def write(self, patch):
        self.written.append(patch)
        if self.errors:
            raise client.ApiException(status=self.errors.pop(0))


def decide(node):
    return {"spec": {"unschedulable": True}}, "decided on %s" % node["metadata"]["resourceVersion"]


def test_conflicts_decide_again_on_the_new_version_while_the_caller_allows():
    node = Node(errors=[409, 409])
    asked = []
    outcome = client.patch_with_version(node.read, decide, node.write, False,
                                        retry_conflict=lambda conflicts: asked.append(conflicts) or True)
    assert outcome == ("decided on 3", True)
    assert [p["metadata"]["resourceVersion"] for p in node.written] == ["1", "2", "3"]
    assert asked == [1, 2]


def test_the_conflict_the_caller_refuses_and_any_other_error_are_raised_after_one_write():
    for status, allowed in ((409, False), (500, True)):
        node = Node(errors=[status])
        with pytest.raises(client.ApiException) as exc:
            client.patch_with_version(node.read, decide, node.write, False, retry_conflict=lambda conflicts: allowed)
        assert exc.value.status == status and len(node.written) == 1


def test_a_dry_run_and_a_decision_to_write_nothing_write_nothing():
    node = Node(errors=[])
    assert client.patch_with_version(node.read, decide, node.write, True, retry_conflict=None) == ("decided on 1", True)
    assert client.patch_with_version(node.read, lambda obj: (None, "as it is"), node.write, False,
                                     retry_conflict=None) == ("as it is", False)
    assert node.written == []


@needs_client
def test_conflicts_against_the_api_standin_are_decided_again_on_what_the_other_writer_left(tmp_path):
    """A real 409 from the API stand-in (no kube-apiserver runs here): the label another writer set between this
    read and write survives, and ours is written on top of it."""
    from kube_api_standin import KubeApiStandin, Node as StandinNode  # pylint: disable=import-outside-toplevel

    standin = KubeApiStandin([StandinNode("gpu-1")]).start()
    try:
        kube = client.connect(standin.write_kubeconfig(str(tmp_path / "kubeconfig")))
        races = ["first", "second"]

        def read():
            node = kube.to_json(kube.core.read_node("gpu-1"))
            if races:  # another controller writes after our read
                with standin.lock:
                    standin.nodes["gpu-1"].labels["other"] = races.pop(0)
                    standin.update_node("gpu-1", standin.nodes["gpu-1"].to_api())
            return node

        def decide_label(node):
            return {"metadata": {"labels": {"ours": "yes"}}}, (node["metadata"].get("labels") or {}).get("other")

        outcome = client.patch_with_version(read, decide_label, lambda patch: kube.core.patch_node("gpu-1", patch),
                                            False, retry_conflict=lambda conflicts: conflicts < 5)
        labels = kube.core.read_node("gpu-1").metadata.labels
        assert outcome == ("second", True) and labels["other"] == "second" and labels["ours"] == "yes"
        assert len([r for r in standin.requests if r[1] == "PATCH"]) == 3  # two answered 409 Conflict
    finally:
        standin.stop()
