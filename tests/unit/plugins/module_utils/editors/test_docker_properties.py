"""Property-based tests of the daemon.json editor (module_utils.editors.docker_config).

For any daemon.json, in any layout real tools write (2/4 spaces, tabs, compact, CRLF, BOM,
escaped or raw unicode, odd whitespace around tokens), the editor either refuses with its own
error (DockerConfigError: file, line and column) or returns text that parses, equals the input
plus exactly the change asked for, keeps every other member's bytes and order, is idempotent,
and `absent` after `present` gives back the input (with the two documented keys that dockerd's
reload needs). Profiles: `ci` (bounded, derandomized) by default, `fuzz` with HYPOTHESIS_PROFILE=fuzz.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import glob
import json
import os
import re
from collections import OrderedDict

from hypothesis import assume, given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import daemon_json as dj
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import docker_config as dc
from unit_paths import UNIT_DIR

PATH = "/etc/docker/daemon.json"
NAME = "nvidia"
CORPUS = sorted(glob.glob(os.path.join(UNIT_DIR, "corpus", "docker", "*.json")))
TOUCHED = ("runtimes", "default-runtime", "features")

# --- documents -----------------------------------------------------------------

text_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6), text_values,
                    st.floats(allow_nan=False, allow_infinity=False, width=32))
keys = st.one_of(st.sampled_from(["log-driver", "log-opts", "debug", "registry-mirrors", "exec-opts",
                                  "data-root", "insecure-registries", "storage-driver", "proxies"]),
                 st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8))


def objects(values):
    return st.lists(st.tuples(keys, values), max_size=4, unique_by=lambda kv: kv[0]).map(OrderedDict)


values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), objects(inner)), max_leaves=8)
TYPED = {"hosts": st.lists(text_values, max_size=2), "exec-opts": st.lists(text_values, max_size=2),
         "data-root": text_values, "containerd": text_values}
runtime_names = st.sampled_from(["crun", "kata", "runsc", "nvidia-legacy", "youki"])
runtime_objects = st.fixed_dictionaries(
    OrderedDict([("path", st.sampled_from(["/usr/bin/crun", "kata-runtime", "/opt/é/runsc"]))]),
    optional=OrderedDict([("runtimeArgs", st.lists(text_values, max_size=2))])).map(OrderedDict)


@st.composite
def documents(draw, with_runtime=False):
    """A daemon.json object; optional runtimes/default-runtime/features anywhere in the key order."""
    data = draw(objects(values))
    for key in TOUCHED:
        data.pop(key, None)
    for key in ("hosts", "exec-opts", "data-root", "containerd"):  # dockerd reads these as strings or lists of them
        if key in data:
            data[key] = draw(TYPED[key])
    extras = []
    if draw(st.booleans()):
        runtimes = draw(st.lists(st.tuples(runtime_names, runtime_objects), max_size=3,
                                 unique_by=lambda kv: kv[0]).map(OrderedDict))
        if with_runtime:
            runtimes[NAME] = OrderedDict([("path", "/old/nvidia"), ("runtimeArgs", ["--old"])])
        extras.append(("runtimes", runtimes))
    if draw(st.booleans()):
        extras.append(("default-runtime", draw(st.sampled_from(["runc", "crun", NAME]))))
    if draw(st.booleans()):
        extras.append(("features", draw(objects(st.booleans()))))
    items = list(data.items())
    for extra in extras:
        items.insert(draw(st.integers(0, len(items))), extra)
    return OrderedDict(items)


@st.composite
def rendered(draw, document):
    """document as text in one of the layouts real tools write."""
    indent = draw(st.sampled_from([None, 2, 4, "\t", 1]))
    ascii_only = draw(st.booleans())
    if indent is None:
        separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
        text = json.dumps(document, separators=separators, ensure_ascii=ascii_only)
    else:
        text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    if draw(st.booleans()):
        text += "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = dj.BOM + text
    return text


TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+')


@st.composite
def reflowed(draw, text):
    """The same JSON with random whitespace between its tokens (a mutation of any layout)."""
    body = text[1:] if text.startswith(dj.BOM) else text
    tokens = TOKEN.findall(body)
    gaps = draw(st.lists(st.sampled_from(["", "", " ", "\n", "\t", "\r\n", "  \n    ", "\n\t\t"]),
                         min_size=len(tokens) + 1, max_size=len(tokens) + 1))
    return text[: len(text) - len(body)] + "".join(g + t for g, t in zip(gaps, tokens)) + gaps[-1]


def daemon_json(with_runtime=False):
    return documents(with_runtime).flatmap(lambda d: st.tuples(st.just(d), rendered(d)))


def corpus_mutations():
    return st.sampled_from(CORPUS).map(lambda f: open(f, encoding="utf-8", newline="").read()).flatmap(reflowed)


requests = st.fixed_dictionaries(OrderedDict([
    ("runtime_args", st.lists(st.sampled_from(["--debug", "--log=/var/log/x", "é"]), max_size=2)),
    ("set_as_default", st.booleans()),
    ("cdi", st.booleans()),
]))


# --- helpers ---------------------------------------------------------------------

def edit(text, state="present", **request):
    return dc.edit_daemon_json(text, PATH, NAME, "/usr/bin/nvidia-container-runtime", state=state, **request)


def parse(text):
    return json.loads(text[1:] if text.startswith(dj.BOM) else text, object_pairs_hook=OrderedDict)


def members(text):
    """Top-level member -> its exact source text."""
    body = text[1:] if text.startswith(dj.BOM) else text
    obj = dj.scan_object(body, dj.skip_ws(body, 0))
    return OrderedDict((m.key, body[m.key_start:m.value_end]) for m in obj.members)


def expected_after_present(data, runtime_args, set_as_default, cdi):
    expected = copy.deepcopy(data)
    runtime = expected.setdefault("runtimes", OrderedDict()).setdefault(NAME, OrderedDict())
    had_args = "runtimeArgs" in runtime
    runtime["path"] = "/usr/bin/nvidia-container-runtime"
    if runtime_args or had_args:
        runtime["runtimeArgs"] = list(runtime_args)
    if set_as_default:
        expected["default-runtime"] = NAME
    if cdi:
        expected.setdefault("features", OrderedDict())["cdi"] = True
    return expected


def check_present(text, data, request):
    out = edit(text, **request)
    after = parse(out)
    assert after == expected_after_present(data, **request)
    # Every member the edit is not about keeps its bytes, and all old members keep their order.
    old, new = members(text), members(out)
    for key, source in old.items():
        if key not in TOUCHED:
            assert new[key] == source
    assert [k for k in new if k in old] == list(old)
    assert out.startswith(dj.BOM) == text.startswith(dj.BOM)
    if "\r\n" in text and "\n" not in text.replace("\r\n", ""):
        assert "\n" not in out.replace("\r\n", "")  # a CRLF file stays CRLF
    assert edit(out, **request) == out  # idempotent
    return out


# --- properties --------------------------------------------------------------------

@given(daemon_json(), requests)
def test_present_is_input_plus_exactly_the_change(doc, request):
    data, text = doc
    check_present(text, data, request)


@given(daemon_json(with_runtime=True), requests)
def test_existing_runtime_is_updated_in_place(doc, request):
    data, text = doc
    check_present(text, data, request)


@given(daemon_json(), requests)
def test_absent_after_present_gives_back_the_input(doc, request):
    data, text = doc
    assume(NAME not in data.get("runtimes", {}) and data.get("default-runtime") != NAME)
    restored = edit(edit(text, **request), state="absent")
    expected = copy.deepcopy(data)
    expected.setdefault("runtimes", OrderedDict())  # kept so that a reload unregisters the runtime
    if request["set_as_default"]:
        expected["default-runtime"] = dc.STOCK_RUNTIME  # dockerd's stock default, the only one it can know
    if request["cdi"]:
        expected.setdefault("features", OrderedDict())["cdi"] = True  # CDI serves every runtime: kept
    assert parse(restored) == expected
    exact = ("runtimes" in data and (not request["set_as_default"] or data.get("default-runtime") == "runc")
             and (not request["cdi"] or data.get("features", {}).get("cdi") is True))
    if exact:
        assert restored == text
    assert edit(restored, state="absent") == restored
    assert edit(edit(restored, **request), state="absent") == restored


@given(corpus_mutations(), requests)
def test_corpus_in_any_layout(text, request):
    check_present(text, parse(text), request)


@given(st.one_of(daemon_json().map(lambda d: d[1]), corpus_mutations()).flatmap(
    lambda text: st.tuples(st.just(text), st.integers(0, len(text)), st.text(max_size=3))), requests,
    st.sampled_from(["present", "absent"]))
def test_any_damage_is_refused_with_a_position_or_edited(damaged, request, state):
    text, at, junk = damaged
    broken = text[:at] + junk + text[at + len(junk):]
    try:
        out = edit(broken, state=state, **request)
    except dj.DockerConfigError as exc:
        message = str(exc)
        assert PATH in message and "untouched" in message
        return
    parse(out)  # whatever was accepted gives JSON back
    assert edit(out, state=state, **request) == out


@given(daemon_json())
def test_absent_removes_a_null_runtime(doc):
    """`"nvidia": null` stops dockerd 28.5 at start ("either a runtimeType or a path must be configured") while
    `dockerd --validate` passes it: absent removes the member, whatever the layout around it."""
    data, text = doc
    assume(NAME not in (data.get("runtimes") or {}) and data.get("default-runtime") != NAME)
    body = text[1:] if text.startswith(dc.BOM) else text
    nulled = text[:len(text) - len(body)] + dc.set_key(body, ("runtimes", NAME), None, PATH, dc.detect_indent(body))
    restored = edit(nulled, state="absent")
    assert NAME not in (parse(restored).get("runtimes") or {})
    assert parse(restored) == parse(edit(edit(text), state="absent"))
