"""A sentinel secret, put into every corpus file under every credential key style, never comes out.

Every config-editing path runs in-process: docker_runtime and crio_runtime (the modules),
containerd_runtime (the action plugin, with its node module played by a stand-in that serves the
file and uses the file itself as a STAND-IN for `containerd config dump`). For each: success,
check mode with diff, and every failure that can be triggered (malformed input, guard failure,
validation failure, flag conflict, a node module failing, an unexpected exception). The sentinel
must not appear in any result, diff, warning, message, exception or captured output/log line.
"""
import glob
import hashlib
import importlib
import json
import logging
import os
import tomllib
from types import SimpleNamespace

import pytest
import tomlkit
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import crio_config

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import daemon_json as dj
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import docker_config

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.modules import crio_runtime, docker_runtime
from unit_paths import UNIT_DIR

S = "S3NTINEL-7d1e5a"
CORPUS = os.path.join(UNIT_DIR, "corpus")


def corpus(*patterns):
    files = sorted(f for p in patterns for f in glob.glob(os.path.join(CORPUS, p)))
    assert files, patterns
    return files


# --- the sentinel under every credential key style -----------------------------

JSON_MEMBERS = [
    '"password": "%s"' % S,
    '"\\u0070assword": "%s"' % S,                       # key written with a JSON escape
    '"Auth": {"username": "u", "secret": "%s"}' % S,    # object value, mixed case
    '"IdentityToken": [\n    "%s",\n    "%s"\n  ]' % (S, S),  # array spanning lines
    '"proxies": {"http-proxy": "http://user:%s@proxy.example:3128"}' % S,  # URL password
    '"registry_token":\n    "%s"' % S,                  # value on the next line
]


def with_json_secrets(text):
    """The document with one member per credential style, first in its top-level object."""
    brace = text.index("{")
    newline = "\r\n" if "\r\n" in text else "\n"
    one_line = "\n" not in text.strip()
    members = [m.replace("\n", "") if one_line else m.replace("\n", newline) for m in JSON_MEMBERS]
    lead = "" if one_line else newline + "  "
    return text[:brace + 1] + "".join(lead + m + "," for m in members) + text[brace + 1:]


TOML_TABLES = '''
# password = "{s}"
[plugins."io.containerd.grpc.v1.cri".registry.configs."sentinel.example".auth]
  username = "user"
  password = "{s}"
  identitytoken = """
{s}
"""
[sentinel.second]
  auth = {{ password = "{s}", token = '{s}' }}
  "pass\\u0077ord" = '{s}'
  Token = [
    "{s}",
    '{s}',
  ]
  API_KEY = \'\'\'{s}\'\'\'
  nested.client_secret = "{s}"
  mirror = "https://user:{s}@mirror.example"
'''.format(s=S)


def with_toml_secrets(text):
    return text + ("" if text.endswith("\n") else "\n") + TOML_TABLES


