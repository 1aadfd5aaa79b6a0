"""Property-based proof of the containerd editor's invariant (docs/containerd.md).

For any input plan_runtime_edit either refuses with ConfigError or returns text that parses, equals the
input document plus exactly the intended change, keeps every other line, plans nothing more when run
again, and gives the original document back after `state: absent`.

Documents are generated containerd-shaped (versions 1-4, CRI tables, runtimes with options, imports,
registry credentials, other TOML types) and rendered in every TOML style: [table] sections, implicit
parents, dotted keys, inline tables, arrays of tables, quote styles, indentation, comments, blank lines,
multi-line strings and arrays, CRLF, BOM. The corpus files are mutated too. Profiles: tests/conftest.py
(HYPOTHESIS_PROFILE=ci, the default, or fuzz).
"""
import datetime
import difflib
import math
import os
import re

import pytest
from hypothesis import assume, event, example, given, note
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_layout import Layout
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import (
    ConfigError,
    pruned,
    binary_keys,
    parse,
    plan_runtime_edit,
)
from unit_paths import UNIT_DIR

try:
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None

pytestmark = pytest.mark.skipif(tomllib is None, reason="the generators check their output with tomllib")

HERE = UNIT_DIR
CORPUS_DIR = os.path.join(HERE, "corpus", "containerd")
# Files real projects ship (tests/unit/corpus/SOURCES.md), byte for byte: every one is also an explicit example of
# the properties below, under each containerd version and option, besides being mutated like the others.
REAL_DIR = os.path.join(HERE, "corpus", "containerd-real")
REAL = [os.path.join(REAL_DIR, n) for n in sorted(os.listdir(REAL_DIR))]
CORPUS = [os.path.join(CORPUS_DIR, n) for n in sorted(os.listdir(CORPUS_DIR))] + REAL
BAD_CORPUS = [os.path.join(HERE, "corpus", "containerd-bad", n)
              for n in sorted(os.listdir(os.path.join(HERE, "corpus", "containerd-bad")))]
BINARY = "/usr/bin/nvidia-container-runtime"
V16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
V21 = "containerd github.com/containerd/containerd/v2 2.1.9+unknown"
CRI = {1: ("plugins", "cri"), 2: ("plugins", "io.containerd.grpc.v1.cri"),
       3: ("plugins", "io.containerd.cri.v1.runtime"), 4: ("plugins", "io.containerd.cri.v1.runtime")}
IMAGES_V3 = ("plugins", "io.containerd.cri.v1.images")
# Refusals that are the input's (valid but not editable in place, or not read by containerd as meant).
LEGIT_REFUSALS = ("is written as an inline table", "is an array of tables", "configures the CRI runtime under",
                  "deprecated `default_runtime` table", "cannot be recorded", "does not start with a version")
INHERITED = (("runtime_type",), ("privileged_without_host_devices",), ("options", "SystemdCgroup"))


def read(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


# ---------------------------------------------------------------- values

safe_text = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=12)
names = st.sampled_from(["runc", "crun", "kata", "youki", "gvisor", "custom-shim", "nvidia", "nvidia-cdi",
                         "my.runtime", "with space"])
scalars = st.one_of(
    safe_text,
    st.integers(-2 ** 63, 2 ** 63 - 1),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), timezones=st.sampled_from([None, datetime.timezone.utc,
                                                                                  datetime.timezone(
                                                                                      datetime.timedelta(hours=-7))])),
    st.dates(),
    st.times().map(lambda t: t.replace(microsecond=0)),
)
values = st.one_of(scalars, st.lists(st.one_of(safe_text, st.integers(0, 99)), max_size=3))


