"""Property-based tests of module_utils.editors.masking on whole JSON and TOML documents.

For any document where a sentinel sits under credential keys (any case, escaped or not, any value
type), the masked text holds no sentinel, still parses, and every value whose key path names no
credential is unchanged. Profiles: `ci` by default, `fuzz` with HYPOTHESIS_PROFILE=fuzz.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import tomllib

import tomlkit
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import MASK, is_secret_path, mask_text

S = "S3NTINEL-prop"
secret_keys = st.sampled_from(["password", "Password", "AUTH", "identitytoken", "registry_token", "client-secret",
                               "api_key", "token"])
plain_keys = st.sampled_from(["path", "runtime_type", "username", "mirrors", "endpoint", "name", "a.b", "x y"])
plain_values = st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(max_size=8).filter(lambda t: S not in t and "*" not in t))
secret_values = st.one_of(st.just(S), st.just("line one\n" + S + "\nline three"), st.lists(st.just(S), min_size=1,
                          max_size=3), st.fixed_dictionaries({"inner": st.just(S)}))


@st.composite
def documents(draw, depth=0):
    doc = {}
    for _index in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            doc[draw(secret_keys)] = draw(secret_values)
        elif depth < 3 and draw(st.booleans()):
            doc[draw(plain_keys)] = draw(documents(depth + 1))
        else:
            doc[draw(plain_keys)] = draw(plain_values)
    return doc


def leaves(data, path=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, path + (key,))
    else:
        yield path, data


def get(data, path):
    for key in path:
        data = data[key]
    return data


def check(original, masked_data):
    for path, value in leaves(original):
        if not is_secret_path(path) and not any(is_secret_path(path[:i]) for i in range(len(path))):
            assert get(masked_data, path) == value


@given(documents(), st.sampled_from([None, 2, 4, "\t"]), st.booleans())
def test_json_documents(doc, indent, escape_keys):
    text = json.dumps(doc, indent=indent)
    if escape_keys:  # JSON escapes in key names: "\u0070assword"
        text = text.replace('"password"', '"\\u0070assword"').replace('"token"', '"\\u0074oken"')
    masked = mask_text(text)
    assert S not in masked
    check(doc, json.loads(masked))


@given(documents(), st.booleans(), st.booleans())
def test_toml_documents(doc, multiline_arrays, crlf):
    rendered = tomlkit.document()
    for key, value in doc.items():
        rendered[key] = value
    text = tomlkit.dumps(rendered)
    if multiline_arrays:  # arrays of values spread over lines (table headers stay as they are)
        text = "\n".join(line.replace('= ["', '= [\n  "').replace('", "', '",\n  "')[:-2] + '",\n]'
                         if ' = ["' in line and line.endswith('"]') else line for line in text.split("\n"))
    if crlf:
        text = text.replace("\n", "\r\n")
    masked = mask_text(text)
    assert S not in masked
    check(doc, tomllib.loads(masked))
    assert (MASK in masked) == (S in text)
