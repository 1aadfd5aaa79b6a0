# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Hide credential values before they reach a diff, a log or a returned value.

Runs on managed nodes and on the controller: standard library only.
Registry credentials live in the very files this collection edits
(containerd's registry auth tables, daemon.json), so every diff and every
returned table goes through these helpers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MASK = "********"

# Key names (TOML or JSON) whose values are credentials. Matched on the last
# dotted component, case-insensitively.
SECRET_KEY_RE = re.compile(
    r"(?i)^(auth|password|passwd|identitytoken|identity_token|registrytoken|token|"
    r"secret|client_secret|api_key|apikey|.*_token|.*_password|.*_secret)$"
)

# `key = value` (TOML, including inside inline tables) and `"key": value` (JSON).
_TOML_PAIR_RE = re.compile(
    r"""(?P<key>(?:"[^"]*"|'[^']*'|[A-Za-z0-9_.-]+))(?P<sep>\s*=\s*)"""
    r"""(?P<val>"(?:[^"\\]|\\.)*"|'[^']*'|[^,{}\[\]\s#"']+)"""
)
_JSON_PAIR_RE = re.compile(
    r"""(?P<key>"(?:[^"\\]|\\.)*")(?P<sep>\s*:\s*)(?P<val>"(?:[^"\\]|\\.)*"|[^,{}\[\]\s"]+)"""
)


def is_secret_key(key):
    """True when a key name (possibly dotted or quoted) holds a credential."""
    name = str(key).strip().strip("\"'")
    return bool(SECRET_KEY_RE.match(name.rsplit(".", 1)[-1]))


def _mask_match(match):
    if not is_secret_key(match.group("key")):
        return match.group(0)
    return match.group("key") + match.group("sep") + '"' + MASK + '"'


def mask_text(text):
    """Mask credential values in TOML or JSON text, line by line, keeping layout."""
    if not text:
        return text
    text = _JSON_PAIR_RE.sub(_mask_match, text)
    return _TOML_PAIR_RE.sub(_mask_match, text)


def mask_data(value):
    """Return a copy of a dict/list structure with credential values masked."""
    if isinstance(value, dict):
        return dict(
            (k, MASK if is_secret_key(k) and not isinstance(v, (dict, list)) else mask_data(v))
            for k, v in value.items()
        )
    if isinstance(value, list):
        return [mask_data(v) for v in value]
    return value
