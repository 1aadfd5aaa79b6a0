# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Kubelet feature gates, written in each distribution's own kubelet config place.

* kubeadm and plain kubelets: the KubeletConfiguration file (``featureGates:`` block mapping);
* k3s and RKE2: ``/etc/rancher/<name>/config.yaml`` (a ``feature-gates=`` item of ``kubelet-arg``);
* MicroK8s and Canonical Kubernetes (snap): the kubelet args file (a ``--feature-gates=`` line).

There is no YAML library on the node, so the YAML files are edited line by line, and only where their
shape is plain: one document, block style, no anchors, aliases or tags near the edit. Every other line
and comment stays byte for byte; a shape that cannot be edited safely raises GateError naming the file,
the line and what to do. Editing a second time with the same gates returns the text unchanged.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:  # PyYAML, where the node has it (cloud-init needs it): then a real YAML parser checks every edit
    import yaml
except ImportError:  # pragma: no cover - depends on the node
    yaml = None

RANCHER_CONFIG = "/etc/rancher/%s/config.yaml"
SNAP_ARGS = {"microk8s": "/var/snap/microk8s/current/args/kubelet", "k8s-snap": "/var/snap/k8s/common/args/kubelet"}
# The unit that runs the kubelet, to restart after an edit; k3s and RKE2 embed it (and containerd) in their
# own service, which is never restarted for a gate (it would restart containerd too).
KUBELET_SERVICE = {"microk8s": "snap.microk8s.daemon-kubelite", "k8s-snap": "snap.k8s.kubelet"}
# Go's strconv.ParseBool, which reads --feature-gates values (flags and k3s's kubelet-arg items).
TRUE_WORDS = ("1", "t", "T", "true", "True", "TRUE")
FALSE_WORDS = ("0", "f", "F", "false", "False", "FALSE")
# A KubeletConfiguration's featureGates values are YAML booleans: "t" or 1 there is no boolean, and kubelet does
# not start with it. y/n, booleans to some YAML readers only, are rewritten too.
YAML_TRUE_WORDS = ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON")
YAML_FALSE_WORDS = ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF")
_CONTENT = re.compile(r"^([ ]*)(?!#)(\S)")
_COMMENT = re.compile(r"\s+#.*$")


class GateError(Exception):
    """A kubelet config this module cannot edit safely; the text names the file, the line and what to do."""


def word(value):
    return "true" if value else "false"


def same(text, value):
    return text in (TRUE_WORDS if value else FALSE_WORDS)


def newline_of(text):
    return "\r\n" if "\r\n" in text else "\n"


def place(kubelet):
    """(kind, path, service) of this distribution's kubelet config place; kind None: none this module edits."""
    platform = kubelet.get("platform")
    if platform in ("k3s", "rke2"):
        return "rancher", RANCHER_CONFIG % platform, ""
    if platform in SNAP_ARGS:
        return "args", SNAP_ARGS[platform], KUBELET_SERVICE[platform]
    path = kubelet.get("config_path")
    if platform is None and path and not path.endswith(".json"):
        return "kubelet_config", path, (kubelet.get("service") or "kubelet.service").replace(".service", "")
    return None, path, ""


def rancher_dropin_override(read, glob, path):
    """Why a k3s/RKE2 drop-in (config.yaml.d/*.yaml, read after config.yaml) would replace its kubelet-arg, or None."""
    for dropin in sorted(glob(path + ".d", "*.yaml")):
        if re.search(r"""^["']?kubelet-arg["']?[ \t]*:""", read(dropin) or "", re.M):
            return ("%s sets kubelet-arg, which replaces the list of %s: put the feature-gates= item there (or write "
                    "it as kubelet-arg+: to append), and run again; nothing was written." % (dropin, path))
    return None


