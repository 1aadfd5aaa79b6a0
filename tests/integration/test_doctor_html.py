"""The HTML diagnosis report opened in a real headless browser (Debian's chromium).

The report comes from real diagnoses: gpu_doctor over fake node trees (tests/unit/node_trees.py), a node
that could not be reached, and the cluster rules over the objects of the Kubernetes API STAND-IN. The
browser loads the file from disk with networking off; assertions read the DOM chromium produced (the
page's script writes what the browser computed, colours included, into data-* attributes and
#report-state), not pixels. A screenshot is taken and checked to be a real PNG.

Set GPUNODE_UPDATE_DOCS=1 to also store the screenshot as docs/diagnose-report.png.
"""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest

import daemons

sys.path.insert(0, os.path.join(daemons.REPO, "tests", "unit"))
sys.path.insert(0, os.path.join(daemons.REPO, "tests", "testbed"))
import node_trees  # noqa: E402
from kube_api_standin import Node  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor import cluster as doctor_cluster
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor import report as doctor_report  # noqa: E402

CHROMIUM_PACKAGE = "chromium"  # Debian's package (bookworm: chromium 1xx from bookworm-security)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RED = "rgb(198, 40, 40)"  # --critical in the page's CSS


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium, installed with apt when missing (a clean CI machine has none)."""
    path = shutil.which("chromium")
    if path is None:
        if os.geteuid() != 0:
            pytest.skip("chromium is not installed and installing it needs root")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", CHROMIUM_PACKAGE],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        path = shutil.which("chromium")
    assert path, "chromium not found after installing %s" % CHROMIUM_PACKAGE
    return path


def run_chromium(chromium, *args):
    profile = tempfile.mkdtemp(prefix="gpunode-chromium-")
    try:
        proc = subprocess.run([chromium] + FLAGS + ["--user-data-dir=" + profile] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-2000:]
    return proc.stdout.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    results = []
    for name, platform in (("gpu-a", "kubeadm-containerd"), ("gpu-b", "eks-al2"), ("gpu-c", "k3s")):
        node_trees.build(platform, base / name)
        results.append((name, doctor_rules.diagnose(str(base / name), query_cri=False)))
    results.append(("gpu-d", {"unreachable": True, "msg": "ssh: connect to host gpu-d port 22: No route to host"}))
    nodes = [Node("gpu-a").to_api(), Node("gpu-b", "zero_allocatable").to_api()]
    cluster = doctor_cluster.cluster_findings(nodes, [], [], [])
    cluster.update(checked=True, error=None)
    document = doctor_report.build_report(results, cluster)
    path = str(base / "diagnose.html")
    with open(path, "w") as handle:
        handle.write(doctor_report.render_html(document))
    return document, path


class Dom(html.parser.HTMLParser):
    """Rows, cells, finding panels and the script's state from chromium's --dump-dom output."""

    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.rows, self.cells, self.findings, self.root = [], [], [], {}
        self.panel, self.state, self._in_state = {}, "", False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "html":
            self.root = attrs
        elif tag == "tr" and "node-row" in (attrs.get("class") or ""):
            self.rows.append(attrs["data-node"])
        elif tag == "td" and "data-node" in attrs:
            self.cells.append(attrs)
        elif tag == "details" and "in-panel" not in (attrs.get("class") or ""):
            self.findings.append(attrs)
        elif tag == "div" and attrs.get("id") == "panel":
            self.panel = attrs
        elif tag == "pre" and attrs.get("id") == "report-state":
            self._in_state = True

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_state = False

    def handle_data(self, data):
        if self._in_state:
            self.state += data


def dump(chromium, path, fragment=""):
    dom = Dom()
    dom.feed(run_chromium(chromium, "--dump-dom", "file://%s%s" % (path, fragment)))
    return dom


def test_matrix_shows_every_node_and_finding(chromium, report):
    document, path = report
    dom = dump(chromium, path)
    assert dom.root.get("data-report-ready") == "1", "the page's script did not run"
    assert dom.rows == ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "(cluster)"]
    cells = dict(((c["data-node"], c["data-rule"]), c) for c in dom.cells)
    expected = [(n["name"], f) for n in document["nodes"] for f in n["findings"]]
    expected += [("(cluster)", f) for f in document["cluster"]["findings"]]
    assert len(expected) >= 6
    for node, item in expected:
        cell = cells[(node, item["rule"])]
        assert cell["data-severity"] == item["severity"], (node, item["rule"])
        if item["severity"] == "critical":
            assert cell["data-bg"] == RED, (node, item["rule"], cell["data-bg"])  # computed by the browser
    assert cells[("gpu-b", "toolkit-glibc-too-old")]["data-severity"] == "critical"
    assert cells[("gpu-c", "generated-config-edited")]["data-severity"] == "warning"
    assert cells[("gpu-a", "nouveau-loaded")]["data-severity"] == "pass"
    assert cells[("gpu-d", "nvidia-runtime-missing")]["data-severity"] == "unknown"
    assert cells[("(cluster)", "cluster-gpu-not-allocatable")]["data-severity"] == "critical"
    assert len(dom.findings) == len(expected)
    assert sorted((f["data-node"], f["data-rule"]) for f in dom.findings) == sorted(
        (node, item["rule"]) for node, item in expected)
    state = json.loads(dom.state)
    assert state["nodes"] == dom.rows and state["findings"] == len(expected)
    assert state["colours"]["critical"] == RED and state["colours"]["pass"] != RED


def test_a_cell_opens_its_findings_in_the_panel(chromium, report):
    _document, path = report
    dom = dump(chromium, path, "#selftest")
    state = json.loads(dom.state)
    selected = state["selftest"]
    assert selected and selected["shown"] >= 1
    assert dom.panel.get("data-rule") == selected["rule"] == selected["panel_rule"]
    assert dom.panel.get("data-node") == selected["node"]
    assert dom.panel.get("data-findings") == str(selected["shown"])


def test_screenshot(chromium, report, tmp_path):
    _document, path = report
    shot = str(tmp_path / "diagnose-report.png")
    run_chromium(chromium, "--window-size=1400,1000", "--hide-scrollbars", "--screenshot=" + shot,
                 "file://" + path)
    with open(shot, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert (width, height) == (1400, 1000) and os.path.getsize(shot) > 20000
    if os.environ.get("GPUNODE_UPDATE_DOCS") == "1":
        shutil.copy(shot, os.path.join(daemons.REPO, "docs", "diagnose-report.png"))
