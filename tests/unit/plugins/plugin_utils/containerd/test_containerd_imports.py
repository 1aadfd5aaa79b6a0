"""containerd `imports`: resolution as containerd does it, and the in-place edit of the imports line."""
import difflib
import os

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import goglob
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import ConfigError

ROOT = "/etc/containerd/config.toml"
V2 = 'plugins."io.containerd.grpc.v1.cri"'
V3 = "plugins.'io.containerd.cri.v1.runtime'"

# What NVIDIA's toolkit (>= 1.18) writes on a version 2 file: the whole CRI table plus its runtime.
NVIDIA_DROPIN = """version = 2

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
        SystemdCgroup = true
""" % {"p": V2}

MAIN_V2 = """# kubeadm node
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[%(p)s]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [%(p)s.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
""" % {"p": V2}


def resolve(contents, version, root=ROOT, globs=None):
    return imports.from_contents(root, contents, version, globs or {})


@pytest.mark.parametrize("version,expected", [
    ("containerd 1.6.20", "/conf.d/*.toml"),           # 1.6: from the working directory (/ under systemd)
    ("containerd 1.7.24", "/etc/containerd/conf.d/*.toml"),
    ("containerd github.com/containerd/containerd/v2 2.1.9", "/etc/containerd/conf.d/*.toml"),
])
def test_relative_glob_base_depends_on_the_version(version, expected):
    assert imports.Semantics(version).absolute("conf.d/*.toml", ROOT) == expected


@pytest.mark.parametrize("version", ["containerd 1.6.20", "containerd 2.1.9"])
def test_relative_file_is_relative_to_the_importing_file(version):
    absolute = imports.Semantics(version).absolute("../x/./a.toml", "/etc/containerd/sub/b.toml")
    assert absolute == "/etc/containerd/x/a.toml"


def test_files_load_breadth_first_once_each_later_files_last():
    contents = {
        ROOT: 'version = 2\nimports = ["a.toml", "/etc/containerd/conf.d/*.toml"]\n',
        "/etc/containerd/a.toml": 'version = 2\nimports = ["nested.toml", "config.toml"]\n',
        "/etc/containerd/nested.toml": "version = 2\n",
        "/etc/containerd/conf.d/20-b.toml": "version = 2\n",
        "/etc/containerd/conf.d/10-a.toml": 'version = 2\nimports = ["../a.toml"]\n',
        "/etc/containerd/conf.d/.hidden.toml": "version = 2\n",  # Go's * matches dot files too
    }
    loaded = resolve(contents, "containerd 1.7.24")
    assert loaded.paths() == [ROOT, "/etc/containerd/a.toml", "/etc/containerd/conf.d/.hidden.toml",
                              "/etc/containerd/conf.d/10-a.toml", "/etc/containerd/conf.d/20-b.toml",
                              "/etc/containerd/nested.toml"]
    assert loaded.get("/etc/containerd/conf.d/10-a.toml").imported_by == ROOT