def read(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def write(path, text):
    with open(str(path), "w", encoding="utf-8", newline="") as handle:
        handle.write(text)


# --- what came out --------------------------------------------------------------

class Outputs:
    """Everything a path produced, searched for the sentinel at the end of each test."""

    def __init__(self):
        self.items = []

    def add(self, what, value):
        self.items.append((what, value if isinstance(value, str) else json.dumps(value, default=str)))

    def assert_clean(self, capsys, caplog, logged):
        captured = capsys.readouterr()
        self.add("stdout", captured.out)
        self.add("stderr", captured.err)
        self.add("log records", caplog.text)
        self.add("module log", logged)
        leaks = [what for what, text in self.items if S in text]
        assert not leaks, "sentinel leaked in: %s" % leaks


@pytest.fixture
def outputs(capsys, caplog, monkeypatch):
    logged = []
    monkeypatch.setattr(AnsibleModule, "log", lambda self, msg, log_args=None: logged.append(msg))
    caplog.set_level(logging.DEBUG)
    out = Outputs()
    yield out
    out.assert_clean(capsys, caplog, logged)


def run_module(module, capsys, outputs, args, check_mode=False):
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    result = json.loads(capsys.readouterr().out)
    outputs.add("result", result)
    return result


# --- docker_runtime ---------------------------------------------------------------

STAND_IN_DOCKERD = """#!/bin/sh
# STAND-IN for dockerd: --version, --help, and a --validate that quotes the whole file when it
# rejects it (the worst a real daemon could print).
case "$1" in
  --version) echo "Docker version 28.5.2, build 0000000" ;;
  --help) echo "      --validate    Validate daemon configuration and exit" ;;
  --validate)
    if [ "%(reject)s" = original ] || { [ "%(reject)s" = candidate ] && [ "$3" != "%(path)s" ]; }; then
      echo "unable to configure the Docker daemon with file $3:" >&2; cat "$3" >&2; exit 1
    fi
    echo "configuration OK" ;;
esac
"""


def stand_in_dockerd(tmp_path, path, reject):
    script = tmp_path / ("dockerd-" + reject)
    script.write_text(STAND_IN_DOCKERD % {"reject": reject, "path": path})
    script.chmod(0o755)
    return str(script)


DOCKER_FILES = corpus("docker/*.json")


@pytest.fixture(params=DOCKER_FILES, ids=os.path.basename)
def daemon_json(request, tmp_path):
    path = tmp_path / "daemon.json"
    write(path, with_json_secrets(read(request.param)))
    assert S in read(path) and dj.parse_daemon_json(read(path), str(path))
    return path


def docker_args(path, tmp_path, **extra):
    args = dict(path=str(path), systemd_root=str(tmp_path), dockerd_binary="dockerd-not-here",
                allow_missing_binary=True)
    args.update(extra)
    return args


def test_docker_success_check_mode_absent(capsys, outputs, daemon_json, tmp_path):
    args = docker_args(daemon_json, tmp_path, set_as_default=True, cdi=True, runtime_args=["--x"])
    checked = run_module(docker_runtime, capsys, outputs, args, check_mode=True)
    assert checked["changed"] is True and "runtimes" in checked["diff"]["after"]
    done = run_module(docker_runtime, capsys, outputs, args)
    assert done["changed"] is True and S in read(daemon_json)
    removed = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path, state="absent"))
    assert removed["changed"] is True


@pytest.mark.parametrize("reject", ["original", "candidate"])
def test_docker_validation_failures(capsys, outputs, daemon_json, tmp_path, reject):
    before = read(daemon_json)
    dockerd = stand_in_dockerd(tmp_path, str(daemon_json), reject)
    args = docker_args(daemon_json, tmp_path, dockerd_binary=dockerd, binary="/opt/sentinel/runtime")
    result = run_module(docker_runtime, capsys, outputs, args)
    assert result["failed"] is True and read(daemon_json) == before
    assert ("already rejects" if reject == "original" else "rejected the new") in result["msg"]


def test_docker_flag_conflict(capsys, outputs, daemon_json, tmp_path):
    unit = tmp_path / "etc" / "systemd" / "system" / "docker.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/dockerd --default-runtime runc\n")
    result = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path, set_as_default=True))
    assert result["failed"] is True and "--default-runtime" in result["msg"]


@pytest.mark.parametrize("breakage", [
    lambda text: text.rstrip().rstrip("}") + ",}",            # trailing comma: not JSON
    lambda text: "[" * 100 + text + "]" * 100,                # nested too deep
    lambda text: text.replace('"password": ', '"runtimes": ', 1),  # runtimes is a string
    lambda text: text.replace('"password": ', '"runtimes": {}, "runtimes": ', 1),  # duplicate key
])
def test_docker_malformed(capsys, outputs, daemon_json, tmp_path, breakage):
    broken = breakage(read(daemon_json))
    write(daemon_json, broken)
    result = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path))
    assert result["failed"] is True and read(daemon_json) == broken


def test_docker_not_utf8(capsys, outputs, daemon_json, tmp_path):
    daemon_json.write_bytes(read(daemon_json).encode("utf-8") + b'\xff"password": "' + S.encode() + b'"')
    result = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path))
    assert result["failed"] is True and "not UTF-8" in result["msg"]


def test_docker_unexpected_exception(capsys, outputs, daemon_json, tmp_path, monkeypatch):
    def broken(text, *args, **kwargs):
        raise KeyError(text)  # the exception's text quotes the file

    monkeypatch.setattr(docker_config, "edit_daemon_json", broken)
    before = read(daemon_json)
    result = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path))
    assert result["failed"] is True and "bug" in result["msg"] and str(daemon_json) in result["msg"]
    assert read(daemon_json) == before


