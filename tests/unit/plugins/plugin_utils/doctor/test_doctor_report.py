"""The diagnosis report: document schema, console summary, HTML structure (no browser here;
tests/integration/test_doctor_html.py opens the HTML in a real headless chromium)."""
import html.parser
import json
import sys
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor import report as doctor_report  # noqa: E402


def fleet(tmp_path):
    """Three diagnosed trees and one node that could not be reached."""
    results = []
    for name in ("kubeadm-containerd", "eks-al2", "k8s-snap-default"):
        node_trees.build(name, tmp_path / name)
        results.append((name, doctor_rules.diagnose(str(tmp_path / name), query_cri=False)))
    results.append(("gone", {"unreachable": True, "msg": "ssh: connect to host gone port 22: No route to host"}))
    return results


def test_document_schema(tmp_path):
    report = doctor_report.build_report(fleet(tmp_path), generated_at="2024-01-01T00:00:00Z")
    assert report["schema"] == "gpunode.nvidia/diagnose-report" and report["schema_version"] == 1
    assert report["summary"] == {"nodes": 4, "nodes_ok": 0, "critical": 5, "warning": 0, "info": 0,
                                 "status": "critical"}
    names = [n["name"] for n in report["nodes"]]
    assert names == ["kubeadm-containerd", "eks-al2", "k8s-snap-default", "gone"]
    gone = report["nodes"][3]
    assert gone["reachable"] is False and gone["findings"][0]["rule"] == "node-unreachable"
    assert "No route to host" in gone["error"]
    ids = [r["id"] for r in report["rules"]]
    assert len(ids) == len(set(ids)) and "node-unreachable" in ids and "cluster-gpu-pod-pending" in ids
    for rule in report["rules"]:
        assert set(rule) == {"id", "severity", "incident", "title", "scope"}
    json.dumps(report)  # plain JSON all the way down
    assert report["cluster"] == {"checked": False, "error": None, "status": "ok", "gpu_nodes": [],
                                 "counts": {"critical": 0, "warning": 0, "info": 0}, "findings": []}


def test_console_fits_the_width_and_names_every_node(tmp_path):
    report = doctor_report.build_report(fleet(tmp_path))
    text = doctor_report.render_console(report, width=76, json_path="/tmp/r.json")
    lines = text.splitlines()
    commands = [line for line in lines if line.lstrip().startswith(("$ ansible-playbook", "-e "))]
    assert commands  # playbook commands are never cut (they must paste); everything else wraps
    assert max(len(line) for line in lines if line not in commands) <= 76
    assert any(line.endswith("-l kubeadm-containerd \\") for line in commands)
    for name in ("kubeadm-containerd", "eks-al2", "k8s-snap-default", "gone"):
        assert any(line.startswith(name) for line in lines)
    assert "XX [I4] toolkit-glibc-too-old" in text
    assert lines[-1] == "JSON report: /tmp/r.json"


def test_fix_command():
    fix = {"playbook": "gpunode.nvidia.site", "vars": {"container_runtime_containerd_config": "/x.toml"}}
    assert doctor_report.fix_command(fix, "n1") == (
        "ansible-playbook -i INVENTORY gpunode.nvidia.site -l n1 -e '{\"container_runtime_containerd_config\": "
        "\"/x.toml\"}'")
    assert doctor_report.fix_command({"playbook": None}) is None


class Cells(html.parser.HTMLParser):
    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.cells, self.details, self.scripts_with_src, self.links = [], [], 0, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "td" and "data-node" in attrs:
            self.cells.append(attrs)
        if tag == "details":
            self.details.append(attrs)
        if tag == "script" and attrs.get("src"):
            self.scripts_with_src += 1
        if tag in ("link", "img", "iframe"):
            self.links += 1


def test_html_is_self_contained_with_a_cell_per_node_and_rule(tmp_path):
    report = doctor_report.build_report(fleet(tmp_path))
    page = doctor_report.render_html(report)
    parser = Cells()
    parser.feed(page)
    assert parser.scripts_with_src == 0 and parser.links == 0 and "http://" not in page and "https://" not in page
    node_rules = [r["id"] for r in report["rules"] if r["scope"] == "node"]
    assert len(parser.cells) == 4 * len(node_rules)
    cell = dict(((c["data-node"], c["data-rule"]), c) for c in parser.cells)
    assert cell[("eks-al2", "toolkit-glibc-too-old")]["data-severity"] == "critical"
    assert cell[("eks-al2", "nouveau-loaded")]["data-severity"] == "pass"
    assert cell[("gone", "node-unreachable")]["data-severity"] == "critical"
    assert cell[("gone", "nvidia-runtime-missing")]["data-severity"] == "unknown"
    assert len(parser.details) == sum(len(n["findings"]) for n in report["nodes"])


def test_html_escapes_what_the_node_reported(tmp_path):
    report = doctor_report.build_report(fleet(tmp_path))
    finding = next(f for n in report["nodes"] for f in n["findings"])
    finding["message"] = '<script>alert("x")</script> & more'
    page = doctor_report.render_html(report)
    assert '<script>alert("x")</script>' not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more" in page
