"""Which file containerd_runtime edits, from discovery's answer (no node needed)."""
import importlib
import json

import pytest

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as planning
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import target as targets
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import ConfigError


@pytest.fixture(scope="module")
def action():
    """The action plugin module (tests/unit/conftest.py puts every test back on the module side after
    controller code is imported)."""
    return importlib.import_module("ansible_collections.gpunode.nvidia.plugins.action.containerd_runtime")


SNAP = {"kind": "containerd", "platform": "k8s-snap", "selected_by": "kubelet", "edit_mode": "main",
        "socket": "/var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock",
        "config_path": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml",
        "edit_path": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml",
        "dropin_dir": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/conf.d"}
K0S = {"kind": "containerd", "platform": "k0s", "selected_by": "kubelet", "edit_mode": "dropin",
       "edit_path": "/etc/k0s/containerd.d", "dropin_dir": "/etc/k0s/containerd.d",
       "config_path": "/run/k0s/containerd.toml", "socket": "/run/k0s/containerd.sock"}
AL2023 = {"kind": "containerd", "platform": "eks-al2023", "selected_by": "kubelet", "edit_mode": "none",
          "edit_path": None, "config_path": "/etc/containerd/config.toml", "regenerated_by": "nodeadm",
          "notes": ["nodeadm rewrites /etc/containerd/config.toml at every boot"]}
K3S = {"kind": "containerd", "platform": "k3s", "selected_by": "kubelet", "edit_mode": "template",
       "nvidia_autodetect": True, "edit_path": "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl"}
DOCKER = {"kind": "docker", "platform": "docker", "selected_by": "kubelet", "socket": "/var/run/cri-dockerd.sock"}


def discovery(target, runtimes=None):
    """gpu_node_facts' registered result, as the role's discovery task leaves it."""
    facts = {"root": "/", "target": target, "target_reason": "kubelet's endpoint", "kubelet": {},
             "runtimes": runtimes if runtimes is not None else ([target] if target else [])}
    return {"changed": False, "ansible_facts": {"gpu_node": facts}}


@pytest.fixture(params=["own discovery", "discovered"])
def resolve(action, request):
    """Both ways give the same answer: the task's own discovery, and the role's passed as `discovered`."""
    def resolve_target(path, target, runtimes=None, allow=False):
        plugin = action.ActionModule.__new__(action.ActionModule)
        found = discovery(target, runtimes)
        passed = found if request.param == "discovered" else None

        def execute_module(**kwargs):
            assert passed is None, "discovered was given: the node must not be asked again"
            return found
        plugin._execute_module = execute_module
        return plugin._resolve_target({"path": path, "allow_path_mismatch": allow, "discovered": passed}, {})
    return resolve_target


def test_auto_mode_edits_the_instance_kubelet_uses(resolve):
    assert resolve(None, SNAP) == (SNAP, SNAP["edit_path"])


def test_k0s_gets_a_dropin_of_its_own(resolve):
    assert resolve(None, K0S)[1] == "/etc/k0s/containerd.d/99-nvidia.toml"


def test_explicit_path_in_the_targets_dropin_dir_is_not_a_mismatch(resolve):
    path = SNAP["dropin_dir"] + "/99-nvidia.toml"
    assert resolve(path, SNAP)[1] == path


def test_explicit_path_of_another_instance_is_refused_naming_both(resolve):
    with pytest.raises(ConfigError) as err:
        resolve("/etc/containerd/config.toml", SNAP)
    assert "/etc/containerd/config.toml" in str(err.value) and SNAP["config_path"] in str(err.value)
    assert resolve("/etc/containerd/config.toml", SNAP, allow=True)[1] == "/etc/containerd/config.toml"


DISTRO = {"kind": "containerd", "platform": "distro", "selected_by": "only-instance", "edit_mode": "main",
          "service": "containerd.service", "socket": "/run/containerd/containerd.sock",
          "config_path": "/etc/containerd/config.toml", "edit_path": "/etc/containerd/config.toml",
          "dropin_dir": None, "imports": ["conf.d/*.toml", "/etc/containerd/extra.toml"]}


def test_a_typo_beside_the_config_is_refused_without_kubelet_naming_the_file_read(resolve):
    with pytest.raises(ConfigError) as err:
        resolve("/etc/containerd/confg.toml", DISTRO)
    assert str(err.value).startswith(
        "/etc/containerd/confg.toml is not the config of the containerd on this node: the distro containerd "
        "(containerd.service) reads /etc/containerd/config.toml, and no kubelet says otherwise. Nothing was changed.")
    assert resolve("/etc/containerd/confg.toml", DISTRO, allow=True)[1] == "/etc/containerd/confg.toml"


@pytest.mark.parametrize("path", ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml",
                                  "/etc/containerd/extra.toml", "/srv/image/etc/containerd/config.toml"])
