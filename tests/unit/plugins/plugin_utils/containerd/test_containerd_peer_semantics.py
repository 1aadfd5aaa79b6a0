"""Editor semantics NVIDIA's own tests check (issue 25): the new runtime is the runtime pods use, as containerd
runs it, with only the binary changed; v1 files with the deprecated `default_runtime` table; state: absent
gives back what present found; errors at the end of a file. Dumps here are trimmed copies of real
`containerd config dump` output (1.6.20, 1.7.24, 2.1.9); tests/integration/test_peer_parity.py proves the
same cases against the real daemons."""

import pytest

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import effective as containerd_effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as containerd_plan
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as containerd_imports
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import toml_edit as containerd_toml
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import (
    ConfigError, parse, plan_runtime_edit)

BINARY = "/usr/bin/nvidia-container-runtime"
V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
V17 = "containerd github.com/containerd/containerd 1.7.24"
V21 = "containerd github.com/containerd/containerd/v2 2.1.9+unknown"
ROOT = "/etc/containerd/config.toml"
CRI3 = "plugins.'io.containerd.cri.v1.runtime'"
CRI2 = 'plugins."io.containerd.grpc.v1.cri"'
ZERO_RUNC_21 = {"runtime_type": "io.containerd.runc.v2", "runtime_path": "", "pod_annotations": [],
                "privileged_without_host_devices": False, "base_runtime_spec": "", "sandboxer": "podsandbox",
                "options": {"BinaryName": "", "IoUid": 0, "NoNewKeyring": False, "Root": "", "ShimCgroup": "",
                            "SystemdCgroup": False}}
BUILTIN_RUNC_1X = {"base_runtime_spec": "", "cni_conf_dir": "", "runtime_type": "io.containerd.runc.v2",
                   "options": {"BinaryName": "", "SystemdCgroup": False}}


def dump_2x(**runc):
    table = dict(ZERO_RUNC_21)
    options = dict(table["options"], **runc.pop("options", {}))
    table.update(runc, options=options)
    return {"plugins": {"io.containerd.cri.v1.runtime": {"containerd": {
        "default_runtime_name": "runc", "runtimes": {"runc": table}}}}}


def dump_1x(default_runtime=None):
    containerd = {"default_runtime_name": "runc", "runtimes": {"runc": BUILTIN_RUNC_1X}}
    if default_runtime is not None:
        containerd["default_runtime"] = default_runtime
    return {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": containerd}}}


def nvidia(plan):
    return plan.data["plugins"][plan.cri_plugin]["containerd"]["runtimes"]["nvidia"]


def runtimes(plan):
    return plan.data["plugins"][plan.cri_plugin]["containerd"]["runtimes"]


# ---------------------------------------------------------------- the effective table is copied

def test_v3_runc_with_only_systemd_cgroup_gets_the_runc_shim():
    text = "version = 3\n[%s.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n" % CRI3
    plan = plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V21,
                             effective=dump_2x(options={"SystemdCgroup": True}))
    assert nvidia(plan)["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia(plan)["options"] == {"SystemdCgroup": True, "BinaryName": BINARY}


def test_empty_runtime_type_becomes_the_runc_shim_without_a_dump():
    text = 'version = 2\n[%s.containerd.runtimes.runc]\n  runtime_type = ""\n' % CRI2
    plan = plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V21)
    assert nvidia(plan)["runtime_type"] == "io.containerd.runc.v2"


def test_settings_only_containerd_knows_are_copied_and_zero_values_left_out():
    """A runtime as containerd runs it: base_runtime_spec (kind), options.Root, ShimCgroup, IoUid..."""
    text = "version = 3\n[%s.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n" % CRI3
    effective = dump_2x(base_runtime_spec="/etc/containerd/cri-base.json",
                        options={"SystemdCgroup": True, "Root": "/run/runc-k8s", "ShimCgroup": "/shim", "IoUid": 1000,
                                 "NoNewKeyring": True})
    table = nvidia(plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V21, effective=effective))
    assert table == {"runtime_type": "io.containerd.runc.v2", "base_runtime_spec": "/etc/containerd/cri-base.json",
                     "sandboxer": "podsandbox",
                     "options": {"SystemdCgroup": True, "Root": "/run/runc-k8s", "ShimCgroup": "/shim", "IoUid": 1000,
                                 "NoNewKeyring": True, "BinaryName": BINARY}}


