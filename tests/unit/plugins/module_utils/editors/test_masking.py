"""module_utils.editors.masking: one mechanism for every output path."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import textwrap

import pytest
import tomlkit

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import (
    MASK,
    is_secret_key,
    mask_data,
    mask_text,
    mask_value,
)

S = "S3NTINEL-mask"


@pytest.mark.parametrize("key", [
    "password", "PASSWORD", "Password", '"password"', "'password'", '"\\u0070assword"', '"pass\\u0077ord"',
    '"\\U00000070assword"', "auth", "Auth", "identitytoken", "IdentityToken", "registry_token", "client-secret",
    "proxy_password", "x.y.auth", 'a."b.c".token', "api_key", "apiKey", "credentials",
])
def test_secret_keys(key):
    assert is_secret_key(key)
    assert S not in mask_text('%s = "%s"' % (key, S)) and S not in mask_text('{%s: "%s"}' % (key, S))


@pytest.mark.parametrize("key", ["username", "authorization-plugins", "path", "runtime_type", "tokenizer",
                                 "BinaryName", "registry-mirrors", '"auth.example.com"'])
def test_ordinary_keys(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize("document", [
    '{"password": "%s"}' % S,
    '{"\\u0070assword": "%s"}' % S,
    '{"PassWord": ["%s", "x"]}' % S,
    '{"auth": {"user": "u", "pass": "%s"}}' % S,
    '{\n  "token": [\n    "%s",\n    {"a": 1}\n  ]\n}\n' % S,
    '{"nested": [{"x": {"identitytoken": %s}}]}' % json.dumps(S),
    '{"password":\n  "%s"}' % S,
])
def test_json_values_masked_whatever_their_type(document):
    masked = mask_text(document)
    assert S not in masked
    assert json.loads(masked) is not None  # still JSON: the value became one string


TOML = textwrap.dedent('''\
    # registry credentials
    version = 2
    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example.com".auth]
      username = "user"
      password = """
    %(s)s
    line two"""
      identitytoken = \'\'\'%(s)s\'\'\'
    [plugins."io.containerd.grpc.v1.cri".registry.configs."r2".other]
      "pass\\u0077ord" = "%(s)s"
      Token = [
        "%(s)s", # comment
        "%(s)s",
      ]
      inline = { user = "u", auth = { password = "%(s)s" } }
      mirrors.auth.x = "%(s)s"
      when = 1979-05-27T07:32:00Z
      api_key = 1979-05-27 07:32:00
    [b]
      keep = "value"
    ''') % {"s": S}


def test_toml_document_masked_layout_kept():
    masked = mask_text(TOML)
    assert S not in masked
    parsed = tomlkit.parse(masked).unwrap()  # still TOML
    configs = parsed["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["configs"]
    assert configs["r.example.com"]["auth"] == {"username": MASK, "password": MASK, "identitytoken": MASK}
    other = configs["r2"]["other"]
    assert other["password"] == MASK and other["Token"] == MASK and other["api_key"] == MASK
    assert other["inline"] == {"user": "u", "auth": MASK} and other["mirrors"] == {"auth": {"x": MASK}}
    assert str(other["when"]) == "1979-05-27 07:32:00+00:00" and parsed["b"] == {"keep": "value"}
    # Lines without credentials keep their bytes.
    for line in ("# registry credentials", "version = 2", "[b]", '  keep = "value"',
                 "      when = 1979-05-27T07:32:00Z".strip()):
        assert line in masked


def test_masking_is_idempotent_and_keeps_plain_text():
    assert mask_text(mask_text(TOML)) == mask_text(TOML)
    plain = '{\n  "log-driver": "json-file",\n  "x": "a = b"\n}\n'
    assert mask_text(plain) == plain


def test_commented_out_credentials_and_messages():
    assert S not in mask_text("# password = %s\n" % S)
    # A bracket in a comment does not hide the next table header.
    assert S not in mask_text('# see [docs\n[r.auth]\nusername = "%s"\n' % S)
    assert "#" * 5000 in mask_text("#" * 5000 + " token = x")
    assert S not in mask_text("dockerd says: invalid value for token: %s (line 3)" % S)
    assert mask_text("https://user:%s@mirror.example.com/v2" % S) == "https://user:%s@mirror.example.com/v2" % MASK


def test_deep_nesting_does_not_recurse():
    deep = '{"a": ' * 50000 + '{"password": "%s"}' % S + "}" * 50000
    assert S not in mask_text(deep)
    assert S not in mask_text("password = " + "[" * 50000 + '"%s"' % S)


@pytest.mark.parametrize("garbage", ['"', "'", '"""', "[[", "{", "password =", "password:", "=:", "\\", "\ufeff"])
def test_malformed_text_never_raises(garbage):
    assert isinstance(mask_text(garbage + "\n" + garbage), str)


def test_data_masked_whatever_the_type():
    data = {"Password": [S], "auth": {"x": S}, "keep": ["a"], "text": 'token = "%s"' % S,
            "url": "https://u:%s@h" % S, "nested": [{"IdentityToken": 5}]}
    masked = mask_data(data)
    assert S not in json.dumps(masked)
    assert masked["keep"] == ["a"] and masked["nested"] == [{"IdentityToken": MASK}]


def test_value_by_path():
    assert mask_value(("plugins", "cri", "registry", "configs", "r", "auth", "username"), "u") == MASK
    assert mask_value(("plugins", "cri", "enable_cdi"), True) is True
    assert S not in repr(mask_value(("plugins", "x"), {"password": S}))
