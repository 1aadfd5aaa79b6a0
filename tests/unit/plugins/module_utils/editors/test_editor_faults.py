"""Faults a real node throws at the three editors' node side (config_file, docker_runtime, crio_runtime).

Symbolic links followed to their target, every filesystem error named with its cause and fix and the
file left as it was, a killed run's temp files cleared, and concurrent writers of one file never
losing an update (a multi-process race: the edit lock, without the node lock).
The modules run in-process; errors the test machine cannot produce on demand (ENOSPC, EROFS, EPERM)
are raised by a patched os.rename here, and produced for real in tests/integration/test_editor_faults_live.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import io
import json
import multiprocessing
import os
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.modules import containerd_config_file, crio_runtime, docker_runtime

DAEMON_JSON = '{\n  "log-driver": "json-file"\n}\n'
CONTAINERD_TOML = 'version = 2\n# the operator\'s comment\n[plugins]\n'
MODULES = {"containerd_config_file": containerd_config_file, "docker_runtime": docker_runtime, "crio_runtime": crio_runtime}
RACE_TRIALS = 25
RACERS = 4


def run(capsys, module, check_mode=False, **args):
    args["_ansible_check_mode"] = check_mode
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            MODULES[module].main()
    return json.loads(capsys.readouterr().out)


def edit_args(module, path, binary):
    """Arguments for a write of path by each editor."""
    if module == "docker_runtime":
        return dict(path=str(path), binary=binary, dockerd_binary="dockerd-not-installed-here")
    if module == "crio_runtime":
        return dict(path=str(path), binary=binary, main_config="/nonexistent/crio.conf")
    return dict(path=str(path), op="write", content=CONTAINERD_TOML + "# edited\n")


INITIAL = {"docker_runtime": DAEMON_JSON, "crio_runtime": "# a file of the operator's\n", "containerd_config_file": CONTAINERD_TOML}
NAMES = {"docker_runtime": "daemon.json", "crio_runtime": "99-nvidia.toml", "containerd_config_file": "config.toml"}


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "bin" / "nvidia-container-runtime"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def layout(tmp_path, module):
    """(link dir/name -> cm dir/name): the config a symlink into a config-management tree."""
    etc = tmp_path / "etc" / "conf.d"
    cm = tmp_path / "srv" / "cm"
    etc.mkdir(parents=True)
    cm.mkdir(parents=True)
    target = cm / NAMES[module]
    target.write_text(INITIAL[module])
    os.chown(str(target), 1234, 2345)
    target.chmod(0o640)
    link = etc / NAMES[module]
    link.symlink_to(os.path.relpath(str(target), str(etc)))
    return link, target


@pytest.mark.parametrize("module", sorted(MODULES))
def test_symlinked_config_is_edited_in_its_target_and_stays_a_link(capsys, tmp_path, binary, module):
    link, target = layout(tmp_path, module)
    result = run(capsys, module, backup=True, **edit_args(module, link, binary))
    assert result.get("changed") is True, result
    assert os.path.islink(str(link)) and os.path.realpath(str(link)) == str(target)
    assert target.read_text() != INITIAL[module]
    stat = os.stat(str(target))
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (1234, 2345, 0o640)
    # The backup is the target's, beside it; nothing else in either directory.
    assert result["backup_file"].startswith(str(target) + ".")
    with open(result["backup_file"]) as handle:
        assert handle.read() == INITIAL[module]
    assert sorted(os.listdir(str(link.parent))) == [link.name]
    assert sorted(os.listdir(str(target.parent))) == sorted([target.name, os.path.basename(result["backup_file"])])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_dangling_link_is_refused(capsys, tmp_path, binary, module):
    link = tmp_path / NAMES[module]
    link.symlink_to(tmp_path / "gone" / NAMES[module])
    result = run(capsys, module, **edit_args(module, link, binary))
    assert result["failed"] and result["msg"] == (
        "%s: is a symbolic link to %s, which does not exist. Nothing was changed; create the target "
        "(or remove the dangling link), and run again." % (link, tmp_path / "gone" / NAMES[module]))
    assert os.path.islink(str(link)) and sorted(os.listdir(str(tmp_path))) == sorted(["bin", link.name])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_link_loop_is_refused(capsys, tmp_path, binary, module):
    one, two = tmp_path / NAMES[module], tmp_path / "other"
    one.symlink_to(two)
    two.symlink_to(one)
    result = run(capsys, module, **edit_args(module, one, binary))
    assert result["failed"] and result["msg"] == (
        "%s: is a symbolic link in a loop (%s -> %s -> %s). Nothing was changed; point the link at the real "
        "file, and run again." % (one, one, two, one))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_directory_instead_of_the_file(capsys, tmp_path, binary, module):
    path = tmp_path / NAMES[module]
    path.mkdir()
    result = run(capsys, module, **edit_args(module, path, binary))
    assert result["failed"] and "Traceback" not in result["msg"] and "bug" not in result["msg"]
    assert str(path) in result["msg"] and "directory" in result["msg"]
    assert path.is_dir() and os.listdir(str(path)) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_file_where_a_directory_should_be(capsys, tmp_path, binary, module):
    (tmp_path / "etc").write_text("not a directory\n")
    path = tmp_path / "etc" / NAMES[module]
    result = run(capsys, module, **edit_args(module, path, binary))
    assert result["failed"] and result["msg"].startswith(
        "%s: could not read it: a part of its path is not a directory. The file was left as it was; fix the path"
        % path), result["msg"]
    assert (tmp_path / "etc").read_text() == "not a directory\n"


FAULTS = [
    (errno.ENOSPC, "the filesystem is full (ENOSPC). The file was left as it was; free space on it (df -h {dir})"),
    (errno.EROFS, "the filesystem is mounted read-only (EROFS). The file was left as it was; remount it read-write"),
    (errno.EPERM, "immutable or append-only. The file was left as it was; check with lsattr, remove the attribute "
                  "with chattr -i"),
    (errno.EACCES, "permission denied (EACCES). The file was left as it was; run the task as root (become: true)"),
    (errno.EIO, "the disk reported an input/output error (EIO)"),
]


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("code,text", FAULTS, ids=[errno.errorcode[c] for c, _t in FAULTS])
def test_filesystem_fault_at_the_rename_is_named_and_leaves_nothing(capsys, tmp_path, binary, monkeypatch,
                                                                    module, code, text):
    path = tmp_path / "etc" / NAMES[module]
    path.parent.mkdir()
    path.write_text(INITIAL[module])

    def refused(src, dst):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(filewrite.os, "rename", refused)
    result = run(capsys, module, **edit_args(module, path, binary))
    assert result["failed"] and result["msg"].startswith("%s: could not replace it: " % path), result["msg"]
    assert text.format(dir=path.parent) in result["msg"]
    assert "bug" not in result["msg"]
    assert path.read_text() == INITIAL[module] and os.listdir(str(path.parent)) == [path.name]


def test_unknown_errno_stays_the_catch_all(capsys, tmp_path, binary, monkeypatch):
    path = tmp_path / "daemon.json"
    path.write_text(DAEMON_JSON)

    def refused(src, dst):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
    monkeypatch.setattr(filewrite.os, "rename", refused)
    result = run(capsys, "docker_runtime", **edit_args("docker_runtime", path, binary))
    assert result["failed"] and ": unexpected OSError at " in result["msg"]
    assert "please report it as \"Reporting a problem\" in the collection's README.md says" in result["msg"]
    assert path.read_text() == DAEMON_JSON and sorted(os.listdir(str(tmp_path))) == ["bin", "daemon.json"]


@given(prefix=st.binary(max_size=40).filter(lambda b: b"\xff" not in b and _utf8(b)), tail=st.binary(max_size=10))
def test_invalid_utf8_names_byte_and_line(prefix, tail):
    data = prefix + b"\xff" + tail
    with pytest.raises(filewrite.FileFault) as caught:
        filewrite.decode_utf8("/etc/docker/daemon.json", data, "dockerd")
    first_bad = next(i for i in range(len(data)) if not _utf8(data[: i + 1]) and not _utf8_prefix(data[: i + 1]))
    assert "(byte %d, line %d)" % (first_bad, data[:first_bad].count(b"\n") + 1) in str(caught.value)


def _utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _utf8_prefix(data):
    """data is a valid start of UTF-8 text (a sequence cut short at the end is still fine)."""
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"


@pytest.mark.parametrize("module,reader", [("containerd_config_file", "containerd"), ("docker_runtime", "dockerd")])
def test_invalid_utf8_is_refused_naming_byte_and_line(capsys, tmp_path, binary, module, reader):
    path = tmp_path / NAMES[module]
    data = INITIAL[module].encode() + b"# caf\xe9\n"
    path.write_bytes(data)
    args = edit_args(module, path, binary)
    args["op"] = "read" if module == "containerd_config_file" else None
    args = dict((k, v) for k, v in args.items() if v is not None and not (module == "containerd_config_file" and k == "content"))
    result = run(capsys, module, **args)
    assert result["failed"] and result["msg"] == (
        "%s is not UTF-8 text (byte %d, line %d); %s cannot read it either. It was left untouched; save it as "
        "UTF-8, and run again." % (path, data.index(b"\xe9"), data.count(b"\n"), reader))
    assert path.read_bytes() == data


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_killed_runs_temp_files_are_removed_by_the_next_run(capsys, tmp_path, binary, module):
    path = tmp_path / "etc" / "conf.d" / NAMES[module]
    path.parent.mkdir(parents=True)
    path.write_text(INITIAL[module])
    old = time.time() - filewrite.DEBRIS_AGE - 60
    debris = [path.parent / (".%s.gpunode-k1ll3d.tmp" % path.name), path.parent / (".%s.gpunode-x_9.json" % path.name),
              path.parent.parent / (".%s.gpunode-abc123.tmp" % path.name)]
    young = path.parent / (".%s.gpunode-l1ve.tmp" % path.name)  # another run's, in use
    foreign = [path.parent / (".%s.gpunode-old.bak" % path.name), path.parent / "other.toml"]
    for name in debris + [young] + foreign:
        name.write_text("half a file")
        os.utime(str(name), (old, old))
    os.utime(str(young), None)
    run(capsys, module, **edit_args(module, path, binary))
    again = run(capsys, module, **edit_args(module, path, binary))  # no change, and still cleared
    assert not again.get("failed"), again
    expected_gone = debris if module == "crio_runtime" else debris[:2]
    assert [p for p in expected_gone if p.exists()] == []
    assert young.exists() and all(p.exists() for p in foreign)


def test_check_mode_removes_no_debris(capsys, tmp_path, binary):
    path = tmp_path / "daemon.json"
    path.write_text(DAEMON_JSON)
    debris = tmp_path / ".daemon.json.gpunode-k1ll3d.tmp"
    debris.write_text("x")
    os.utime(str(debris), (0, 0))
    result = run(capsys, "docker_runtime", check_mode=True, **edit_args("docker_runtime", path, binary))
    assert result["changed"] and debris.exists() and path.read_text() == DAEMON_JSON


def test_temp_names_escape_containerd_and_crio_globs(tmp_path):
    """containerd imports are usually `conf.d/*.toml`; CRI-O reads every file of crio.conf.d (so ours go above it)."""
    name = os.path.basename(filewrite.write_temp_beside(str(tmp_path / "99-nvidia.toml"), b"x"))
    assert name.startswith(".99-nvidia.toml.gpunode-") and not name.endswith((".toml", ".conf"))
    assert crio_runtime.temp_dir("/etc/crio/crio.conf.d/99-nvidia.toml") == "/etc/crio"
    assert filewrite.EDIT_LOCK_DIR == "/run/lock"


# --- concurrent writers ------------------------------------------------------------------------------

def _race(module, arg_sets):
    """Run module.main once per argument set, all released at the same instant in forked processes."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(arg_sets))
    results = context.Queue()

    def child(args, out):
        sys.stdout = io.StringIO()
        barrier.wait()
        try:
            with patch_module_args(args):
                MODULES[module].main()
        except SystemExit:
            pass
        out.put(json.loads(sys.stdout.getvalue()))

    processes = [context.Process(target=child, args=(args, results)) for args in arg_sets]
    for process in processes:
        process.start()
    found = [results.get(timeout=60) for _p in processes]
    for process in processes:
        process.join(10)
    return found