def test_missing_import_stops_1x_and_is_skipped_by_2x():
    contents = {ROOT: 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n'}
    with pytest.raises(ConfigError, match="gone.toml, which does not exist: containerd 1.7 fails to start"):
        resolve(contents, "containerd 1.7.24")
    assert resolve(contents, "containerd 2.1.9").missing == ["/etc/containerd/gone.toml"]


def test_imports_of_the_wrong_type_name_the_file():
    with pytest.raises(ConfigError, match="config.toml: `imports` must be a list"):
        resolve({ROOT: 'version = 2\nimports = "/etc/containerd/conf.d/*.toml"\n'}, "containerd 1.7.24")


def test_1x_uses_only_the_last_cri_table_nvidia_style():
    contents = {ROOT: MAIN_V2.replace('runtime_type = "io.containerd.runc.v2"\n',
                                      'runtime_type = "io.containerd.runc.v2"\n  [%s.containerd.runtimes.nvidia]\n'
                                      '    runtime_type = "io.containerd.runc.v2"\n' % V2),
                "/etc/containerd/conf.d/99-nvidia.toml": NVIDIA_DROPIN}
    loaded = resolve(contents, "containerd 1.7.24")
    assert loaded.defined_in("nvidia").path == "/etc/containerd/conf.d/99-nvidia.toml"
    assert [c.path for c in loaded.ignored_definitions("nvidia")] == [ROOT]
    assert loaded.default_set_in().path == "/etc/containerd/conf.d/99-nvidia.toml"
    assert loaded.merged_runtimes()["runc"]["options"] == {"SystemdCgroup": True}


def test_1x_dropin_without_cri_table_leaves_the_root_in_charge():
    contents = {ROOT: MAIN_V2.replace('"/etc/containerd/conf.d/*.toml"', '"conf.d/*.toml"'),
                "/etc/containerd/conf.d/10-debug.toml": 'version = 2\n[debug]\n  level = "debug"\n'}
    assert resolve(contents, "containerd 1.6.20").paths() == [ROOT]  # 1.6 looks in /conf.d
    loaded = resolve(contents, "containerd 1.7.24")
    assert loaded.paths() == [ROOT, "/etc/containerd/conf.d/10-debug.toml"]
    assert loaded.effective_cri_file().path == ROOT and loaded.defined_in("runc").path == ROOT


def test_2x_merges_later_definitions_win():
    dropin = ("version = 3\n[%s.containerd]\n  default_runtime_name = \"crun\"\n"
              "[%s.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n" % (V3, V3))
    contents = {ROOT: "version = 3\nimports = ['conf.d/*.toml']\n[%s.containerd.runtimes.runc]\n"
                      "  runtime_type = 'io.containerd.runc.v2'\n" % V3,
                "/etc/containerd/conf.d/50.toml": dropin}
    loaded = resolve(contents, "containerd 2.1.9")
    assert loaded.defined_in("runc").path == "/etc/containerd/conf.d/50.toml"
    assert loaded.default_set_in().path == "/etc/containerd/conf.d/50.toml"
    assert loaded.merged_runtimes()["runc"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert loaded.ignored_definitions("runc") == []


def test_version_conflicts_and_unknown_version_from_root():
    contents = {ROOT: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
                "/etc/containerd/conf.d/a.toml": "version = 3\n", "/etc/containerd/conf.d/b.toml": "\n"}
    loaded = resolve(contents, None)
    assert [(c.path, v) for c, v in loaded.version_conflicts()] == [
        ("/etc/containerd/conf.d/a.toml", 3), ("/etc/containerd/conf.d/b.toml", 1)]
    assert loaded.semantics.replaces_plugin_tables  # unknown containerd: the 1.x rules, the careful ones
    assert imports.Semantics(None, root_version=3).major == 2


def test_covers_by_glob_or_by_name():
    loaded = resolve({ROOT: 'version = 2\nimports = ["conf.d/*.toml", "extra/x.toml"]\n',
                      "/etc/containerd/extra/x.toml": "version = 2\n"}, "containerd 1.7.24")
    assert loaded.covers("/etc/containerd/conf.d/99-nvidia.toml")
    assert loaded.covers("/etc/containerd/extra/x.toml")
    assert not loaded.covers("/etc/containerd/conf.d/sub/99-nvidia.toml")
    assert not loaded.covers("/etc/containerd/99-nvidia.toml")


# ---------------------------------------------------------------- editing the imports line

NEW = "/etc/containerd/conf.d/50-gpunode.toml"
LAYOUTS = {
    "no key, version first": ("# top\nversion = 2\n\n[grpc]\n  address = 'x'\n",
                              '# top\nversion = 2\nimports = ["%s"]\n\n[grpc]\n  address = \'x\'\n' % NEW),
    "no key, no version, comment above table": ("# about grpc\n[grpc]\n  address = 'x'\n",
                                                'imports = ["%s"]\n# about grpc\n[grpc]\n  address = \'x\'\n' % NEW),
    "no key, no tables, no newline": ("version = 2", 'version = 2\nimports = ["%s"]\n' % NEW),
    "one line": ('version = 2\nimports = ["/a.toml"]  # keep\n[x]\n',
                 'version = 2\nimports = ["/a.toml", "%s"]  # keep\n[x]\n' % NEW),
    "empty": ("imports = []\nversion = 2\n", 'imports = ["%s"]\nversion = 2\n' % NEW),
    "literal quotes": ("imports = ['/a.toml']\n", "imports = ['/a.toml', '%s']\n" % NEW),
    "multi-line, trailing comma": ('imports = [\n    "/a.toml",  # a\n    "/b.toml",\n]\nversion = 2\n',
                                   'imports = [\n    "/a.toml",  # a\n    "/b.toml",\n    "%s",\n]\nversion = 2\n'
                                   % NEW),
    "multi-line, no trailing comma": ('imports = [\n  "/a.toml"  # a\n]\n',
                                      'imports = [\n  "/a.toml",  # a\n  "%s"\n]\n' % NEW),
    "closing on the last line": ('imports = [\n  "/a.toml",\n  "/b.toml"]\n',
                                 'imports = [\n  "/a.toml",\n  "/b.toml", "%s"]\n' % NEW),
    "CRLF": ('version = 2\r\nimports = ["/a.toml"]\r\n[x]\r\n', 'version = 2\r\nimports = ["/a.toml", "%s"]\r\n[x]\r\n'
             % NEW),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_add_import_touches_only_the_imports_line(layout):
    text, expected = LAYOUTS[layout]
    assert imports.add_import(text, NEW, ROOT) == expected


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_remove_import_gives_back_the_original(layout):
    text, _expected = LAYOUTS[layout]
    added = imports.add_import(text, NEW, ROOT)
    removed = imports.remove_import(added, NEW, ROOT)
    if layout == "no key, no tables, no newline":
        assert removed == text + "\n"
    elif layout == "empty":
        assert removed == "version = 2\n"  # an emptied imports list goes, as it came with our entry
    elif layout == "multi-line, no trailing comma":
        assert removed == 'imports = [\n  "/a.toml",  # a\n]\n'  # the comma stays: valid and equal
    else:
        assert removed == text, list(difflib.ndiff(text.splitlines(True), removed.splitlines(True)))


def test_remove_import_keeps_others_inline():
    text = 'imports = ["/a.toml", "%s", "/b.toml"]\n' % NEW
    assert imports.remove_import(text, NEW, ROOT) == 'imports = ["/a.toml", "/b.toml"]\n'
    assert imports.remove_import(text, "/nope.toml", ROOT) == text


def test_replace_imports_for_the_guard_copy():
    text = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n[x]\n'
    assert imports.replace_imports(text, ["00-a.toml", "/b.toml"], ROOT) == \
        'version = 2\nimports = ["00-a.toml", "/b.toml"]\n[x]\n'
    assert imports.replace_imports(text, [], ROOT) == 'version = 2\nimports = []\n[x]\n'


# ---------------------------------------------------------------- Go's glob


@pytest.mark.parametrize("pattern,name,matched", [
    ("*.toml", ".hidden.toml", True), ("*.toml", "a.toml.bak", False), ("[^a]*", "b", True),
    ("[^a]*", "a", False), ("[a-c]x", "bx", True), ("a\\*", "a*", True), ("a\\*", "ab", False), ("?", "/", False),
    # Go tests lo <= c <= hi: a reversed range is no error and matches nothing.
    ("[z-a]x", "bx", False), ("[^z-a]x", "bx", True), ("[z-ab]x", "bx", True), ("[a-[]", "b", False),
])
def test_go_match(pattern, name, matched):
    assert goglob.match(pattern, name) is matched


@pytest.mark.parametrize("pattern", ["[]", "[a", "a\\", "[a-]"])
def test_go_bad_patterns(pattern):
    with pytest.raises(goglob.BadPattern):
        goglob.match(pattern, "a")


def test_go_glob_sorts_per_directory(tmp_path):
    for directory in ("b", "b-x"):
        os.makedirs(str(tmp_path / directory))
        (tmp_path / directory / "f.toml").write_text("")
    found = goglob.glob(str(tmp_path / "*" / "*.toml"))
    # Go sorts "b" before "b-x" directory by directory; sorting whole paths would not.
    assert found == [str(tmp_path / "b" / "f.toml"), str(tmp_path / "b-x" / "f.toml")]
    assert sorted(found) != found


def test_version_of_the_wrong_type_names_the_file():
    contents = {ROOT: 'version = 2\nimports = ["/etc/containerd/conf.d/a.toml"]\n',
                "/etc/containerd/conf.d/a.toml": 'version = "3"\n'}
    loaded = resolve(contents, "containerd 2.1.9")
    with pytest.raises(ConfigError, match="conf.d/a.toml: `version` must be an integer"):
        loaded.version_conflicts()


def test_add_import_keeps_crlf_line_endings():
    assert imports.add_import("version = 2\r\n[x]\r\n", NEW, ROOT) == 'version = 2\r\nimports = ["%s"]\r\n[x]\r\n' % NEW


def test_node_reads_included_files_as_containerd_expands_them(tmp_path):
    from ansible_collections.gpunode.nvidia.plugins.modules import containerd_config_file as config_file
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (conf_d / "b.toml").write_text("version = 2\n")
    (conf_d / ".a.toml").write_text("version = 3\n")
    (tmp_path / "odd[1].toml").write_text("")
    answers = config_file.read_included([str(conf_d) + "//*.toml", str(tmp_path / "odd[1].toml"),
                                         str(tmp_path / "gone.toml"), str(tmp_path / "[*")])
    assert [f["path"] for f in answers[0]["files"]] == [str(conf_d / ".a.toml"), str(conf_d / "b.toml")]
    assert answers[0]["files"][0]["content"] == "version = 3\n" and answers[0]["files"][0]["sha256"]
    assert answers[1]["files"][0]["exists"]  # no `*`: one file, brackets and all
    assert answers[2]["files"] == [{"path": str(tmp_path / "gone.toml"), "exists": False, "content": "",
                                    "sha256": ""}]
    assert "error" in answers[3]
