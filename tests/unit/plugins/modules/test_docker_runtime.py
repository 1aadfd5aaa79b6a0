"""gpunode.nvidia.docker_runtime and module_utils.editors.docker_config, without a daemon.

The module's own code runs in-process (AnsibleModule with patched arguments);
dockerd's `--validate` is played by a small stand-in script here, the real
dockerd versions are exercised in tests/integration/test_docker_runtime_live.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import textwrap

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import daemon_json as dj
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import docker_config as dc
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import dockerd_flags
from ansible_collections.gpunode.nvidia.plugins.modules import docker_runtime

NCR = "/usr/bin/nvidia-container-runtime"
SECRET = "c2VjcmV0LXRva2VuLXZhbHVl"

# The seed host's daemon.json, plus a credential-like key (proxy auth) to prove masking.
SEED = textwrap.dedent("""\
    {
      "exec-opts": ["native.cgroupdriver=systemd"],
      "log-driver": "json-file",
      "log-opts": {
        "max-size": "100m",
        "max-file": "3"
      },
      "registry-mirrors": ["https://mirror.gcr.example.com", "https://registry-1.example.org"],
      "insecure-registries": ["10.0.0.5:5000", "registry.internal:5000"],
      "proxy-auth": {
        "password": "%s"
      }
    }
    """) % SECRET


def edit(text, **kw):
    kw.setdefault("name", "nvidia")
    kw.setdefault("binary", NCR)
    return dc.edit_daemon_json(text, "/etc/docker/daemon.json", **kw)


def members_text(text):
    """Top-level member name -> its exact source text, for byte comparisons."""
    obj = dj.scan_object(text, text.index("{"))
    return dict((m.key, text[m.key_start:m.value_end]) for m in obj.members)


# --- pure edits -------------------------------------------------------------

def test_seed_keys_stay_byte_identical():
    out = edit(SEED, runtime_args=["--log-level=debug"], set_as_default=True, cdi=True)
    before, after = members_text(SEED), members_text(out)
    for key, source in before.items():
        assert after[key] == source
    assert list(after)[: len(before)] == list(before)
    # Everything up to the last old value is the untouched prefix of the file.
    last_end = SEED.rindex("}", 0, SEED.rindex("}")) + 1
    assert out.startswith(SEED[:last_end]) and out.endswith("\n}\n")
    data = json.loads(out)
    assert data["runtimes"] == {"nvidia": {"path": NCR, "runtimeArgs": ["--log-level=debug"]}}
    assert data["default-runtime"] == "nvidia" and data["features"] == {"cdi": True}


def test_seed_edit_exact_layout():
    out = edit(SEED)
    assert out == SEED[: SEED.rindex("\n}")] + textwrap.dedent("""\
        ,
          "runtimes": {
            "nvidia": {
              "path": "/usr/bin/nvidia-container-runtime"
            }
          }
        }
        """)


def test_second_apply_is_byte_identical():
    once = edit(SEED, runtime_args=["a"], set_as_default=True, cdi=True)
    assert edit(once, runtime_args=["a"], set_as_default=True, cdi=True) == once


@pytest.mark.parametrize("kw,left", [
    ({}, ',\n  "runtimes": {}\n}\n'),
    ({"runtime_args": ["--debug"]}, ',\n  "runtimes": {}\n}\n'),
    ({"set_as_default": True}, ',\n  "runtimes": {},\n  "default-runtime": "runc"\n}\n'),
])
def test_present_then_absent_leaves_only_reloadable_defaults(kw, left):
    # dockerd reloads only keys present in the file: an emptied `runtimes` and the
    # stock default stay, everything else is the original text.
    out = edit(SEED, **kw)
    removed = edit(out, state="absent")
    assert removed == SEED[: SEED.rindex("\n}")] + left
    # From there on, present then absent gives back the exact bytes.
    assert edit(edit(removed, **kw), state="absent") == removed
    assert edit(removed, state="absent") == removed


@pytest.mark.parametrize("original", [
    '{\n  "debug": true,\n  "runtimes": {}\n}\n',
    '{\n  "runtimes": {\n    "crun": {"path": "/usr/bin/crun"}\n  },\n  "debug": true\n}\n',
    '{"runtimes": {"crun": {"path": "/usr/bin/crun"}}}',
])
def test_present_then_absent_restores_original_bytes(original):
    out = edit(original, runtime_args=["--debug"])
    assert out != original
    assert edit(out, state="absent") == original


@pytest.mark.parametrize("unit", ["  ", "    ", "\t"])
def test_indentation_is_copied(unit):
    original = '{\n%s"log-driver": "json-file",\n%s"log-opts": {\n%s%s"max-size": "10m"\n%s}\n}\n' % (
        unit, unit, unit, unit, unit)
    out = edit(original, set_as_default=True)
    expected = original[: original.rindex("\n}")] + (
        ',\n{u}"runtimes": {{\n{u}{u}"nvidia": {{\n{u}{u}{u}"path": "{ncr}"\n{u}{u}}}\n{u}}},'
        '\n{u}"default-runtime": "nvidia"\n}}\n').format(u=unit, ncr=NCR)
    assert out == expected
    assert dc.detect_indent(original) == unit
    removed = edit(out, state="absent")
    assert removed == original[: original.rindex("\n}")] + (
        ',\n{u}"runtimes": {{}},\n{u}"default-runtime": "runc"\n}}\n').format(u=unit)
    assert edit(edit(removed, set_as_default=True), state="absent") == removed


def test_one_line_file_stays_one_line():
    original = '{"log-driver":"json-file","debug":true}'
    out = edit(original, runtime_args=["x"])
    assert out == '{"log-driver":"json-file","debug":true,"runtimes":{"nvidia":{"path":"%s","runtimeArgs":["x"]}}}' % NCR
    assert edit(out, state="absent") == '{"log-driver":"json-file","debug":true,"runtimes":{}}'


def test_missing_or_empty_file_gets_only_what_was_asked():
    expected = '{\n  "runtimes": {\n    "nvidia": {\n      "path": "%s"\n    }\n  }\n}\n' % NCR
    assert edit("") == expected
    assert edit("\n") == expected
    assert edit("", state="absent") == ""


def test_empty_object_file_roundtrip():
    assert edit("{}\n", state="absent") == "{}\n"
    assert edit(edit("{}\n"), state="absent") == '{\n  "runtimes": {}\n}\n'


def test_other_runtime_kept_and_inline_object_extended_inline():
    original = '{\n  "runtimes": {"crun": {"path": "/usr/bin/crun"}},\n  "debug": true\n}\n'
    out = edit(original)
    assert out == ('{\n  "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": "%s"}},\n'
                   '  "debug": true\n}\n' % NCR)
    assert edit(out, state="absent") == original


def test_existing_runtime_is_updated_in_place():
    original = ('{\n  "runtimes": {\n    "nvidia": {\n      "path": "/usr/local/nvidia/toolkit/nvidia-container-runtime",'
                '\n      "runtimeArgs": ["--debug"]\n    }\n  }\n}\n')
    out = edit(original)
    # runtimeArgs already present: an empty list empties it, on the same line.
    assert out == original.replace("/usr/local/nvidia/toolkit/nvidia-container-runtime", NCR).replace(
        '["--debug"]', "[]")
    assert edit(out) == out


def test_runtime_args_not_written_when_empty():
    assert "runtimeArgs" not in edit(SEED)


def test_cdi_keeps_other_feature_flags():
    original = '{\n  "features": {\n    "containerd-snapshotter": true,\n    "buildkit": false\n  }\n}\n'
    out = edit(original, cdi=True)
    assert json.loads(out)["features"] == {"containerd-snapshotter": True, "buildkit": False, "cdi": True}
    assert out.startswith(original[: original.index("false") + len("false")])
    flipped = edit(original.replace('"buildkit": false', '"cdi": false'), cdi=True)
    assert '"cdi": true' in flipped and '"containerd-snapshotter": true' in flipped
    # absent leaves CDI alone: it serves every runtime.
    assert json.loads(edit(out, state="absent"))["features"]["cdi"] is True


def test_absent_resets_default_runtime_only_when_it_names_the_runtime():
    ours = '{\n  "runtimes": {"nvidia": {"path": "x"}},\n  "default-runtime": "nvidia"\n}\n'
    assert edit(ours, state="absent") == '{\n  "runtimes": {},\n  "default-runtime": "runc"\n}\n'
    other = '{\n  "runtimes": {"nvidia": {"path": "x"}},\n  "default-runtime": "crun"\n}\n'
    assert edit(other, state="absent") == '{\n  "runtimes": {},\n  "default-runtime": "crun"\n}\n'
    # Nothing to remove: no `runtimes` key is invented.
    assert edit('{\n  "debug": true\n}\n', state="absent") == '{\n  "debug": true\n}\n'


def test_remove_first_member_keeps_layout():
    original = '{\n  "runtimes": {\n    "nvidia": {"path": "x"},\n    "crun": {"path": "y"}\n  }\n}\n'
    assert edit(original, state="absent") == '{\n  "runtimes": {\n    "crun": {"path": "y"}\n  }\n}\n'


def test_bom_and_crlf_are_kept():
    original = u"\ufeff{\r\n  \"debug\": true\r\n}\r\n"
    out = edit(original)
    assert out.startswith(u"\ufeff{\r\n  \"debug\": true,\r\n  \"runtimes\": {\r\n")
    assert "\n" not in out.replace("\r\n", "")
    assert edit(out, state="absent") == u"\ufeff{\r\n  \"debug\": true,\r\n  \"runtimes\": {}\r\n}\r\n"


def test_unicode_and_escapes_untouched():
    original = '{\n  "labels": ["owner=J\\u00fcrgen", "site=Z\u00fcrich"],\n  "data-root": "/var/lib/d\\"x"\n}\n'
    out = edit(original)
    assert out.startswith(original[: original.rindex("\n}")])


# A trailing comma is named at the bracket as dockerd and Python up to 3.12 stop there (3.13's json stops at the
# comma): the same message on every node.
@pytest.mark.parametrize("text,where", [
    ('{\n  "log-driver": "json-file",\n  "debug": true,\n}\n',
     "a trailing comma (line 3 column 16) before the '}' at line 4 column 1"),
    ('{"hosts": ["fd://",\n  ]}', "a trailing comma (line 1 column 19) before the ']' at line 2 column 3"),
    ('{\n  "debug": true,,\n}', "Expecting property name enclosed in double quotes at line 2 column 17"),
    ('{\n  "log-driver": "json-file"\n  "debug": true\n}\n', "line 3 column 3"),
    ('{"a": 1', "line 1 column 8"),
])
def test_malformed_json_names_line_and_column(text, where):
    with pytest.raises(dj.DockerConfigError) as err:
        edit(text)
    assert "/etc/docker/daemon.json is not valid JSON" in str(err.value)
    assert where in str(err.value)


@pytest.mark.parametrize("text", ["null\n", " null", "\ufeffnull\r\n"])
def test_a_null_file_is_no_settings_as_for_dockerd(text):
    """dockerd 26.1 and 28.5 start with a daemon.json of `null` (no settings): it becomes the object."""
    written = edit(text)
    assert json.loads(written.lstrip("\ufeff")) == {"runtimes": {"nvidia": {"path": NCR}}}
    assert written.startswith("\ufeff") == text.startswith("\ufeff")
    assert edit(text, state="absent") == text


@pytest.mark.parametrize("text,expected", [
    ('["a"]\n', "JSON object at the top level, found an array"),
    ('{\n  "runtimes": ["nvidia"]\n}\n', "runtimes is an array; dockerd expects an object"),
    ('{\n  "runtimes": {"nvidia": "/usr/bin/x"}\n}\n', "runtimes.nvidia is a string"),
    ('{\n  "debug": true,\n  "debug": false\n}\n', None),
])
def test_structure_errors(text, expected):
    if expected is None:  # a duplicate key is only an error on the path being edited
        assert json.loads(edit(text))["runtimes"]
        text, expected = '{"runtimes": {},\n "runtimes": {}}', 'key "runtimes" appears more than once (again at'
    with pytest.raises(dj.DockerConfigError) as err:
        edit(text)
    assert expected in str(err.value)


def test_duplicate_error_points_at_second_key():
    with pytest.raises(dj.DockerConfigError) as err:
        edit('{"runtimes": {},\n "runtimes": {}}')
    assert "line 2 column 2" in str(err.value)


# --- the module, in-process ---------------------------------------------------

def run(capsys, check_mode=False, **args):
    args.setdefault("dockerd_binary", "dockerd-not-installed-here")
    args["_ansible_check_mode"] = check_mode
    args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            docker_runtime.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args", [dict(name=""), dict(binary=" ")])
def test_a_blank_name_or_binary_is_refused_before_the_file_is_read(capsys, daemon_json, args):
    before = daemon_json.read_text()
    result = run(capsys, path=str(daemon_json), **args)
    assert result["failed"] is True and "cannot name a runtime" in result["msg"]
    assert daemon_json.read_text() == before


def warnings(result):
    """Warning texts (ansible-core 2.19 returns them as structured summaries)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]