def test_concurrent_docker_runs_lose_no_runtime(tmp_path, binary):
    path = tmp_path / "daemon.json"
    for trial in range(RACE_TRIALS):
        path.write_text(DAEMON_JSON)
        names = ["rt%d-%d" % (trial, n) for n in range(RACERS)]
        results = _race("docker_runtime", [dict(edit_args("docker_runtime", path, binary), name=name, validate=False)
                                           for name in names])
        assert all(r.get("changed") and not r.get("failed") for r in results), results
        data = json.loads(path.read_text())
        assert sorted(data["runtimes"]) == names and data["log-driver"] == "json-file", (trial, data)
        assert sorted(os.listdir(str(tmp_path))) == ["bin", "daemon.json"]


def test_concurrent_writes_with_the_same_expected_checksum_let_one_win(tmp_path):
    """The containerd editor's node half: every writer planned on the same file; one write lands, the rest fail."""
    path = tmp_path / "config.toml"
    for trial in range(RACE_TRIALS):
        path.write_text(CONTAINERD_TOML)
        expected = filewrite.sha256_bytes(CONTAINERD_TOML.encode())
        contents = [CONTAINERD_TOML + "# writer %d of trial %d\n" % (n, trial) for n in range(RACERS)]
        results = _race("containerd_config_file",
                        [dict(path=str(path), op="write", content=c, expected_sha256=expected) for c in contents])
        won = [r for r in results if r.get("changed")]
        assert len(won) == 1, (trial, results)
        assert all("changed on the node while this task was preparing its edit" in r["msg"]
                   for r in results if r.get("failed"))
        assert path.read_text() in contents and sorted(os.listdir(str(tmp_path))) == ["config.toml"]


def test_a_bom_is_read_past_as_containerd_1x_does():
    """containerd 1.7 loads a file that starts with a UTF-8 BOM; the controller's parse must too (2.x: see the
    integration test, where containerd's own dump refuses it and the message names the BOM)."""
    from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import parse
    assert parse(u"\ufeffversion = 2\n[plugins]\n", "/etc/containerd/config.toml") == {"version": 2, "plugins": {}}