def refusal(platform, path):
    """Why the gate cannot be written here, and where the operator sets it instead."""
    if platform == "k0s":
        return ("k0s generates the kubelet config from its worker profiles (the cluster's k0s config, "
                "spec.workerProfiles[].values.featureGates): set the gates there; this node was left as it was.")
    if path:
        return ("%s is a JSON kubelet config (EKS and others generate it at boot): set featureGates in what "
                "generates it (nodeadm's kubelet.config, or the bootstrap's --kubelet-extra-args "
                "--feature-gates=...); the file was left as it was." % path)
    return ("No kubelet config file was found on this node (no --config and no /var/lib/kubelet/config.yaml): "
            "nothing was written. Join the node first, or set the gates where its kubelet gets its flags.")


# --- comma-separated gate lists: "A=true,B=false" ----------------------------------------------------------

def merge_gate_list(value, gates):
    """value with gates set, other items kept as written; equal to value when nothing changes."""
    items = value.split(",") if value.strip() else []
    names = [item.partition("=")[0].strip() for item in items]
    for name, wanted in sorted(gates.items()):
        if name in names:
            index = len(names) - 1 - names[::-1].index(name)  # the last occurrence wins, as in kubelet
            if not same(items[index].partition("=")[2].strip(), wanted):
                items[index] = "%s=%s" % (name, word(wanted))
        else:
            items.append("%s=%s" % (name, word(wanted)))
            names.append(name)
    return ",".join(items)


def gate_settings(values):
    """{gate: setting} of --feature-gates values in order, a later setting winning, as kubelet merges them."""
    settings = {}
    for value in values:
        for item in value.split(","):
            name, _eq, setting = item.partition("=")
            settings[name.strip()] = setting.strip()
    return settings


def unquote(text, where):
    """(quote, inner) of a scalar written plain, 'single' or "double" (without escapes)."""
    if text[:1] in ("'", '"'):
        quote = text[0]
        if len(text) < 2 or text[-1] != quote or quote in text[1:-1] or "\\" in text:
            raise GateError("%s: cannot read the quoted value %s (escapes or a quote inside): write it as one "
                            "plain or quoted string without escapes, and run again." % (where, text))
        return quote, text[1:-1]
    return "", text


# --- line helpers -------------------------------------------------------------------------------------

def split_lines(text):
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += newline_of(text)  # the edit appends below it; the rest of the line stays as it was
    return lines


def content(line):
    """(indent, text without a trailing comment) of a line with content, or None for blanks and comments."""
    match = _CONTENT.match(line)
    if match is None:
        return None
    body = _COMMENT.sub("", line.rstrip("\r\n")[len(match.group(1)):])
    return len(match.group(1)), body.rstrip()


def _value_span(line):
    """(start, end) of a `key: value` line's value, the trailing comment and line end excluded."""
    stripped = line.rstrip("\r\n")
    colon = stripped.index(":") + 1
    body = _COMMENT.sub("", stripped[colon:])
    start = colon + len(body) - len(body.lstrip())
    return start, colon + len(body.rstrip())


def check_plain_yaml(path, lines):
    """Refuse several documents, flow style or an indented root: shapes a line edit could break."""
    seen = False
    for number, line in enumerate(lines, 1):
        found = content(line)
        if found is None:
            continue
        indent, body = found
        if body in ("---", "...") or body.startswith(("--- ", "%")):
            if seen or body != "---":
                raise GateError("%s line %d: the file holds several YAML documents (or directives): the gate cannot "
                                "be placed safely. Keep one document in it, and run again." % (path, number))
            continue
        if not seen and (indent or body.startswith(("{", "[", "-"))):
            raise GateError("%s line %d: the file is not a block-style YAML mapping at its first column (JSON, flow "
                            "style or a list): it is left as it was. Rewrite it in block style, one key per line, "
                            "and run again." % (path, number))
        if not indent and not _TOP_LINE.match(body):
            raise GateError("%s line %d: a line at the first column that is not a plain `key:` or `- item` (a tag, "
                            "anchor or complex key, or a value continued from the line above): the gate cannot be "
                            "placed safely. Write it as `key: value` on one line, and run again." % (path, number))
        seen = True


