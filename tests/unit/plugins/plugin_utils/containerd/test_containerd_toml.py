"""In-place editing of containerd config.toml (controller side, no daemon)."""
import difflib
import os

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import MASK, mask_text
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import (
    ConfigError,
    pruned,
    parse,
    plan_runtime_edit,
)
from unit_paths import UNIT_DIR

CORPUS = os.path.join(UNIT_DIR, "corpus", "containerd")
BAD = os.path.join(UNIT_DIR, "corpus", "containerd-bad")
CONFIGS = sorted(os.listdir(CORPUS))
BINARY = "/usr/bin/nvidia-container-runtime"
BUILTIN_RUNC = {"runtime_type": "io.containerd.runc.v2", "sandbox_mode": "podsandbox",
                "options": {"BinaryName": "", "SystemdCgroup": False}}
DUMP_1X = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": BUILTIN_RUNC}}}}}
V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
V21 = "containerd github.com/containerd/containerd/v2 2.1.9+unknown"
CRI = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def read(name, folder=CORPUS):
    with open(os.path.join(folder, name)) as handle:
        return handle.read()


def runtimes(data, version):
    return data["plugins"][CRI[version]]["containerd"]["runtimes"]


def removed_lines(before, after):
    """Lines of `before` that the edit deleted or rewrote."""
    diff = difflib.ndiff(before.splitlines(True), after.splitlines(True))
    return [line[2:] for line in diff if line.startswith("- ")]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("options", [{}, {"set_as_default": True, "cdi": True}])
def test_apply_keeps_every_other_line_and_is_idempotent(name, options):
    text = read(name)
    plan = plan_runtime_edit(text, name, binary=BINARY, **options)
    assert plan.changed
    # Only the lines of intended keys may be rewritten; none may disappear.
    for line in removed_lines(text, plan.text):
        assert any(key in line for key in ("default_runtime_name", "BinaryName", "enable_cdi")), line
    again = plan_runtime_edit(plan.text, name, binary=BINARY, **options)
    assert again.text == plan.text
    assert not again.changed
    assert runtimes(plan.data, plan.version)["nvidia"]["options"]["BinaryName"] == BINARY


@pytest.mark.parametrize("name", [c for c in CONFIGS if "nvidia" not in c])
def test_present_then_absent_restores_bytes(name):
    text = read(name)
    added = plan_runtime_edit(text, name, binary=BINARY, containerd_version=V21)
    removed = plan_runtime_edit(added.text, name, state="absent", containerd_version=V21)
    assert removed.text == text


@pytest.mark.parametrize("name", CONFIGS)
def test_present_default_then_absent_restores_effective_data(name):
    text = read(name)
    original = parse(text, name)
    added = plan_runtime_edit(text, name, binary=BINARY, set_as_default=True, containerd_version=V21)
    removed = plan_runtime_edit(added.text, name, state="absent", containerd_version=V21)
    data = removed.data
    if "nvidia" in name:  # the seed's own nvidia default falls back to the runtime pods used: runc
        del runtimes(original, 2)["nvidia"]
        original["plugins"][CRI[2]]["containerd"]["default_runtime_name"] = "runc"
    else:
        cri = data.get("plugins", {}).get(CRI[removed.version], {}).get("containerd", {})
        # containerd's built-in default is runc: naming it explicitly changes nothing.
        if cri.get("default_runtime_name") == "runc" and "default_runtime_name" not in str(text):
            del cri["default_runtime_name"]
    assert pruned(data) == pruned(original)


def test_new_runtime_copies_the_runtime_pods_use_today():
    plan = plan_runtime_edit(read("v2-commented.toml"), "x", binary=BINARY)
    table = runtimes(plan.data, 2)["nvidia"]
    assert table == {
        "runtime_type": "io.containerd.runc.v2",
        "privileged_without_host_devices": False,
        "options": {"SystemdCgroup": True, "BinaryName": BINARY},
    }
    assert plan.source_runtime == "runc"


