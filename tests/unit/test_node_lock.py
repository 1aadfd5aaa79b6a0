"""gpunode.nvidia.node_lock: one edit-restart-verify sequence per node at a time."""
import json
import multiprocessing
import os
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


# --- the stale takeover race: many processes, one winner ----------------------

TRIALS = 200
RACERS = 6


def _race(index, paths, barrier, results):
    """One racer: at each trial, try to take the same stale lock as the others, without waiting."""
    for trial, path in enumerate(paths):
        barrier.wait(60)
        try:
            owner, _waited, taken_over = acquire(path, "racer-%d" % index, 0, 3600)
            results.put((trial, index, owner, taken_over))
        except TimeoutError:
            results.put((trial, index, None, None))
        except Exception as exc:  # a racer tripped by another's takeover: a failure, not a hang
            results.put((trial, index, "error: %r" % exc, None))


def test_stale_takeover_has_exactly_one_winner_per_trial(tmp_path):
    context = multiprocessing.get_context("fork")
    paths = []
    for trial in range(TRIALS):
        lock = tmp_path / ("lock-%d" % trial)
        held(lock, "crashed-run", time.time() - 7200)
        paths.append(str(lock))
    barrier, results = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=_race, args=(i, paths, barrier, results), daemon=True) for i in range(RACERS)]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _index in range(TRIALS * RACERS)]
    for racer in racers:
        racer.join(60)
    for trial in range(TRIALS):
        winners = [(index, owner, taken_over) for t, index, owner, taken_over in outcomes if t == trial and owner]
        assert len(winners) == 1, "trial %d: winners %r" % (trial, winners)
        index, _owner, taken_over = winners[0]
        assert taken_over == "crashed-run"
        assert json.loads(open(paths[trial]).read())["owner"] == "racer-%d" % index


def test_unreadable_lease_is_judged_by_its_age(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("{half a lease")
    with pytest.raises(TimeoutError):
        acquire(str(lock), "me", 0, 3600)  # fresh: someone may be writing it
    os.utime(str(lock), (time.time() - 7200, time.time() - 7200))
    assert acquire(str(lock), "me", 0, 3600)[0] == "me"


def test_module_failures_are_clean(capsys, tmp_path, monkeypatch):
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.gpunode.nvidia.plugins.modules import node_lock

    def broken(*_args, **_kwargs):
        raise KeyError("S3NTINEL-lock")

    monkeypatch.setattr(node_lock, "acquire", broken)
    with patch_module_args({"path": str(tmp_path / "lock"), "owner": "me"}):
        with pytest.raises(SystemExit):
            node_lock.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "KeyError" in result["msg"] and "bug" in result["msg"]
    assert str(tmp_path / "lock") in result["msg"] and "S3NTINEL" not in json.dumps(result)
    assert "Traceback" not in json.dumps(result)