def test_v1_linux_shim_gets_the_binary_in_options_runtime_too():
    text = ('[plugins.cri.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runtime.v1.linux"\n'
            '  [plugins.cri.containerd.runtimes.runc.options]\n    Runtime = "/usr/bin/runc"\n')
    plan = plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V17)
    assert nvidia(plan)["runtime_type"] == "io.containerd.runtime.v1.linux"
    assert nvidia(plan)["options"] == {"Runtime": BINARY, "BinaryName": BINARY}
    again = plan_runtime_edit(plan.text, ROOT, binary=BINARY, containerd_version=V17)
    assert not again.changed


@pytest.mark.parametrize("shim", ["io.containerd.kata.v2", "io.containerd.runsc.v1"])
def test_a_shim_that_does_not_run_binary_name_is_not_copied(shim):
    text = ('version = 2\n[%s.containerd]\n  default_runtime_name = "kata"\n[%s.containerd.runtimes.kata]\n'
            '  runtime_type = "%s"\n  privileged_without_host_devices = true\n'
            '  [%s.containerd.runtimes.kata.options]\n    ConfigPath = "/opt/kata/configuration.toml"\n'
            '[%s.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
            '  [%s.containerd.runtimes.runc.options]\n    SystemdCgroup = true\n') % (CRI2, CRI2, shim, CRI2, CRI2,
                                                                                      CRI2)
    plan = plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V17)
    assert nvidia(plan) == {"runtime_type": "io.containerd.runc.v2",
                            "options": {"SystemdCgroup": True, "BinaryName": BINARY}}
    assert plan.source_runtime == "runc"
    assert any(shim in w and "does not start an OCI runtime binary" in w for w in plan.warnings)


# ---------------------------------------------------------------- v1 files with `default_runtime` (issue 19)

LEGACY_V1 = ('[plugins.cri.containerd.default_runtime]\n  runtime_type = "io.containerd.runtime.v1.linux"\n'
             '  [plugins.cri.containerd.default_runtime.options]\n    Runtime = "/usr/bin/runc"\n'
             '    SystemdCgroup = true\n')


@pytest.mark.parametrize("version", [V16, V17])
def test_v1_default_runtime_file_keeps_runc_and_inherits_its_options(version):
    effective = dump_1x(default_runtime={"runtime_type": "io.containerd.runtime.v1.linux", "runtime_root": "",
                                         "options": {"Runtime": "/usr/bin/runc", "SystemdCgroup": True}})
    plan = plan_runtime_edit(LEGACY_V1, ROOT, binary=BINARY, containerd_version=version, effective=effective)
    assert runtimes(plan)["runc"] == BUILTIN_RUNC_1X  # containerd 1.x would drop its built-in runc otherwise
    assert nvidia(plan) == {"runtime_type": "io.containerd.runtime.v1.linux",
                            "options": {"Runtime": BINARY, "SystemdCgroup": True, "BinaryName": BINARY}}
    assert plan.source_runtime == "default_runtime"
    assert plan.text.startswith(LEGACY_V1)
    with pytest.raises(ConfigError, match=r"line 1, column 1: .*deprecated `default_runtime` table"):
        plan_runtime_edit(LEGACY_V1, ROOT, binary=BINARY, containerd_version=version, effective=effective,
                          set_as_default=True)


# ---------------------------------------------------------------- drop-ins (controller action)

def edit_args(**overrides):
    args = dict(name="nvidia", binary=BINARY, set_as_default=False, cdi=False, state="present", drop_in=None,
                validate=True)
    args.update(overrides)
    return args


def planned(contents, version, dump=None, exists=True, **overrides):
    files = containerd_imports.from_contents(ROOT, contents, version, {})
    return files, containerd_plan.plan_edit(edit_args(**overrides), files, {"exists": exists}, dump)


KIND_V2 = ('version = 2\n[%s]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n[%s.containerd]\n'
           '  default_runtime_name = "runc"\n[%s.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
           '  base_runtime_spec = "/etc/containerd/cri-base.json"\n  [%s.containerd.runtimes.runc.options]\n'
           '    SystemdCgroup = true\n') % (CRI2, CRI2, CRI2, CRI2)


def test_drop_in_on_containerd_2_copies_the_whole_runtime_kind_uses():
    dropin = "/etc/containerd/conf.d/99-nvidia.toml"
    effective = dump_2x(base_runtime_spec="/etc/containerd/cri-base.json", options={"SystemdCgroup": True})
    _files, edit = planned({ROOT: KIND_V2}, V21, dump=effective, drop_in=dropin)
    assert edit.runtime == {"runtime_type": "io.containerd.runc.v2", "sandboxer": "podsandbox",
                            "base_runtime_spec": "/etc/containerd/cri-base.json",
                            "options": {"SystemdCgroup": True, "BinaryName": BINARY}}
    assert 'base_runtime_spec = "/etc/containerd/cri-base.json"' in edit.changes[dropin]


