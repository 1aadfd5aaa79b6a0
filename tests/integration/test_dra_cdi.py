"""DRA-ready nodes: CDI on in the effective config of real containerd 1.7.24 and 2.1.9 (Debian's packages),
proven with `containerd --config F config dump`, through the existing containerd editor; containerd 1.6.20
is refused with a clear message, since its dump silently drops enable_cdi."""
import subprocess

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import dra_readiness
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.effective import load_dump
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import plan_runtime_edit

# CDI off as each release's packaged config leaves it: 1.7 reads no key (off by default), 2.1 an explicit false.
CDI_OFF = {"trixie": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n',
           "sid": 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n'}
CRI_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")


def version_of(dist):
    return subprocess.run([dist.containerd, "--version"], capture_output=True, text=True, check=True).stdout.split()[2]


def effective_cdi(dist, text, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(text)
    done = subprocess.run([dist.containerd, "--config", str(path), "config", "dump"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    plugins = load_dump(done.stdout)["plugins"]
    return [plugins[p].get("enable_cdi") for p in CRI_PLUGINS if p in plugins]


@pytest.mark.parametrize("release", ["trixie", "sid"], ids=["containerd-1.7.24", "containerd-2.1.9"])
def test_cdi_is_on_in_the_effective_config_after_the_edit(containerd_dist, release, tmp_path):
    dist = containerd_dist(release)
    version = version_of(dist)
    assert dra_readiness.runtime_problem("containerd", version) is None
    assert True not in effective_cdi(dist, CDI_OFF[release], tmp_path)
    plan = plan_runtime_edit(CDI_OFF[release], "config.toml", cdi=True, containerd_version=version)
    assert True in effective_cdi(dist, plan.text, tmp_path)


def test_containerd_1_6_drops_enable_cdi_and_dra_is_refused(containerd_dist, tmp_path):
    dist = containerd_dist("bookworm")
    version = version_of(dist)
    plan = plan_runtime_edit("", "config.toml", cdi=True, containerd_version=version)
    assert "enable_cdi = true" in plan.text
    assert True not in effective_cdi(dist, plan.text, tmp_path)  # the key is silently dropped
    assert dra_readiness.runtime_problem("containerd", version) == (
        "containerd %s has no CDI support (enable_cdi exists from 1.7; 1.6's config dump silently drops the key): "
        "DRA cannot inject devices. Upgrade containerd to 1.7 or newer first." % version)