@st.composite
def runtime_tables(draw):
    table = {"runtime_type": draw(st.sampled_from(["io.containerd.runc.v2", "io.containerd.kata.v2",
                                                   "io.containerd.runsc.v1"]))}
    if draw(st.booleans()):
        table["privileged_without_host_devices"] = draw(st.booleans())
    options = {}
    if draw(st.booleans()):
        options["SystemdCgroup"] = draw(st.booleans())
    if draw(st.booleans()):
        options["BinaryName"] = draw(st.sampled_from(["/usr/bin/crun", "/usr/local/bin/runc",
                                                      "/usr/local/nvidia/toolkit/nvidia-container-runtime"]))
    if options or draw(st.booleans()):
        table["options"] = options
    return table


@st.composite
def documents(draw):
    """A containerd-shaped document (plain data)."""
    version = draw(st.sampled_from([None, 1, 2, 3, 4]))
    number = version or 1
    doc = {}
    if version is not None:
        doc["version"] = version
    if draw(st.booleans()):
        doc["root"] = "/var/lib/containerd"
    if draw(st.booleans()):
        doc["imports"] = draw(st.lists(st.sampled_from(["/etc/containerd/conf.d/*.toml", "/etc/containerd/x.toml"]),
                                       max_size=2))
    if draw(st.booleans()):
        doc["timeouts"] = {"io.containerd.timeout.shim.cleanup": "5s", "io.containerd.timeout.task.state": "2s"}
    if draw(st.booleans()):
        doc["debug"] = {draw(st.sampled_from(["level", "started", "odd key", "ratio"])): draw(values)}
    if not draw(st.integers(0, 9)):
        return doc
    plugins = doc.setdefault("plugins", {})
    cri = {}
    runtime_names = draw(st.lists(names, max_size=3, unique=True))
    runtimes = dict((n, draw(runtime_tables())) for n in runtime_names)
    containerd = {}
    if runtimes or draw(st.booleans()):
        containerd["runtimes"] = runtimes
    default = draw(st.sampled_from([None] + runtime_names + ["runc"]))
    if default is not None:
        containerd["default_runtime_name"] = default
    if draw(st.booleans()):
        containerd["snapshotter"] = "overlayfs"
    if number == 1 and draw(st.integers(0, 4)) == 0:
        containerd["default_runtime"] = {"runtime_type": "io.containerd.runc.v2",
                                         "options": {"SystemdCgroup": draw(st.booleans())}}
    if containerd:
        cri["containerd"] = containerd
    if draw(st.booleans()):
        cri["enable_cdi"] = draw(st.booleans())
    registry = {}
    if draw(st.booleans()):
        registry["mirrors"] = {"docker.io": {"endpoint": ["https://mirror.example", "https://registry-1.docker.io"]}}
    if draw(st.booleans()):
        registry["configs"] = {"registry.example:5000": {"auth": {"username": "puller", "password": "s3cr3t",
                                                                  "auth": "cHVsbGVyOnMzY3IzdA=="}}}
    if number >= 3:
        plugins[CRI[number][1]] = cri
        if registry or draw(st.booleans()):
            plugins[IMAGES_V3[1]] = {"registry": registry, "pinned_images": {"sandbox": "registry.k8s.io/pause:3.10"}}
    else:
        if draw(st.booleans()):
            cri["sandbox_image"] = "registry.k8s.io/pause:3.9"
        if registry:
            cri["registry"] = registry
        # Some cloud images write containerd 2.x plugin IDs under a version 1/2 header.
        plugins[CRI[3 if draw(st.integers(0, 6)) == 0 else number][1]] = cri
    if draw(st.integers(0, 5)) == 0:
        plugins["io.containerd.example.v1.things"] = {"items": [{"name": "a", "at": datetime.date(2024, 1, 2)},
                                                                {"name": "b"}]}
    return doc


# ---------------------------------------------------------------- rendering