class _Changed(object):
    changes = {ROOT: ""}


def guard_message(contents, version, unintended):
    files = containerd_imports.from_contents(ROOT, contents, version, {})
    return containerd_effective.guard_message(edit_args(), _Changed(), files, unintended, [])


def test_guard_names_lost_builtin_runtimes_not_imports_in_a_file_without_imports():
    lost = ['plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type (would be lost; was '
            "'io.containerd.runc.v2')"]
    message = guard_message({ROOT: LEGACY_V1}, V16, lost)
    assert "containerd 1.x drops its built-in runtimes (runc) from a file that lists any runtime" in message
    assert "imported file" not in message


def test_guard_names_the_imports_when_there_are_some():
    dropin = "/etc/containerd/conf.d/10-cri.toml"
    contents = {ROOT: 'version = 2\nimports = ["%s"]\n' % dropin, dropin: KIND_V2}
    message = guard_message(contents, V17, ["x (would change from 1 to 2)"])
    assert "an imported file replaces the whole CRI plugin table" in message and dropin in message


def test_guard_names_version_headers_that_differ():
    dropin = "/etc/containerd/conf.d/10-cri.toml"
    contents = {ROOT: 'version = 3\nimports = ["%s"]\n' % dropin, dropin: KIND_V2}
    message = guard_message(contents, V21, ["x (would change from 1 to 2)"])
    assert "different `version` headers (%s: 3; %s: 2)" % (ROOT, dropin) in message
    assert "imported file replaces" not in message


# ---------------------------------------------------------------- state: absent gives back what present found

NODEADM_GPU = ('version = 2\nroot = "/var/lib/containerd"\nstate = "/run/containerd"\n\n[grpc]\n'
               'address = "/run/containerd/containerd.sock"\n\n[%s.containerd]\ndefault_runtime_name = "nvidia"\n'
               'discard_unpacked_layers = true\n\n[%s]\nsandbox_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/'
               'eks/pause:3.5"\n\n[%s.registry]\nconfig_path = "/etc/containerd/certs.d:/etc/docker/certs.d"\n\n'
               '[%s.containerd.runtimes]\n\n[%s.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
               'base_runtime_spec = "/etc/containerd/base-runtime-spec.json"\n\n'
               '[%s.containerd.runtimes.nvidia.options]\nBinaryName = "/usr/bin/nvidia-container-runtime"\n'
               'SystemdCgroup = true\n\n[%s.cni]\nbin_dir = "/opt/cni/bin"\nconf_dir = "/etc/cni/net.d"\n') % ((CRI2,) * 7)


def test_absent_never_leaves_an_empty_runtimes_table():
    plan = plan_runtime_edit(NODEADM_GPU, ROOT, state="absent", containerd_version=V17)
    data = parse(plan.text, ROOT)
    assert "runtimes" not in data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert "[%s.containerd.runtimes]" % CRI2 not in plan.text
    assert 'sandbox_image = "602401143452' in plan.text


@pytest.mark.parametrize("version", [V16, V17])
@pytest.mark.parametrize("options", [{}, {"set_as_default": True}])
def test_present_absent_present_on_a_missing_file_round_trips(version, options):
    _files, added = planned({ROOT: ""}, version, exists=False, **options)
    created = added.changes[ROOT]
    assert "# containerd's built-in runtime" in created
    _files, removed = planned({ROOT: created}, version, state="absent")
    assert removed.changes == {ROOT: None}  # the file present created is removed
    _files, again = planned({ROOT: ""}, version, exists=False, **options)
    assert again.changes == {ROOT: created}


@pytest.mark.parametrize("text", ["version = 2\n", "# managed by hand\nversion = 2\n",
                                  'version = 2\n[%s.containerd]\n  snapshotter = "overlayfs"\n' % CRI2])
def test_absent_after_present_gives_back_the_original_file_on_containerd_1(text):
    _files, added = planned({ROOT: text}, V17, set_as_default=True)
    _files, removed = planned({ROOT: added.changes[ROOT]}, V17, state="absent")
    assert removed.changes[ROOT] == text


def test_absent_on_1x_removes_our_drop_in_and_its_import_line():
    dropin = "/etc/containerd/conf.d/99-nvidia.toml"
    root = 'version = 2\nimports = ["%s"]\n' % dropin
    contents = {ROOT: 'version = 2\n', dropin: None}
    _files, added = planned(contents, V17, drop_in=dropin)
    assert added.changes[ROOT] == root and "# containerd's built-in runtime" in added.changes[dropin]
    _files, removed = planned({ROOT: root, dropin: added.changes[dropin]}, V17, drop_in=dropin,
                              state="absent")
    assert removed.changes == {dropin: None, ROOT: "version = 2\n"}


