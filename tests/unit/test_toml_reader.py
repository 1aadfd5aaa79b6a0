"""The node-side TOML reader (module_utils.editors.toml_reader) on values TOML refuses.

On a node without tomllib (Python before 3.11) the small reader is the only parser: a value it cannot
turn into Python must be a TomlError with its line, never another exception.
"""
import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import toml_reader


@pytest.mark.parametrize("value", [
    '"\\U0011FFFF"', '"\\uD800"', '"\\u12G4"', '"\\q"',  # past U+10FFFF, a surrogate, not hex, no such escape
    '"""\\U0011FFFF"""', '"""\\uDFFF"""', '"""\\q"""',
    "0x_", "0o_", "0b_", "_1",
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
    ("0x1F", 31), ("1_000", 1000), ("0o17", 15), ("-inf", float("-inf")),
])
def test_the_small_reader_reads_what_tomllib_reads(text, value, monkeypatch):
    assert toml_reader.read_toml("a = %s\n" % text).data == {"a": value}
    monkeypatch.setattr(toml_reader, "tomllib", None)
    assert toml_reader.read_toml("a = %s\n" % text).data == {"a": value}


@pytest.mark.parametrize("text, line", [
    ('a = 1\n# a comment with a lone \r carriage return\n', 2),
    ('a = 1\r\nb = "x\ry"\r\n', 2),
    ("a = 1\nb = 'bell\x07'\n", 2),
    ('a = """\nline\x00"""\n', 2),
    ("a = 1 # \x1b[31m\n", 1),
])
@pytest.mark.parametrize("use_tomllib", [True, False])
def test_a_control_character_is_invalid_toml_anywhere(text, line, use_tomllib, monkeypatch):
    """Tab and the line end (LF or CR LF) are the only control characters TOML allows; CRI-O refuses the rest."""
    if not use_tomllib:
        monkeypatch.setattr(toml_reader, "tomllib", None)
    with pytest.raises(toml_reader.TomlError) as err:
        toml_reader.read_toml(text)
    assert err.value.line == line


def test_tabs_and_crlf_line_ends_are_toml(monkeypatch):
    monkeypatch.setattr(toml_reader, "tomllib", None)
    assert toml_reader.read_toml('a\t=\t"x\ty"\r\n# tab\there\r\n').data == {"a": "x\ty"}
