"""gpunode.nvidia.node_lock: one edit-restart-verify sequence per node at a time."""
import json
import time

import pytest

from ansible_collections.gpunode.nvidia.plugins.modules.node_lock import acquire, release


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def held(path, owner, since):
    path.write_text(json.dumps({"owner": owner, "since": since}))


def test_free_lock_is_taken(tmp_path):
    lock = tmp_path / "lock"
    assert acquire(str(lock), "me", 10, 3600)[0] == "me"
    assert json.loads(lock.read_text())["owner"] == "me"


def test_same_owner_takes_it_again(tmp_path):
    lock = tmp_path / "lock"
    acquire(str(lock), "me", 10, 3600)
    assert acquire(str(lock), "me", 10, 3600)[0] == "me"


def test_waits_for_another_owner_then_takes_it(tmp_path):
    lock, clock = tmp_path / "lock", FakeClock()
    held(lock, "other", clock.now)

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now >= 1005:
            lock.unlink()  # the other run finishes after 5 seconds

    owner, waited, taken_over = acquire(str(lock), "me", 60, 3600, sleep=sleep, clock=clock)
    assert owner == "me" and waited == 5 and taken_over is None


def test_gives_up_naming_the_holder(tmp_path):
    lock, clock = tmp_path / "lock", FakeClock()
    held(lock, "other", clock.now)
    with pytest.raises(TimeoutError, match="held by other"):
        acquire(str(lock), "me", 3, 3600, sleep=clock.sleep, clock=clock)
    assert json.loads(lock.read_text())["owner"] == "other"


def test_stale_lock_is_taken_over(tmp_path):
    lock = tmp_path / "lock"
    held(lock, "crashed-run", time.time() - 7200)
    owner, _unused, taken_over = acquire(str(lock), "me", 10, 3600)
    assert owner == "me" and taken_over == "crashed-run"


def test_release_only_own_lock(tmp_path):
    lock = tmp_path / "lock"
    held(lock, "other", time.time())
    assert release(str(lock), "me") == "other" and lock.exists()
    acquire_path = tmp_path / "mine"
    acquire(str(acquire_path), "me", 10, 3600)
    assert release(str(acquire_path), "me") is None and not acquire_path.exists()