@pytest.fixture
def daemon_json(tmp_path):
    path = tmp_path / "etc" / "docker" / "daemon.json"
    path.parent.mkdir(parents=True)
    path.write_text(SEED)
    return path


@pytest.fixture
def runtime_binary(tmp_path):
    binary = tmp_path / "bin" / "nvidia-container-runtime"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexec runc \"$@\"\n")
    binary.chmod(0o755)
    return str(binary)


def test_module_present_idempotent_and_masked(capsys, daemon_json, runtime_binary, tmp_path):
    result = run(capsys, path=str(daemon_json), binary=runtime_binary, systemd_root=str(tmp_path))
    assert result["changed"] is True
    assert result["runtime"] == {"path": runtime_binary}
    assert result["validated"] is False and result["dockerd_version"] is None
    assert SECRET in daemon_json.read_text()
    assert SECRET not in json.dumps(result)
    assert '"password": "********"' in result["diff"]["before"]
    written = daemon_json.read_bytes()
    again = run(capsys, path=str(daemon_json), binary=runtime_binary, systemd_root=str(tmp_path))
    assert again["changed"] is False and daemon_json.read_bytes() == written


def test_module_masks_credential_in_inline_object(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"proxy-auth": {"password": "%s"}}\n' % SECRET)
    result = run(capsys, path=str(path), systemd_root=str(tmp_path))
    assert result["changed"] is True and SECRET not in json.dumps(result)