class Style(object):
    """How one document is written: per-table styles and the file's habits."""

    def __init__(self, draw):
        self.draw = draw
        self.indent = draw(st.sampled_from(["", "  ", "    ", "\t"]))
        self.blank = draw(st.booleans())
        self.quote = draw(st.sampled_from(['"', "'"]))
        self.comments = draw(st.booleans())
        self.multiline = draw(st.booleans())
        self.spaces = draw(st.sampled_from([" = ", "=", "  =  "]))

    def table_style(self, path, table, parent_style):
        """header, implicit (no header of its own), dotted or inline."""
        if parent_style in ("dotted", "inline"):
            return self.draw(st.sampled_from(["dotted", "inline"])) if parent_style == "dotted" else "inline"
        if not table:
            return self.draw(st.sampled_from(["header", "header", "header", "inline"]))
        if len(path) <= 4 and self.draw(st.integers(0, 9)):  # inline up to `runtimes` is refused: keep it rare
            return self.draw(st.sampled_from(["header", "implicit", "dotted"]))
        return self.draw(st.sampled_from(["header", "header", "implicit", "dotted", "inline"]))


def key(part, quote):
    if re.match(r"^[A-Za-z0-9_-]+$", part):
        return part
    if quote == "'" and "'" not in part:
        return "'%s'" % part
    return '"%s"' % part.replace("\\", "\\\\").replace('"', '\\"')


def string(value, style, multiline_ok):
    if multiline_ok and style.multiline and style.draw(st.booleans()) and "\r" not in value:
        if ("'''" not in value and not value.endswith("'") and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", value)
                and style.draw(st.booleans())):
            return "'''\n%s'''" % value
        return '"""\n%s"""' % basic_body(value, multiline=True)
    if style.quote == "'" and not re.search(r"['\x00-\x1f\x7f]", value):
        return "'%s'" % value
    return '"%s"' % basic_body(value)


def basic_body(value, multiline=False):
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n" and multiline:
            out.append("\n")
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    return "".join(out)


def value(v, style, multiline_ok=True):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return style.draw(st.sampled_from(["%d" % v, "%d" % v if v < 0 else "+%d" % v])) if v else "0"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return string(v, style, multiline_ok)
    if isinstance(v, datetime.datetime):
        text = v.isoformat()
        return text.replace("T", " ") if style.draw(st.booleans()) else text
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, list):
        items = [value(i, style, False) for i in v]
        if multiline_ok and style.multiline and items:
            inner = "".join("\n  %s,%s" % (i, "  # item" if style.comments else "") for i in items)
            return "[%s\n]" % inner
        return "[" + ", ".join(items) + "]"
    if isinstance(v, dict):
        return inline(v, style)
    raise TypeError(v)


def inline(table, style):
    if not table:
        return "{}"
    return "{ " + ", ".join("%s = %s" % (key(k, style.quote), value(v, style, False)) for k, v in table.items()) + " }"


def render(doc, style):
    """TOML text of `doc` in `style` (checked by the caller against tomllib)."""
    sections = []  # (path, lines, depth)
    root_lines = []

    def comment():
        if style.comments and style.draw(st.integers(0, 3)) == 0:
            return ["# %s" % style.draw(st.sampled_from(["note", "kept as is", "[not.a.table]", "x = 1"]))]
        return []

    def emit(path, table, lines, prefix, depth, parent_style):
        nested = []
        for k, v in table.items():
            if isinstance(v, dict):
                nested.append((k, v))
                continue
            if isinstance(v, list) and v and all(isinstance(i, dict) for i in v):
                nested.append((k, v))
                continue
            lines.extend(comment())
            trailing = "  # trailing" if style.comments and style.draw(st.booleans()) else ""
            dotted = ".".join(key(p, style.quote) for p in prefix + (k,))
            lines.append("%s%s%s%s" % (dotted, style.spaces, value(v, style), trailing))
        for k, v in nested:
            child = path + (k,)
            if isinstance(v, list):  # array of tables
                for item in v:
                    item_lines = []
                    sections.append((child, item_lines, depth + 1, "[[%s]]"))
                    emit(child, item, item_lines, (), depth + 1, "header")
                continue
            kind = style.table_style(child, v, parent_style)
            if kind == "inline":
                lines.append("%s%s%s" % (".".join(key(p, style.quote) for p in prefix + (k,)), style.spaces,
                                         inline(v, style)))
            elif kind == "dotted":
                if not v:
                    lines.append("%s%s{}" % (".".join(key(p, style.quote) for p in prefix + (k,)), style.spaces))
                emit(child, v, lines, prefix + (k,), depth, "dotted")
            else:
                own = []
                section = (child, own, depth + 1, "[%s]")
                sections.append(section)
                emit(child, v, own, (), depth + 1, "header")
                if kind == "implicit" and not own and v:  # no header: its sub-tables' headers create it
                    del sections[next(i for i, x in enumerate(sections) if x is section)]

    emit((), doc, root_lines, (), 0, "header")
    out = [line + "\n" for line in root_lines]
    for path, lines, depth, form in sections:
        indent = style.indent * max(0, depth - 1)
        if style.blank and out:
            out.append("\n")
        out.extend(indent + c + "\n" for c in comment())
        out.append(indent + form % ".".join(key(p, style.quote) for p in path) + "\n")
        out.extend(indent + style.indent + line.replace("\n", "\n") + "\n" for line in lines)
    return "".join(out)


