"""present -> absent gives every file back as present found it (issue 44), over the files containerd loads.

Generated containerd 1.6/1.7/2.1 configs with the runc variants real nodes ship (SystemdCgroup as on kubeadm
nodes, BinaryName, no options table, the 1.x v1 shim with runtime_engine/runtime_root and the CRI-level
systemd_cgroup of Kubespray 2.15 and MicroK8s 2020), the deprecated `default_runtime` table, an empty
`runtimes` header, a drop-in of ours (imported by a glob or by its own entry), CDI and set_as_default. The
plan is the module's own (plan.plan_edit over imports.from_contents); tests/integration/test_containerd_uninstall.py
asks real containerd about the same shapes.
"""
from hypothesis import assume, given, note
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as imports_mod
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as planning
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import ConfigError

ROOT = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
VERSIONS = {"1.6": "containerd github.com/containerd/containerd 1.6.20", "1.7": "containerd github.com/containerd/containerd 1.7.24",
            "2.1": "containerd github.com/containerd/containerd/v2 2.1.9"}
V1_SHIM = "io.containerd.runtime.v1.linux"


@st.composite
def node_files(draw):
    """(containerd version, root file text, drop_in or None)."""
    release = draw(st.sampled_from(sorted(VERSIONS)))
    header = draw(st.sampled_from([2, 3])) if release == "2.1" else 2
    cri = 'plugins."io.containerd.grpc.v1.cri"' if header == 2 else 'plugins."io.containerd.cri.v1.runtime"'
    lines = ["# a node's config", "version = %d" % header]
    drop_in = draw(st.sampled_from([None, DROP_IN]))
    if drop_in and draw(st.booleans()):
        lines.append('imports = ["/etc/containerd/conf.d/*.toml"]')
    runc = draw(st.sampled_from(["none", "plain", "systemd", "binary", "no-options", "empty-header"]
                                + (["v1-shim"] if release != "2.1" else [])))
    table = []
    if runc == "v1-shim" and draw(st.booleans()):
        table += ["[%s]" % cri, "  systemd_cgroup = true"]
    if release != "2.1" and draw(st.booleans()):
        # As `nvidia-ctk runtime configure` on old toolkits left the deprecated table (runc's settings, here).
        table += ["[%s.containerd.default_runtime]" % cri,
                  '  runtime_type = "%s"' % (V1_SHIM if runc == "v1-shim" else "io.containerd.runc.v2")]
    if runc == "empty-header":
        table += ["[%s.containerd.runtimes]" % cri]
    elif runc == "v1-shim":
        table += ["[%s.containerd.runtimes.runc]" % cri, '  runtime_type = "%s"' % V1_SHIM, '  runtime_engine = ""',
                  '  runtime_root = "/run/containerd/runc-k8s"']
    elif runc != "none":
        table += ["[%s.containerd.runtimes.runc]" % cri, '  runtime_type = "io.containerd.runc.v2"']
        options = {"systemd": "SystemdCgroup = true", "binary": 'BinaryName = "/usr/bin/runc"'}.get(runc)
        if options:
            table += ["  [%s.containerd.runtimes.runc.options]" % cri, "    " + options]
    if draw(st.booleans()):
        table = ["[%s]" % cri, '  sandbox_image = "registry.k8s.io/pause:3.9"'] + [
            line for line in table if line != "[%s]" % cri]
    # One blank line, or none, between tables.
    separator = draw(st.sampled_from(["\n", "\n\n"]))
    body = "\n".join(table).replace("\n[", separator + "[") + "\n" if table else ""
    text = "\n".join(lines) + "\n" + body
    return VERSIONS[release], text, drop_in


def plan(contents, version, **args):
    files = imports_mod.from_contents(ROOT, contents, version, {})
    request = dict(name="nvidia", binary="/usr/bin/nvidia-container-runtime", set_as_default=False, cdi=False,
                   state="present", drop_in=None, validate=True)
    request.update(args)
    return planning.plan_edit(request, files, {"exists": True}, None)


def applied(contents, edit):
    after = dict(contents)
    for path, text in edit.changes.items():
        if text is None:
            after.pop(path)
        else:
            after[path] = text
    return after


@given(node_files(), st.booleans(), st.booleans())
def test_absent_gives_back_every_file_present_found(node, cdi, set_as_default):
    version, text, drop_in = node
    note(text)
    original = {ROOT: text}
    try:
        present = plan(original, version, drop_in=drop_in, cdi=cdi, set_as_default=set_as_default)
    except ConfigError as exc:
        assume("deprecated `default_runtime` table" not in str(exc))  # set_as_default beside it: refused
        raise
    added = applied(original, present)
    assert plan(added, version, drop_in=drop_in, cdi=cdi, set_as_default=set_as_default).changes == {}
    removed = applied(added, plan(added, version, drop_in=drop_in, state="absent"))
    assert sorted(removed) == sorted(original)
    for path, before in original.items():
        assert removed[path] in (before, before + "\n"), path
    assert plan(removed, version, drop_in=drop_in, state="absent").changes == {}