def test_module_check_mode_writes_nothing(capsys, daemon_json, tmp_path):
    result = run(capsys, check_mode=True, path=str(daemon_json), systemd_root=str(tmp_path))
    assert result["changed"] is True and '"runtimes"' in result["diff"]["after"]
    assert daemon_json.read_text() == SEED
    assert any("not on this node" in w for w in warnings(result))


def test_module_keeps_mode_and_owner_and_backs_up(capsys, daemon_json, tmp_path):
    os.chmod(str(daemon_json), 0o600)
    if os.geteuid() == 0:
        os.chown(str(daemon_json), 1234, 2345)
    result = run(capsys, path=str(daemon_json), backup=True, systemd_root=str(tmp_path))
    st = os.stat(str(daemon_json))
    assert stat.S_IMODE(st.st_mode) == 0o600
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1234, 2345)
    with open(result["backup_file"]) as handle:
        assert handle.read() == SEED
    leftovers = [n for n in os.listdir(str(daemon_json.parent)) if n.startswith(".")]
    assert leftovers == []


def test_module_creates_missing_file_and_absent_on_missing_does_nothing(capsys, tmp_path):
    path = tmp_path / "new" / "daemon.json"
    result = run(capsys, path=str(path), state="absent", systemd_root=str(tmp_path))
    assert result["changed"] is False and not path.exists()
    result = run(capsys, path=str(path), systemd_root=str(tmp_path))
    assert result["changed"] is True
    assert json.loads(path.read_text()) == {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644


def test_module_present_then_absent(capsys, daemon_json, runtime_binary, tmp_path):
    run(capsys, path=str(daemon_json), binary=runtime_binary, set_as_default=True, systemd_root=str(tmp_path))
    assert json.loads(daemon_json.read_text())["default-runtime"] == "nvidia"
    result = run(capsys, path=str(daemon_json), state="absent", systemd_root=str(tmp_path))
    assert result["changed"] is True and result["runtime"] is None and result["default_runtime"] == "runc"
    assert daemon_json.read_text() == SEED[: SEED.rindex("\n}")] + (
        ',\n  "runtimes": {},\n  "default-runtime": "runc"\n}\n')
    assert run(capsys, path=str(daemon_json), state="absent", systemd_root=str(tmp_path))["changed"] is False


def test_module_malformed_json_fails_and_leaves_file(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    broken = '{\n  "log-driver": "json-file",\n  "debug": true,\n}\n'
    path.write_text(broken)
    result = run(capsys, path=str(path), systemd_root=str(tmp_path))
    assert result["failed"] is True
    assert "%s is not valid JSON" % path in result["msg"] and "line 4 column 1" in result["msg"]
    assert path.read_text() == broken


def test_module_refuses_default_without_binary(capsys, daemon_json, tmp_path):
    result = run(capsys, path=str(daemon_json), binary="/nonexistent/nvidia-container-runtime",
                 set_as_default=True, systemd_root=str(tmp_path))
    assert result["failed"] is True and "every pod (not only GPU pods) would fail" in result["msg"]
    assert daemon_json.read_text() == SEED
    result = run(capsys, path=str(daemon_json), binary="/nonexistent/nvidia-container-runtime",
                 set_as_default=True, allow_missing_binary=True, systemd_root=str(tmp_path))
    assert result["changed"] is True and result["default_runtime"] == "nvidia"


def test_module_refuses_reserved_name(capsys, daemon_json, tmp_path):
    result = run(capsys, path=str(daemon_json), name="runc", systemd_root=str(tmp_path))
    assert result["failed"] is True and "reserved" in result["msg"]


# --- validation through a stand-in dockerd -----------------------------------

STAND_IN_DOCKERD = """#!/bin/sh
# Stand-in for dockerd: version, help and --validate only.
case "$1" in
  --version) echo "Docker version %(version)s, build 0000000" ;;
  --help) %(help)s ;;
  --validate)
    echo "$3" >> "%(log)s"
    if grep -q bogus "$3"; then
      echo "unable to configure the Docker daemon with file $3: the following directives don't match any configuration option: bogus-key" >&2
      exit 1
    fi
    echo "configuration OK" ;;
esac
"""


def stand_in_dockerd(tmp_path, version="26.1.5+dfsg1", has_validate=True):
    log = tmp_path / "validate.log"
    script = tmp_path / "dockerd-stand-in"
    help_text = 'echo "      --validate    Validate daemon configuration and exit"' if has_validate else "echo usage"
    script.write_text(STAND_IN_DOCKERD % {"version": version, "help": help_text, "log": log})
    script.chmod(0o755)
    return str(script), log


def test_validation_accepts(capsys, daemon_json, tmp_path):
    dockerd, log = stand_in_dockerd(tmp_path)
    result = run(capsys, path=str(daemon_json), dockerd_binary=dockerd, systemd_root=str(tmp_path))
    assert result["validated"] is True and result["validation_output"] == "configuration OK"
    assert result["dockerd_version"] == "26.1.5+dfsg1"
    original, candidate = log.read_text().split()
    assert original == str(daemon_json)  # the file as it is, first
    # Checked from a private directory, never beside the file: check mode writes nothing under /etc.
    assert os.path.dirname(candidate) != str(daemon_json.parent) and not os.path.exists(os.path.dirname(candidate))


def test_check_mode_validates_without_writing_beside_the_file(capsys, daemon_json, tmp_path):
    dockerd, log = stand_in_dockerd(tmp_path)
    result = run(capsys, check_mode=True, path=str(daemon_json), dockerd_binary=dockerd, systemd_root=str(tmp_path))
    assert result["changed"] is True and result["validated"] is True
    candidate = log.read_text().split()[-1]
    assert not candidate.startswith(str(daemon_json.parent)), candidate
    assert sorted(os.listdir(str(daemon_json.parent))) == ["daemon.json"]


def test_validation_rejects_and_file_untouched(capsys, tmp_path):
    dockerd, log = stand_in_dockerd(tmp_path)
    path = tmp_path / "daemon.json"
    original = '{\n  "debug": true\n}\n'
    path.write_text(original)
    result = run(capsys, path=str(path), dockerd_binary=dockerd, binary="/opt/bogus/nvidia-container-runtime",
                 systemd_root=str(tmp_path))
    assert result["failed"] is True and result["validated"] is False
    assert "dockerd rejected the new %s" % path in result["msg"]
    assert "with file %s:" % path in result["validation_output"]  # temp name shown as the real path
    assert path.read_text() == original
    assert sorted(os.listdir(str(tmp_path))) == ["daemon.json", "dockerd-stand-in", "validate.log"]


def test_original_already_rejected_is_reported_as_such(capsys, tmp_path):
    dockerd, log = stand_in_dockerd(tmp_path)
    path = tmp_path / "daemon.json"
    original = '{\n  "bogus-key": 1,\n  "proxy-password": "%s"\n}\n' % SECRET
    path.write_text(original)
    result = run(capsys, path=str(path), dockerd_binary=dockerd, systemd_root=str(tmp_path))
    assert result["failed"] is True and result["validated"] is False
    assert "already rejects %s as it is, before any edit, so nothing was written" % path in result["msg"]
    assert "bogus-key" in result["msg"] and "bogus-key" in result["validation_output"]
    assert log.read_text().split() == [str(path)]  # no candidate was even tried
    assert path.read_text() == original and SECRET not in json.dumps(result)


def test_no_validate_flag_means_not_validated(capsys, daemon_json, tmp_path):
    dockerd, log = stand_in_dockerd(tmp_path, version="20.10.24+dfsg1", has_validate=False)
    result = run(capsys, path=str(daemon_json), dockerd_binary=dockerd, systemd_root=str(tmp_path))
    assert result["changed"] is True and result["validated"] is False
    assert result["dockerd_version"] == "20.10.24+dfsg1" and "has no --validate" in result["validation_output"]
    assert not log.exists()


def test_explicit_missing_dockerd_is_an_error(capsys, daemon_json, tmp_path):
    result = run(capsys, path=str(daemon_json), dockerd_binary="/nonexistent/dockerd", systemd_root=str(tmp_path))
    assert result["failed"] is True and "/nonexistent/dockerd" in result["msg"]


# --- dockerd flags that clash with daemon.json ---------------------------------

DEBIAN_UNIT = textwrap.dedent("""\
    [Unit]
    Description=Docker Application Container Engine

    [Service]
    Type=notify
    EnvironmentFile=-/etc/default/docker
    ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS
    ExecReload=/bin/kill -s HUP $MAINPID
    """)


def fake_root(tmp_path, files):
    root = tmp_path / "root"
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(content))
    return str(root)


DROPIN = "etc/systemd/system/docker.service.d/"


def test_flags_from_dropin_after_reset(tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        DROPIN + "10-nvidia.conf": """\
            [Service]
            ExecStart=
            ExecStart=/usr/sbin/dockerd -H fd:// \\
                --add-runtime nvidia=/usr/bin/nvidia-container-runtime \\
                --default-runtime=nvidia
            """,
    })
    flags = dockerd_flags.dockerd_flags(root)
    source = "/" + DROPIN + "10-nvidia.conf"  # a path on the node
    assert [(f.flag, f.value, f.key, f.source) for f in flags] == [
        ("--add-runtime", "nvidia=/usr/bin/nvidia-container-runtime", "runtimes", source),
        ("--default-runtime", "nvidia", "default-runtime", source),
    ]