@st.composite
def rendered(draw):
    doc = draw(documents())
    style = Style(draw)
    text = render(doc, style)
    if draw(st.integers(0, 3)) == 0:
        text = text.replace("\n", "\r\n")
    if draw(st.integers(0, 5)) == 0:
        text = u"\ufeff" + text
    if draw(st.integers(0, 5)) == 0 and text.endswith("\n"):
        text = text.rstrip("\r\n")
    # The generator must produce valid TOML equal to the model, or the properties prove nothing.
    parsed = tomllib.loads(text[1:] if text.startswith(u"\ufeff") else text)
    assert _same(parsed, doc), text
    return text


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# ---------------------------------------------------------------- corpus mutations


@st.composite
def mutated_corpus(draw):
    text = read(draw(st.sampled_from(CORPUS)))
    lines = text.splitlines(True)
    for _index in range(draw(st.integers(0, 4))):
        where = draw(st.integers(0, len(lines)))
        lines.insert(where, draw(st.sampled_from(["\n", "# a comment\n", "   \n", "# [fake.header]\n"])))
    text = "".join(lines)
    indent = draw(st.sampled_from([None, "", "\t", "      "]))
    if indent is not None:
        text = re.sub(r"(?m)^[ \t]+(?=\S)", indent, text)
    if draw(st.booleans()):
        text = text.replace('plugins."io.containerd.grpc.v1.cri"', "plugins.'io.containerd.grpc.v1.cri'")
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = u"\ufeff" + text
    tomllib.loads(text[1:] if text.startswith(u"\ufeff") else text)
    return text


@st.composite
def garbled(draw):
    """Arbitrary damage to valid files: the editor must still raise nothing but ConfigError."""
    text = draw(st.one_of(rendered(), st.sampled_from([read(p) for p in CORPUS + BAD_CORPUS])))
    for _index in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:where] + text[where + draw(st.integers(1, 8)):]
        else:
            text = text[:where] + draw(st.sampled_from(["[", "]", "{", "}", '"', "'", "=", "\n", ".", "\\",
                                                        "[[", "'''", '"""', "#", "\r", "\ufeff", "\x00",
                                                        "[" * 40, "a.b.c = 1\n", "x = {", ","])) + text[where:]
    return text


options = st.fixed_dictionaries({
    # Not "runc": a runtime named after the one pods use replaces it (a known limit, docs/containerd.md).
    "name": st.sampled_from(["nvidia", "nvidia-cdi", "gpu.runtime"]),
    "set_as_default": st.booleans(),
    "cdi": st.booleans(),
    "containerd_version": st.sampled_from([V21, V21, V16, None]),
})


# ---------------------------------------------------------------- the properties