def test_docker_file_changed_meanwhile(capsys, outputs, daemon_json, tmp_path, monkeypatch):
    # The module's own read sees the file; the re-read before the rename (filewrite's) sees another writer's.
    monkeypatch.setattr(filewrite, "read_bytes", lambda path: b'{"password": "%s"}' % S.encode())
    result = run_module(docker_runtime, capsys, outputs, docker_args(daemon_json, tmp_path, binary="/opt/s/rt"))
    assert result["failed"] is True and "changed while" in result["msg"]


# --- crio_runtime ----------------------------------------------------------------

CRIO_FILES = corpus("crio/*")


@pytest.fixture(params=CRIO_FILES, ids=os.path.basename)
def crio_dir(request, tmp_path):
    """A drop-in directory: the corpus file (with secrets) before ours, at ours, and after ours."""
    directory = tmp_path / "crio.conf.d"
    directory.mkdir()
    text = with_toml_secrets(read(request.param))
    assert S in text
    write(directory / "10-corpus.toml", text)
    write(directory / "99-nvidia.toml", text)  # a foreign file where ours goes
    write(directory / "99-z-later.toml", text + '\n[crio.runtime.runtimes.nvidia]\nruntime_path = "/x"\n'
          '[crio.runtime.runtimes.sentinel]\nruntime_path = "/y"\n')
    write(tmp_path / "crio.conf", text.replace("[crio.runtime]", "[crio.runtime]\ndefault_runtime = \"nvidia\"", 1))
    return directory


def crio_args(crio_dir, **extra):
    args = dict(path=str(crio_dir / "99-nvidia.toml"), main_config=str(crio_dir.parent / "crio.conf"),
                allow_missing_binary=True, binary="/nonexistent/nvidia-container-runtime")
    args.update(extra)
    return args


def test_crio_success_check_mode_absent(capsys, outputs, crio_dir):
    checked = run_module(crio_runtime, capsys, outputs, crio_args(crio_dir, set_as_default=True), check_mode=True)
    assert checked["changed"] is True and checked["replaced_foreign_file"] is True
    assert checked["overrides"] and "********" in checked["diff"]["before"]
    done = run_module(crio_runtime, capsys, outputs, crio_args(crio_dir, set_as_default=True))
    assert done["changed"] is True and done["backup_file"]
    os.unlink(str(crio_dir / "99-z-later.toml"))
    removed = run_module(crio_runtime, capsys, outputs, crio_args(crio_dir, state="absent"))
    assert removed["changed"] is True


def test_crio_refusal_and_absent_of_foreign_file(capsys, outputs, crio_dir):
    args = crio_args(crio_dir, set_as_default=True, allow_missing_binary=False)
    refused = run_module(crio_runtime, capsys, outputs, args)
    assert refused["failed"] is True
    removed = run_module(crio_runtime, capsys, outputs, crio_args(crio_dir, state="absent"), check_mode=True)
    assert removed["changed"] is True and "********" in removed["diff"]["before"]


def test_crio_unexpected_exception(capsys, outputs, crio_dir, monkeypatch):
    def broken(path, *args):
        raise ValueError(read(path))

    monkeypatch.setattr(crio_config, "find_overrides", broken)
    before = read(crio_dir / "99-nvidia.toml")
    result = run_module(crio_runtime, capsys, outputs, crio_args(crio_dir))
    assert result["failed"] is True and "bug" in result["msg"]
    assert read(crio_dir / "99-nvidia.toml") == before


# --- containerd_runtime (the action plugin) ---------------------------------------

@pytest.fixture(scope="module")
def action():
    """The action plugin module (tests/unit/conftest.py puts every test back on the module side after
    controller code is imported)."""
    return importlib.import_module("ansible_collections.gpunode.nvidia.plugins.action.containerd_runtime")


