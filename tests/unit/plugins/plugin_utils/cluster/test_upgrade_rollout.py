"""The rolling upgrade's pure decisions: node states, what a node needs, and the slot arithmetic."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro


def node(name, unschedulable=False, ready=True, state=None, skip=False):
    labels = {}
    if state:
        labels[ro.STATE_LABEL] = state
    if skip:
        labels[ro.SKIP_LABEL] = "true"
    return ro.node_view({"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
                         "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def alive(_holder):
    return None  # cannot tell: the ttl decides


def grant(candidate, views, slots, holder="me", parallel=2, unavailable=2, now=100.0, ttl=60, is_alive=alive,
          paused=None):
    return ro.acquire(candidate, views, slots, holder, parallel, unavailable, now, ttl, is_alive, paused)


@pytest.mark.parametrize("value, nodes, count", [
    (2, 6, 2), ("2", 6, 2), ("25%", 6, 2), ("25%", 4, 1), ("10%", 3, 1), ("100%", 6, 6), ("34%", 3, 2),
])
def test_max_unavailable_count(value, nodes, count):
    assert ro.max_unavailable_count(value, nodes) == count


@pytest.mark.parametrize("value", ["0", 0, "0%", "abc", "-1", "2.5"])
def test_max_unavailable_refused(value):
    with pytest.raises(ro.RolloutError, match="max_unavailable"):
        ro.max_unavailable_count(value, 6)


def test_the_operator_names():
    assert ro.STATE_LABEL == "nvidia.com/gpu-driver-upgrade-state"
    assert ro.SKIP_LABEL == "nvidia.com/gpu-driver-upgrade.skip"
    assert ro.INITIAL_STATE_ANNOTATION == "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
    assert ro.STATES[0] == "upgrade-required" and ro.STATES[-1] == "upgrade-done"


def test_unavailable_for_any_reason_takes_a_slot():
    views = [node("a"), node("b"), node("c", ready=False), node("d")]
    assert grant("a", views, {})["granted"]
    full = grant("b", views, {"a": {"holder": "me", "renewed": 100}})
    assert not full["granted"] and "max_unavailable 2 reached: a, c" in full["reason"]


def test_a_node_cordoned_by_someone_else_costs_no_extra_slot():
    views = [node("a", unschedulable=True), node("b", unschedulable=True), node("c")]
    assert grant("a", views, {})["granted"]
    assert not grant("c", views, {})["granted"]


def test_max_parallel():
    views = [node(n) for n in "abcdef"]
    slots = {"a": {"holder": "me", "renewed": 100}, "b": {"holder": "other", "renewed": 99}}
    result = grant("c", views, slots, unavailable=6)
    assert not result["granted"] and "max_parallel 2 reached: a, b" in result["reason"]


def test_a_finished_node_frees_its_slot_at_once():
    views = [node(n) for n in "abc"]
    slots = grant("a", views, {}, parallel=1)["slots"]
    assert not grant("b", views, slots, parallel=1)["granted"]
    freed = ro.release("a", slots, "me")
    assert freed == {} and grant("b", views, freed, parallel=1)["granted"]


def test_dead_and_expired_holders_are_dropped():
    views = [node(n) for n in "abc"]
    slots = {"a": {"holder": "killed", "renewed": 99}, "b": {"holder": "old", "renewed": 1}}
    result = grant("c", views, slots, parallel=1, is_alive=lambda holder: holder != "killed")
    assert result["granted"] and set(result["slots"]) == {"c"}


def test_a_node_held_by_another_live_controller_is_left_to_it():
    views = [node(n) for n in "ab"]
    result = grant("a", views, {"a": {"holder": "other", "renewed": 99}})
    assert not result["granted"] and "another controller (other" in result["reason"]


def test_resuming_my_own_slot_is_granted_even_at_the_limits():
    views = [node("a", unschedulable=True), node("b", unschedulable=True), node("c", ready=False)]
    result = grant("a", views, {"a": {"holder": "me", "renewed": 90}}, parallel=1, unavailable=1)
    assert result["granted"] and result["slots"]["a"]["renewed"] == 100


def test_a_failed_node_halts_new_starts_but_not_nodes_in_progress():
    views = [node("a", state=ro.FAILED, unschedulable=True), node("b", state="drain-required"), node("c")]
    stopped = grant("c", views, {"b": {"holder": "me", "renewed": 100}}, unavailable=6, parallel=6)
    assert stopped["halted"] and not stopped["granted"] and "a is upgrade-failed" in stopped["reason"]
    assert grant("b", views, {"b": {"holder": "me", "renewed": 100}}, unavailable=6)["granted"]


@pytest.mark.parametrize("state, changes, retry, action, start", [
    (None, ["driver"], False, "upgrade", "upgrade-required"),
    (None, [], False, "at-target", None),
    ("upgrade-done", [], False, "at-target", None),
    ("upgrade-done", ["driver"], False, "upgrade", "upgrade-required"),
    ("drain-required", [], False, "upgrade", "drain-required"),           # resume where a killed run stopped
    ("upgrade-required", [], False, "upgrade", "upgrade-required"),       # a reset retry, already at the target
    ("upgrade-failed", [], False, "failed", None),
    ("upgrade-failed", [], True, "upgrade", "upgrade-required"),          # a retry starts over, never jumps to done
])
def test_decide(state, changes, retry, action, start):
    decision = ro.decide(node("a", state=state), changes, retry_failed=retry)
    assert (decision["action"], decision["start"]) == (action, start)


def test_skip_label_and_operator_managed_nodes_are_left_alone():
    assert ro.decide(node("a", skip=True), ["driver"])["action"] == "skip"
    refused = ro.decide(node("a"), ["driver"], operator_managed=True)
    assert refused["action"] == "refused" and "upgradePolicy" in refused["reason"]


ON = "2026-11-29"  # the controller's date, given: no test reads the clock


@pytest.mark.parametrize("target, changes, bulletins", [
    ({"toolkit": "1.18.0-1"}, ["toolkit"], ["bulletin 5850", "CVE-2026-24260"]),
    ({"driver": "580.159.03"}, ["driver"], ["bulletin 5861"]),
    ({"driver": "580.178.04", "toolkit": "1.19.1-1"}, ["driver", "toolkit"], []),
    ({"toolkit": "1.18.0-1"}, [], []),                                     # not changed: not installed by this run
    ({"driver": "580"}, ["driver"], []),                                   # a branch alone is no version
    ({"driver": "620.70.06"}, ["driver"], []),                             # no bulletin names R620 yet
])
def test_a_target_below_the_security_minimum_is_refused(target, changes, bulletins):
    below = ro.below_minimum(target, changes, ON)
    assert all(any(word in sentence for sentence in below) for word in bulletins) and bool(below) is bool(bulletins)
    decision = ro.decide(node("a"), changes, below=below)
    if bulletins:
        assert decision["action"] == "refused" and "gpunode_upgrade_allow_below_minimum" in decision["reason"]
        assert "below the security minimum" in decision["reason"] and "target=minimum picks it" in decision["reason"]
    else:
        assert decision["action"] != "refused"


@pytest.mark.parametrize("target, changes", [
    ({"driver": "535.309.01"}, ["driver"]),
    ({"driver": "535.288.01"}, ["driver"]),      # below R535's last fix too: the ended branch is what is said
    ({"driver": "535"}, []),                     # a branch alone, the node already on it: still the wrong target
    ({"driver": "610.57.04", "toolkit": "1.19.1-1"}, ["driver", "toolkit"]),
])
def test_a_target_on_an_ended_branch_is_refused_naming_the_supported_ones(target, changes):
    below = ro.below_minimum(target, changes, ON)
    assert len(below) == 1 and "ended 20" in below[0] and "no security fixes; move to R580 or R620" in below[0], below
    assert "supported branches (580, 595, 615, 620)" in below[0] and "minimum fixed version" not in below[0], below
    decision = ro.decide(node("a"), changes, below=below)
    assert decision["action"] == "refused" and "gpunode_upgrade_allow_below_minimum" in decision["reason"]
    assert "target=minimum picks it" not in decision["reason"]


@pytest.mark.parametrize("current, changes", [
    ({"driver": "535.309.01", "toolkit": "1.19.1"}, []),          # at R535's last fix: not "at the minimum"
    ({"driver": "535.261.03", "toolkit": "1.18.0"}, ["driver", "toolkit"]),
])
def test_target_minimum_on_an_ended_branch_says_to_change_branch(current, changes):
    target = {"driver": "535.309.01" if changes else "", "toolkit": "1.19.1" if changes else ""}
    below = ro.below_minimum(target, changes, ON, minimum=True, current=current)
    assert len(below) == 1, below
    assert below[0].startswith("gpunode_upgrade_target=minimum keeps a node on its driver's branch, and this node "
                               "runs %s. R535 ended 2026-06: no security fixes; move to R580 or R620" % (
                                   target["driver"] or current["driver"])), below
    assert "Set gpunode_upgrade_driver to one of the supported branches (580, 595, 615, 620)" in below[0]
    assert ro.decide(node("a"), changes, below=below)["action"] == "refused"
    # A supported branch at its minimum is left alone, on the day R535 still had support too.
    assert ro.below_minimum({"driver": ""}, [], ON, minimum=True, current={"driver": "580.178.04"}) == []
    assert ro.below_minimum({"driver": ""}, [], "2026-06-30", minimum=True, current={"driver": "535.309.01"}) == []


def test_failed_never_jumps_to_done():
    with pytest.raises(ro.RolloutError, match="only a retry"):
        ro.check_transition(ro.FAILED, ro.DONE)
    with pytest.raises(ro.RolloutError, match="cannot go from validation-required to cordon-required"):
        ro.check_transition("validation-required", "cordon-required")
    ro.check_transition(ro.FAILED, ro.REQUIRED)
    ro.check_transition("validation-required", ro.FAILED)


@pytest.mark.parametrize("at_rest", [None, ro.DONE])
def test_a_node_at_rest_enters_only_at_the_beginning(at_rest):
    for state in ro.IN_PROGRESS + (ro.DONE,):
        if state != at_rest:
            with pytest.raises(ro.RolloutError, match="an upgrade begins at upgrade-required"):
                ro.check_transition(at_rest, state)
    ro.check_transition(at_rest, ro.REQUIRED)
    ro.check_transition(at_rest, ro.FAILED)
    ro.check_transition(at_rest, at_rest)


@pytest.mark.parametrize("current, target, changes", [
    ({"driver": "535.261.03", "toolkit": "1.17.8-1"}, {"driver": "535.309.01", "toolkit": "1.17.8"}, ["driver"]),
    ({"driver": "535.309.01", "toolkit": "1.17.8-1"}, {"driver": "535", "toolkit": "1.18.0"}, ["toolkit"]),
    ({"driver": "535.309.01", "fabricmanager": "535.261.03"}, {"fabricmanager": "535.309.01"}, ["fabricmanager"]),
    ({"driver": None}, {"driver": "535.309.01"}, ["driver"]),
])
def test_needs_and_light_path(current, target, changes):
    assert ro.needs(current, target) == changes
    assert ro.light_path(changes) == ("driver" not in changes)


def test_steps_leave_out_what_does_nothing():
    assert ro.steps_from(ro.REQUIRED) == [s for s in ro.STATES if s not in ("wait-for-jobs-required", "drain-required")]
    assert ro.steps_from("drain-required", drain=True)[0] == "drain-required"
    with pytest.raises(ro.RolloutError, match="unknown upgrade state 'bogus'"):
        ro.steps_from("bogus")


def test_slot_table_round_trip_and_bad_json():
    slots = {"a": {"holder": "h", "renewed": 1.5}}
    assert ro.parse_slots({ro.SLOTS_ANNOTATION: ro.dump_slots(slots)}) == slots
    with pytest.raises(ro.RolloutError, match="not JSON"):
        ro.parse_slots({ro.SLOTS_ANNOTATION: "{broken"})


def test_plan_lines_name_the_pdb_waits():
    decision = ro.decide(node("a"), ["driver"])
    lines = ro.plan_lines("a", decision, ro.steps_from(ro.REQUIRED), light=False, pdb_waits={"ml/train-0": "ml/pdb"})
    assert lines[0].startswith("a: upgrade") and any("PodDisruptionBudget ml/pdb before evicting ml/train-0" in x
                                                     for x in lines)


# --- properties: however the requests interleave, the limits hold ------------------------------------------

@st.composite
def clusters(draw):
    count = draw(st.integers(min_value=1, max_value=12))
    views = [node("n%d" % i, unschedulable=draw(st.booleans()) and draw(st.booleans()),
                  ready=not (draw(st.booleans()) and draw(st.booleans()))) for i in range(count)]
    requests = draw(st.lists(st.tuples(st.integers(0, count - 1), st.sampled_from(["c1", "c2"]), st.booleans()),
                             max_size=40))
    return views, requests, draw(st.integers(1, 4)), draw(st.integers(1, 5))


@given(clusters())
def test_limits_hold_for_any_sequence_of_acquire_and_release(cluster):
    views, requests, parallel, limit = cluster
    initially_unavailable = set(v["name"] for v in views if ro.unavailable(v))
    slots = {}
    for index, holder, is_release in requests:
        name = views[index]["name"]
        if is_release:
            slots = ro.release(name, slots, holder) or slots
            continue
        result = ro.acquire(name, views, slots, holder, parallel, limit, 100.0, 60, alive)
        if result["granted"]:
            slots = result["slots"]
            assert len(slots) <= parallel
            assert len(initially_unavailable | set(slots)) <= limit
        assert all(slot["holder"] in ("c1", "c2") for slot in slots.values())


# --- the target and how the driver role installs it ------------------------------------------------------------

def test_the_target_given_is_the_target_and_fabric_manager_follows_the_driver():
    current = {"driver": "535.288.01", "toolkit": "1.17.8", "fabricmanager": "535.288.01"}
    assert ro.resolve_target(current, {"driver": "535.309.01"}, minimum=False) == {
        "driver": "535.309.01", "toolkit": "", "fabricmanager": "535.309.01"}
    # no fabric manager on the node: none in the target
    assert ro.resolve_target({"driver": "535.288.01"}, {"driver": "535.309.01"}, False)["fabricmanager"] == ""


def test_minimum_targets_the_security_minimum_of_the_branch_each_node_runs():
    below = ro.resolve_target({"driver": "535.288.01"}, {"driver": "580.178.04"}, minimum=True)
    at = ro.resolve_target({"driver": "535.309.01"}, {}, minimum=True)
    assert below["driver"] == "535.309.01" and at["driver"] == ""


@pytest.mark.parametrize("driver, branch, version", [
    ("535.309.01", "535", "535.309.01"),
    ("1:535.309.01-1ubuntu1", "535", "535.309.01"),  # epoch and package revision: the packages' business
    ("535", "535", ""),  # a branch alone: its newest
    ("", "", ""),
])
def test_the_driver_role_gets_the_branch_and_the_exact_version_parsed_once(driver, branch, version):
    assert ro.driver_install(driver) == {"branch": branch, "version": version}


# --- a fleet: targets, GPU nodes, two controllers, pause, rollback -------------------------------------

@pytest.mark.parametrize("target, words", [
    ({"driver": "58O"}, "gpunode_upgrade_driver is '58O': no version"),
    ({"driver": "latest"}, "gpunode_upgrade_driver is 'latest': no version"),
    ({"driver": "5800"}, "gpunode_upgrade_driver is '5800': no version"),
    ({"toolkit": "newest"}, "gpunode_upgrade_toolkit is 'newest': no version"),
])
def test_a_target_that_is_no_version_is_refused(target, words):
    with pytest.raises(ro.RolloutError, match=words):
        ro.check_target(target)


@pytest.mark.parametrize("driver", ["580", "580.178.04", "1:580.178.04-1", "580.178"])
def test_driver_versions_as_the_packages_name_them_are_taken(driver):
    ro.check_target({"driver": driver, "toolkit": "1.19.1-1"}, "580")


def test_a_driver_outside_the_pinned_branch_is_refused():
    with pytest.raises(ro.RolloutError, match="gpunode_upgrade_driver 590.48.01 is not on nvidia_driver_branch 580"):
        ro.check_target({"driver": "590.48.01"}, "580")


def api_node(name, labels=None, gpus=0):
    return ro.node_view({"metadata": {"name": name, "labels": labels or {}},
                         "status": {"capacity": {"nvidia.com/gpu": str(gpus)} if gpus else {}}})


def test_gpu_nodes_by_the_label_or_by_capacity_and_none_is_an_error_naming_both():
    views = [api_node("a", {"nvidia.com/gpu.present": "true"}), api_node("b", gpus=8), api_node("cpu")]
    found = ro.gpu_views(views, "nvidia.com/gpu.present=true")
    assert [(v["name"], v["found_by"]) for v in found] == [("a", ["label"]), ("b", ["capacity"])]
    assert ro.how_found(found, "nvidia.com/gpu.present=true") == (
        "2 GPU node(s): 1 by the label nvidia.com/gpu.present=true, 1 more by nvidia.com/gpu capacity alone")
    with pytest.raises(ro.RolloutError, match=r"no GPU node found: no Node has the label gpu=yes "
                                              r"\(gpunode_upgrade_gpu_node_selector\) or nvidia.com/gpu capacity"):
        ro.gpu_views([api_node("cpu")], "gpu=yes")


@pytest.mark.parametrize("selector, labels, selected", [
    ("a=1", {"a": "1"}, True), ("a==1,b", {"a": "1", "b": ""}, True), ("a!=1", {"a": "2"}, True),
    ("!a", {"a": "1"}, False), ("a", {}, False), ("", {}, True),
])
def test_equality_based_selectors(selector, labels, selected):
    assert ro.label_selector_matches(selector, labels) is selected


def test_done_for_this_target_is_at_target_and_is_never_entered_again():
    target = {"driver": "580.178.04", "toolkit": "", "fabricmanager": ""}
    done = ro.node_view({"metadata": {"name": "a", "labels": {ro.STATE_LABEL: ro.DONE},
                                      "annotations": {ro.TARGET_ANNOTATION: ro.target_key(target)}}})
    decision = ro.decide(done, ["driver"], target=target)
    assert decision["action"] == "at-target" and "already upgraded to this target" in decision["reason"]
    assert ro.decide(done, ["driver"], target=dict(target, driver="580.190.01"))["action"] == "upgrade"
    with pytest.raises(ro.Replan, match="already upgrade-done for this target"):
        ro.check_transition(ro.DONE, ro.REQUIRED, done_same_target=True)
    ro.check_transition(ro.DONE, ro.REQUIRED, done_same_target=False)


def test_a_refused_move_on_a_node_at_rest_or_a_step_back_is_a_replan_but_a_failed_node_is_not():
    for current, new in ((ro.DONE, "cordon-required"), ("validation-required", "cordon-required")):
        with pytest.raises(ro.Replan):
            ro.check_transition(current, new)
    with pytest.raises(ro.RolloutError) as refused:
        ro.check_transition(ro.FAILED, ro.DONE)
    assert not isinstance(refused.value, ro.Replan)


def test_a_node_another_live_controller_holds_is_left_to_it_without_waiting():
    result = grant("a", [node("a"), node("b")], {"a": {"holder": "other", "renewed": 99}})
    assert result["held_elsewhere"] and not result["granted"] and "left to it" in result["reason"]


def test_a_pause_starts_no_new_node_but_a_node_in_progress_keeps_its_slot():
    views = [node(n) for n in "abc"]
    paused = grant("b", views, {"a": {"holder": "me", "renewed": 99}}, paused="window closed")
    assert not paused["granted"] and not paused["halted"] and "paused" in paused["reason"]
    assert "window closed" in paused["reason"] and "remove it to resume" in paused["reason"]
    assert grant("a", views, {"a": {"holder": "me", "renewed": 99}}, paused="window closed")["granted"]
    assert grant("b", views, {}, paused=None)["granted"]


def test_slot_budget_counts_the_nodes_unavailable_for_other_reasons():
    views = [node("a"), node("b", unschedulable=True), node("c"), node("d")]
    assert ro.slot_budget(views, {}, 4, 3) == 2
    assert ro.slot_budget(views, {"b": {}}, 4, 3) == 3  # b is unavailable because it is in progress
    assert ro.slot_budget(views, {}, 1, 3) == 1


@pytest.mark.parametrize("current, target, found", [
    ({"driver": "580.178.04"}, {"driver": "580.159.03"}, ["driver 580.178.04 -> 580.159.03"]),
    ({"driver": "580.159.03"}, {"driver": "580.178.04"}, []),
    ({"driver": "580.178.04"}, {"driver": "580"}, []),  # a branch is its newest: never older
    ({"toolkit": "1.19.1-1"}, {"toolkit": "1.18.0"}, ["toolkit 1.19.1 -> 1.18.0"]),
])
def test_downgrades_are_named(current, target, found):
    changes = ro.needs(current, target)
    assert ro.downgrades(current, target, changes) == found


def test_a_downgrade_is_refused_unless_allowed():
    refused = ro.decide(node("a"), ["driver"], downgrade=["driver 580.178.04 -> 580.159.03"])
    assert refused["action"] == "refused" and "gpunode_upgrade_allow_downgrade=true" in refused["reason"]


def test_worst_case_duration_adds_the_timeouts_of_the_steps_walked():
    timeouts = {"job": 3600, "eviction": 300, "validation": 600, "reboot": 1200}
    steps = ro.steps_from(ro.REQUIRED, job_selector="app=train", drain=True)
    assert ro.worst_case_seconds(steps, False, timeouts) == 3600 + 300 + 300 + 600 + 1200 + 600
    assert ro.duration(ro.worst_case_seconds(steps, False, timeouts)) == "1h50m"
    light = ro.steps_from(ro.REQUIRED)
    assert ro.worst_case_seconds(light, True, timeouts) == 300 + 600 + 600
    assert ro.duration(1500) == "25m00s"