def test_without_kubelet_the_config_its_imports_and_files_elsewhere_are_allowed(resolve, path):
    assert resolve(path, DISTRO)[1] == path


def test_image_bake_without_runtime_uses_the_default_file(resolve):
    assert resolve(None, None) == (None, "/etc/containerd/config.toml")


def test_ambiguous_node_asks_for_a_path(resolve):
    with pytest.raises(ConfigError, match="Set path explicitly"):
        resolve(None, None, runtimes=[SNAP, K0S])


def test_kubelet_on_docker_points_to_the_docker_module(resolve):
    with pytest.raises(ConfigError, match="gpunode.nvidia.docker_runtime"):
        resolve(None, DOCKER)


@pytest.mark.parametrize("target,managed", [(AL2023, True), (K3S, True), (SNAP, False), (None, False)])
def test_platforms_that_write_their_own_config_are_left_alone(target, managed):
    assert targets.platform_writes_config(target) is managed


# ---------------------------------------------------------------- drop-ins: where the runtime is edited

ROOT = "/etc/containerd/config.toml"
NVIDIA_FILE = "/etc/containerd/conf.d/99-nvidia.toml"
V2 = 'plugins."io.containerd.grpc.v1.cri"'
MAIN = """# kubeadm node
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[%(p)s]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [%(p)s.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [%(p)s.containerd.runtimes.runc.options]
      SystemdCgroup = true
""" % {"p": V2}
# As NVIDIA's toolkit >= 1.18 writes it: the whole CRI table and its runtime.
NVIDIA = """version = 2

[%(p)s]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [%(p)s.containerd]
    default_runtime_name = "nvidia"
    [%(p)s.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [%(p)s.containerd.runtimes.runc.options]
        SystemdCgroup = true
    [%(p)s.containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [%(p)s.containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
""" % {"p": V2}
CTRD_17 = "containerd github.com/containerd/containerd 1.7.24"
CTRD_21 = "containerd github.com/containerd/containerd/v2 2.1.9"


def edit_args(**overrides):
    args = dict(name="nvidia", binary="/opt/nvidia/bin/nvidia-container-runtime", set_as_default=False, cdi=False,
                state="present", drop_in=None, validate=True)
    args.update(overrides)
    return args


def planned(contents, version, **overrides):
    from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as containerd_imports
    files = containerd_imports.from_contents(ROOT, contents, version, {})
    return files, planning.plan_edit(edit_args(**overrides), files, {"exists": True}, None)


@pytest.mark.parametrize("version", [CTRD_17, CTRD_21])
def test_nvidia_dropin_is_updated_in_place_not_duplicated(version):
    files, edit = planned({ROOT: MAIN, NVIDIA_FILE: NVIDIA}, version)
    assert list(edit.changes) == [NVIDIA_FILE] and edit.defined_in == NVIDIA_FILE
    assert '/opt/nvidia/bin/nvidia-container-runtime' in edit.changes[NVIDIA_FILE]
    assert edit.changes[NVIDIA_FILE].count("runtimes.nvidia]") == 1


def test_1x_settings_hidden_by_a_dropin_are_named():
    main = MAIN.replace('sandbox_image = "registry.k8s.io/pause:3.9"', 'sandbox_image = "mirror.local/pause:3.9"')
    files, edit = planned({ROOT: main, NVIDIA_FILE: NVIDIA}, CTRD_17)
    assert planning.hidden_settings(files) == ['plugins."io.containerd.grpc.v1.cri".sandbox_image']
    assert any("have no effect" in w and "sandbox_image" in w and "mirror.local" not in w for w in edit.warnings)