def real_world_examples(test):
    """Every shipped file under every containerd version, with and without set_as_default and cdi."""
    for path in REAL:
        for version in (V21, V16, None):
            for set_as_default in (False, True):
                for cdi in (False, True):
                    test = example(read(path), {"name": "nvidia", "set_as_default": set_as_default, "cdi": cdi,
                                                "containerd_version": version})(test)
    return test


def plan_or_refuse(text, **kwargs):
    try:
        return plan_runtime_edit(text, "/etc/containerd/config.toml", binary=BINARY, **kwargs)
    except ConfigError as exc:
        message = str(exc)
        note("refused: %s" % message)
        assert message.startswith("/etc/containerd/config.toml: "), message
        assert "This is a bug" not in message, message
        assert "fix the TOML" not in message, message  # the input is valid: never blame it
        assert any(reason in message for reason in LEGIT_REFUSALS), message
        assert re.search(r"line \d+(, column \d+)?", message), message
        event("refused: %s" % next(reason for reason in LEGIT_REFUSALS if reason in message))
        return None


def document(text):
    return parse(text[1:] if text.startswith(u"\ufeff") else text, "x")


def written_builtin(plan):
    """The runtime a containerd 1.x edit writes out beside ours: the source, or runc for the deprecated table or none."""
    return "runc" if plan.source_runtime in (None, "default_runtime") else plan.source_runtime


def without_edit(data, plan, name, builtin_written, created):
    """The document minus what the edit may change."""
    data = _copy(data)
    cri = data.get(plan.cri_path[0], {}).get(plan.cri_path[1], {}) if isinstance(data.get("plugins"), dict) else {}
    if isinstance(cri, dict):
        cri.pop("enable_cdi", None)
        containerd = cri.get("containerd", {})
        if isinstance(containerd, dict):
            containerd.pop("default_runtime_name", None)
            runtimes = containerd.get("runtimes", {})
            if isinstance(runtimes, dict):
                runtimes.pop(name, None)
                if builtin_written:
                    runtimes.pop(written_builtin(plan), None)
    if created:
        data.pop("version", None)
    return _normal(pruned(data))


def _copy(data):
    if isinstance(data, dict):
        return dict((k, _copy(v)) for k, v in data.items())
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


def _normal(data):
    if isinstance(data, dict):
        return dict((k, _normal(v)) for k, v in data.items())
    if isinstance(data, list):
        return [_normal(v) for v in data]
    if isinstance(data, float) and math.isnan(data):
        return "nan"
    return data


def removed_line_numbers(before, after):
    """1-based numbers of the lines of `before` missing from `after` (a last line may gain its newline)."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return [number + 1 for tag, start, end, _new_start, _new_end in matcher.get_opcodes() if tag in ("replace", "delete")
            for number in range(start, end)]


def lines_of_edited_keys(text, cri_path, name):
    """Line numbers the edit may rewrite: default_runtime_name, enable_cdi and the runtime's own table."""
    runtime = cri_path + ("containerd", "runtimes", name)
    allowed = set()
    layout = Layout(text)
    for entry in layout.entries:
        asked = entry.path in (cri_path + ("containerd", "default_runtime_name"), cri_path + ("enable_cdi",))
        if asked or entry.path[:len(runtime)] == runtime:
            end = layout.section_end(entry) if entry.is_header else entry.end
            allowed.update(range(entry.line, entry.line + text.count("\n", entry.start, end) + 1))
    return allowed