def stand_in_dump(text, lose_credentials=False):
    """STAND-IN for `containerd config dump`: the file's own content (rc, stdout, stderr).

    A file that does not parse is refused with an error quoting it, as a careless daemon might.
    lose_credentials plays containerd 1.x replacing a table from an import: the registry tables go.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return 1, "", "failed to load TOML: " + text
    if lose_credentials:
        data.pop("sentinel", None)
        for plugin in data.get("plugins", {}).values():
            if isinstance(plugin, dict):
                plugin.pop("registry", None)
    return 0, tomlkit.dumps(data), ""


class StandInNode:
    """The node half: gpu_node_facts (nothing found) and config_file (read/check/write a real file)."""

    def __init__(self, path, lose_credentials=False, fail_op=None, quote_on_check=False):
        self.path, self.lose, self.fail_op, self.quote_on_check = path, lose_credentials, fail_op, quote_on_check

    def __call__(self, module_name, module_args, task_vars=None, **_kwargs):
        if module_name.endswith("gpu_node_facts"):
            return {"ansible_facts": {"gpu_node": {"target": None, "runtimes": [], "target_reason": "none"}}}
        op = module_args["op"]
        if op == self.fail_op:
            return {"failed": True, "msg": "config_file could not %s %s: %s" % (op, self.path, read(self.path))}
        if op == "read":
            content = read(self.path) if os.path.exists(self.path) else ""
            rc, out, err = stand_in_dump(content)
            return {"content": content, "exists": os.path.exists(self.path),
                    "sha256": hashlib.sha256(content.encode()).hexdigest(), "binary_path": "/usr/bin/containerd",
                    "binary_version": "1.7.24", "command_rc": rc, "command_stdout": out, "command_stderr": err,
                    "paths": {}}
        if op == "check":
            rc, out, err = stand_in_dump(module_args["content"], self.lose)
            if self.quote_on_check:
                rc, out, err = 1, "", "invalid plugin config: " + module_args["content"]
            return {"command_rc": rc, "command_stdout": out, "command_stderr": err}
        write(self.path, module_args["content"])
        return {"changed": True, "backup_file": None}


def run_action(action, monkeypatch, outputs, node, check_mode=False, **args):
    from ansible.errors import AnsibleActionFail
    from ansible.plugins.action import ActionBase

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = SimpleNamespace(args=dict(args, path=node.path), check_mode=check_mode, async_val=0)
    plugin._execute_module = node
    try:
        result = plugin.run(task_vars={})
    except AnsibleActionFail as exc:
        outputs.add("exception", str(exc))
        outputs.add("exception result", exc.result)
        return {"failed": True, "msg": str(exc)}
    outputs.add("result", result)
    return result


CONTAINERD_FILES = corpus("containerd/*.toml", "containerd-real/*.toml", "containerd-bad/*.toml")


@pytest.fixture(params=CONTAINERD_FILES, ids=lambda f: "/".join(f.split(os.sep)[-2:]))
def config_toml(request, tmp_path):
    path = tmp_path / "config.toml"
    write(path, with_toml_secrets(read(request.param)))
    return str(path)


def test_containerd_success_and_check_mode(action, monkeypatch, outputs, config_toml):
    node = StandInNode(config_toml)
    checked = run_action(action, monkeypatch, outputs, node, check_mode=True, set_as_default=True, cdi=True,
                         allow_missing_binary=True)
    done = run_action(action, monkeypatch, outputs, node, set_as_default=True, allow_missing_binary=True)
    if not checked.get("failed"):
        assert checked["changed"] is True and "diff" in checked
        run_action(action, monkeypatch, outputs, node, state="absent")


@pytest.mark.parametrize("failure", ["guard", "candidate rejected", "read fails", "write fails", "no binary"])
def test_containerd_failures(action, monkeypatch, outputs, config_toml, failure):
    node = StandInNode(config_toml, lose_credentials=failure == "guard", quote_on_check=failure == "candidate rejected",
                       fail_op={"read fails": "read", "write fails": "write"}.get(failure))
    before = read(config_toml)
    result = run_action(action, monkeypatch, outputs, node, set_as_default=True,
                        allow_missing_binary=failure != "no binary")
    assert result.get("failed") is True
    assert read(config_toml) == before


def test_containerd_unloadable_current_file(action, monkeypatch, outputs, tmp_path):
    path = tmp_path / "config.toml"
    write(path, 'version = 2\npassword = "%s"\n[[[\n' % S)
    result = run_action(action, monkeypatch, outputs, StandInNode(str(path)))
    assert result["failed"] is True


def test_containerd_unexpected_exception(action, monkeypatch, outputs, config_toml):
    def broken(self, args, task_vars):
        raise KeyError(read(config_toml))

    # The first step of every run: files are parsed later, so even a malformed corpus file gets here.
    monkeypatch.setattr(action.ActionModule, "_resolve_target", broken)
    result = run_action(action, monkeypatch, outputs, StandInNode(config_toml))
    assert result["failed"] is True and "bug" in result["msg"]
