"""The node-side TOML reader (module_utils.common.toml_reader) on values TOML refuses, and on any document against tomllib.

On a node without tomllib (Python before 3.11) the small reader is the only parser: a value it cannot
turn into Python must be a TomlError with its line, never another exception.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import math
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import toml_reader


@pytest.mark.parametrize("value", [
    '"\\U0011FFFF"', '"\\uD800"', '"\\u12G4"', '"\\q"',  # past U+10FFFF, a surrogate, not hex, no such escape
    '"""\\U0011FFFF"""', '"""\\uDFFF"""', '"""\\q"""',
    "0x_", "0o_", "0b_", "_1",
    "01", "-00", "1__0", "1_", "1_.5", "+0x1F", "0x1F_", "1.", "1e",  # TOML 1.0's numbers: what go-toml refuses too
    "1979-13-27", "1979-02-30", "1979-05-27T25:00:00Z", "07:61:00", "1979-05-27T07:32:00+24:00",
    '"\\e[31m"', '"\\x41"',  # TOML 1.1's escapes: containerd and CRI-O read TOML 1.0
    '"""""""""', "{a = 1, a = 2}", "{a = {b = 1}, a.c = 2}", "{a = 1,}",
])
@pytest.mark.parametrize("use_tomllib", [True, False])
def test_a_value_toml_refuses_is_a_toml_error_with_its_line(value, use_tomllib, monkeypatch):
    if not use_tomllib:
        monkeypatch.setattr(toml_reader, "tomllib", None)
    with pytest.raises(toml_reader.TomlError) as err:
        toml_reader.read_toml("[crio.runtime]\nconmon = %s\n" % value)
    assert err.value.line == 2


@pytest.mark.parametrize("text, value", [
    ('"\\U0001F600 \\u00e9 \\\\u12G4"', "\U0001F600 \u00e9 \\u12G4"),
    ('"""a\\\n   b\\tc\\u00e9"""', "ab\tc\u00e9"),
    ("0x1F", 31), ("1_000", 1000), ("0o17", 15), ("-inf", float("-inf")), ("-0", 0), ("0.5e-3", 0.0005),
    ('"""a\\\\\nb"""', "a\\\nb"),  # an escaped backslash at a line end is not a line-ending backslash
    ('"""a\\""""', 'a"'), ('""""q""""', '"q"'), ("''''q'''''", "'q''"),
    ("1979-05-27T07:32:00.999-07:00", "1979-05-27T07:32:00.999-07:00"), ("{a.b = 1, c = [1]}", {"a": {"b": 1}, "c": [1]}),
])
def test_the_small_reader_reads_what_tomllib_reads(text, value, monkeypatch):
    if toml_reader.tomllib is not None and "T07" not in text:  # tomllib gives a datetime, the small reader its text
        assert toml_reader.read_toml("a = %s\n" % text).data == {"a": value}
    monkeypatch.setattr(toml_reader, "tomllib", None)
    assert toml_reader.read_toml("a = %s\n" % text).data == {"a": value}


ARRAY_OF_TABLES = """\
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/amd64"
  snapshotter = "overlayfs"
  [plugins."io.containerd.transfer.v1.local".unpack_config.extra]
    a = 1
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/arm64"
  [plugins."io.containerd.transfer.v1.local".unpack_config.extra]
    a = 2
"""


def test_arrays_of_tables_are_read_each_table_with_its_own_keys(monkeypatch):
    monkeypatch.setattr(toml_reader, "tomllib", None)
    doc = toml_reader.read_toml(ARRAY_OF_TABLES)
    assert doc.data["plugins"]["io.containerd.transfer.v1.local"]["unpack_config"] == [
        {"platform": "linux/amd64", "snapshotter": "overlayfs", "extra": {"a": 1}},
        {"platform": "linux/arm64", "extra": {"a": 2}}]
    assert doc.line_of(("plugins", "io.containerd.transfer.v1.local", "unpack_config", "platform")) == 2


