"""gpunode.nvidia.crio_runtime and module_utils.editors.crio_config.

CRI-O cannot be installed on the test machines: these are unit tests only.
The rendered drop-in is checked with a real TOML parser (tomllib/tomlkit) on
the controller side, since the node-side code has none.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys
import textwrap

import pytest
import tomlkit
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import crio_config as cc
from ansible_collections.gpunode.nvidia.plugins.module_utils.common import toml_reader
from ansible_collections.gpunode.nvidia.plugins.modules import crio_runtime
from unit_paths import REPO


# What CRI-O 1.30+ packages ship as /etc/crio/crio.conf.d/10-crio.conf (abridged).
PACKAGED_DROPIN = textwrap.dedent("""\
    [crio.image]
    signature_policy = "/etc/crio/policy.json"

    [crio.runtime]
    default_runtime = "crun"

    [crio.runtime.runtimes.crun]
    runtime_path = "/usr/libexec/crio/crun"
    runtime_root = "/run/crun"
    monitor_path = "/usr/libexec/crio/conmon"
    allowed_annotations = [
        "io.containers.trace-syscall",
    ]

    [crio.runtime.runtimes.runc]
    runtime_path = "/usr/libexec/crio/runc"
    runtime_root = "/run/runc"
    monitor_path = "/usr/libexec/crio/conmon"
    """)


def test_render_default():
    text = cc.render_dropin("nvidia", "/usr/bin/nvidia-container-runtime")
    assert text == (
        cc.HEADER + "\n"
        "[crio.runtime.runtimes.nvidia]\n"
        'runtime_path = "/usr/bin/nvidia-container-runtime"\n'
        'runtime_type = "oci"\n'
        'runtime_root = "/run/nvidia"\n'
    )
    assert tomlkit.parse(text).unwrap() == {"crio": {"runtime": {"runtimes": {"nvidia": {
        "runtime_path": "/usr/bin/nvidia-container-runtime", "runtime_type": "oci", "runtime_root": "/run/nvidia"}}}}}


def test_render_as_default_with_odd_name_and_root():
    text = cc.render_dropin("nvidia.cdi", 'C:\\odd "path"', runtime_root="/run/nv", set_as_default=True)
    assert tomlkit.parse(text).unwrap()["crio"]["runtime"] == {
        "default_runtime": "nvidia.cdi",
        "runtimes": {"nvidia.cdi": {"runtime_path": 'C:\\odd "path"', "runtime_type": "oci", "runtime_root": "/run/nv"}},
    }
    assert '[crio.runtime.runtimes."nvidia.cdi"]' in text
    assert cc.is_managed(text) and not cc.is_managed(PACKAGED_DROPIN)


@pytest.mark.parametrize("style", [
    '[crio.runtime]\ndefault_runtime = "crun"\n\n[crio.runtime.runtimes.nvidia]\nruntime_path = "/opt/x"\n',
    '\ufeffcrio.runtime.default_runtime = "crun"\r\n\r\n\r\ncrio.runtime.runtimes.nvidia.runtime_path = "/opt/x"\r\n',
    '[crio]\nruntime.default_runtime = "cr\\u0075n"\n# [crio.runtime.runtimes.nvidia]\n'
    'runtime.runtimes = { nvidia = { runtime_path = "/opt/x" } }\n',
    "[crio.runtime]\ndefault_runtime = 'crun'\nnote = \"\"\"\n[crio.runtime.runtimes.nvidia]\n\"\"\"\n"
    '[crio.runtime.runtimes."nvidia"]\n',
])
def test_overrides_seen_in_every_toml_style(crio_dir, style):
    later = crio_dir / "crio.conf.d" / "99-zz-local.conf"
    later.write_text(style, encoding="utf-8")
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", True, "present")
    assert [i["file"] for i in issues] == [str(later)] * 2
    assert all(isinstance(i["line"], int) for i in issues)
    assert "redefines" in issues[0]["message"] and 'default_runtime = "crun"' in issues[1]["message"]


def test_unreadable_dropins_are_reported_not_fatal(crio_dir):
    (crio_dir / "crio.conf.d" / "99-zz-bad.conf").write_bytes(b'[crio.runtime]\ndefault_runtime = "x\n')
    (crio_dir / "crio.conf.d" / "99-zz-latin1.conf").write_bytes(b"# caf\xe9\n")
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", False, "present")
    assert [(os.path.basename(i["file"]), i["line"]) for i in issues] == [("99-zz-bad.conf", 2),
                                                                          ("99-zz-latin1.conf", None)]
    assert "not valid TOML" in issues[0]["message"] and "not UTF-8" in issues[1]["message"]


@pytest.mark.parametrize("escape", ["\\U0011FFFF", "\\uD800", "\\u12G4"])
@pytest.mark.parametrize("quote", ['"', '"""'])
@pytest.mark.parametrize("use_tomllib", [True, False])
def test_an_escape_naming_no_character_is_reported_with_its_line(crio_dir, escape, quote, use_tomllib, monkeypatch):
    """Past U+10FFFF, a surrogate, not hex: TOML refuses each, in basic and multi-line strings alike."""
    if not use_tomllib:
        monkeypatch.setattr(toml_reader, "tomllib", None)
    (crio_dir / "crio.conf.d" / "99-zz-bad.conf").write_text(
        '[crio.runtime.runtimes.crun]\nruntime_path = %s/usr/bin/%scrun%s\n' % (quote, escape, quote))
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", False, "present")
    assert [(os.path.basename(i["file"]), i["line"]) for i in issues] == [("99-zz-bad.conf", 2)]
    assert "not valid TOML" in issues[0]["message"]