def check_edit(text, opts):
    name = opts["name"]
    plan = plan_or_refuse(text, **opts)
    if plan is None:
        return None
    event("edited in place")
    original = document(text)
    new = document(plan.text)
    runtimes = new["plugins"][plan.cri_path[1]]["containerd"]["runtimes"]
    assert [_get(runtimes[name], key) for key in binary_keys(runtimes[name])] == [BINARY] * len(
        binary_keys(runtimes[name]))
    if opts["set_as_default"]:
        assert new["plugins"][plan.cri_path[1]]["containerd"]["default_runtime_name"] == name
    if opts["cdi"]:
        assert new["plugins"][plan.cri_path[1]]["enable_cdi"] is True
    old_runtimes = ((original.get("plugins") or {}).get(plan.cri_path[1]) or {}).get("containerd", {}).get(
        "runtimes") or {}
    builtin = written_builtin(plan)
    builtin_written = not old_runtimes and builtin in runtimes and builtin != name
    if builtin_written:
        assert opts["containerd_version"] != V21
    # Exactly the intended change: everything else is the same document.
    created = not original
    assert without_edit(new, plan, name, builtin_written, created) == without_edit(
        original, plan, name, builtin_written, created)
    # The new runtime inherits what pods use today.
    source = runtimes.get(plan.source_runtime) if plan.source_runtime in runtimes else None
    if source is not None and plan.source_runtime != name:
        for key_path in INHERITED:
            expected = _get(source, key_path)
            if key_path == ("runtime_type",):
                expected = expected or "io.containerd.runc.v2"  # containerd runs no runtime without a type
            if expected is not None:
                assert _get(runtimes[name], key_path) == expected, key_path
    # Every original line outside the runtime's table and the keys asked for is kept.
    before, after = (t.lstrip(u"\ufeff").replace("\r\n", "\n") for t in (text, plan.text))
    allowed = lines_of_edited_keys(before, plan.cri_path, name)
    for number in removed_line_numbers(before, after):
        assert number in allowed, before.splitlines()[number - 1]
    # Line endings and BOM are the file's own.
    assert plan.text.startswith(u"\ufeff") == text.startswith(u"\ufeff")
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        assert plan.text.count("\r\n") == plan.text.count("\n")
    # Idempotent.
    again = plan_runtime_edit(plan.text, "/etc/containerd/config.toml", binary=BINARY, **opts)
    assert again.text == plan.text
    assert again.source_runtime == plan.source_runtime
    return plan


@given(rendered(), options)
def test_property_edit_invariant_on_generated_documents(text, opts):
    note(repr(text))
    check_edit(text, opts)


@real_world_examples
@given(mutated_corpus(), options)
def test_property_edit_invariant_on_mutated_corpus(text, opts):
    note(repr(text))
    check_edit(text, opts)


@real_world_examples
@given(st.one_of(rendered(), mutated_corpus()), options)
def test_property_present_then_absent_restores_the_document(text, opts):
    note(repr(text))
    name = opts["name"]
    original = document(text)
    assume(name not in str(original) and "nvidia" not in str(original))  # the runtime is new
    opts = dict(opts, containerd_version=V21)
    plan = plan_or_refuse(text, **opts)
    if plan is None:
        return
    event("round trip")
    removed = plan_runtime_edit(plan.text, "/etc/containerd/config.toml", state="absent",
                                containerd_version=V21, name=name)
    restored = document(removed.text)
    if original:
        assert _normal(pruned(restored)) == _normal(pruned(original))
    else:  # an empty file gained `version = N`: absent leaves the version, nothing else
        assert set(document(removed.text)) <= {"version", "plugins"}
    if not opts["set_as_default"] and original:
        # New lines only were added, and only they were removed (a last line may keep the newline it gained).
        ending = "\r\n" if "\r\n" in text else "\n"
        assert removed.text in (text, text + ending)


@given(garbled(), options, st.sampled_from(["present", "absent"]))
def test_property_any_input_raises_nothing_but_config_error(text, opts, state):
    note(repr(text))
    try:
        plan_runtime_edit(text, "/etc/containerd/config.toml", binary=BINARY, state=state, **opts)
    except ConfigError as exc:
        assert str(exc).startswith("/etc/containerd/config.toml: ")


def _get(data, path):
    for part in path:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


# ---------------------------------------------------------------- the runtime as containerd runs it (issue 25)