def test_later_reset_clears_earlier_flags(tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        DROPIN + "10-nvidia.conf": "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd --add-runtime=nvidia=/x\n",
        DROPIN + "20-plain.conf": "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd://\n",
    })
    assert dockerd_flags.dockerd_flags(root) == []


def test_docker_opts_from_environment_file(tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        "etc/default/docker": 'DOCKER_OPTS="--add-runtime nvidia=/usr/bin/nvidia-container-runtime"\n',
    })
    flags = dockerd_flags.dockerd_flags(root)
    assert [(f.flag, f.source) for f in flags] == [("--add-runtime", "/etc/default/docker")]


def test_docker_opts_ignored_when_unit_does_not_reference_it(tmp_path):
    root = fake_root(tmp_path, {
        "usr/lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/bin/dockerd -H fd://\n",
        "etc/default/docker": 'DOCKER_OPTS="--default-runtime nvidia"\n',
    })
    assert dockerd_flags.dockerd_flags(root) == []


def test_sysv_host_reads_sysconfig(tmp_path):
    root = fake_root(tmp_path, {"etc/sysconfig/docker": "DOCKER_OPTS='--default-runtime=nvidia'\n"})
    flags = dockerd_flags.dockerd_flags(root)
    assert [(f.flag, f.value) for f in flags] == [("--default-runtime", "nvidia")]