@pytest.fixture
def crio_dir(tmp_path):
    etc = tmp_path / "etc" / "crio"
    (etc / "crio.conf.d").mkdir(parents=True)
    (etc / "crio.conf").write_text('[crio.runtime]\ndefault_runtime = "runc"\n')
    (etc / "crio.conf.d" / "10-crio.conf").write_text(PACKAGED_DROPIN)
    return etc


def ours(crio_dir):
    return str(crio_dir / "crio.conf.d" / "99-nvidia.toml")


def test_no_overrides_from_earlier_files(crio_dir):
    assert cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", True, "present") == []


def test_later_dropin_redefining_runtime_and_default_is_reported(crio_dir):
    later = crio_dir / "crio.conf.d" / "99-zz-local.conf"
    later.write_text('[crio.runtime]\ndefault_runtime = "crun"\n\n[crio.runtime.runtimes.nvidia]\nruntime_path = "/opt/x"\n')
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", True, "present")
    assert [(i["file"], i["line"]) for i in issues] == [(str(later), 4), (str(later), 2)]
    assert "redefines [crio.runtime.runtimes.nvidia]" in issues[0]["message"]
    assert 'sets default_runtime = "crun"' in issues[1]["message"]
    # Without set_as_default another default is not our business.
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", False, "present")
    assert len(issues) == 1


def test_lexical_order_decides_later(crio_dir):
    (crio_dir / "crio.conf.d" / "50-nvidia.conf").write_text("[crio.runtime.runtimes.nvidia]\n")
    (crio_dir / "crio.conf.d" / "99-nvidia.toml.d").mkdir()  # directories are not config files
    assert cc.find_overrides(ours(crio_dir), None, "nvidia", False, "present") == []
    (crio_dir / "crio.conf.d" / "990-late.conf").write_text("[crio.runtime.runtimes.nvidia]\n")
    assert len(cc.find_overrides(ours(crio_dir), None, "nvidia", False, "present")) == 1


def test_absent_warns_when_default_still_names_runtime(crio_dir):
    (crio_dir / "crio.conf.d" / "50-default.conf").write_text('[crio.runtime]\ndefault_runtime = "nvidia"\n')
    issues = cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", False, "absent")
    assert len(issues) == 1 and "CRI-O will refuse to start" in issues[0]["message"]
    # A later file choosing another default makes it harmless.
    (crio_dir / "crio.conf.d" / "60-default.conf").write_text('[crio.runtime]\ndefault_runtime = "crun"\n')
    assert cc.find_overrides(ours(crio_dir), str(crio_dir / "crio.conf"), "nvidia", False, "absent") == []


# --- the module ---------------------------------------------------------------

def run(capsys, check_mode=False, **args):
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            crio_runtime.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args", [dict(name="nvidia\n"), dict(binary="")])
def test_a_blank_name_or_binary_is_refused_before_anything_is_written(capsys, crio_dir, args):
    result = run(capsys, path=ours(crio_dir), **args)
    assert result["failed"] is True and "cannot name a runtime" in result["msg"]
    assert not os.path.exists(ours(crio_dir))


