"""containerd 2.2 to 2.4 as the editor reads them. These releases are in no Debian archive, so not in the test
bed: each test models one rule of containerd's source, named in its docstring (tag and file)."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import (
    cdi_always_on, newest_config_version)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as containerd_imports
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as containerd_plan
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import (
    ConfigError, default_version, parse, plan_runtime_edit)
from unit_paths import UNIT_DIR

BINARY = "/usr/bin/nvidia-container-runtime"
ROOT = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
V21 = "containerd github.com/containerd/containerd/v2 2.1.9+unknown"
V22 = "containerd github.com/containerd/containerd/v2 v2.2.7"
V23 = "containerd github.com/containerd/containerd/v2 v2.3.4"
V24 = "containerd github.com/containerd/containerd/v2 v2.4.0-beta.0"
CRI3 = 'plugins."io.containerd.cri.v1.runtime"'
V4_FILE = ('version = 4\n\n[plugins]\n  [%s]\n    enable_selinux = false\n    [%s.containerd]\n'
           '      default_runtime_name = "runc"\n      [%s.containerd.runtimes.runc]\n'
           '        runtime_type = "io.containerd.runc.v2"\n        [%s.containerd.runtimes.runc.options]\n'
           '          SystemdCgroup = true\n\n  [plugins."io.containerd.server.v1.grpc"]\n'
           '    address = "/run/containerd/containerd.sock"\n') % (CRI3, CRI3, CRI3, CRI3)
REAL_DIR = os.path.join(UNIT_DIR, "corpus", "containerd-real")


@pytest.mark.parametrize("version, newest", [("1.6.20", None), ("1.7.24", 2), ("2.1.9", 3), ("2.2.7", 3),
                                             ("2.3.0", 4), ("2.3.4", 4), ("2.4.0-beta.0", 4), (None, None)])
def test_newest_config_version_follows_config_version_constant(version, newest):
    """version/version.go: ConfigVersion = 3 at v2.1.9 and v2.2.0, 4 at v2.3.0, v2.3.4 and v2.4.0-beta.0;
    RELEASES.md (v2.4.0-beta.0) "Configuration Version | Minimum containerd version": 4 needs v2.3.0."""
    assert newest_config_version(version) == newest


@pytest.mark.parametrize("version, expected", [(V21, 3), (V22, 3), (V23, 4), (V24, 4), ("1.7.24", 2), (None, 2)])
def test_a_new_file_gets_the_version_config_default_writes(version, expected):
    """cmd/containerd/server/config/config.go (v2.3.0): a file older than ConfigVersion is migrated at every start
    ("Configuration migrated from version 3, use `containerd config migrate`"), so 2.3+ gets version 4."""
    assert default_version(version) == expected
    plan = plan_runtime_edit("", ROOT, binary=BINARY, containerd_version=version)
    assert parse(plan.text, ROOT)["version"] == expected


@pytest.mark.parametrize("version", [V23, V24])
def test_a_version_4_file_is_edited_under_the_version_3_plugin_id(version):
    """plugins/cri/runtime/plugin.go (v2.3.0, v2.4.0-beta.0): the CRI runtime plugin is still
    io.containerd.cri.v1 "runtime"; version 4 moved only server settings (serviceMigrate, config.go v2.3.0)."""
    plan = plan_runtime_edit(V4_FILE, ROOT, binary=BINARY, containerd_version=version)
    assert plan.cri_path == ("plugins", "io.containerd.cri.v1.runtime")
    runtime = parse(plan.text, ROOT)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]
    assert runtime["options"] == {"BinaryName": BINARY, "SystemdCgroup": True}
    assert plan.text.startswith(V4_FILE.split("\n\n  [plugins.\"io.containerd.server", maxsplit=1)[0])
    assert 'address = "/run/containerd/containerd.sock"' in plan.text


@pytest.mark.parametrize("version, release", [(V21, "2.1.9"), (V22, "2.2.7"), ("1.7.24", "1.7.24")])
def test_a_version_4_file_is_refused_where_containerd_cannot_read_it(version, release):
    """cmd/containerd/server/config/config.go ValidateVersion (v2.2.0): a version above ConfigVersion (3) stops
    containerd ("expected containerd config version equal to or less than `3`")."""
    with pytest.raises(ConfigError, match=r"line 1: containerd %s does not start with a version 4 file" % release):
        plan_runtime_edit(V4_FILE, ROOT, binary=BINARY, containerd_version=version)


def test_cdi_is_always_on_from_2_4():
    """RELEASES.md "Deprecated features" (v2.4.0-beta.0): `enable_cdi` of io.containerd.cri.v1.runtime, deprecated
    in v2.2, removed in v2.4, "CDI support will always be enabled"; 2.2 and 2.3 still read it
    (internal/cri/config/config.go v2.3.4, EnableCDI *bool)."""
    assert [cdi_always_on(v) for v in (V21, V22, V23, V24, "3.0.0", None)] == [False, False, False, True, True, False]


@pytest.mark.parametrize("version", [V21, V22, V23])
def test_cdi_is_written_where_containerd_reads_enable_cdi(version):
    plan = plan_runtime_edit(V4_FILE.replace("version = 4", "version = 3"), ROOT, binary=BINARY, cdi=True,
                             containerd_version=version)
    assert parse(plan.text, ROOT)["plugins"]["io.containerd.cri.v1.runtime"]["enable_cdi"] is True


def test_cdi_on_2_4_is_satisfied_without_the_key_and_said_so():
    plan = plan_runtime_edit(V4_FILE, ROOT, binary=BINARY, cdi=True, containerd_version=V24)
    assert "enable_cdi" not in plan.text
    assert plan.text == plan_runtime_edit(V4_FILE, ROOT, binary=BINARY, containerd_version=V24).text
    assert [w for w in plan.warnings if w.startswith("cdi: containerd 2.4.0 always enables CDI")]
    assert ("enable_cdi",) not in plan.planned_keys


def test_cdi_on_2_4_names_the_enable_cdi_left_in_the_file():
    text = V4_FILE.replace("enable_selinux = false", "enable_selinux = false\n    enable_cdi = false")
    plan = plan_runtime_edit(text, ROOT, binary=BINARY, cdi=True, containerd_version=V24)
    (warning,) = [w for w in plan.warnings if w.startswith("cdi:")]
    assert "%s line 6 still sets enable_cdi = false, a key containerd 2.4 removed" % ROOT in warning
    assert "enable_cdi = false" in plan.text  # the user's key is reported, not rewritten


def _edited(text, version, cdi):
    try:
        return plan_runtime_edit(text, ROOT, binary=BINARY, cdi=cdi, containerd_version=version).text
    except ConfigError as exc:
        return str(exc)


@given(st.sampled_from(sorted(os.listdir(REAL_DIR))), st.sampled_from([V24, "containerd 2.5.1", "3.0.0"]),
       st.sampled_from([None, "true", "false"]), st.booleans())
def test_property_cdi_request_never_writes_enable_cdi_from_2_4(name, version, found, set_as_default):
    """Any real-world file, with or without enable_cdi: on 2.4+ `cdi: true` edits exactly as `cdi: false` does."""
    with open(os.path.join(REAL_DIR, name)) as handle:
        text = handle.read()
    if found is not None:
        text = text + "\n[%s]\n  enable_cdi = %s\n" % (CRI3, found) if "version = 3" in text else text
    with_cdi = _edited(text, version, True)
    assert with_cdi == _edited(text, version, False)
    assert with_cdi.count("enable_cdi") == text.count("enable_cdi") or with_cdi.startswith(ROOT)


def planned(contents, version, **overrides):
    args = dict(name="nvidia", binary=BINARY, set_as_default=False, cdi=False, state="present", drop_in=None,
                validate=True)
    args.update(overrides)
    files = containerd_imports.from_contents(ROOT, contents, version, {})
    return containerd_plan.plan_edit(args, files, {"exists": True}, None)


@pytest.mark.parametrize("version", [V23, V24])
def test_a_new_drop_in_has_the_root_files_version(version):
    """cmd/containerd/server/config/config.go LoadConfigWithPlugins (v2.3.0 to v2.3.4, v2.4.0-beta.0): "drop-in config
    version %d higher than root config version %d" stops containerd; a lower one is migrated."""
    for root_version in (2, 3, 4):
        edit = planned({ROOT: "version = %d\n" % root_version, DROP_IN: None}, version, drop_in=DROP_IN)
        assert parse(edit.changes[DROP_IN], DROP_IN)["version"] == root_version


def test_a_drop_in_with_a_higher_version_than_the_root_is_refused():
    """Same check (config.go v2.3.4): a version 4 drop-in under a version 3 root stops 2.3.0 to 2.3.4."""
    contents = {ROOT: 'version = 3\nimports = ["%s"]\n' % DROP_IN, DROP_IN: "version = 4\n"}
    with pytest.raises(ConfigError, match=r"2\.3\.0 to 2\.3\.4 refuse to start"):
        planned(contents, V23, drop_in=DROP_IN)
