"""Fixtures around tests/integration/daemons.py (real containerd, stand-in images)."""
import pytest

import daemons


@pytest.fixture(scope="session")
def standin_images():
    """name -> tarball of the stand-in images (pause, vectoradd, vectoradd-fail)."""
    return daemons.ensure_images()


@pytest.fixture(scope="session")
def containerd_dist():
    """release -> ContainerdDist, fetching Debian's package on first use."""
    cache = {}

    def get(release):
        if release not in cache:
            cache[release] = daemons.ensure_containerd(release)
        return cache[release]
    return get


@pytest.fixture
def private_containerd(containerd_dist):
    """Factory: private_containerd(release) -> a PrivateContainerd, not started; all are
    stopped and removed after the test."""
    created = []

    def make(release, **kwargs):
        ctrd = daemons.PrivateContainerd(containerd_dist(release), **kwargs)
        created.append(ctrd)
        return ctrd
    yield make
    for ctrd in reversed(created):
        ctrd.close()


@pytest.fixture(scope="module", params=list(daemons.CONTAINERD_RELEASES),
                ids=["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()])
def cri_containerd(request, standin_images):
    """One running private containerd per Debian release (1.6.20, 1.7.24, 2.1.9) for the
    module, with the minimal config (runc only) and the stand-in images imported."""
    with daemons.running_containerd(request.param) as ctrd:
        yield ctrd