def test_default_set_by_a_later_dropin_is_changed_there():
    dropin = 'version = 2\n[%s.containerd]\n  default_runtime_name = "runc"\n' % V2
    main = MAIN + '    [%s.containerd.runtimes.nvidia]\n      runtime_type = "io.containerd.runc.v2"\n' % V2
    files, edit = planned({ROOT: main, "/etc/containerd/conf.d/50-default.toml": dropin}, CTRD_21,
                          set_as_default=True)
    # 2.x: the runtime stays where it is defined; the default must change where containerd reads it last.
    assert edit.defined_in == ROOT
    assert 'default_runtime_name = "nvidia"' in edit.changes["/etc/containerd/conf.d/50-default.toml"]


def test_new_dropin_has_the_root_version_and_inherits_systemd_cgroup():
    main = MAIN.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    dropin = "/etc/containerd/gpu/50-nvidia.toml"
    files, edit = planned({ROOT: main}, CTRD_21, drop_in=dropin)
    assert edit.order == [dropin, ROOT]
    written = edit.changes[dropin]
    assert "version = 2\n" in written  # the root's version, although containerd 2.1 writes 3
    assert edit.runtime["options"] == {"BinaryName": "/opt/nvidia/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert edit.changes[ROOT] == main.replace("version = 2\n", 'version = 2\nimports = ["%s"]\n' % dropin)
    assert edit.write_order(ROOT) == [(dropin, written), (ROOT, edit.changes[ROOT])]


def test_dropin_under_an_existing_glob_needs_no_import_line():
    files, edit = planned({ROOT: MAIN}, CTRD_21, drop_in="/etc/containerd/conf.d/50-nvidia.toml")
    assert list(edit.changes) == ["/etc/containerd/conf.d/50-nvidia.toml"]


def test_absent_with_dropin_removes_file_and_import_line():
    main = MAIN.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    dropin = "/etc/containerd/gpu/50-nvidia.toml"
    _files, added = planned({ROOT: main}, CTRD_21, drop_in=dropin, set_as_default=True)
    state = {ROOT: added.changes[ROOT], dropin: added.changes[dropin]}
    files, removed = planned(state, CTRD_21, drop_in=dropin, state="absent")
    assert removed.changes == {dropin: None, ROOT: main}
    assert removed.write_order(ROOT) == [(ROOT, main), (dropin, None)]


def test_absent_keeps_a_dropin_that_holds_other_settings():
    dropin = "/etc/containerd/conf.d/50-nvidia.toml"
    text = ('version = 2\n[debug]\n  level = "debug"\n[%s.containerd.runtimes.nvidia]\n'
            '  runtime_type = "io.containerd.runc.v2"\n' % V2)
    files, edit = planned({ROOT: MAIN, dropin: text}, CTRD_21, drop_in=dropin, state="absent")
    assert edit.changes == {dropin: 'version = 2\n[debug]\n  level = "debug"\n'}


@pytest.mark.parametrize("dropin_version,reason", [(3, "2.3.0 to 2.3.4 refuse to start"), (1, "")])
def test_dropin_with_another_version_is_never_written(dropin_version, reason):
    text = NVIDIA.replace("version = 2\n", "version = %d\n" % dropin_version if dropin_version > 1 else "")
    with pytest.raises(ConfigError) as err:
        planned({ROOT: MAIN, NVIDIA_FILE: text}, CTRD_21)
    assert "never writes a drop-in whose version differs" in str(err.value) and reason in str(err.value)


def test_higher_version_dropin_elsewhere_is_warned_about():
    other = "/etc/containerd/conf.d/10-v3.toml"
    files, edit = planned({ROOT: MAIN, other: "version = 3\n"}, CTRD_21)
    assert edit.defined_in == ROOT
    assert any("2.3.0 to 2.3.4" in w and other in w for w in edit.warnings)


def test_dropin_must_not_be_the_root():
    with pytest.raises(ConfigError, match="is the root config file itself"):
        planned({ROOT: MAIN}, CTRD_21, drop_in=ROOT)


def test_guard_copy_lists_every_file_in_order():
    nested = "/etc/containerd/conf.d/50-nested.toml"
    contents = {ROOT: MAIN, NVIDIA_FILE: NVIDIA, nested: 'version = 2\nimports = ["/etc/containerd/extra.toml"]\n',
                "/etc/containerd/extra.toml": "version = 2\n"}
    files, edit = planned(contents, CTRD_21)
    globs = {"/etc/containerd/conf.d/*.toml": [nested, NVIDIA_FILE]}
    root_text, companions = effective.candidate_files(edit, files, globs, CTRD_21)
    assert 'imports = ["00-50-nested.toml", "01-99-nvidia.toml", "/etc/containerd/extra.toml"]' in root_text
    assert [(c["name"], c["path"]) for c in companions] == [
        ("00-50-nested.toml", nested), ("01-99-nvidia.toml", NVIDIA_FILE)]
    assert "imports = []" in companions[0]["content"]
    assert companions[1]["content"] == edit.changes[NVIDIA_FILE]


@pytest.mark.parametrize("version,extra", [(CTRD_17, {}), (CTRD_21, {}),
                                           (CTRD_21, {"drop_in": "/etc/containerd/gpu/50-nvidia.toml",
                                                      "set_as_default": True})])
def test_second_run_changes_nothing(version, extra):
    contents = {ROOT: MAIN, NVIDIA_FILE: NVIDIA}
    if extra:
        contents = {ROOT: MAIN.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")}
    _files, first = planned(contents, version, **extra)
    assert first.changed
    contents.update(first.changes)
    _files, second = planned(contents, version, **extra)
    assert second.changes == {}


@pytest.mark.parametrize("version,refused", [(CTRD_17, True), (None, True), (CTRD_21, False)])
def test_unguarded_dropin_only_where_containerd_merges(version, refused):
    main = MAIN.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    dropin = "/etc/containerd/gpu/50-nvidia.toml"
    files, edit = planned({ROOT: main}, version, drop_in=dropin)
    args = edit_args(drop_in=dropin, validate=False)
    if refused:
        with pytest.raises(ConfigError, match="replace the whole CRI plugin table"):
            planning.refuse_unchecked_drop_in(args, edit, files, {"binary_version": version})
    else:
        planning.refuse_unchecked_drop_in(args, edit, files, {"binary_version": version})


def test_dropin_must_be_absolute():
    with pytest.raises(ConfigError, match="must be an absolute path"):
        planned({ROOT: MAIN}, CTRD_21, drop_in="conf.d/50-nvidia.toml")


def test_absent_with_dropin_gives_back_a_crun_default():
    main = ('version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "crun"\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun]\n  runtime_type = "io.containerd.runc.v2"\n')
    dropin = "/etc/containerd/conf.d/50-nvidia.toml"
    _files, added = planned({ROOT: main}, CTRD_21, drop_in=dropin, set_as_default=True)
    state = {ROOT: added.changes[ROOT], dropin: added.changes[dropin]}
    _files, removed = planned(state, CTRD_21, drop_in=dropin, state="absent")
    assert removed.changes == {dropin: None, ROOT: main}


def test_unexpected_exception_becomes_a_failure_naming_the_file_without_its_content(action, monkeypatch):
    """No traceback reaches the user; the message names the file and asks for a bug report."""
    from ansible.playbook.task import Task

    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = Task()
    plugin._task.args = {"path": "/etc/containerd/config.toml"}
    monkeypatch.setattr(action.ValidatedAction, "run", lambda self, tmp=None, task_vars=None: {})

    def boom(args, task_vars):
        plugin._edit_path = "/etc/containerd/config.toml"
        raise KeyError('password = "s3cr3t"')
    plugin._run = boom
    result = plugin.run(task_vars={})
    assert result["failed"] and not result["changed"]
    assert result["msg"].startswith("/etc/containerd/config.toml: unexpected KeyError")
    assert "This is a bug" in result["msg"] and "nothing was written" in result["msg"]
    assert "s3cr3t" not in result["msg"]


# ---------------------------------------------------------------- discovery passed in, node lock in the read call

KUBEADM = {"kind": "containerd", "platform": "kubeadm", "selected_by": "kubelet", "edit_mode": "main",
           "config_path": ROOT, "edit_path": ROOT, "socket": "/run/containerd/containerd.sock"}
BINARY = "/usr/bin/nvidia-container-runtime"
PLAIN = """version = 2

[%(p)s.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
""" % {"p": V2}
RECORD = "/var/lib/gpunode/containerd-runtime.json"
LOCK = {"path": "/run/lock/gpunode-nvidia.lock", "owner": "controller:2026-11-24T10:00:00", "timeout": 600,
        "stale_after": 3600}


class StandInNode:
    """STAND-IN for a node: config_file's read and write, and node_lock's release, on files and a lock held here.
    Records every module call (one call = one round trip to the node)."""

    def __init__(self, files, lock=None):
        self.files = dict(files)
        self.lock = lock
        self.calls = []
        self.fail_writes = False
        self.record = None

    def __call__(self, module_name, module_args, task_vars=None, **_kwargs):
        name = module_name.rsplit(".", 1)[-1]
        self.calls.append((name, dict(module_args)))
        if name == "node_lock":
            assert module_args["state"] == "released"
            if self.lock == module_args["owner"]:
                self.lock = None
            return {"changed": False, "held_by": self.lock}
        assert name == "containerd_config_file", "%s was called: the discovery passed in must be used" % name
        lock = module_args.get("lock")
        if not lock:
            return self._config_file(module_args)
        if self.lock not in (None, lock["owner"]):
            return {"failed": True, "msg": "lock %s is held by %s" % (lock["path"], self.lock)}
        reentered = self.lock == lock["owner"]
        self.lock = lock["owner"]
        result = self._config_file(module_args)
        if not reentered and (result.get("failed") or not module_args.get("keep_lock")):
            self.lock = None
        result.update(lock_held=self.lock == lock["owner"], lock_waited=0.0)
        return result

    def _config_file(self, args):
        if args["op"] == "record":
            return self._record(json.loads(args["content"]))
        text = self.files.get(args["path"])
        sha = self.sha256(args["path"])
        if args["op"] == "write":
            if self.fail_writes or args["expected_sha256"] != sha:
                return {"failed": True, "msg": "%s: write failed" % args["path"]}
            self.files[args["path"]] = args["content"]
            return {"changed": True}
        assert args["op"] == "read", args
        result = {"exists": text is not None, "content": text or "", "sha256": sha, "file_mode": "0644",
                  "paths": dict((p, p == BINARY) for p in args.get("exists") or [])}
        if args.get("binary"):
            result.update(binary_path="/usr/bin/containerd", binary_version=CTRD_17)
        if args.get("include"):
            result["included"] = [
                {"pattern": p, "files": [{"path": p, "exists": p in self.files, "content": self.files.get(p, ""),
                                          "sha256": self.sha256(p)}]} for p in args["include"]]
        return result

    def _record(self, proposal):
        """op=record: kept when every file is still what the task read (the node's runtime_record.make)."""
        if any((self.sha256(path) or None) != digest for path, digest in proposal["files"].items()):
            return {"changed": False, "recorded": False, "record_reason": "changed since it was read"}
        self.record = proposal
        return {"changed": True, "recorded": True}

    def recall(self, path=RECORD):
        """gpu_node_facts' runtime_record for this node: the record, and whether its files are the same now."""
        if self.record is None:
            return {"path": path, "found": False, "holds": False, "reason": "no record on the node"}
        holds = all((self.sha256(p) or None) == digest for p, digest in self.record["files"].items())
        return {"path": path, "found": True, "holds": holds, "key": self.record["key"],
                "result": self.record["result"], "reason": "" if holds else "changed since the record"}

    def sha256(self, path):
        import hashlib
        return hashlib.sha256(self.files[path].encode()).hexdigest() if path in self.files else ""

    def names(self):
        return [name for name, _args in self.calls]


@pytest.fixture
def task(action, monkeypatch):
    from ansible.playbook.task import Task
    monkeypatch.setattr(action.ValidatedAction, "run", lambda self, tmp=None, task_vars=None: {})

    def run_task(node, check_mode=False, **args):
        plugin = action.ActionModule.__new__(action.ActionModule)
        plugin._task = Task()
        plugin._task.args = dict(dict(binary=BINARY, validate=False, discovered=discovery(KUBEADM), lock=LOCK), **args)
        plugin._task.check_mode = check_mode
        plugin._execute_module = node
        return plugin.run(task_vars={})
    return run_task


@pytest.mark.parametrize("args", [dict(name=" "), dict(binary="")])
def test_a_blank_name_or_binary_is_refused_before_the_node_is_called(task, args):
    node = StandInNode({ROOT: PLAIN})
    result = task(node, **args)
    assert result["failed"] is True and "cannot name a runtime" in result["msg"] and node.calls == []


def test_run_that_changes_nothing_is_one_call_and_leaves_no_lock(task):
    node = StandInNode({ROOT: PLAIN})
    first = task(node)
    assert first["changed"] and first["lock_held"] is True and node.lock == LOCK["owner"]
    node.lock = None  # given back by the role after the restart
    node.calls = []
    again = task(node)
    assert not again["changed"] and again["lock_held"] is False and node.lock is None
    assert node.names() == ["containerd_config_file"]
    assert node.calls[0][1]["lock"] == LOCK and node.calls[0][1]["keep_lock"] is False


def test_change_is_planned_again_under_a_kept_lock_and_written(task):
    node = StandInNode({ROOT: PLAIN})
    result = task(node)
    reads = [args for name, args in node.calls if args.get("op") == "read"]
    assert [args["keep_lock"] for args in reads] == [False, True]
    assert node.names()[-1] == "containerd_config_file" and node.calls[-1][1]["op"] == "write"
    assert "node_lock" not in node.names()  # kept for the restart: the role gives it back
    assert result["lock_held"] is True and node.lock == LOCK["owner"] and "runtimes.nvidia" in node.files[ROOT]


def test_check_mode_reads_under_the_lock_and_never_keeps_it(task):
    node = StandInNode({ROOT: PLAIN})
    result = task(node, check_mode=True)
    assert result["changed"] and result["lock_held"] is False and node.lock is None
    assert node.names() == ["containerd_config_file"] and node.files[ROOT] == PLAIN


def test_failed_write_gives_the_kept_lock_back(task):
    from ansible.errors import AnsibleActionFail
    node = StandInNode({ROOT: PLAIN})
    node.fail_writes = True
    with pytest.raises(AnsibleActionFail, match="write failed"):
        task(node)
    assert node.names()[-1] == "node_lock" and node.lock is None


def test_refused_edit_leaves_no_lock(task):
    node = StandInNode({ROOT: PLAIN})
    result = task(node, set_as_default=True, binary="/nonexistent/runtime")
    assert result["failed"] and "refusing to make 'nvidia' the default runtime" in result["msg"]
    assert result["lock_held"] is False and node.lock is None and node.names() == ["containerd_config_file"]


def test_config_with_imports_is_read_again_under_a_held_lock(task):
    main = PLAIN.replace("version = 2\n", 'version = 2\nimports = ["%s"]\n' % NVIDIA_FILE)
    node = StandInNode({ROOT: main, NVIDIA_FILE: NVIDIA})
    assert task(node)["changed"]
    node.lock, node.calls = None, []
    result = task(node)
    assert not result["changed"] and result["lock_held"] is False and node.lock is None
    reads = [(args.get("keep_lock"), args.get("include")) for name, args in node.calls if name == "containerd_config_file"]
    # the first read's lock was given back before the import could be read: read again, keeping it
    assert reads == [(False, None), (True, None), (None, [NVIDIA_FILE])]
    assert node.names()[-1] == "node_lock"


def test_lock_held_before_the_task_is_not_given_back(task):
    main = PLAIN.replace("version = 2\n", 'version = 2\nimports = ["%s"]\n' % NVIDIA_FILE)
    node = StandInNode({ROOT: main, NVIDIA_FILE: NVIDIA}, lock=LOCK["owner"])
    result = task(node)
    assert result["lock_held"] is True and node.lock == LOCK["owner"] and "node_lock" not in node.names()


def test_lock_of_another_run_fails_naming_it(task):
    from ansible.errors import AnsibleActionFail
    node = StandInNode({ROOT: PLAIN}, lock="other-operator")
    with pytest.raises(AnsibleActionFail, match="held by other-operator"):
        task(node)
    assert node.lock == "other-operator"


def test_without_lock_nothing_is_locked(task):
    node = StandInNode({ROOT: PLAIN})
    result = task(node, lock=None)
    assert result["changed"] and "lock_held" not in result and node.lock is None
    assert all("lock" not in args for _name, args in node.calls)


@pytest.mark.parametrize("discovered,message", [
    ({"skipped": True, "changed": False}, "that task was skipped"),
    ({"failed": True, "msg": "kubelet unreadable"}, "that task failed: kubelet unreadable"),
    ({"gpu_node": {"target": None}}, "has no ansible_facts.gpu_node"),
    ({"ansible_facts": {"gpu_node": {"root": "/", "runtimes": []}}}, "lacks target, target_reason"),
    ({"ansible_facts": {"gpu_node": dict(discovery(KUBEADM)["ansible_facts"]["gpu_node"], root="/mnt/image")}},
     "read the tree at /mnt/image"),
    ({"ansible_facts": {"gpu_node": dict(discovery(KUBEADM)["ansible_facts"]["gpu_node"], target="containerd")}},
     "has another form"),
    ({"ansible_facts": {"gpu_node": dict(discovery(KUBEADM)["ansible_facts"]["gpu_node"], runtimes={})}},
     "has another form"),
], ids=["skipped", "failed", "facts-not-result", "gather-without-target", "mounted-image", "target-str", "runtimes"])
def test_malformed_discovery_is_refused_before_the_node_is_touched(task, discovered, message):
    node = StandInNode({ROOT: PLAIN})
    result = task(node, discovered=discovered)
    assert result["failed"] and message in result["msg"] and "gpu_node_facts" in result["msg"]
    assert node.calls == [] and result["lock_held"] is False


# ---------------------------------------------------------------- the node's record of a run that changed nothing

def recalled(node, **facts_overrides):
    """The role's discovery with gpu_node_facts' recall of the node's record."""
    found = discovery(dict(KUBEADM, **facts_overrides))
    found["runtime_record"] = node.recall()
    return found


def test_a_run_that_changes_nothing_records_it_and_the_next_reports_it_without_a_call(task):
    node = StandInNode({ROOT: PLAIN})
    assert task(node, discovered=recalled(node))["changed"]  # a change: nothing recorded
    assert node.record is None
    node.lock, node.calls = None, []
    full = task(node, discovered=recalled(node))
    assert not full["changed"] and full["record"] == "written"
    assert [args["op"] for _name, args in node.calls] == ["read", "record"]
    node.calls = []
    reused = task(node, discovered=recalled(node))
    assert node.calls == [] and reused["record"] == "reused" and reused["lock_held"] is False
    same = ("changed", "path", "defined_in", "runtime", "default_runtime", "target", "loaded_files", "files")
    assert dict((k, reused[k]) for k in same) == dict((k, full[k]) for k in same)


def test_check_mode_reuses_a_record_that_holds_and_never_writes_one(task):
    node = StandInNode({ROOT: PLAIN})
    task(node, discovered=recalled(node))
    node.lock, node.calls = None, []
    checked = task(node, check_mode=True, discovered=recalled(node))
    assert not checked["changed"] and "record" not in checked and node.record is None
    task(node, discovered=recalled(node))
    node.calls = []
    assert task(node, check_mode=True, discovered=recalled(node))["record"] == "reused" and node.calls == []


@pytest.mark.parametrize("change", ["file", "request", "target", "path"])
def test_a_record_that_no_longer_answers_the_request_means_a_full_run(task, change):
    node = StandInNode({ROOT: PLAIN})
    task(node, discovered=recalled(node))
    node.lock = None
    task(node, discovered=recalled(node))
    node.calls = []
    discovered, args = recalled(node), {}
    if change == "file":
        node.files[ROOT] = PLAIN + "# an operator's comment\n"
        discovered = recalled(node)
    elif change == "request":
        args = dict(set_as_default=True)
    elif change == "target":
        discovered = recalled(node, socket="/run/k8s/containerd.sock")
    else:
        discovered["runtime_record"]["path"] = "/elsewhere.json"
    result = task(node, discovered=discovered, **args)
    assert result.get("record") != "reused" and node.calls[0][1]["op"] == "read"


def test_a_discovery_that_did_not_read_the_record_writes_none(task):
    node = StandInNode({ROOT: PLAIN})
    task(node)
    node.lock, node.calls = None, []
    result = task(node)
    assert "record" not in result and [args["op"] for _name, args in node.calls] == ["read"]


def test_a_restart_of_the_same_containerd_keeps_the_record(action):
    from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import record as records
    args = dict(edit_args(), path=ROOT, discovered={"any": 1}, lock=LOCK, record=RECORD)
    key = records.request_key(args, dict(KUBEADM, pid=10, running=True))
    assert key == records.request_key(dict(args, discovered=None, lock=None), dict(KUBEADM, pid=4242, running=False))
    assert key != records.request_key(dict(args, name="nvidia-cdi"), KUBEADM)
