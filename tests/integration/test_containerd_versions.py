"""What each containerd release really reads, proven with `containerd --config F config dump` (no daemon).

Real containerd 1.6.20, 1.7.24 and 2.1.9 (Debian's packages). Proves the editor's choices for files whose
`version` header disagrees with their plugin IDs, and that the styles it writes in place (dotted keys,
inline runtimes, CRLF) load in containerd's own TOML parser, not only in Python's.
"""
import re
import subprocess

import pytest

import daemons
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import ConfigError, plan_runtime_edit
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.effective import (
    compare, default_in_dump, load_dump, runtime_in_dump)

RELEASES = list(daemons.CONTAINERD_RELEASES)
IDS = ["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()]
BINARY = "/usr/bin/nvidia-container-runtime"
# A version 2 header over containerd 2.x plugin IDs, as some cloud node images ship it.
MIXED = ('version = 2\n[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "crun"\n'
         '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun]\n  runtime_type = "io.containerd.runc.v2"\n'
         '  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun.options]\n'
         '    BinaryName = "/usr/bin/crun"\n    SystemdCgroup = true\n')
CRI2 = 'plugins."io.containerd.grpc.v1.cri"'
STYLES = {
    "dotted-top-level": (
        'version = 2\n%s.containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"\n'
        '%s.containerd.runtimes.runc.options.SystemdCgroup = true\n' % (CRI2, CRI2)),
    "dotted-in-table": (
        'version = 2\n[%s]\n  containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"\n'
        "  containerd.runtimes.runc.options.SystemdCgroup = true\n" % CRI2),
    "inline-runtime": (
        'version = 2\n[%s.containerd.runtimes]\n  runc = { runtime_type = "io.containerd.runc.v2", '
        "options = { SystemdCgroup = true } }\n" % CRI2),
    "crlf": (
        'version = 2\n[%s.containerd]\n  default_runtime_name = "runc"\n[%s.containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n  [%s.containerd.runtimes.runc.options]\n'
        "    SystemdCgroup = true\n" % (CRI2, CRI2, CRI2)).replace("\n", "\r\n"),
}


@pytest.fixture(params=RELEASES, ids=IDS)
def containerd(request, containerd_dist):
    dist = containerd_dist(request.param)
    version = subprocess.run([dist.containerd, "--version"], capture_output=True, text=True, check=True).stdout
    return dist, version.strip()


def dump(dist, text, tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(text.encode("utf-8"))
    done = subprocess.run([dist.containerd, "--config", str(path), "config", "dump"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return load_dump(done.stdout)


def test_mismatched_header_is_edited_where_this_containerd_reads_or_refused(containerd, tmp_path):
    dist, version = containerd
    before = dump(dist, MIXED, tmp_path)
    if dist.major < 2:
        # 1.x ignores the io.containerd.cri.v1.* tables: the file's crun default is not in effect.
        assert runtime_in_dump(before, "crun") is None and default_in_dump(before) == "runc"
        with pytest.raises(ConfigError, match=r"line 2, column 1: .*which containerd %s ignores" % dist.version):
            plan_runtime_edit(MIXED, "config.toml", binary=BINARY, set_as_default=True, containerd_version=version)
        return
    # 2.x reads them despite the version 2 header: the editor edits them, and containerd sees the edit.
    assert runtime_in_dump(before, "crun")["options"]["SystemdCgroup"] is True
    assert default_in_dump(before) == "crun"
    plan = plan_runtime_edit(MIXED, "config.toml", binary=BINARY, set_as_default=True, containerd_version=version)
    after = dump(dist, plan.text, tmp_path)
    nvidia = runtime_in_dump(after, "nvidia")
    assert nvidia["options"]["BinaryName"] == BINARY and nvidia["options"]["SystemdCgroup"] is True
    assert default_in_dump(after) == "nvidia"
    restored = plan_runtime_edit(plan.text, "config.toml", state="absent", containerd_version=version)
    assert restored.text == MIXED and default_in_dump(dump(dist, restored.text, tmp_path)) == "crun"


def test_only_containerd_2_reads_cri_v1_runtime_tables_in_a_version_2_file(containerd, tmp_path):
    """The fact the rule above rests on, with the legacy table beside it: 2.x prefers the new one."""
    dist, _version = containerd
    text = MIXED + '[%s.containerd.runtimes.legacy]\n  runtime_type = "io.containerd.runc.v2"\n' % CRI2
    effective = dump(dist, text, tmp_path)
    assert (runtime_in_dump(effective, "crun") is not None) == (dist.major >= 2)
    assert (runtime_in_dump(effective, "legacy") is not None) == (dist.major < 2)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_styles_edited_in_place_load_in_containerd(containerd, style, tmp_path):
    dist, version = containerd
    text = STYLES[style]
    plan = plan_runtime_edit(text, "config.toml", binary=BINARY, set_as_default=True, containerd_version=version)
    after = dump(dist, plan.text, tmp_path)
    nvidia = runtime_in_dump(after, "nvidia")
    assert nvidia["options"]["BinaryName"] == BINARY and nvidia["options"]["SystemdCgroup"] is True
    assert default_in_dump(after) == "nvidia"
    assert runtime_in_dump(after, "runc")["options"]["SystemdCgroup"] is True
    restored = plan_runtime_edit(plan.text, "config.toml", state="absent", containerd_version=version)
    assert default_in_dump(dump(dist, restored.text, tmp_path)) == "runc"
    assert runtime_in_dump(dump(dist, restored.text, tmp_path), "nvidia") is None


# A version 1 file as containerd 1.x packages and old node images ship it (no header, plugin "cri").
VERSION_1 = ('root = "/var/lib/containerd"\n[plugins]\n  [plugins.cri]\n    [plugins.cri.containerd]\n'
             '      snapshotter = "overlayfs"\n      [plugins.cri.containerd.runtimes.runc]\n'
             '        runtime_type = "io.containerd.runc.v2"\n        [plugins.cri.containerd.runtimes.runc.options]\n'
             '          SystemdCgroup = true\n')


def test_a_version_1_file_is_edited_where_this_containerd_reads(containerd, tmp_path):
    """containerd 2.x reads none of a version 1 file's [plugins.cri] settings: the runtime goes where it reads."""
    dist, version = containerd
    before = dump(dist, VERSION_1, tmp_path)
    # 1.x runs the file's runc (SystemdCgroup on); 2.x its built-in runc, the file's table being unknown keys.
    assert runtime_in_dump(before, "runc")["options"]["SystemdCgroup"] is (dist.major < 2)
    plan = plan_runtime_edit(VERSION_1, "config.toml", binary=BINARY, set_as_default=True, containerd_version=version)
    after = dump(dist, plan.text, tmp_path)
    nvidia = runtime_in_dump(after, "nvidia")
    assert nvidia["options"]["BinaryName"] == BINARY and default_in_dump(after) == "nvidia"
    assert nvidia["options"].get("SystemdCgroup", False) is (dist.major < 2)  # as containerd ran the runtime pods used
    assert not compare(before, after, plan.planned_keys)[1]
    assert any("version 1 file" in warning for warning in plan.warnings) == (dist.major >= 2)
    restored = plan_runtime_edit(plan.text, "config.toml", state="absent", containerd_version=version)
    assert restored.text == VERSION_1 and dump(dist, restored.text, tmp_path) == before


def test_a_version_3_file_on_containerd_1(containerd, tmp_path):
    """1.6 reads a version 3 header as version 2 (the grpc.v1.cri table), 1.7 does not start with it."""
    dist, version = containerd
    grpc_tables = MIXED.replace("version = 2", "version = 3").replace("io.containerd.cri.v1.runtime",
                                                                      "io.containerd.grpc.v1.cri")
    v3_tables = MIXED.replace("version = 2", "version = 3")
    if dist.version.startswith("1.7"):
        for text in (grpc_tables, v3_tables):
            refused_like_containerd(containerd, text, tmp_path, 3, 2)
        return
    if dist.major < 2:
        with pytest.raises(ConfigError, match=r"line 2, column 1: this version 3 file .* which containerd 1\.6\.20 "
                                              r"ignores"):
            plan_runtime_edit(v3_tables, "config.toml", binary=BINARY, containerd_version=version)
    for text in (grpc_tables,) if dist.major < 2 else (v3_tables,):
        before = dump(dist, text, tmp_path)
        plan = plan_runtime_edit(text, "config.toml", binary=BINARY, set_as_default=True, containerd_version=version)
        after = dump(dist, plan.text, tmp_path)
        assert runtime_in_dump(after, "nvidia")["options"]["BinaryName"] == BINARY
        assert default_in_dump(after) == "nvidia" and not compare(before, after, plan.planned_keys)[1]


def test_a_header_newer_than_containerd_2_1_reads_is_refused(containerd, tmp_path):
    """containerd 2.1.9 does not start with a version 4 file (containerd 2.3's): refused, not edited."""
    if containerd[0].major < 2:
        pytest.skip("containerd 1.x and newer headers: test_a_version_3_file_on_containerd_1")
    refused_like_containerd(containerd, MIXED.replace("version = 2", "version = 4"), tmp_path, 4, 3)


def refused_like_containerd(containerd, text, tmp_path, header, newest):
    """containerd does not start with TEXT, and the editor refuses it, saying so."""
    dist, version = containerd
    path = tmp_path / "config.toml"
    path.write_text(text)
    assert subprocess.run([dist.containerd, "--config", str(path), "config", "dump"], capture_output=True,
                          check=False).returncode != 0
    with pytest.raises(ConfigError, match=r"line 1: containerd %s does not start with a version %d file \(it reads "
                                          r"versions 1 to %d" % (re.escape(dist.version), header, newest)):
        plan_runtime_edit(text, "config.toml", binary=BINARY, containerd_version=version)
