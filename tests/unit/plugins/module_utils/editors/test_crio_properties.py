"""Property-based tests of the CRI-O drop-in editor (module_utils.editors.crio_config).

The drop-in is rendered whole: for any runtime name, binary and root it must parse (tomllib,
the real parser) to exactly the table asked for, and be the same text every time. The override
check reads every other drop-in: written in any TOML style (tables, dotted keys, inline tables,
quoted keys with escapes, comments and multi-line strings that look like tables, CRLF, BOM), it
must agree with tomllib on which later file redefines the runtime or sets another default, and
for any damaged file it reports the file instead of raising. Profiles: `ci` (bounded,
derandomized) by default, `fuzz` with HYPOTHESIS_PROFILE=fuzz.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil
import tempfile
import tomllib

from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import crio_config as cc

names = st.one_of(st.sampled_from(["nvidia", "nvidia-cdi", "nvidia.legacy", "crun", "kata qemu", 'n"q', "é"]),
                  st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10))
texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@given(names, texts, st.one_of(st.none(), texts), st.booleans())
@example("nvidia", "/usr/bin/\x7f", None, False)  # DEL must be escaped in a TOML string
def test_rendered_dropin_is_exactly_the_runtime(name, binary, root, set_as_default):
    text = cc.render_dropin(name, binary, root, set_as_default)
    expected = {"crio": {"runtime": {"runtimes": {name: cc.runtime_table(name, binary, root)}}}}
    if set_as_default:
        expected["crio"]["runtime"]["default_runtime"] = name
    assert tomllib.loads(text) == expected
    assert cc.is_managed(text) and cc.render_dropin(name, binary, root, set_as_default) == text


# --- other drop-ins, in every style --------------------------------------------------

NAME = "nvidia"


def quoted(key, draw):
    """A key as TOML may write it: bare, "basic" (possibly with an escape), or 'literal'."""
    style = draw(st.sampled_from(["bare", "basic", "escaped", "literal"]))
    if style == "basic" or (style == "bare" and not cc._BARE_KEY.match(key)):
        return '"%s"' % key
    if style == "escaped":
        return '"%s"' % "".join("\\u%04x" % ord(c) if i == 0 else c for i, c in enumerate(key))
    return "'%s'" % key if style == "literal" else key


@st.composite
def dropins(draw):
    """(text, defines nvidia, default_runtime or None) for one drop-in in a random style."""
    runtimes = draw(st.lists(st.sampled_from([NAME, "crun", "runc", "kata"]), max_size=3, unique=True))
    default = draw(st.one_of(st.none(), st.sampled_from([NAME, "crun", "runc"])))
    style = draw(st.sampled_from(["tables", "dotted", "inline", "nested-tables"]))
    lines = []
    if draw(st.booleans()):
        lines.append("# [crio.runtime.runtimes.%s] in a comment is not a table" % NAME)
    rt = quoted("runtime", draw)
    rts = quoted("runtimes", draw)
    if style == "tables":
        if default is not None:
            lines += ["[crio.%s]" % rt, "default_runtime = %s" % cc.toml_string(default)]
        for runtime in runtimes:
            lines += ["[crio.%s.%s.%s]" % (rt, rts, quoted(runtime, draw)), 'runtime_path = "/usr/bin/%s"' % runtime]
    elif style == "dotted":
        if default is not None:
            lines.append("crio.%s.default_runtime = %s" % (rt, cc.toml_string(default)))
        for runtime in runtimes:
            lines.append('crio . %s.%s . %s.runtime_path = "/x"' % (rt, rts, quoted(runtime, draw)))
    elif style == "inline":
        lines.append("[crio]")
        body = ", ".join('%s = { runtime_path = "/x", runtime_root = "/run/y" }' % quoted(r, draw) for r in runtimes)
        fields = ["%s = { %s }" % (rts, body)]
        if default is not None:
            fields.insert(draw(st.integers(0, 1)), "default_runtime = %s" % cc.toml_string(default))
        lines.append("%s = { %s }" % (rt, ", ".join(fields)))
    else:
        lines += ["[crio]", "[crio.%s]" % rt]
        if default is not None:
            lines.append("  default_runtime = %s  # a comment" % cc.toml_string(default))
        lines.append("  [crio.%s.%s]" % (rt, rts))
        for runtime in runtimes:
            lines += ["    [crio.%s.%s.%s]" % (rt, rts, quoted(runtime, draw)), "      runtime_type = 'oci'",
                      "      allowed_annotations = [", '        "a",', "      ]"]
    if draw(st.booleans()):
        lines += ["[crio.image]", 'note = """', "[crio.runtime.runtimes.%s]" % NAME, 'default_runtime = "x"', '"""']
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = cc.BOM + text
    truth = tomllib.loads(text[1:] if text.startswith(cc.BOM) else text)
    runtime = truth.get("crio", {}).get("runtime", {})
    assert (NAME in runtime.get("runtimes", {})) == (NAME in runtimes)  # the generator means what it says
    return text, NAME in runtimes, runtime.get("default_runtime")


def directory_with(files):
    root = tempfile.mkdtemp(prefix="crio-props-")
    dropin_dir = os.path.join(root, "crio.conf.d")
    os.makedirs(dropin_dir)
    paths = []
    for index, content in enumerate(files):
        path = os.path.join(dropin_dir, "%02d-file.conf" % (index * 10 + (5 if index % 2 else 0)))
        with open(path, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode("utf-8"))
        paths.append(path)
    return root, dropin_dir, paths


@given(st.lists(dropins(), min_size=1, max_size=4), st.integers(0, 4), st.booleans())
def test_overrides_agree_with_tomllib(files, position, set_as_default):
    root, dropin_dir, paths = directory_with([text for text, _defines, _default in files])
    try:
        ours = os.path.join(dropin_dir, "%02d-ours.toml" % (min(position, len(files)) * 10 - 1 if position else 0))
        later = [(p, f) for p, f in zip(paths, files) if os.path.basename(p) > os.path.basename(ours)]
        issues = cc.find_overrides(ours, None, NAME, set_as_default, "present")
        expected = []
        for path, (_text, defines, default) in later:
            if defines:
                expected.append((path, "redefines"))
            if set_as_default and default is not None and default != NAME:
                expected.append((path, "sets default_runtime"))
        assert [(i["file"], "redefines" if "redefines" in i["message"] else "sets default_runtime")
                for i in issues] == expected
        assert all(isinstance(i["line"], int) for i in issues)

        absent = cc.find_overrides(ours, None, NAME, False, "absent")
        others = [f for p, f in zip(paths, files)]
        defaults = [default for _t, _d, default in others if default is not None]
        refuses = bool(defaults) and defaults[-1] == NAME and not any(d for _t, d, _x in others)
        assert len(absent) == (1 if refuses else 0)
    finally:
        shutil.rmtree(root)


@given(st.lists(dropins(), min_size=1, max_size=2).flatmap(lambda files: st.tuples(
    st.just(files), st.integers(0, len(files) - 1), st.integers(0, 400), st.binary(max_size=4))))
def test_damaged_dropins_are_reported_never_raised(damage):
    files, which, at, junk = damage
    contents = [text.encode("utf-8") for text, _d, _x in files]
    target = contents[which]
    at = min(at, len(target))
    contents[which] = target[:at] + junk + target[at + len(junk):]
    root, dropin_dir, paths = directory_with(contents)
    try:
        for state in ("present", "absent"):
            issues = cc.find_overrides(os.path.join(dropin_dir, "00-ours.toml"), None, NAME, True, state)
            for issue in issues:
                assert issue["file"] in paths and issue["message"].startswith(issue["file"])
    finally:
        shutil.rmtree(root)