# Settings only containerd's view of a runtime may hold (a drop-in, containerd's defaults): the copy keeps them.
effective_extras = st.fixed_dictionaries({}, optional={
    "base_runtime_spec": st.sampled_from(["/etc/containerd/cri-base.json", ""]),
    "sandbox_mode": st.just("podsandbox"),
    "options": st.fixed_dictionaries({}, optional={
        "Root": st.sampled_from(["/run/containerd/runc-k8s", ""]), "ShimCgroup": st.sampled_from(["/shim", ""]),
        "IoUid": st.sampled_from([0, 1000]), "NoNewKeyring": st.booleans(), "BinaryName": st.just("")}),
})
RUNC_SHIMS = ("io.containerd.runc.v2", "io.containerd.runc.v1", "io.containerd.runtime.v1.linux")


def _merged(base, top):
    out = dict(base)
    for key, value in top.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _leaves_of(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _leaves_of(value, prefix + (key,))
        elif value not in ("", 0, False, [], {}):
            yield prefix + (key,), value


@given(rendered(), options, effective_extras)
def test_property_new_runtime_is_the_source_as_containerd_runs_it(text, opts, extras):
    note(repr(text))
    name = opts["name"]
    original = document(text)
    assume(name not in str(original))
    first = plan_or_refuse(text, **opts)
    if first is None or first.source_runtime in (None, "default_runtime"):
        return
    runtimes = dict(_get(original, first.cri_path + ("containerd", "runtimes")) or {})
    source_file = runtimes.get(first.source_runtime)
    source = _merged(extras, source_file if isinstance(source_file, dict) else {"runtime_type": "io.containerd.runc.v2"})
    runtimes[first.source_runtime] = source
    dump = {"plugins": {first.cri_path[1]: {"containerd": {"runtimes": runtimes}}}}
    plan = plan_or_refuse(text, effective=dump, **opts)
    if plan is None:
        return
    new = document(plan.text)
    ours = _get(new, plan.cri_path + ("containerd", "runtimes", name))
    assert [_get(ours, key) for key in binary_keys(ours)] == [BINARY] * len(binary_keys(ours))
    assert ours["runtime_type"] in RUNC_SHIMS  # a runtime that runs the NVIDIA binary, never an empty type
    if plan.source_runtime != first.source_runtime:  # a kata-like source: runc's shim instead, and a warning
        assert any("does not start an OCI runtime binary" in warning for warning in plan.warnings)
        return
    event("copied as containerd runs it")
    for key_path, expected in _leaves_of(source):
        if key_path not in (("options", "BinaryName"), ("options", "Runtime")):
            assert _get(ours, key_path) == expected, key_path
    again = plan_runtime_edit(plan.text, "/etc/containerd/config.toml", binary=BINARY, effective=dump, **opts)
    assert again.text == plan.text


@real_world_examples
@given(st.one_of(rendered(), mutated_corpus()), options)
def test_property_present_absent_present_round_trips_on_containerd_1(text, opts):
    """containerd 1.x: the runc present writes out, and the tables it adds, go again with absent."""
    note(repr(text))
    name = opts["name"]
    original = document(text)
    assume(original and name not in str(original) and "nvidia" not in str(original))
    opts = dict(opts, containerd_version=V16, cdi=False)
    plan = plan_or_refuse(text, **opts)
    if plan is None:
        return
    removed = plan_runtime_edit(plan.text, "/etc/containerd/config.toml", state="absent", containerd_version=V16,
                                name=name)
    assert _normal(pruned(document(removed.text))) == _normal(pruned(original))
    ending = "\r\n" if "\r\n" in text else "\n"
    if not opts["set_as_default"]:
        event("byte round trip on 1.x")
        assert removed.text in (text, text + ending)
    again = plan_or_refuse(removed.text, **opts)
    assert again is not None and again.text in (plan.text, plan.text.replace(text, text + ending, 1))
