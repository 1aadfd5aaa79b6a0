"""gpunode.nvidia.containerd_runtime against real containerd 1.6.20, 1.7.24 and 2.1.9.

Each version runs as a private daemon on its own socket. Before the change, a
CRI RunPodSandbox through the `nvidia` handler fails exactly as in incident
I1; after the module and a restart, the live daemon lists the runtime and a
sandbox starts through it. The runtime binary is a STAND-IN
(tests/testbed/stand-ins/nvidia-container-runtime: records its call, execs runc).
"""
import difflib
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

import ansible_runner
import daemons
from ansible_runner import run_module, run_tasks
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.effective import flatten, load_dump
import warm_ansible

RELEASES = list(daemons.CONTAINERD_RELEASES)
IDS = ["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()]
MODULE = "gpunode.nvidia.containerd_runtime"


def runtime_args(ctrd, **args):
    args.setdefault("path", ctrd.config_path)
    args.setdefault("binary", daemons.STANDIN_RUNTIME)
    return args


def configure(ctrd, **args):
    return run_module(MODULE, runtime_args(ctrd, **args), path_prepend=[ctrd.dist.bin_dir])


def configure_in_turn(ctrd, *each_args):
    """configure() once per argument set, in one ansible-playbook run (one start-up instead of one each)."""
    steps = [(runtime_args(ctrd, **args), False) for args in each_args]
    return run_tasks(MODULE, steps, path_prepend=[ctrd.dist.bin_dir])


def run_sandbox(ctrd, handler):
    client = ctrd.client()
    config = cri.sandbox_config("probe-%s" % handler, str(uuid.uuid4()), log_directory=ctrd.pod_logs)
    sandbox_id = client.run_pod_sandbox(config, runtime_handler=handler)
    client.stop_pod_sandbox(sandbox_id)
    client.remove_pod_sandbox(sandbox_id)
    return sandbox_id


@pytest.fixture
def node(private_containerd, standin_images, request):
    ctrd = private_containerd(request.param)
    ctrd.start(ctrd.minimal_config())
    ctrd.import_image(standin_images["pause"])
    return ctrd


@pytest.mark.parametrize("node", RELEASES, ids=IDS, indirect=True)
def test_runtime_reaches_the_live_daemon(node):
    before = node.read_config()
    with pytest.raises(http2_grpc.CRIError, match='no runtime for "nvidia" is configured'):
        run_sandbox(node, "nvidia")

    result = configure(node)
    assert result["changed"] and result["validated"], result
    assert any("runtimes.nvidia" in key for key in result["effective_changes"])
    after = node.read_config()
    # Only lines were added: nothing of the original moved, changed or went away.
    assert [l for l in difflib.ndiff(before.splitlines(True), after.splitlines(True)) if l[0] == "-"] == []

    node.restart()
    runtimes = cri.runtimes_from_status(node.client().status(verbose=True))
    assert runtimes["nvidia"]["binary_name"] == daemons.STANDIN_RUNTIME
    run_sandbox(node, "nvidia")
    assert any("create" in line for line in node.standin_invocations())

    again = configure(node)
    assert not again["changed"]
    assert node.read_config() == after


@pytest.mark.parametrize("node", RELEASES, ids=IDS, indirect=True)
def test_check_mode_writes_nothing(node):
    before = node.read_config()
    result = run_module(MODULE, {"path": node.config_path, "binary": daemons.STANDIN_RUNTIME},
                        path_prepend=[node.dist.bin_dir], check=True, diff=True)
    assert result["changed"] and result["validated"]
    assert [d["after_header"] for d in result["diff"]] == [node.config_path]  # one diff per file
    assert "runtimes.nvidia" in result["diff"][0]["after"]
    assert node.read_config() == before


@pytest.mark.parametrize("node", RELEASES, ids=IDS, indirect=True)
def test_present_then_absent_restores_effective_config(node):
    dump = [node.dist.containerd, "--config", node.config_path, "config", "dump"]
    original = subprocess.run(dump, stdout=subprocess.PIPE, check=True).stdout
    # containerd 1.6 does not read enable_cdi: cdi there is refused (test_containerd_uninstall.py).
    present, removed = configure_in_turn(node, dict(set_as_default=True, cdi=node.dist.version >= "1.7"),
                                         dict(state="absent"))
    assert present["changed"], present
    assert removed["changed"] and removed["validated"], removed
    restored = subprocess.run(dump, stdout=subprocess.PIPE, check=True).stdout
    before, after = flatten(load_dump(original.decode())), flatten(load_dump(restored.decode()))
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == []  # enable_cdi too: present recorded what it was


def hazard_files(ctrd):
    """Main file + a drop-in that holds only the nvidia runtime: the containerd 1.x trap (drop_in refusal:
    tests/integration/test_containerd_dropin.py)."""
    dropins = os.path.join(os.path.dirname(ctrd.config_path), "conf.d")
    os.makedirs(dropins, exist_ok=True)
    runtime_plugin = daemons.cri_tables(ctrd.dist)[0]
    with open(os.path.join(dropins, "99-nvidia.toml"), "w") as handle:
        handle.write("version = %d\n[%s.containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"
                     % (ctrd.dist.config_version, runtime_plugin))
    main = ctrd.minimal_config().replace(
        "version = %d\n" % ctrd.dist.config_version,
        'version = %d\nimports = ["%s/*.toml"]\n' % (ctrd.dist.config_version, dropins))
    ctrd.write_config(main)
    return main


@pytest.mark.parametrize("node", RELEASES, ids=IDS, indirect=True)
def test_runtime_in_a_dropin_is_edited_where_containerd_reads_it(node):
    main = hazard_files(node)
    result = configure(node, set_as_default=True)
    # The runtime lives in the drop-in: it is updated there (not defined again in the main file, where
    # containerd 1.x would ignore it: the drop-in replaces the whole CRI table).
    assert result["changed"] and result["validated"], result
    assert result["defined_in"] == os.path.join(os.path.dirname(node.config_path), "conf.d", "99-nvidia.toml")
    assert node.read_config() == main
    if node.dist.major < 2:
        # The drop-in already hides the main file's CRI settings on 1.x: the module names them.
        assert any("have no effect" in w and "sandbox_image" in w for w in result["warnings"]), result


@pytest.mark.parametrize("node", ["bookworm", "sid"], ids=["containerd-1.6.20", "containerd-2.1.9"], indirect=True)
def test_config_containerd_cannot_load_is_left_untouched(node):
    # Valid TOML, but containerd refuses it: the module must not build on a broken file.
    text = node.read_config().replace("\nroot = ", '\noom_score = "high"\nroot = ', 1)
    node.write_config(text)
    result = configure(node)
    assert result.get("failed")
    assert "containerd cannot load the current file" in result["msg"]
    assert re.search(r"\(3, 1\)|row 3", result["msg"])  # containerd's own position of the bad line
    assert node.read_config() == text


@pytest.mark.parametrize("node", ["bookworm"], ids=["containerd-1.6.20"], indirect=True)
def test_default_to_missing_binary_is_refused(node):
    before = node.read_config()
    result = configure(node, binary="/nonexistent/nvidia-container-runtime", set_as_default=True)
    assert result.get("failed")
    assert "every pod" in result["msg"]
    assert node.read_config() == before
    forced = configure(node, binary="/nonexistent/nvidia-container-runtime", set_as_default=True,
                       allow_missing_binary=True)
    assert forced["changed"]


# Debian's packaged /etc/containerd/config.toml (bookworm), plus the setting the Molecule nodes add: it lists
# no runtime, so on 1.x the edit writes containerd's runc out with every default spelled out.
DEBIAN_PACKAGED = '''version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
'''


@pytest.mark.parametrize("release", RELEASES, ids=IDS)
def test_second_run_on_debians_packaged_config_changes_nothing(private_containerd, release):
    ctrd = private_containerd(release)
    ctrd.start(DEBIAN_PACKAGED)
    assert configure(ctrd)["changed"]
    written = ctrd.read_config()
    for attempt, again in enumerate(configure_in_turn(ctrd, {}, {})):
        assert not again["changed"], (attempt, again.get("effective_changes"))
    assert ctrd.read_config() == written


def test_a_run_that_changed_nothing_is_recorded_and_reported_until_the_node_changes(private_containerd, tmp_path):
    """The node's record (plugins/module_utils/editors/runtime_record.py) through the real modules: gpu_node_facts
    recalls it, containerd_runtime reports it without reading the node while nothing changed, and a drop-in that
    appears under the config's imports glob means a full run again. containerd 2.1 validates every full run (its
    `config dump`; no daemon needed). The discovery's node part is a STAND-IN (this machine's own runtimes are not
    the private containerd's): only its recall of the record is the real module's."""
    ctrd = private_containerd(RELEASES[-1])
    dropins = os.path.join(ctrd.base, "conf.d")
    os.makedirs(dropins)
    ctrd.write_config(ctrd.minimal_config().replace(
        "version = 3\n", 'version = 3\nimports = ["%s/*.toml"]\n' % dropins))
    record = str(tmp_path / "record.json")
    discovered = ("{{ {'changed': false, 'runtime_record': recall.runtime_record, 'ansible_facts': {'gpu_node': "
                  "{'root': '/', 'runtimes': [], 'target': none, 'target_reason': 'stand-in', 'kubelet': {}}}} }}")
    look_and_configure = [
        {"gpunode.nvidia.gpu_node_facts": {"gather": ["gpus"], "runtime_record": record}, "register": "recall"},
        {MODULE: {"path": ctrd.config_path, "binary": daemons.STANDIN_RUNTIME, "discovered": discovered,
                  "record": record}},
    ]
    mirror = {"ansible.builtin.copy": {"dest": os.path.join(dropins, "10-mirror.toml"),
                                       "content": "# an operator's drop-in\nversion = 3\n"}}
    tasks = look_and_configure * 3 + [mirror] + look_and_configure * 2
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.json").write_text(json.dumps(play))
    env = dict(ansible_runner._environment([ctrd.dist.bin_dir], None))
    proc = warm_ansible.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                             str(tmp_path / "play.json")], env=env, stdout=subprocess.PIPE, universal_newlines=True,
                            check=False)
    results = [task["hosts"]["localhost"] for task in json.loads(proc.stdout)["plays"][0]["tasks"]]
    recalls, runs = results[0:6:2] + results[7::2], results[1:6:2] + results[8::2]
    assert [run.get("failed") for run in runs] == [None] * 5, runs
    assert [(run["changed"], run.get("record")) for run in runs] == [
        (True, None), (False, "written"), (False, "reused"), (False, "written"), (False, "reused")]
    assert [(r["runtime_record"]["found"], r["runtime_record"]["holds"]) for r in recalls] == [
        (False, False), (False, False), (True, True), (True, False), (True, True)]
    assert recalls[3]["runtime_record"]["reason"] == "changed since the record: the files %s/*.toml matches changed" \
        % dropins
    same = ("path", "runtime", "default_runtime", "loaded_files", "validated", "containerd_version")
    assert dict((k, runs[2][k]) for k in same) == dict((k, runs[1][k]) for k in same)
    assert runs[4]["loaded_files"] == [ctrd.config_path, os.path.join(dropins, "10-mirror.toml")]
