"""Kubelet feature gates in each distribution's own place (module_utils.partitioning.kubelet_gates, module kubelet_feature_gates).

Property tests generate kubelet configs in many shapes (comments, key order, gates set already, indentation, CRLF,
no final newline): the edit only inserts lines or changes the one gate's value, a real YAML parser (PyYAML, on the
test side only) reads exactly the gates asked for on top of what was there, and a second edit returns the text
unchanged. The module runs over node trees (tests/unit/node_trees.py) of kubeadm, k3s, MicroK8s, k0s and EKS.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import difflib
import json
import os
import stat
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import kubelet_gates as kg
from ansible_collections.gpunode.nvidia.plugins.modules import kubelet_feature_gates
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

GATE = "DynamicResourceAllocation"
GATES = {GATE: True}
names = st.sampled_from([GATE, "KubeletTracing", "GracefulNodeShutdown", "CPUManagerPolicyAlphaOptions"])
comments = st.sampled_from(["# featureGates: {}", "  # indented comment", "#", "# kubelet-arg: [x]"])


def only_inserts_or_the_gate_line(before, after):
    """Every line of before is in after, in order, except at most one line that names the gate."""
    old, new = before.splitlines(), after.splitlines()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            assert i2 - i1 == 1 and GATE in old[i1] or "feature-gates" in old[i1], (old[i1:i2], after)


@st.composite
def kubelet_configs(draw):
    """(text, gates already set) of a KubeletConfiguration written in block style."""
    indent = " " * draw(st.sampled_from([2, 4]))
    gate_indent = " " * draw(st.sampled_from([1, 2, 4]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    gates = draw(st.dictionaries(names, st.booleans(), max_size=3))
    parts = [["apiVersion: kubelet.config.k8s.io/v1beta1"], ["kind: KubeletConfiguration"],
             ["authentication:", indent + "anonymous:", indent * 2 + "enabled: false"],
             ["clusterDNS:", "- 10.96.0.10"], [draw(comments)], [""]]
    if draw(st.booleans()) or gates:
        block = ["featureGates:" + draw(st.sampled_from(["", "  # gates"]))]
        for name, on in gates.items():
            spelled = draw(st.sampled_from(["true", "True", "TRUE"] if on else ["false", "False"]))
            block.append("%s%s: %s%s" % (gate_indent, name, spelled, draw(st.sampled_from(["", "  # why"]))))
            if draw(st.booleans()):
                block.append(draw(comments))
        parts.append(block)
    order = draw(st.permutations(parts))
    text = newline.join(line for part in order for line in part)
    return (text + newline if draw(st.booleans()) else text), gates


@given(kubelet_configs())
def test_kubelet_config_edit_keeps_every_other_line_and_is_idempotent(config):
    text, gates = config
    after = kg.edit("kubelet_config", "/var/lib/kubelet/config.yaml", text, GATES)
    only_inserts_or_the_gate_line(text, after)
    expected = yaml.safe_load(text) or {}
    expected["featureGates"] = dict(expected.get("featureGates") or {}, **GATES)
    assert yaml.safe_load(after) == expected
    assert kg.edit("kubelet_config", "/var/lib/kubelet/config.yaml", after, GATES) == after
    if gates.get(GATE) is True:
        assert after == text


@st.composite
def rancher_configs(draw):
    """(text, the kubelet-arg items) of a k3s/RKE2 config.yaml."""
    dash = draw(st.sampled_from(["- ", "  - ", "    -   "]))
    quote = draw(st.sampled_from(["", "'", '"']))
    gates = draw(st.dictionaries(names, st.booleans(), max_size=3))
    args = ["max-pods=200", "eviction-hard=memory.available<5%"]
    if gates:
        args.insert(draw(st.integers(0, 2)), "feature-gates=" + ",".join("%s=%s" % (n, str(v).lower())
                                                                         for n, v in gates.items()))
    parts = [["write-kubeconfig-mode: \"0644\""], ["token: secret-token-123"], [draw(comments)],
             ["node-label:", '  - "gpu=true"']]
    if draw(st.booleans()) or gates:
        parts.append(["kubelet-arg:"] + ["%s%s%s%s" % (dash, quote, arg, quote) for arg in args])
    text = "\n".join(line for part in draw(st.permutations(parts)) for line in part) + "\n"
    return text, gates


@given(rancher_configs())
def test_rancher_config_edit_merges_into_one_feature_gates_item(config):
    text, gates = config
    after = kg.edit("rancher", "/etc/rancher/k3s/config.yaml", text, GATES)
    only_inserts_or_the_gate_line(text, after)
    before, edited = yaml.safe_load(text), yaml.safe_load(after)
    items = [a for a in edited["kubelet-arg"] if a.startswith("feature-gates=")]
    assert len(items) == 1
    assert dict(i.split("=") for i in items[0][len("feature-gates="):].split(",")) == dict(
        {n: str(v).lower() for n, v in gates.items()}, **{GATE: "true"})
    assert [a for a in edited["kubelet-arg"] if a not in items] == [
        a for a in before.get("kubelet-arg") or [] if not a.startswith("feature-gates=")]
    assert {k: v for k, v in edited.items() if k != "kubelet-arg"} == {
        k: v for k, v in before.items() if k != "kubelet-arg"}
    assert kg.edit("rancher", "/etc/rancher/k3s/config.yaml", after, GATES) == after


@given(st.lists(st.sampled_from(["--kubeconfig=${SNAP_DATA}/credentials/kubelet.config", "# comment",
                                 "--feature-gates=KubeletTracing=true", '--feature-gates="%s=false"' % GATE,
                                 "--feature-gates %s=true" % GATE, ""]), max_size=6), st.booleans())
def test_args_file_edit_sets_the_gate_in_the_last_flag(lines, final_newline):
    text = "\n".join(lines) + ("\n" if final_newline else "")
    after = kg.edit("args", "/var/snap/microk8s/current/args/kubelet", text, GATES)
    only_inserts_or_the_gate_line(text, after)
    flags = [line for line in after.splitlines() if line.startswith("--feature-gates")]
    last = flags[-1].split("=", 1)[1] if "=" in flags[-1].split()[0] else flags[-1].split(None, 1)[1]
    effective = {}
    for flag in flags:
        value = flag.split("=", 1)[1] if flag.startswith("--feature-gates=") else flag.split(None, 1)[1]
        effective.update(item.split("=") for item in value.strip('"').split(","))
    assert effective[GATE] == "true" and last
    assert kg.edit("args", "/var/snap/microk8s/current/args/kubelet", after, GATES) == after


@pytest.mark.parametrize("text, line, what", [
    ("a: 1\n---\nb: 2\n", 2, "several YAML documents"),
    ('{"kind": "KubeletConfiguration"}\n', 1, "not a block-style YAML mapping"),
    ("featureGates: {KubeletTracing: true}\n", 1, "featureGates is written inline ({KubeletTracing: true})"),
    ("featureGates: &gates\n  KubeletTracing: true\n", 1, "featureGates is written inline (&gates)"),
    ("featureGates:\n  %s: *on\n" % GATE, 2, "uses an anchor, alias or tag (*on)"),
    ("featureGates:\n  KubeletTracing: true\n    Nested: true\n", 3, "one `Gate: true|false` per line"),
    ("featureGates:\n  A: true\nfeatureGates:\n  B: true\n", "s 1 and 3", "featureGates is set more than once"),
])
def test_unsafe_kubelet_configs_are_refused_naming_the_line(text, line, what):
    with pytest.raises(kg.GateError) as refused:
        kg.edit("kubelet_config", "/var/lib/kubelet/config.yaml", text, GATES)
    assert "/var/lib/kubelet/config.yaml line%s: " % (line if isinstance(line, str) else " %d" % line) in str(
        refused.value)
    assert what in str(refused.value) and "run again" in str(refused.value)


@pytest.mark.parametrize("written", ["t", "1", '"true"', "y", "T"])
def test_a_gate_value_that_is_no_yaml_boolean_is_rewritten(written):
    """featureGates is a map of booleans: kubelet does not start with "t", 1 or a quoted "true" there."""
    text = "kind: KubeletConfiguration\nfeatureGates:\n  %s: %s  # why\n" % (GATE, written)
    after = kg.edit("kubelet_config", "/var/lib/kubelet/config.yaml", text, GATES)
    assert after == "kind: KubeletConfiguration\nfeatureGates:\n  %s: true  # why\n" % GATE
    assert yaml.safe_load(after)["featureGates"] == GATES


@pytest.mark.parametrize("kind, text, line, what", [
    ("rancher", 'kubelet-arg:\n  - "max-pods=250\nx: feature-gates=A=true"\n', 2, "cannot read the quoted value"),
    ("rancher", 'kubelet-arg:\n  - "max-pods=250\nfeature-gates=A=true"\n', 3, "not a plain `key:` or `- item`"),
    ("rancher", 'kubelet-arg:\n  - &arg "max-pods=250"\n', 2, 'one "flag=value" item per line'),
    ("rancher", '!!str kubelet-arg:\n  - "max-pods=250"\n', 1, "not a plain `key:` or `- item`"),
    ("kubelet_config", "kind: KubeletConfiguration\nfeatureGates:\n  %s: \"tr\nx: ue\"\n" % GATE, 3,
     "cannot read the quoted value"),
    ("kubelet_config", "kind: KubeletConfiguration\n? featureGates\n: {}\n", 2, "not a plain `key:` or `- item`"),
    ("kubelet_config", "kind: KubeletConfiguration\nclusterDNS: [10.96.0.10\nmemorySwap: {}\n", 3, "not valid YAML"),
])
def test_yaml_a_line_edit_cannot_read_is_refused_naming_the_line(kind, text, line, what):
    """A value continued on the next line, tags, anchors, complex keys; where PyYAML exists, any invalid YAML."""
    with pytest.raises(kg.GateError) as refused:
        kg.edit(kind, "/x/config.yaml", text, GATES)
    assert "/x/config.yaml line %d: " % line in str(refused.value) and what in str(refused.value)


def test_without_pyyaml_on_the_node_the_line_checks_alone_decide(monkeypatch):
    monkeypatch.setattr(kg, "yaml", None)
    text = "kind: KubeletConfiguration\nclusterDNS: [10.96.0.10\nmemorySwap: {}\n"
    assert kg.edit("kubelet_config", "/x/config.yaml", text, GATES).endswith("featureGates:\n  %s: true\n" % GATE)


def test_an_edit_that_would_change_more_than_the_gates_is_refused(monkeypatch):
    """The post-condition, where PyYAML exists: the edited file reads as the old one with the gates set."""
    monkeypatch.setitem(kg.EDITORS, "kubelet_config", lambda path, text, gates: text + "extra: 1\n")
    with pytest.raises(kg.GateError, match="would change more than the gates in this file"):
        kg.edit("kubelet_config", "/x/config.yaml", "kind: KubeletConfiguration\n", GATES)


def test_rancher_flow_list_and_escaped_items_are_refused():
    with pytest.raises(kg.GateError, match=r"line 1: kubelet-arg is written inline \(\[\"max-pods=1\"\]\)"):
        kg.edit("rancher", "/etc/rancher/k3s/config.yaml", 'kubelet-arg: ["max-pods=1"]\n', GATES)
    with pytest.raises(kg.GateError, match="line 2: cannot read the quoted value"):
        kg.edit("rancher", "/etc/rancher/k3s/config.yaml", 'kubelet-arg:\n  - "feature-gates=A=\\x"\n', GATES)


def test_kubelet_version_from_each_distribution():
    def run(argv):
        return 0, {"/usr/bin/kubelet": "Kubernetes v1.33.4\n",
                   "/usr/local/bin/k3s": "k3s version v1.32.5+k3s1 (8e8f2a47)\ngo version go1.23.8\n"}[argv[0]]
    snap = {"/snap/microk8s/current/meta/snap.yaml": "name: microk8s\nversion: v1.33.1\n"}.get
    assert kg.kubelet_version({"binary": "/usr/bin/kubelet"}, run, snap) == "1.33.4"
    assert kg.kubelet_version({"binary": "/usr/local/bin/k3s", "platform": "k3s", "embedded_in": "k3s"},
                              run, snap) == "1.32.5"
    assert kg.kubelet_version({"binary": "/snap/microk8s/1/kubelite", "platform": "microk8s",
                               "embedded_in": "kubelite"}, run, snap) == "1.33.1"


# --- the module over node trees ------------------------------------------------------------------------

def module(capsys, root, check_mode=False, **args):
    args.update(_ansible_check_mode=check_mode, _ansible_diff=True, root=str(root), gates=GATES,
                kubernetes_minors=["1.32", "1.33"])
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            kubelet_feature_gates.main()
    return json.loads(capsys.readouterr().out)


def test_kubeadm_gate_written_once_on_1_33_with_check_mode_first(capsys, tmp_path):
    tree, _facts = node_trees.build("kubeadm-containerd", tmp_path)
    config = tree.local("/var/lib/kubelet/config.yaml")
    before = open(config).read()
    checked = module(capsys, tmp_path, check_mode=True, kubernetes_version="1.33.4")
    assert checked["changed"] is True and open(config).read() == before
    assert checked["diff"]["after"] == before + "featureGates:\n  %s: true\n" % GATE
    done = module(capsys, tmp_path, kubernetes_version="1.33.4")
    assert done["changed"] is True and done["restart_service"] == "kubelet"
    assert open(config).read() == checked["diff"]["after"]
    assert "kube-system/kubelet-config ConfigMap" in done["msg"]
    again = module(capsys, tmp_path, kubernetes_version="1.33.4")
    assert again["changed"] is False and again["restart_service"] == ""


@pytest.mark.parametrize("name", ["Dynamic Resource Allocation", "A,B", "A=true", "-A", ""])
def test_a_gate_name_that_would_break_the_line_is_refused(capsys, tmp_path, name):
    """A comma or `=` would split the --feature-gates flag; a space or colon breaks the YAML line."""
    tree, _facts = node_trees.build("kubeadm-containerd", tmp_path)
    before = open(tree.local("/var/lib/kubelet/config.yaml")).read()
    args = dict(_ansible_check_mode=False, _ansible_diff=True, root=str(tmp_path), gates={name: True},
                kubernetes_minors=["1.32", "1.33"], kubernetes_version="1.33.4")
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            kubelet_feature_gates.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "%r is no feature gate name" % name in result["msg"]
    assert open(tree.local("/var/lib/kubelet/config.yaml")).read() == before


@pytest.mark.parametrize("version, says", [("1.34.2", "the gates belong only on 1.32, 1.33; nothing to write"),
                                           ("", "the kubelet's version is unknown")])
def test_other_versions_write_nothing(capsys, tmp_path, version, says):
    tree, _facts = node_trees.build("kubeadm-containerd", tmp_path)
    before = open(tree.local("/var/lib/kubelet/config.yaml")).read()
    os.chmod(tree.local("/usr/bin/kubelet"), 0o644)  # the stand-in file cannot say its version
    result = module(capsys, tmp_path, kubernetes_version=version)
    assert result["changed"] is False and says in result["msg"]
    assert open(tree.local("/var/lib/kubelet/config.yaml")).read() == before


def test_k3s_config_created_root_only_and_no_restart_named(capsys, tmp_path):
    node_trees.build("k3s", tmp_path)
    result = module(capsys, tmp_path, kubernetes_version="1.32.5")
    path = tmp_path / "etc/rancher/k3s/config.yaml"
    assert result["changed"] is True and result["restart_service"] == ""
    assert path.read_text() == 'kubelet-arg:\n  - "feature-gates=%s=true"\n' % GATE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "restart k3s (server or agent) yourself" in result["msg"]


def test_microk8s_args_file_and_its_service(capsys, tmp_path):
    tree, _facts = node_trees.build("microk8s", tmp_path)
    result = module(capsys, tmp_path, kubernetes_version="1.33.1")
    assert result["restart_service"] == "snap.microk8s.daemon-kubelite"
    assert open(tree.local("/var/snap/microk8s/6089/args/kubelet")).read().endswith(
        "--containerd=${SNAP_COMMON}/run/containerd.sock\n--feature-gates=%s=true\n" % GATE)
    assert os.path.islink(tree.local("/var/snap/microk8s/current"))


@pytest.mark.parametrize("platform, says", [("k0s", "spec.workerProfiles[].values.featureGates"),
                                            ("eks-al2", "is a JSON kubelet config")])
def test_places_this_module_does_not_edit_are_refused(capsys, tmp_path, platform, says):
    node_trees.build(platform, tmp_path)
    result = module(capsys, tmp_path, kubernetes_version="1.33.0")
    assert result["failed"] is True and says in result["msg"]


def test_a_kubelet_flag_that_overrides_the_file_is_refused(capsys, tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._kubeadm_kubelet(tree, extra_args=" --feature-gates=%s=false" % GATE)  # pylint: disable=W0212
    before = open(tree.local("/var/lib/kubelet/config.yaml")).read()
    result = module(capsys, tmp_path, kubernetes_version="1.33.4")
    assert result["failed"] is True
    assert result["msg"].startswith("kubelet runs with --feature-gates=%s=false, which overrides its config file" % GATE)
    assert open(tree.local("/var/lib/kubelet/config.yaml")).read() == before


def test_a_k3s_dropin_that_replaces_kubelet_arg_is_refused(capsys, tmp_path):
    tree, _facts = node_trees.build("k3s", tmp_path)
    tree.file("/etc/rancher/k3s/config.yaml.d/50-gpu.yaml", "kubelet-arg:\n  - max-pods=50\n")
    result = module(capsys, tmp_path, kubernetes_version="1.33.2")
    assert result["failed"] is True
    assert result["msg"].startswith("/etc/rancher/k3s/config.yaml.d/50-gpu.yaml sets kubelet-arg, which replaces the "
                                    "list of /etc/rancher/k3s/config.yaml")
    assert not (tmp_path / "etc/rancher/k3s/config.yaml").exists()
    tree.file("/etc/rancher/k3s/config.yaml.d/50-gpu.yaml", "kubelet-arg+:\n  - max-pods=50\n")
    assert module(capsys, tmp_path, kubernetes_version="1.33.2")["changed"] is True