# A top-level line: a key, plain or quoted whole, then `:`; or a list item of the key above.
_TOP_LINE = re.compile(r"""^(?:"[^"\\]*"|'[^']*'|[^\s"'!&*?|>%@`{}\[\],#-]|-\S).*?:(?:\s|$)|^-(?:\s|$)""")


def top_key(path, lines, key):
    """Index of the top-level `key:` line, or None; a key written twice is refused."""
    pattern = re.compile(r"""^(["']?)%s\1[ \t]*:(\s|$)""" % re.escape(key))
    found = [index for index, line in enumerate(lines) if pattern.match(line)]
    if len(found) > 1:
        raise GateError("%s lines %s: %s is set more than once: keep one, and run again."
                        % (path, " and ".join(str(i + 1) for i in found), key))
    return found[0] if found else None


def block(lines, start):
    """Indexes of the content lines below lines[start] that belong to its block (until the next top-level key)."""
    members = []
    for index in range(start + 1, len(lines)):
        found = content(lines[index])
        if found is None:
            continue
        if found[0] == 0 and not found[1].startswith("- ") and found[1] != "-":
            break
        members.append(index)
    return members


def refuse_inline(path, lines, index, key, what):
    """A value on the key's own line (a flow collection, a scalar, null, an anchor, alias or tag) is refused."""
    start, end = _value_span(lines[index])
    value = lines[index][start:end]
    if value:
        raise GateError("%s line %d: %s is written inline (%s), which this edit does not change: write it as %s, "
                        "and run again." % (path, index + 1, key, value, what))


def child_indent(lines, default=2):
    """The indentation the file uses for nested keys (its first indented line), default 2."""
    for line in lines:
        found = content(line)
        if found and found[0]:
            return found[0]
    return default


def insert_after(lines, index, new, newline):
    """lines with `new` (texts) inserted after lines[index] (-1: at the start; len: at the end)."""
    return lines[:index + 1] + [text + newline for text in new] + lines[index + 1:]


# --- KubeletConfiguration featureGates ------------------------------------------------------------------

_CHILD = re.compile(r"""^[ ]+(["']?)([A-Za-z0-9]+)\1[ \t]*:([ \t].*|)$""")


def edit_kubelet_config(path, text, gates):
    """The KubeletConfiguration text with gates set in its featureGates block mapping."""
    lines = split_lines(text)
    newline = newline_of(text)
    check_plain_yaml(path, lines)
    key = top_key(path, lines, "featureGates")
    indent = " " * child_indent(lines)
    if key is None:
        new = ["featureGates:"] + ["%s%s: %s" % (indent, name, word(on)) for name, on in sorted(gates.items())]
        return "".join(insert_after(lines, len(lines), new, newline))
    refuse_inline(path, lines, key, "featureGates", "a block mapping, one gate per line")
    members = block(lines, key)
    found = {}
    for index in members:
        match = _CHILD.match(lines[index].rstrip("\r\n"))
        if not match or content(lines[index])[0] != content(lines[members[0]])[0]:
            raise GateError("%s line %d: featureGates holds something other than one `Gate: true|false` per line at "
                            "one indentation: write it so, and run again." % (path, index + 1))
        found[match.group(2)] = index
    if members:
        indent = " " * content(lines[members[0]])[0]
    for name, on in sorted(gates.items()):
        if name in found:
            lines[found[name]] = set_value(path, lines[found[name]], found[name], on)
    missing = ["%s%s: %s" % (indent, name, word(on)) for name, on in sorted(gates.items()) if name not in found]
    return "".join(insert_after(lines, members[-1] if members else key, missing, newline))