def test_etc_unit_wins_over_lib_unit(tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd --add-runtime a=/a\n",
        "etc/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd -H fd://\n",
    })
    assert dockerd_flags.dockerd_flags(root) == []


def test_flags_in_other_sections_or_comments_are_ignored(tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        DROPIN + "override.conf": "# ExecStart=/usr/sbin/dockerd --add-runtime x=/x\n[Unit]\nExecStart=--add-runtime\n",
    })
    assert dockerd_flags.dockerd_flags(root) == []


def test_module_fails_on_conflict_naming_the_dropin(capsys, daemon_json, tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        DROPIN + "nvidia.conf": "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd:// --add-runtime nvidia=/usr/bin/ncr\n",
    })
    result = run(capsys, path=str(daemon_json), systemd_root=root)
    assert result["failed"] is True
    assert "(passed by /%snvidia.conf)" % DROPIN in result["msg"]
    assert "--add-runtime nvidia=/usr/bin/ncr" in result["msg"] and "ignores the flag" in result["msg"]
    assert daemon_json.read_text() == SEED
    # Removing the runtime from daemon.json cannot clash with the flag.
    assert run(capsys, path=str(daemon_json), state="absent", systemd_root=root)["changed"] is False


def test_add_runtime_for_another_name_does_not_clash(capsys, daemon_json, tmp_path):
    # dockerd merges --add-runtime with daemon.json's runtimes when the names differ.
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd --add-runtime=crun=/usr/bin/crun\n",
    })
    assert run(capsys, path=str(daemon_json), systemd_root=root)["changed"] is True


