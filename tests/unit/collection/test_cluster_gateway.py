"""One front door to the cluster: only plugin_utils/cluster/client.py imports the kubernetes client (or its
transport), no action imports another, and every cluster module is in the action group, documents the kubeconfig
fragment and takes the shared KUBE_OPTIONS."""
import glob
import importlib
import os
import re

import yaml
from unit_paths import REPO

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import KUBE_OPTIONS

IMPORT = re.compile(r"^\s*(from|import) (kubernetes|urllib3)\b", re.M)
ACTION_IMPORT = re.compile(r"^\s*(from|import) ansible_collections\.gpunode\.nvidia\.plugins\.action\b", re.M)


def plugin_files():
    return sorted(glob.glob(os.path.join(REPO, "plugins", "**", "*.py"), recursive=True))


def read(path):
    with open(path) as handle:
        return handle.read()


def test_only_the_cluster_client_imports_kubernetes_or_urllib3():
    importers = [os.path.relpath(path, REPO) for path in plugin_files() if IMPORT.search(read(path))]
    assert importers == ["plugins/plugin_utils/cluster/client.py"]


def test_no_action_imports_another_action():
    actions = glob.glob(os.path.join(REPO, "plugins", "action", "*.py"))
    assert [os.path.basename(path) for path in actions if ACTION_IMPORT.search(read(path))] == []


def test_every_cluster_module_is_in_the_group_documents_the_fragment_and_takes_kube_options():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        group = sorted(yaml.safe_load(handle)["action_groups"]["cluster"])
    modules = glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))
    documented = sorted(os.path.basename(path)[:-3] for path in modules
                        if "  - gpunode.nvidia.kubernetes\n" in read(path))
    assert group == documented and len(group) == 7
    for name in group:
        spec = importlib.import_module("ansible_collections.gpunode.nvidia.plugins.action.%s" % name).ARGUMENT_SPEC
        assert spec["context"] == KUBE_OPTIONS["context"], name
        assert spec["kubeconfig"]["type"] == KUBE_OPTIONS["kubeconfig"]["type"], name
