"""The CRI plugin ids are one table (node/containerd_semantics.py): the node's views, the doctor and the
controller's editor read the same names in the same order as before."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import containerd_semantics as sem
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import runtime_views
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports, toml_edit


def test_the_editor_reads_the_tables_ids():
    assert toml_edit.CRI_PLUGIN == {1: ("plugins", "cri"), 2: ("plugins", "io.containerd.grpc.v1.cri"),
                                    3: ("plugins", "io.containerd.cri.v1.runtime"),
                                    4: ("plugins", "io.containerd.cri.v1.runtime")}
    assert toml_edit.CRI_V1_RUNTIME == ("plugins", "io.containerd.cri.v1.runtime")
    assert toml_edit.CRI_PLUGIN_IDS == ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",
                                        "io.containerd.cri.v1.images")
    assert toml_edit.CRI_DUMP_PLUGINS == ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
    assert imports.CRI_1X_PLUGINS == ("cri", "io.containerd.grpc.v1.cri")


def test_the_node_views_look_newest_first_and_the_doctor_knows_every_name_that_disables_cri():
    assert runtime_views.CRI_PLUGIN_IDS == ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri")
    assert set(sem.CRI_DISABLE_NAMES) == set(toml_edit.CRI_PLUGIN_IDS)