def warnings(result):
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "nvidia-container-runtime"
    path.write_text("#!/bin/sh\nexec runc \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def common(crio_dir, binary):
    return dict(path=ours(crio_dir), main_config=str(crio_dir / "crio.conf"), binary=binary)


def test_module_present_idempotent_absent(capsys, crio_dir, binary):
    args = common(crio_dir, binary)
    result = run(capsys, **args)
    assert result["changed"] is True and result["overrides"] == []
    assert result["runtime"] == {"runtime_path": binary, "runtime_type": "oci", "runtime_root": "/run/nvidia"}
    written = open(args["path"], "rb").read()
    assert written.decode() == cc.render_dropin("nvidia", binary)
    assert oct(os.stat(args["path"]).st_mode & 0o777) == "0o644"
    assert run(capsys, **args)["changed"] is False
    assert open(args["path"], "rb").read() == written
    result = run(capsys, state="absent", **args)
    assert result["changed"] is True and not os.path.exists(args["path"])
    assert result["diff"]["after"] == "" and result["runtime"] is None
    assert run(capsys, state="absent", **args)["changed"] is False
    # The other files were never touched.
    assert (crio_dir / "crio.conf.d" / "10-crio.conf").read_text() == PACKAGED_DROPIN


def test_module_check_mode_and_diff(capsys, crio_dir, binary):
    result = run(capsys, check_mode=True, set_as_default=True, **common(crio_dir, binary))
    assert result["changed"] is True and 'default_runtime = "nvidia"' in result["diff"]["after"]
    assert not os.path.exists(ours(crio_dir))


def test_module_set_as_default_updates_and_keeps_mode(capsys, crio_dir, binary):
    args = common(crio_dir, binary)
    run(capsys, **args)
    os.chmod(args["path"], 0o600)
    result = run(capsys, set_as_default=True, backup=True, **args)
    assert result["changed"] is True
    assert oct(os.stat(args["path"]).st_mode & 0o777) == "0o600"
    assert open(result["backup_file"]).read() == cc.render_dropin("nvidia", binary)
    assert os.path.dirname(result["backup_file"]) == str(crio_dir)
    assert tomlkit.parse(open(args["path"]).read())["crio"]["runtime"]["default_runtime"] == "nvidia"


def test_module_backs_up_foreign_file(capsys, crio_dir, binary):
    foreign = '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\nmonitor_env = ["X=1"]\n'
    with open(ours(crio_dir), "w") as handle:
        handle.write(foreign)
    result = run(capsys, **common(crio_dir, binary))
    assert result["changed"] is True and result["replaced_foreign_file"] is True
    assert open(result["backup_file"]).read() == foreign
    assert any("not written by this module" in w for w in warnings(result))
    # CRI-O reads every file of its drop-in directory: a backup there would win over the new drop-in.
    assert os.path.dirname(result["backup_file"]) == str(crio_dir)
    assert cc.config_files(None, str(crio_dir / "crio.conf.d")) == sorted(
        str(p) for p in (crio_dir / "crio.conf.d").iterdir())
    assert result["backup_file"] not in cc.config_files(None, str(crio_dir / "crio.conf.d"))


def test_module_warns_about_later_override(capsys, crio_dir, binary):
    (crio_dir / "crio.conf.d" / "99-zz.conf").write_text('[crio.runtime]\ndefault_runtime = "crun"\n')
    result = run(capsys, set_as_default=True, **common(crio_dir, binary))
    assert result["changed"] is True and len(result["overrides"]) == 1
    assert any("99-zz.conf line 2 sets default_runtime" in w for w in warnings(result))


def test_module_refuses_default_without_binary(capsys, crio_dir):
    args = common(crio_dir, "/nonexistent/nvidia-container-runtime")
    result = run(capsys, set_as_default=True, **args)
    assert result["failed"] is True and "every pod" in result["msg"]
    assert not os.path.exists(args["path"])
    result = run(capsys, set_as_default=True, allow_missing_binary=True, **args)
    assert result["changed"] is True


def test_module_file_end_to_end_with_ansible(tmp_path, crio_dir, binary):
    """One run of the real module file through ansible's own module execution."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    args = json.dumps(dict(common(crio_dir, binary), set_as_default=True))
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    out = subprocess.run([ansible, "localhost", "-m", "gpunode.nvidia.crio_runtime", "-a", args,
                          "-e", "ansible_python_interpreter=" + sys.executable],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=True)
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is True
    assert open(ours(crio_dir)).read() == cc.render_dropin("nvidia", binary, set_as_default=True)


def test_documentation_matches_argument_spec():
    import yaml
    from ansible_collections.gpunode.nvidia.plugins.doc_fragments.node_lock import ModuleDocFragment
    doc = yaml.safe_load(crio_runtime.DOCUMENTATION)
    assert "gpunode.nvidia.node_lock" in doc["extends_documentation_fragment"]
    doc["options"].update(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    assert set(doc["options"]) == set(crio_runtime.ARGUMENT_SPEC)
    for name, spec in crio_runtime.ARGUMENT_SPEC.items():
        assert doc["options"][name].get("default") == spec.get("default"), name
        assert doc["options"][name]["type"] == spec["type"], name
    yaml.safe_load(crio_runtime.EXAMPLES)
    yaml.safe_load(crio_runtime.RETURN)


def test_lock_kept_only_after_a_write(capsys, crio_dir, binary, tmp_path):
    lock = tmp_path / "lock"
    args = dict(common(crio_dir, binary), lock={"path": str(lock), "owner": "run-1"})
    assert run(capsys, check_mode=True, **args)["lock_held"] is False and not lock.exists()
    assert run(capsys, **args)["lock_held"] is True and json.loads(lock.read_text())["owner"] == "run-1"
    lock.unlink()  # given back after the restart, as the role does
    again = run(capsys, **args)
    assert not again["changed"] and again["lock_held"] is False and not lock.exists()