def set_value(path, line, index, on):
    start, end = _value_span(line)
    value = line[start:end]
    if value[:1] in ("&", "*", "!"):
        raise GateError("%s line %d: the gate's value uses an anchor, alias or tag (%s): write true or false, and "
                        "run again." % (path, index + 1, value))
    unquote(value, "%s line %d" % (path, index + 1))  # a quote left open continues on the next line
    if value in (YAML_TRUE_WORDS if on else YAML_FALSE_WORDS):
        return line
    return line[:start] + ("" if value else " ") + word(on) + line[end:]


# --- k3s / RKE2 config.yaml kubelet-arg ------------------------------------------------------------------

_ITEM = re.compile(r"^([ ]*)-([ ]+)(.*)$")
_FLAG = re.compile(r"^(?:--)?feature-gates=(.*)$")


def edit_rancher_config(path, text, gates):
    """The k3s/RKE2 config text with gates in the feature-gates= item of its kubelet-arg list."""
    lines = split_lines(text)
    newline = newline_of(text)
    check_plain_yaml(path, lines)
    key = top_key(path, lines, "kubelet-arg")
    wanted = merge_gate_list("", gates)
    if key is None:
        return "".join(insert_after(lines, len(lines), ["kubelet-arg:", '  - "feature-gates=%s"' % wanted], newline))
    refuse_inline(path, lines, key, "kubelet-arg", 'a block list, one "flag=value" item per line')
    members = block(lines, key)
    items = []  # (index, quote, text) of each item; an open quote (continued below) is refused by unquote
    for index in members:
        match = _ITEM.match(lines[index].rstrip("\r\n"))
        if not match or content(lines[index])[0] != content(lines[members[0]])[0] or \
                item_text(lines[index])[:1] in ("&", "*", "!", "[", "{", "|", ">"):
            raise GateError("%s line %d: kubelet-arg holds something other than one \"flag=value\" item per line: "
                            "write it so, and run again." % (path, index + 1))
        items.append((index,) + unquote(item_text(lines[index]), "%s line %d" % (path, index + 1)))
    gate_items = [item for item in items if _FLAG.match(item[2])]
    if not gate_items:
        first = _ITEM.match(lines[items[0][0]].rstrip("\r\n")) if items else None
        prefix = first.group(1) + "-" + first.group(2) if first else "  - "
        quote = items[0][1] if items else '"'
        new = "%s%sfeature-gates=%s%s" % (prefix, quote, wanted, quote)
        return "".join(insert_after(lines, items[-1][0] if items else key, [new], newline))
    index, quote, inner = gate_items[-1]  # kubelet merges repeated --feature-gates flags, the last one winning
    flag, _eq, value = inner.partition("=")
    merged = merge_gate_list(value, gates)
    if merged != value:
        start, end = _item_span(lines[index])
        lines[index] = lines[index][:start] + "%s%s=%s%s" % (quote, flag, merged, quote) + lines[index][end:]
    return "".join(lines)


def _item_span(line):
    stripped = line.rstrip("\r\n")
    match = _ITEM.match(stripped)
    start = len(match.group(1)) + 1 + len(match.group(2))
    return start, start + len(_COMMENT.sub("", stripped[start:]).rstrip())


def item_text(line):
    start, end = _item_span(line)
    return line[start:end]


# --- MicroK8s / Canonical Kubernetes args file -----------------------------------------------------------

_ARG = re.compile(r"""^([ \t]*--feature-gates(?:=|[ \t]+))(["']?)(.*?)\2([ \t]*)$""")


def edit_args_file(path, text, gates):
    """The kubelet args file with gates in its last --feature-gates line (a new line when there is none)."""
    lines = split_lines(text)
    flags = [i for i, line in enumerate(lines) if _ARG.match(line.rstrip("\r\n"))]
    effective = gate_settings(_ARG.match(lines[index].rstrip("\r\n")).group(3) for index in flags)
    if all(same(effective.get(name, ""), on) for name, on in gates.items()):
        return text
    if not flags:
        return "".join(insert_after(lines, len(lines), ["--feature-gates=%s" % merge_gate_list("", gates)],
                                    newline_of(text)))
    index = flags[-1]
    match = _ARG.match(lines[index].rstrip("\r\n"))
    ending = lines[index][len(lines[index].rstrip("\r\n")):]
    lines[index] = "%s%s%s%s%s%s" % (match.group(1), match.group(2), merge_gate_list(match.group(3), gates),
                                     match.group(2), match.group(4), ending)
    return "".join(lines)