def test_feature_flag_clashes_with_cdi(capsys, daemon_json, tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd --feature cdi=true\n",
    })
    result = run(capsys, path=str(daemon_json), cdi=True, systemd_root=root)
    assert result["failed"] is True and "refuses to start when features is also set" in result["msg"]
    assert run(capsys, path=str(daemon_json), systemd_root=root)["changed"] is True


def test_default_runtime_flag_only_clashes_with_set_as_default(capsys, daemon_json, runtime_binary, tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": DEBIAN_UNIT,
        "etc/default/docker": "DOCKER_OPTS='--default-runtime runc'\n",
    })
    result = run(capsys, path=str(daemon_json), binary=runtime_binary, set_as_default=True, systemd_root=root)
    assert result["failed"] is True and "(passed by /etc/default/docker)" in result["msg"]
    assert daemon_json.read_text() == SEED
    result = run(capsys, path=str(daemon_json), binary=runtime_binary, systemd_root=root)
    assert result["changed"] is True


def test_absent_refused_when_flag_makes_it_the_default(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    original = '{"runtimes": {"nvidia": {"path": "/usr/bin/ncr"}}}\n'
    path.write_text(original)
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd --default-runtime=nvidia\n",
    })
    result = run(capsys, path=str(path), state="absent", systemd_root=root)
    assert result["failed"] is True and "default runtime undefined" in result["msg"]
    assert path.read_text() == original