def test_absent_gives_runc_back_to_a_default_runtime_table_that_ran_the_removed_binary():
    text = ('[plugins.cri.containerd.default_runtime]\n  runtime_type = "io.containerd.runtime.v1.linux"\n'
            '  [plugins.cri.containerd.default_runtime.options]\n    Runtime = "%s"\n    SystemdCgroup = true\n'
            '[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runtime.v1.linux"\n'
            '  [plugins.cri.containerd.runtimes.nvidia.options]\n    Runtime = "%s"\n    BinaryName = "%s"\n'
            '    SystemdCgroup = true\n' % (BINARY, BINARY, BINARY))
    plan = plan_runtime_edit(text, ROOT, state="absent", containerd_version=V16)
    assert BINARY not in plan.text
    assert parse(plan.text, ROOT)["plugins"]["cri"]["containerd"]["default_runtime"] == {
        "runtime_type": "io.containerd.runtime.v1.linux", "options": {"SystemdCgroup": True}}


def test_absent_after_present_on_a_v1_default_runtime_file_gives_it_back():
    effective = dump_1x(default_runtime={"runtime_type": "io.containerd.runtime.v1.linux",
                                         "options": {"Runtime": "/usr/bin/runc", "SystemdCgroup": True}})
    added = plan_runtime_edit(LEGACY_V1, ROOT, binary=BINARY, containerd_version=V16, effective=effective)
    removed = plan_runtime_edit(added.text, ROOT, state="absent", containerd_version=V16)
    assert removed.text == LEGACY_V1


# ---------------------------------------------------------------- a node without /etc/containerd (containerd_config_file)

def run_config_file(capsys, check_mode=False, **args):
    import json
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.gpunode.nvidia.plugins.modules import containerd_config_file as config_file
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            config_file.main()
    return json.loads(capsys.readouterr().out)


DUMP = ["/bin/sh", "-c", "cat %s; echo read-from:%s"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_missing_parent_directory_is_read_and_checked_without_creating_it(capsys, tmp_path, check_mode):
    path = tmp_path / "etc-containerd" / "config.toml"
    read = run_config_file(capsys, check_mode, path=str(path), op="read", command=DUMP)
    assert read["exists"] is False and read["command_rc"] == 0 and "read-from:%s" % path in read["command_stdout"]
    checked = run_config_file(capsys, check_mode, path=str(path), op="check", content="version = 2\n",
                              command=DUMP)
    assert checked["command_stdout"] == "version = 2\nread-from:%s\n" % path
    written = run_config_file(capsys, check_mode, path=str(path), op="write", content="version = 2\n")
    assert written["changed"] and not written.get("failed")
    assert path.exists() is not check_mode and path.parent.exists() is not check_mode
    if not check_mode:
        assert oct(path.parent.stat().st_mode & 0o777) == "0o755"


# ---------------------------------------------------------------- syntax errors at the end of a file

@pytest.mark.parametrize("text,expected", [
    ('version = 2\n[%s.registry]\n  config_path = "/etc/containerd/certs.d' % CRI2,
     r'line 3, column 41: Unterminated string at the end of the file \(the last line\) in table '
     r'\[plugins."io.containerd.grpc.v1.cri".registry\]'),
    ('version = 2\nimports = ["/etc/containerd/conf.d/*.toml",\n', r"line 2, column 44: Invalid value at the end "
     r"of the file \(the last line\) at the top level"),
    ("version = 2\n[debug]\n  level = ", r"line 3, column 11: Invalid value at the end of the file \(the last line\) in "
     r"table \[debug\]"),
])
def test_syntax_error_at_the_end_of_a_file_names_the_last_line_and_the_open_table(text, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        plan_runtime_edit(text, ROOT, binary=BINARY, containerd_version=V21)
    assert "?" not in str(err.value) and str(err.value).startswith(ROOT + ": ")


def test_a_default_spelled_out_in_the_source_is_no_change_to_an_existing_runtime():
    # A written-out runc says SystemdCgroup = false; the nvidia runtime that leaves the key out runs the same.
    existing = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}
    source = {"runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": False,
              "options": {"SystemdCgroup": False, "BinaryName": ""}}
    assert containerd_toml.desired_runtime(existing, source, "/usr/bin/nvidia-container-runtime") == existing
    source["options"]["SystemdCgroup"] = True
    assert containerd_toml.desired_runtime(existing, source, None)["options"]["SystemdCgroup"] is True