EDITORS = {"kubelet_config": edit_kubelet_config, "rancher": edit_rancher_config, "args": edit_args_file}


def edit(kind, path, text, gates):
    """The new text of path; `text` itself when the gates are set already (a second edit is a no-op)."""
    after = EDITORS[kind](path, text, gates)
    # The appended newline of a last line without one is not a change of its own.
    if after.rstrip("\r\n") == text.rstrip("\r\n"):
        return text
    if kind != "args" and yaml is not None:
        _check_with_yaml(kind, path, text, after, gates)
    return after


def _check_with_yaml(kind, path, before, after, gates):
    """The file is YAML its reader starts with, and the edit changes nothing but the gates (PyYAML's reading)."""
    try:
        old = yaml.safe_load(before) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        # No parser message: it may quote the file (a k3s config holds the cluster's join token).
        raise GateError("%s line %s: not valid YAML, so %s does not start with it as it is; nothing was written. "
                        "Fix the file, and run again." % (path, mark.line + 1 if mark else "?",
                                                          "k3s/RKE2" if kind == "rancher" else "kubelet"))
    try:
        new = yaml.safe_load(after)
    except yaml.YAMLError:
        new = None
    if not isinstance(old, dict) or new != _expected(kind, old, new, gates):
        raise GateError("%s: placing the gates by line would change more than the gates in this file (a YAML shape "
                        "the edit does not handle); nothing was written. Write the file in plain block style, one "
                        "key per line, or set the gates by hand, and run again." % path)


def _expected(kind, old, new, gates):
    """What the edited file must read as: `old` with the gates set (and nothing else changed)."""
    expected = dict(old)
    if kind == "kubelet_config":
        wanted = dict(old.get("featureGates") or {})
        wanted.update(gates)
        expected["featureGates"] = wanted
        return expected
    items = new.get("kubelet-arg") if isinstance(new, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        return None
    kept = [item for item in items if not _FLAG.match(item)]
    if kept != [item for item in (old.get("kubelet-arg") or []) if not _FLAG.match(str(item))]:
        return None
    effective = gate_settings(_FLAG.match(item).group(1) for item in items if _FLAG.match(item))
    if not all(same(effective.get(name, ""), on) for name, on in gates.items()):
        return None
    expected["kubelet-arg"] = items
    return expected


# --- the kubelet's version ---------------------------------------------------------------------------

_VERSION = re.compile(r"v(\d+\.\d+\.\d+)")
SNAP_META = {"microk8s": "/snap/microk8s/current/meta/snap.yaml", "k8s-snap": "/snap/k8s/current/meta/snap.yaml"}


def kubelet_version(kubelet, run, read):
    """The kubelet's version ("1.33.4"), or "" when it cannot be told.

    run(argv) -> (rc, out); read(path) -> text or None. k3s and RKE2 embed kubelet in their own binary (which says
    its Kubernetes version); the snaps say it in their metadata; a kubelet binary is asked.
    """
    platform = kubelet.get("platform")
    if platform in SNAP_META:
        match = re.search(r"^version:\s*['\"]?v?(\d+\.\d+\.\d+)", read(SNAP_META[platform]) or "", re.M)
        return match.group(1) if match else ""
    binary = kubelet.get("binary") or ""
    if not binary or (kubelet.get("embedded_in") and platform not in ("k3s", "rke2")):
        return ""
    rc, out = run([binary, "--version"])
    match = _VERSION.search(out) if rc == 0 else None
    return match.group(1) if match else ""


def minor(version):
    return ".".join(version.split(".")[:2])