def test_new_table_sits_after_the_source_runtime_in_the_same_style():
    text = read("v2-commented.toml")
    plan = plan_runtime_edit(text, "x", binary=BINARY)
    block = (
        "\n"
        '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '          runtime_type = "io.containerd.runc.v2"\n'
        "          privileged_without_host_devices = false\n"
        "\n"
        '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        "            SystemdCgroup = true\n"
        '            BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )
    anchor = "SystemdCgroup = true   # kubelet uses the systemd cgroup driver\n"
    assert plan.text == text.replace(anchor, anchor + block)


def test_seed_nvidia_default_is_updated_not_duplicated():
    text = read("seed-nvidia-default.toml")
    plan = plan_runtime_edit(text, "x", binary=BINARY)
    assert plan.text.count("runtimes.nvidia]") == 1
    table = runtimes(plan.data, 2)["nvidia"]
    assert table["options"] == {"BinaryName": BINARY, "SystemdCgroup": True}
    # Copied from runc, since the default (nvidia) is itself an nvidia runtime.
    assert plan.source_runtime == "runc"
    # set_as_default: false does not demote the existing default.
    assert plan.default_runtime == "nvidia"
    assert removed_lines(text, plan.text) == [
        '  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n'
    ]


def test_default_runtime_other_than_runc_is_the_source():
    text = read("v3-containerd2.toml").replace("default_runtime_name = 'runc'", "default_runtime_name = 'crun'")
    text += "\n        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun]\n" \
            "          runtime_type = 'io.containerd.runc.v2'\n" \
            "          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun.options]\n" \
            "            BinaryName = '/usr/bin/crun'\n            SystemdCgroup = false\n"
    plan = plan_runtime_edit(text, "x", binary=BINARY)
    assert plan.source_runtime == "crun"
    assert runtimes(plan.data, 3)["nvidia"]["options"] == {"BinaryName": BINARY, "SystemdCgroup": False}
    assert "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]" in plan.text


def test_v1_uses_plugin_cri():
    plan = plan_runtime_edit(read("v1-legacy.toml"), "x", binary=BINARY, set_as_default=True)
    assert plan.version == 1 and plan.cri_plugin == "cri"
    assert plan.data["plugins"]["cri"]["containerd"]["default_runtime_name"] == "nvidia"


@pytest.mark.parametrize("containerd_version, warned", [
    (None, "version is unknown, so it was edited where containerd 1.x reads it"),
    (V16, None),
    (V21, "containerd 2.1.9 ignores its [plugins.cri]")])
@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_version_1_file_says_which_containerd_it_was_edited_for(containerd_version, warned, state):
    """containerd 2.x ignores a version 1 file's [plugins.cri]: where the version is unknown, the run says so."""
    plan = plan_runtime_edit(read("v1-legacy.toml"), "x", binary=BINARY, state=state,
                             containerd_version=containerd_version)
    found = [w for w in plan.warnings if "version 1 file" in w]
    if warned is None or (state == "absent" and containerd_version == V21):  # no nvidia under [plugins.cri]
        assert found == []
    else:
        assert len(found) == 1 and warned in found[0]


def test_absent_on_containerd_2_names_the_ignored_v1_table_that_migrate_would_bring_back():
    """nvidia-ctk's version 1 file on containerd 2.x: [plugins.cri]'s nvidia is ignored, not removed."""
    text = read("v1-legacy.toml") + ('\n[plugins.cri.containerd.runtimes.nvidia]\n  runtime_type = '
                                     '"io.containerd.runc.v2"\n')
    plan = plan_runtime_edit(text, "x", binary=BINARY, state="absent", containerd_version=V21)
    assert not plan.changed
    assert any("still defines nvidia: `containerd config migrate` would bring it back" in w for w in plan.warnings)


@pytest.mark.parametrize("containerd_version,version", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", 2),
    ("containerd github.com/containerd/containerd/v2 2.1.9+unknown", 3),
    (None, 2),
])
@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_missing_or_empty_file_gets_version_of_installed_containerd(text, containerd_version, version):
    plan = plan_runtime_edit(text, "x", binary=BINARY, containerd_version=containerd_version)
    assert plan.data["version"] == version
    assert runtimes(plan.data, version)["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BINARY}}
    assert plan.text.startswith(text)


def test_absent_default_falls_back_to_runc():
    text = read("seed-nvidia-default.toml")
    plan = plan_runtime_edit(text, "x", state="absent")
    assert "nvidia" not in runtimes(plan.data, 2)
    assert plan.default_runtime == "runc"
    assert 'default_runtime_name = "runc"' in plan.text


def test_absent_when_missing_changes_nothing():
    text = read("v2-commented.toml")
    assert not plan_runtime_edit(text, "x", state="absent").changed


def test_cdi_sets_enable_cdi_in_the_runtime_plugin():
    plan = plan_runtime_edit(read("v3-containerd2.toml"), "x", binary=BINARY, cdi=True)
    assert plan.data["plugins"]["io.containerd.cri.v1.runtime"]["enable_cdi"] is True
    assert "    enable_cdi = true\n" in plan.text


@pytest.mark.parametrize("name,expected", [
    ("malformed.toml", r"malformed.toml: line \d+, column \d+"),
    ("duplicate-table.toml", r"duplicate-table.toml: line 5, column \d+"),
    ("version-string.toml", r"version-string.toml: line 2: `version` must be an integer"),
    ("cri-disabled.toml", r"cri-disabled.toml: line 2: disabled_plugins lists \"cri\".*Kubernetes cannot use it"),
])
def test_bad_input_fails_clearly(name, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        plan_runtime_edit(read(name, BAD), name, binary=BINARY)
    assert "left unchanged" in str(err.value)


def test_credentials_are_masked_in_text():
    masked = mask_text(read("seed-nvidia-default.toml"))
    assert "s3cr3t-registry-password" not in masked
    assert "cHVsbGVyOnMzY3IzdA==" not in masked
    assert 'password = "%s"' % MASK in masked
    assert 'username = "%s"' % MASK in masked  # everything under an `auth` table is masked


def test_containerd_1x_keeps_builtin_runc_when_file_lists_no_runtime():
    plan = plan_runtime_edit(read("v2-debian-default.toml"), "x", binary=BINARY,
                             containerd_version=V16, effective=DUMP_1X)
    tables = runtimes(plan.data, 2)
    assert tables["runc"] == BUILTIN_RUNC
    assert tables["nvidia"]["sandbox_mode"] == "podsandbox"
    assert "# containerd's built-in runtime, written out as it runs today" in plan.text


def test_containerd_2x_merges_runtimes_so_runc_is_not_written():
    plan = plan_runtime_edit(read("v2-debian-default.toml"), "x", binary=BINARY,
                             containerd_version=V21, effective=DUMP_1X)
    assert "runc" not in runtimes(plan.data, 2)


# ---------------------------------------------------------------- styles real tools write (issue 11)

CRI2 = 'plugins."io.containerd.grpc.v1.cri"'


def edit(text, **kwargs):
    kwargs.setdefault("containerd_version", V21)
    return plan_runtime_edit(text, "/etc/containerd/config.toml", binary=BINARY, **kwargs)


def test_top_level_dotted_keys_are_extended_in_the_same_style():
    text = 'version = 2\n%s.containerd.default_runtime_name = "runc"\n' % CRI2
    plan = edit(text, set_as_default=True)
    assert plan.text.startswith("version = 2\n")
    assert '%s.containerd.runtimes.nvidia.options.BinaryName = "%s"\n' % (CRI2, BINARY) in plan.text
    assert "[" not in plan.text.replace('"', "")  # no [table] header was introduced
    assert edit(plan.text, set_as_default=True).text == plan.text
    assert edit(plan.text, state="absent").text == text


def test_dotted_runtime_keys_inside_a_table_are_extended_beside_the_source():
    text = ('version = 2\n[%s]\n  containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"\n'
            "  containerd.runtimes.runc.options.SystemdCgroup = true\n  sandbox_image = \"pause:3.9\"\n" % CRI2)
    plan = edit(text)
    assert plan.text == text.replace(
        "SystemdCgroup = true\n",
        'SystemdCgroup = true\n  containerd.runtimes.nvidia.runtime_type = "io.containerd.runc.v2"\n'
        "  containerd.runtimes.nvidia.options.SystemdCgroup = true\n"
        '  containerd.runtimes.nvidia.options.BinaryName = "%s"\n' % BINARY)
    assert edit(plan.text, state="absent").text == text


def test_inline_runtime_is_added_as_one_more_inline_line():
    text = ('version = 2\n[%s.containerd.runtimes]\n'
            '  runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } }\n' % CRI2)
    plan = edit(text)
    assert plan.text == text + ('  nvidia = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true, '
                                'BinaryName = "%s" } }\n' % BINARY)
    assert edit(plan.text, state="absent").text == text


def test_inline_runtimes_map_is_refused_with_its_position_and_what_to_do():
    text = 'version = 2\n[%s.containerd]\n  runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n' % CRI2
    with pytest.raises(ConfigError) as err:
        edit(text)
    message = str(err.value)
    assert message.startswith("/etc/containerd/config.toml: line 3, column 14: ")
    assert "is written as an inline table" in message and "section" in message and "left unchanged" in message
    assert "fix the TOML" not in message


def test_array_of_tables_on_the_path_is_refused_with_its_position():
    text = 'version = 2\n[[%s.containerd.runtimes]]\n  runtime_type = "x"\n' % CRI2
    with pytest.raises(ConfigError, match=r"config.toml: line 2, column 1: .*must be a table \(it is an array of tables\)"):
        edit(text)


def test_other_types_pass_through_untouched():
    text = ('version = 2\nstarted = 1979-05-27 07:32:00-07:00\nday = 1979-05-27\nat = 07:32:00\nratio = nan\n'
            "big = inf\n[timeouts]\n  \"io.containerd.timeout.shim.cleanup\" = \"5s\"\n  'odd key' = '''\nmulti\nline'''\n"
            "[%s.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\n"
            '    "a",  # first\n    "b",\n  ]\n  note = """\n  spans\n  lines"""\n' % CRI2)
    plan = edit(text)
    assert not removed_lines(text, plan.text)
    assert plan.text.startswith(text)
    assert edit(plan.text, state="absent").text == text


@pytest.mark.parametrize("prefix,newline", [("", "\r\n"), ("\ufeff", "\n"), ("\ufeff", "\r\n")])
def test_crlf_and_bom_are_kept(prefix, newline):
    text = prefix + read("v2-commented.toml").replace("\n", newline)
    plan = edit(text, set_as_default=True, cdi=True)
    assert plan.text.startswith(prefix + "#") and plan.text.count("\r\n") == (
        plan.text.count("\n") if newline == "\r\n" else 0)
    assert edit(plan.text, set_as_default=True, cdi=True).text == plan.text
    restored = edit(plan.text, state="absent")
    assert removed_lines(text, restored.text) == []


@pytest.mark.parametrize("text", ["a = " + "[" * 5000 + "]" * 5000 + "\n",
                                  "a = " + "{ b = " * 3000 + "1" + " }" * 3000 + "\n",
                                  "[" + ".".join(["t"] * 3000) + "]\n"])
def test_deep_nesting_is_refused_cleanly(text):
    with pytest.raises(ConfigError, match=r"config.toml: .*(nested|nests) .*deep.*left unchanged"):
        edit(text)


def test_v1_default_runtime_table_is_the_source_runtime():
    text = ("[plugins.cri.containerd.default_runtime]\n  runtime_type = \"io.containerd.runc.v2\"\n"
            "  [plugins.cri.containerd.default_runtime.options]\n    SystemdCgroup = true\n")
    plan = edit(text, containerd_version=V16)
    assert plan.source_runtime == "default_runtime"
    assert runtimes(plan.data, 1)["nvidia"]["options"] == {"SystemdCgroup": True, "BinaryName": BINARY}
    # containerd 1.x drops its built-in runc once the file lists a runtime: it is written out.
    assert runtimes(plan.data, 1)["runc"] == {"runtime_type": "io.containerd.runc.v2"}
    with pytest.raises(ConfigError, match=r"line 1, column 1: .*deprecated `default_runtime` table"):
        edit(text, containerd_version=V16, set_as_default=True)


def test_absent_gives_back_a_custom_shim_that_was_the_only_runtime_and_default():
    text = ('version = 2\n[%s.containerd]\n  default_runtime_name = "shim"\n[%s.containerd.runtimes.shim]\n'
            '  runtime_type = "io.containerd.shim.v1"\n' % (CRI2, CRI2))
    added = edit(text, set_as_default=True)
    # A shim that does not run BinaryName is not copied (nvidia gets runc's shim): the old default is recorded.
    assert runtimes(added.data, 2)["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert '# gpunode.nvidia: default_runtime_name was "shim"' in added.text
    removed = edit(added.text, state="absent")
    assert removed.text == text and removed.default_runtime == "shim"


def test_absent_gives_back_containerds_builtin_default_in_a_v3_file_defining_only_crun():
    text = ("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun]\n"
            "  runtime_type = 'io.containerd.runc.v2'\n  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes"
            ".crun.options]\n    BinaryName = '/usr/bin/crun'\n")
    added = edit(text, set_as_default=True)
    assert added.source_runtime == "runc"  # containerd's built-in default, not the file's only runtime
    removed = edit(added.text, state="absent")
    assert "default_runtime_name" not in removed.text
    assert pruned(removed.data) == pruned(parse(text, "x"))


def test_absent_restores_an_explicit_runc_default_without_a_runc_table():
    text = 'version = 2\n[%s.containerd]\n  default_runtime_name = "runc"\n' % CRI2
    added = edit(text, set_as_default=True)
    assert '# gpunode.nvidia: default_runtime_name was "runc"' in added.text
    assert edit(added.text, state="absent").text == text


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "\ufeff", "\r\n# c\r\n"])
def test_absent_on_empty_or_comment_only_file_writes_nothing(text):
    plan = edit(text, state="absent")
    assert plan.text == text and not plan.changed


def test_second_run_keeps_the_source_runtime_when_crun_and_runc_disagree():
    text = ('version = 2\n[%s.containerd]\n  default_runtime_name = "crun"\n'
            '[%s.containerd.runtimes.crun]\n  runtime_type = "io.containerd.runc.v2"\n'
            '  [%s.containerd.runtimes.crun.options]\n    SystemdCgroup = true\n    BinaryName = "/usr/bin/crun"\n'
            '[%s.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
            '  [%s.containerd.runtimes.runc.options]\n    SystemdCgroup = false\n' % ((CRI2,) * 5))
    first = edit(text, set_as_default=True)
    second = edit(first.text, set_as_default=True)
    assert first.source_runtime == second.source_runtime == "crun"
    assert second.text == first.text
    assert runtimes(second.data, 2)["nvidia"]["options"]["SystemdCgroup"] is True
    assert edit(first.text, state="absent").text == text


MIXED = ('version = 2\n[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "crun"\n'
         '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun]\n  runtime_type = "io.containerd.runc.v2"\n'
         '  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun.options]\n    SystemdCgroup = true\n')


def test_version_2_file_with_cri_v1_tables_is_edited_where_containerd_2_reads():
    plan = edit(MIXED, set_as_default=True)
    assert plan.cri_plugin == "io.containerd.cri.v1.runtime" and plan.source_runtime == "crun"
    assert plan.data["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]["options"] == {
        "SystemdCgroup": True, "BinaryName": BINARY}


@pytest.mark.parametrize("version,expected", [
    (V16, r"line 2, column 1: .*which containerd 1.6.20 ignores"),
    (None, r"line 2, column 1: .*version is unknown")])
def test_version_2_file_with_cri_v1_tables_is_refused_where_no_reader_is_known(version, expected):
    with pytest.raises(ConfigError, match=expected):
        edit(MIXED, containerd_version=version)


def test_editor_mistakes_become_refusals_not_writes(monkeypatch):
    from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import toml_edit as containerd_toml
    monkeypatch.setattr(containerd_toml, "render_keys", lambda *a: "oops = 1\n")
    monkeypatch.setattr(containerd_toml, "insert_table", lambda text, *a, **k: text + "oops = 1\n")
    with pytest.raises(ConfigError, match="could not edit this file in place.*This is a bug"):
        edit(read("v2-commented.toml"))


@pytest.mark.parametrize("text,expected", [
    ('version = 2\nplugins = { "io.containerd.grpc.v1.cri" = 5 }\n',
     r"line 2, column 11: plugins.\"io.containerd.grpc.v1.cri\" must be a table \(it is an integer\)"),
    ('version = 2\n[%s.containerd]\ndefault_runtime_name = 3\n' % CRI2,
     r"line 3, column 24: default_runtime_name must be a string naming a runtime, not an integer"),
    ('version = 2\n[%s.containerd.runtimes.runc]\noptions = "x"\n' % CRI2,
     r"line 3, column 11: .*runtimes.runc.options must be a table \(it is a string\)"),
])
def test_valid_toml_of_the_wrong_type_is_refused_with_its_position(text, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        edit(text)
    assert "fix the TOML" not in str(err.value) and "left unchanged" in str(err.value)


def test_runtime_appended_at_the_end_is_removed_without_leftover_blank_lines():
    """Found by the fuzz profile: a file whose CRI runtime tables start at its end."""
    text = ('[plugins."io.containerd.cri.v1.runtime".containerd.default_runtime]\r\nruntime_type = "io.containerd.runc.v2"'
            '\r\n[plugins."io.containerd.example.v1.things"]\r\n[[plugins."io.containerd.example.v1.things".items]]\r\n'
            'name = "b"')
    added = edit(text)
    assert edit(added.text, state="absent").text == text + "\r\n"