def test_other_config_file_flag_warns(capsys, daemon_json, tmp_path):
    root = fake_root(tmp_path, {
        "lib/systemd/system/docker.service": "[Service]\nExecStart=/usr/sbin/dockerd --config-file /srv/docker.json\n",
    })
    result = run(capsys, path=str(daemon_json), systemd_root=root)
    assert any("--config-file /srv/docker.json" in w for w in warnings(result))


def test_documentation_matches_argument_spec():
    import yaml
    from ansible_collections.gpunode.nvidia.plugins.doc_fragments.node_lock import ModuleDocFragment
    doc = yaml.safe_load(docker_runtime.DOCUMENTATION)
    assert "gpunode.nvidia.node_lock" in doc["extends_documentation_fragment"]
    doc["options"].update(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    assert set(doc["options"]) == set(docker_runtime.ARGUMENT_SPEC)
    for name, spec in docker_runtime.ARGUMENT_SPEC.items():
        assert doc["options"][name].get("default") == spec.get("default"), name
        assert doc["options"][name]["type"] == spec["type"], name
    yaml.safe_load(docker_runtime.EXAMPLES)
    yaml.safe_load(docker_runtime.RETURN)


@pytest.mark.parametrize("depth", [65, 100000])
def test_deep_nesting_refused_with_position_not_recursion(depth):
    text = '{\n  "a": ' + '{"b": [' * depth + "1" + "]}" * depth + "\n}\n"
    with pytest.raises(dj.DockerConfigError) as err:
        edit(text)
    assert "more than %d levels deep at line 2 column" % dj.MAX_NESTING in str(err.value)


def test_nesting_within_the_limit_is_edited():
    nested = '{"b": [' * 31 + "1" + "]}" * 31
    text = '{\n  "a": %s\n}\n' % nested
    assert json.loads(edit(text))["a"] == json.loads(nested)


@pytest.mark.parametrize("number, column", [("NaN", 21), ("-Infinity", 22), ("Infinity", 21)])
def test_numbers_go_refuses_are_refused_where_they_are(number, column):
    """Python's json reads NaN and Infinity; dockerd's Go decoder refuses them and does not start."""
    text = '{\n  "max-concurrent": %s,\n  "labels": ["NaN", "Infinity"]\n}\n' % number
    with pytest.raises(dj.DockerConfigError, match=r"%s at line 2 column %d is not a JSON number"
                       % (number.lstrip("-"), column)):
        edit(text)


# What dockerd 26.1 and 28.5 say of each (`dockerd --validate`; tests/integration/test_docker_runtime_live.py asks
# them again): a value of another JSON type at a key dockerd decodes stops it; `null` is "not set".
WRONG_TYPES = [
    ('"hosts": 5', "hosts is a number; dockerd expects a list of strings"),
    ('"hosts": "unix:///run/docker.sock"', "hosts is a string; dockerd expects a list of strings"),
    ('"hosts": [null, 1]', "hosts[1] is a number; dockerd expects a string"),
    ('"exec-opts": "native.cgroupdriver=systemd"', "exec-opts is a string; dockerd expects a list of strings"),
    ('"default-runtime": 5', "default-runtime is a number; dockerd expects a string"),
    ('"containerd": 5', "containerd is a number; dockerd expects a string"),
    ('"data-root": 5', "data-root is a number; dockerd expects a string"),
    ('"runtimes": [1]', "runtimes is an array; dockerd expects an object"),
    ('"runtimes": {"crun": "x"}', "runtimes.crun is a string; dockerd expects an object"),
    ('"runtimes": {"crun": {"path": 5}}', "runtimes.crun.path is a number; dockerd expects a string"),
    ('"runtimes": {"crun": {"path": "/x", "runtimeArgs": "a"}}',
     "runtimes.crun.runtimeArgs is a string; dockerd expects a list of strings"),
    ('"runtimes": {"crun": {"path": "/x", "options": 1}}', "runtimes.crun.options is a number; dockerd expects an object"),
    ('"features": {"cdi": "yes"}', "features.cdi is a string; dockerd expects true or false"),
    ('"features": [true]', "features is an array; dockerd expects an object of booleans"),
]
NULLS_GO_READS = ['"hosts": [null]', '"runtimes": {"crun": null}', '"runtimes": null', '"default-runtime": null',
                  '"features": {"cdi": null}', '"runtimes": {"crun": {"path": "/x", "runtimeArgs": [null]}}']


@pytest.mark.parametrize("member, reason", WRONG_TYPES)
def test_a_value_dockerd_cannot_decode_is_refused_with_its_line(member, reason):
    text = '{\n  "log-driver": "json-file",\n  %s\n}\n' % member
    with pytest.raises(dj.DockerConfigError) as err:
        edit(text)
    assert err.value.line == 3 and err.value.reason == reason
    assert "/etc/docker/daemon.json line 3: " in str(err.value) and "left untouched" in str(err.value)


@pytest.mark.parametrize("member", NULLS_GO_READS)
def test_null_is_not_set_to_dockerd_and_is_edited(member):
    text = '{\n  "log-driver": "json-file",\n  %s\n}\n' % member
    assert json.loads(edit(text))["runtimes"]["nvidia"]["path"]


def test_nan_inside_a_string_is_a_string():
    text = '{\n  "labels": ["NaN", "Infinity", "\\"NaN"]\n}\n'
    assert json.loads(edit(text))["labels"] == ["NaN", "Infinity", '"NaN']


def test_unexpected_error_is_a_clean_failure(capsys, daemon_json, tmp_path, monkeypatch):
    def broken(*_args, **_kwargs):
        raise AttributeError("'NoneType' object has no attribute 'x'")

    monkeypatch.setattr(dc, "edit_daemon_json", broken)
    result = run(capsys, path=str(daemon_json), systemd_root=str(tmp_path))
    assert result["failed"] is True and "Traceback" not in json.dumps(result)
    assert "daemon.json: unexpected AttributeError at test_docker_runtime.py:" in result["msg"]  # where raised
    assert str(daemon_json) in result["msg"] and "bug" in result["msg"]
    assert daemon_json.read_text() == SEED


# --- the node lock, taken in the module's own call ----------------------------

def lock_holder(lock):
    return json.loads(lock.read_text())["owner"] if lock.exists() else None


def test_lock_kept_only_after_a_write(capsys, daemon_json, runtime_binary, tmp_path):
    lock = tmp_path / "lock"
    args = dict(path=str(daemon_json), binary=runtime_binary, systemd_root=str(tmp_path),
                lock={"path": str(lock), "owner": "run-1"})
    checked = run(capsys, check_mode=True, **args)
    assert checked["changed"] and checked["lock_held"] is False and lock_holder(lock) is None
    written = run(capsys, **args)
    assert written["changed"] and written["lock_held"] is True and lock_holder(lock) == "run-1"
    lock.unlink()  # given back after the restart, as the role does
    again = run(capsys, **args)
    assert not again["changed"] and again["lock_held"] is False and lock_holder(lock) is None


def test_refused_edit_gives_the_lock_back(capsys, daemon_json, tmp_path):
    lock = tmp_path / "lock"
    result = run(capsys, path=str(daemon_json), binary="/nonexistent/nvidia-container-runtime", set_as_default=True,
                 systemd_root=str(tmp_path), lock={"path": str(lock), "owner": "run-1"})
    assert result["failed"] and "refusing to make 'nvidia' the default runtime" in result["msg"] and lock_holder(lock) is None


@pytest.mark.parametrize("text,expected", [
    ('{"runtimes": null, "debug": true}\n', '{"runtimes": {"nvidia": {"path": "%s"}}, "debug": true}\n' % NCR),
    ('{\n  "runtimes": null,\n  "debug": true\n}\n',
     '{\n  "runtimes": {\n    "nvidia": {\n      "path": "%s"\n    }\n  },\n  "debug": true\n}\n' % NCR),
    ('{\n    "runtimes": {\n        "nvidia": null\n    }\n}\n',
     '{\n    "runtimes": {\n        "nvidia": {\n            "path": "%s"\n        }\n    }\n}\n' % NCR),
])
def test_null_is_read_as_absent_as_dockerd_does(text, expected):
    assert edit(text) == expected
    assert edit(expected) == expected


def test_absent_removes_a_null_runtime():
    """dockerd 28.5 does not start with `"nvidia": null` ("runtime nvidia: either a runtimeType or a path must be
    configured"), though `dockerd --validate` passes it: absent removes it (tests/integration/test_docker_runtime_live.py
    starts dockerd on the result)."""
    text = '{\n    "runtimes": {\n        "nvidia": null\n    },\n    "debug": true\n}\n'
    assert edit(text, state="absent") == '{\n    "runtimes": {},\n    "debug": true\n}\n'
    assert edit('{"runtimes": null, "debug": true}\n', state="absent") == '{"runtimes": null, "debug": true}\n'
