"""gpunode.nvidia.containerd_config_file (node side): no traceback ever reaches the user."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.modules import containerd_config_file as config_file


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            config_file.main()
    return json.loads(capsys.readouterr().out)


def test_unexpected_exception_is_a_failure_naming_the_file(capsys, tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text('password = "s3cr3t"\n')

    def broken(_path):
        raise ValueError('password = "s3cr3t"')
    monkeypatch.setattr(config_file, "read_bytes", broken)
    result = run(capsys, path=str(path), op="read")
    assert result["failed"]
    assert result["msg"].startswith("%s: unexpected ValueError" % path)
    assert "bug" in result["msg"] and "s3cr3t" not in result["msg"]
    assert path.read_text() == 'password = "s3cr3t"\n'


def lock_holder(lock):
    return json.loads(lock.read_text())["owner"] if lock.exists() else None


def test_read_under_the_lock_gives_it_back_in_the_same_call(capsys, tmp_path):
    path, lock = tmp_path / "config.toml", tmp_path / "lock"
    path.write_text("version = 2\n")
    result = run(capsys, path=str(path), op="read", lock={"path": str(lock), "owner": "run-1"})
    assert result["content"] == "version = 2\n" and result["lock_held"] is False
    assert lock_holder(lock) is None


def test_read_that_keeps_the_lock(capsys, tmp_path):
    path, lock = tmp_path / "config.toml", tmp_path / "lock"
    result = run(capsys, path=str(path), op="read", lock={"path": str(lock), "owner": "run-1"}, keep_lock=True)
    assert result["exists"] is False and result["lock_held"] is True
    assert lock_holder(lock) == "run-1"


def test_failing_call_gives_the_lock_back_even_when_asked_to_keep_it(capsys, tmp_path):
    lock = tmp_path / "lock"
    result = run(capsys, path=str(tmp_path), op="read", lock={"path": str(lock), "owner": "run-1"}, keep_lock=True)
    assert result["failed"] and "is a directory" in result["msg"]
    assert lock_holder(lock) is None


def test_lock_held_by_another_run_fails_naming_it(capsys, tmp_path):
    path, lock = tmp_path / "config.toml", tmp_path / "lock"
    lock.write_text(json.dumps({"owner": "other-operator", "since": time.time()}))
    result = run(capsys, path=str(path), op="read", lock={"path": str(lock), "owner": "run-1", "timeout": 0})
    assert result["failed"] and "held by other-operator" in result["msg"]
    assert lock_holder(lock) == "other-operator"


@pytest.mark.parametrize("path_exists", [True, False])
def test_a_candidate_is_checked_from_a_private_directory_never_beside_the_file(capsys, tmp_path, path_exists):
    """Check mode writes nothing under /etc: the command sees the candidate elsewhere, named as the real file."""
    path = tmp_path / "config.toml"
    if path_exists:
        path.write_text("version = 2\n")
    command = ["/bin/sh", "-c", "ls -A %s; echo checked %%s; cat %%s" % tmp_path]
    op = dict(op="check", content="version = 3\n") if path_exists else dict(op="read")
    result = run(capsys, path=str(path), command=command, **op)
    listing, checked = result["command_stdout"].split("checked ")
    assert listing.split() == (["config.toml"] if path_exists else [])
    assert checked.startswith("%s\n" % path)


@pytest.mark.parametrize("op", [dict(op="read"), dict(op="check", content="version = 3\n")])
def test_a_command_that_fails_fails_the_task_naming_it(capsys, tmp_path, op):
    path = tmp_path / "config.toml"
    path.write_text('version = 2\npassword = "s3cr3t-value"\n')
    op = dict(op, content='version = 3\npassword = "s3cr3t-value"\n') if op["op"] == "check" else op
    command = ["/bin/sh", "-c", "echo failed to load %s: >&2; cat %s >&2; exit 3"]
    result = run(capsys, path=str(path), command=command, **op)
    assert result["failed"] and result["command_rc"] == 3
    assert result["msg"].startswith("%s: /bin/sh exited with status 3 on it: failed to load %s" % (path, path))
    assert 'password = "********"' in result["msg"] and "Nothing was changed" in result["msg"]
    # The module's own arguments (a check's content among them), which ansible-core before 2.21 returns as
    # `invocation` (2.21 only with INJECT_INVOCATION).
    result.pop("invocation", None)
    assert "s3cr3t-value" not in json.dumps(result)
    assert path.read_text() == 'version = 2\npassword = "s3cr3t-value"\n'


def test_a_caller_that_judges_the_command_gets_its_status(capsys, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("version = 2\n")
    result = run(capsys, path=str(path), command=["/bin/sh", "-c", "exit 3"], command_failure="report")
    assert not result.get("failed") and result["command_rc"] == 3
