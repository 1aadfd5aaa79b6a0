"""The node lock (gpunode.nvidia.node_lock, and the `lock` option of the config modules that take it in
the call that reads the config): one edit-restart-verify sequence per node at a time."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import acquire, release, run_holding


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
    lease = acquire(str(lock), "me", 10, 3600)
    assert lease.held_by == "me" and not lease.reentered
    assert json.loads(lock.read_text())["owner"] == "me"


def test_same_owner_takes_it_again(tmp_path):
    lock = tmp_path / "lock"
    acquire(str(lock), "me", 10, 3600)
    again = acquire(str(lock), "me", 10, 3600)
    assert again.held_by == "me" and again.reentered


def test_waits_for_another_owner_then_takes_it(tmp_path):
    lock, clock = tmp_path / "lock", FakeClock()
    held(lock, "other", clock.now)

    def sleep(seconds):
        clock.sleep(seconds)
        if clock.now >= 1005:
            lock.unlink()  # the other run finishes after 5 seconds

    lease = acquire(str(lock), "me", 60, 3600, sleep=sleep, clock=clock)
    assert lease.held_by == "me" and lease.waited == 5 and lease.taken_over is None and not lease.reentered


def test_gives_up_naming_the_holder(tmp_path):
    lock, clock = tmp_path / "lock", FakeClock()
    held(lock, "other", clock.now)
    with pytest.raises(TimeoutError, match="held by other"):
        acquire(str(lock), "me", 3, 3600, sleep=clock.sleep, clock=clock)
    assert json.loads(lock.read_text())["owner"] == "other"


def test_stale_lock_is_taken_over(tmp_path):
    lock = tmp_path / "lock"
    held(lock, "crashed-run", time.time() - 7200)
    lease = acquire(str(lock), "me", 10, 3600)
    assert lease.held_by == "me" and lease.taken_over == "crashed-run" and not lease.reentered


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
            lease = acquire(path, "racer-%d" % index, 0, 3600)
            results.put((trial, index, lease.held_by, lease.taken_over))
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
    assert acquire(str(lock), "me", 0, 3600).held_by == "me"


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


# --- the lock folded into a module's own call (run_holding) -------------------

class StandInModule:
    """STAND-IN for AnsibleModule: fail_json leaves as the real one does (SystemExit), keeping the message."""

    def __init__(self):
        self.failure = None

    def fail_json(self, **result):
        self.failure = result
        raise SystemExit(1)


def lock_options(path, owner="me", timeout=10):
    return {"path": str(path), "owner": owner, "timeout": timeout, "stale_after": 3600}


def holder(path):
    return json.loads(path.read_text())["owner"] if path.exists() else None


def test_folded_lock_is_held_while_the_call_runs_and_given_back_after(tmp_path):
    lock = tmp_path / "lock"
    seen = []
    result = run_holding(StandInModule(), lock_options(lock), lambda _m: seen.append(holder(lock)) or {},
                         keep=lambda _result: False)
    assert seen == ["me"] and holder(lock) is None
    assert result["lock_held"] is False and result["lock_waited"] == 0


def test_folded_lock_is_kept_when_asked(tmp_path):
    lock = tmp_path / "lock"
    result = run_holding(StandInModule(), lock_options(lock), lambda _m: {"changed": True},
                         keep=lambda result: result["changed"])
    assert result["lock_held"] is True and holder(lock) == "me"


@pytest.mark.parametrize("failure", [SystemExit(1), KeyError("bug")], ids=["fail_json", "exception"])
def test_folded_lock_is_given_back_when_the_call_fails(tmp_path, failure):
    lock = tmp_path / "lock"

    def run(_module):
        raise failure
    with pytest.raises(type(failure)):
        run_holding(StandInModule(), lock_options(lock), run, keep=lambda _result: True)
    assert holder(lock) is None


def test_lock_its_owner_held_before_is_left_held(tmp_path):
    lock = tmp_path / "lock"
    acquire(str(lock), "me", 10, 3600)
    result = run_holding(StandInModule(), lock_options(lock), lambda _m: {}, keep=lambda _result: False)
    assert result["lock_held"] is True and holder(lock) == "me"


def test_folded_lock_held_by_another_fails_naming_it_without_running(tmp_path):
    lock, module = tmp_path / "lock", StandInModule()
    held(lock, "other-operator", time.time())
    ran = []
    with pytest.raises(SystemExit):
        run_holding(module, lock_options(lock, timeout=0), ran.append, keep=lambda _result: False)
    assert ran == [] and "held by other-operator" in module.failure["msg"] and holder(lock) == "other-operator"


ROUNDS = 40


def _critical_section(inside, entries):
    """Only one holder at a time may be here: a second one finds the marker and says so."""
    try:
        fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        entries.put("overlap")
        return {}
    time.sleep(0.005)  # widens the window a broken lock would let a second holder into (no timing asserted)
    os.close(fd)
    os.unlink(inside)
    entries.put("entered")
    return {}


def _contend(index, path, inside, barrier, entries):
    """Even racers take the lock as node_lock tasks do, odd ones fold it into their call; none waits."""
    owner = "racer-%d" % index
    for _round in range(ROUNDS):
        barrier.wait(60)
        if index % 2:
            try:
                run_holding(StandInModule(), lock_options(path, owner, timeout=0),
                            lambda _m: _critical_section(inside, entries), keep=lambda _result: False)
            except SystemExit:
                pass  # another racer holds it
        else:
            try:
                acquire(path, owner, 0, 3600)
            except TimeoutError:
                continue
            try:
                _critical_section(inside, entries)
            finally:
                release(path, owner)


def test_folded_and_separate_locks_exclude_each_other(tmp_path):
    context = multiprocessing.get_context("fork")
    path, inside = str(tmp_path / "lock"), str(tmp_path / "inside")
    barrier, entries = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=_contend, args=(i, path, inside, barrier, entries), daemon=True)
              for i in range(RACERS)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    seen = []
    while not entries.empty():
        seen.append(entries.get())
    assert all(racer.exitcode == 0 for racer in racers)
    assert "overlap" not in seen and seen.count("entered") >= ROUNDS
    assert not os.path.exists(path)  # every holder gave it back