@pytest.mark.parametrize("text, line", [
    ("[[a]]\nx = 1\nx = 2\n", 3),  # a key twice in one table of an array of tables
    ("[a]\n[[a]]\n", 2), ("[[a]]\n[a]\n", 2), ("a = [1]\n[[a]]\n", 2), ("a = 1\n[[a]]\n", 2),
    ("a = {b = 1}\n[a]\n", 2), ("a = {b = 1}\n[a.c]\n", 2), ("a = {b = 1}\na.c = 2\n", 2),
    ("[fruit]\napple.color = 1\n[fruit.apple]\n", 3),  # a table a dotted key defined is not defined again
    ("[a.b]\n[a]\nb.c = 1\n", 3),  # nor is a table a header defined extended by a dotted key
    ("a = 1 b = 2\n", 1), ("[a] b = 1\n", 1),
    # Tab and the line end (LF or CR LF) are the only control characters TOML allows; CRI-O refuses the rest.
    ('a = 1\n# a comment with a lone \r carriage return\n', 2),
    ('a = 1\r\nb = "x\ry"\r\n', 2),
    ("a = 1\nb = 'bell\x07'\n", 2),
    ('a = """\nline\x00"""\n', 2),
    ("a = 1 # \x1b[31m\n", 1),
])
@pytest.mark.parametrize("use_tomllib", [True, False])
def test_a_document_toml_1_0_refuses_is_a_toml_error_with_its_line(text, line, use_tomllib, monkeypatch):
    """What may not be defined again, two statements on a line, a control character anywhere."""
    if not use_tomllib:
        monkeypatch.setattr(toml_reader, "tomllib", None)
    with pytest.raises(toml_reader.TomlError) as err:
        toml_reader.read_toml(text)
    assert err.value.line == line


def test_tabs_and_crlf_line_ends_are_toml(monkeypatch):
    monkeypatch.setattr(toml_reader, "tomllib", None)
    assert toml_reader.read_toml('a\t=\t"x\ty"\r\n# tab\there\r\n').data == {"a": "x\ty"}


# --- the small reader agrees with tomllib on any document ------------------------------------------

KEYS = st.sampled_from(["a", "b", "x-y", "1", '"q.k"', "'lit'", '"\\u00e9"', "runtimes", "nvidia"])
SCALARS = st.sampled_from([
    "1", "0", "-0", "+12", "1_000", "1__0", "01", "0x1F", "0xdead_beef", "-0x1", "0o17", "0b101", "1.5", "1e5",
    "1.5e-3", "1.", ".5", "inf", "-nan", "true", "false", '"s"', '"a\\tb"', '"\\e"', '"\\x41"', '"\\u00e9"',
    "'lit'", '"""m\nl"""', "'''m\nl'''", '"""a\\\n  b"""', '"""a\\\\\nb"""', '""""q""""', '"""q\\""""',
    "1979-05-27", "1979-05-27T07:32:00Z", "1979-05-27 07:32:00", "1979-13-27", "07:32:00", "25:00:00"])
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.builds(lambda items, comma: "[%s%s]" % (", ".join(items), comma), st.lists(inner, max_size=3),
              st.sampled_from(["", ","])),
    st.builds(lambda pairs: "{%s}" % ", ".join("%s = %s" % pair for pair in pairs),
              st.lists(st.tuples(KEYS, inner), max_size=3))), max_leaves=6)
PATHS = st.lists(KEYS, min_size=1, max_size=3).map(".".join)
STATEMENTS = st.one_of(PATHS.map("[{}]".format), PATHS.map("[[{}]]".format),
                       st.builds("{} = {}".format, PATHS, VALUES))


def plain(data):
    """tomllib's dates and times as the text the small reader keeps, NaN as a string (NaN != NaN)."""
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    if isinstance(data, list):
        return [plain(value) for value in data]
    if isinstance(data, float) and math.isnan(data):
        return "nan"
    if isinstance(data, (datetime.date, datetime.time)):
        return "datetime"
    if isinstance(data, str) and toml_reader.DATETIME.match(data) and toml_reader.DATETIME.match(data).end() == len(data):
        return "datetime"
    return data


@given(st.lists(STATEMENTS, min_size=1, max_size=10))
def test_property_the_small_reader_accepts_and_reads_exactly_what_tomllib_does(statements):
    """Tables, arrays of tables, dotted keys and inline tables defined (again) in any order, values TOML 1.0
    accepts and refuses: without tomllib, the small reader is the node's only TOML parser."""
    text = "\n".join(statements) + "\n"
    try:
        expected = plain(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        expected = None
    try:
        got = plain(toml_reader.read_toml(text, use_tomllib=False).data)
    except toml_reader.TomlError as err:
        assert expected is None, "refused valid TOML: %s" % err
    else:
        assert got == expected
