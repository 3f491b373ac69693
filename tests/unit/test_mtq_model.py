"""The MTQ model: blocking quotas, the budget's raise on the keys each quota has, the shared raise,
the exact restore keeping an administrator's edits, the lock's deadline, the event text."""

from __future__ import annotations

import datetime
from typing import Any

from harvester_quota.apis.mtq import OriginalQuota, decode_vmmrq
from harvester_quota.util.mtq import (
    ANNOTATION_LOCK,
    LABEL_LOCKED,
    Blocked,
    Lock,
    QuotaView,
    Verdict,
    evaluate,
    not_enough_message,
    parse_lock,
    plan_namespace,
    quota_view,
    raise_action,
    raise_hard,
    restore_action,
    restored_hard,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import PLAIN_FACTS, PodScopeFacts
from harvester_quota.util.resources import ResourceList, parse_resource_list
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime.datetime(2026, 11, 23, 9, 0, tzinfo=datetime.UTC)


def rl(**values: str) -> ResourceList:
    return parse_resource_list({k.replace("_", "."): v for k, v in values.items()})


def quota(name: str, hard: dict[str, str], used: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "tenant"},
        "spec": {"hard": hard, **spec},
        "status": {"hard": hard, "used": used},
    }


def vmmrq(additional: dict[str, str], status: dict[str, Any] | None = None, **meta: Any) -> Any:
    return decode_vmmrq(
        {
            "metadata": {"name": "budget", "namespace": "tenant", **meta},
            "spec": {"additionalMigrationResources": additional},
            "status": status or {},
        }
    )


POD = rl(requests_memory="1Gi", requests_cpu="500m", pods="1")


def test_raise_adds_the_budget_only_on_keys_the_quota_has() -> None:
    raised = raise_hard(
        rl(requests_memory="2Gi", pods="4"), rl(requests_memory="1Gi", memory="9Gi")
    )
    assert raised == rl(requests_memory="3Gi", pods="4")


def test_a_full_quota_blocks_and_the_budget_releases() -> None:
    full = quota_view(quota("rq", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"}))
    roomy = quota_view(quota("other", {"requests.cpu": "10"}, {"requests.cpu": "1"}))
    verdict = evaluate(POD, [full, roomy], {}, rl(requests_memory="1Gi"))
    assert verdict.blocking == ("rq",) and verdict.short == () and verdict.releasable


def test_a_budget_too_small_names_the_key_and_the_numbers() -> None:
    full = quota_view(quota("rq", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"}))
    verdict = evaluate(POD, [full], {}, rl(requests_memory="1023Mi"))
    assert not verdict.releasable
    message = not_enough_message("budget", "tenant", "mig-1", verdict.short)
    assert message == (
        "VirtualMachineMigrationResourceQuota budget in namespace tenant does not have enough "
        "resources to release blocked migration mig-1: quota rq requests.memory: the target pod "
        "needs 1Gi, 2Gi is used of 3071Mi including the budget's 1023Mi (short by 1Mi)"
    )


def test_a_quota_the_pod_fits_under_is_not_blocking_and_nothing_is_releasable() -> None:
    roomy = quota_view(quota("rq", {"requests.memory": "8Gi"}, {"requests.memory": "1Gi"}))
    assert evaluate(POD, [roomy], {}, rl(requests_memory="1Gi")) == evaluate(POD, [roomy], {}, {})
    assert not evaluate(POD, [roomy], {}, {}).releasable


def test_a_raised_quota_is_judged_at_its_recorded_original() -> None:
    raised = quota_view(quota("rq", {"requests.memory": "3Gi"}, {"requests.memory": "2Gi"}))
    verdict = evaluate(POD, [raised], {"rq": rl(requests_memory="2Gi")}, rl(requests_memory="1Gi"))
    assert verdict.blocking == ("rq",) and verdict.releasable


def test_scopes_a_launcher_never_matches_are_ignored() -> None:
    best_effort = quota_view(quota("be", {"pods": "0"}, {"pods": "0"}, scopes=["BestEffort"]))
    assert not best_effort.scope.matches(PLAIN_FACTS)
    assert evaluate(POD, [best_effort], {}, {}).blocking == ()


def priority_scoped(name: str, operator: str, *values: str) -> QuotaView:
    """A full quota on requests.memory that charges only pods its PriorityClass selector picks."""
    expression: dict[str, Any] = {"scopeName": "PriorityClass", "operator": operator}
    if values:
        expression["values"] = list(values)
    return quota_view(
        quota(
            name,
            {"requests.memory": "2Gi"},
            {"requests.memory": "2Gi"},
            scopeSelector={"matchExpressions": [expression]},
        )
    )


def test_a_quota_of_a_priority_class_the_launcher_does_not_use_blocks_nothing_and_is_not_raised() -> (
    None
):
    """A full quota for the "batch" class, a launcher without a class (or of another one): the
    quota charges the target pod nothing, so it neither blocks the migration nor is raised."""
    batch = priority_scoped("batch-only", "In", "batch")
    budget = rl(requests_memory="1Gi")
    for facts in (PLAIN_FACTS, PodScopeFacts(priority_class="vm-high")):
        assert evaluate(POD, [batch], {}, budget, facts=facts) == Verdict()
    plan = plan_namespace(vmmrq({"requests.memory": "1Gi"}), [blocked("m1")], [batch])
    assert plan.migrations == {} and plan.refused == {} and not plan.locks


def test_a_quota_of_the_launchers_priority_class_blocks_and_is_raised() -> None:
    batch = priority_scoped("vms", "In", "vm-high")
    plan = plan_namespace(
        vmmrq({"requests.memory": "1Gi"}),
        [Blocked("m1", "uid-m1", POD, PodScopeFacts(priority_class="vm-high"))],
        [batch],
    )
    assert plan.migrations == {"m1": ("vms",)} and plan.locks


def test_a_notin_or_doesnotexist_priority_quota_charges_a_launcher_without_a_class() -> None:
    for scoped in (priority_scoped("a", "NotIn", "batch"), priority_scoped("b", "DoesNotExist")):
        assert evaluate(POD, [scoped], {}, rl(requests_memory="1Gi")).blocking == (scoped.name,)
    exists = priority_scoped("c", "Exists")
    assert evaluate(POD, [exists], {}, rl(requests_memory="1Gi")).blocking == ()


def blocked(name: str, usage: ResourceList = POD) -> Blocked:
    return Blocked(name, f"uid-{name}", usage)


def test_several_migrations_share_one_raise_and_one_record() -> None:
    quotas = [
        quota_view(quota("a", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"})),
        quota_view(quota("b", {"requests.cpu": "1"}, {"requests.cpu": "1"})),
    ]
    plan = plan_namespace(
        vmmrq({"requests.memory": "4Gi", "requests.cpu": "2"}),
        [blocked("m1"), blocked("m2")],
        quotas,
    )
    assert plan.migrations == {"m1": ("a", "b"), "m2": ("a", "b")}
    assert plan.uids == {"uid-m1": "m1", "uid-m2": "m2"}
    assert [o.name for o in plan.originals] == ["a", "b"] and plan.locks
    assert plan.originals[0].hard == {"requests.memory": "2Gi"}


def test_a_protected_quota_holds_its_migrations_and_is_never_raised() -> None:
    """Only Rancher may raise `a`: the migration it blocks is neither releasable nor short of
    budget (no NotEnoughResourceToRelease), and `b`, which it also blocks, is not raised for it."""
    quotas = [
        quota_view(quota("a", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"})),
        quota_view(quota("b", {"requests.cpu": "1"}, {"requests.cpu": "1"})),
    ]
    budget = {"requests.memory": "1Mi", "requests.cpu": "2"}
    verdict = evaluate(
        POD,
        quotas,
        {},
        rl(**{k.replace(".", "_"): v for k, v in budget.items()}),
        protected=frozenset({"a"}),
    )
    assert verdict.held == ("a",) and verdict.short == () and not verdict.releasable
    plan = plan_namespace(vmmrq(budget), [blocked("m1")], quotas, protected=frozenset({"a"}))
    assert plan.held == {"m1": ("a",)} and plan.refused == {} and plan.migrations == {}
    assert not plan.locks


def test_a_protected_quota_the_pod_fits_under_holds_nothing() -> None:
    quotas = [
        quota_view(quota("a", {"requests.memory": "8Gi"}, {"requests.memory": "2Gi"})),
        quota_view(quota("b", {"requests.cpu": "1"}, {"requests.cpu": "1"})),
    ]
    plan = plan_namespace(
        vmmrq({"requests.cpu": "2"}), [blocked("m1")], quotas, protected=frozenset({"a"})
    )
    assert plan.held == {} and plan.migrations == {"m1": ("b",)} and plan.locks


def test_a_rancher_labelled_quota_is_known_as_one() -> None:
    labelled = quota("a", {"pods": "1"}, {"pods": "1"})
    labelled["metadata"]["labels"] = {
        "resourcequota.management.cattle.io/default-resource-quota": "true"
    }
    assert quota_view(labelled).rancher_default
    assert not quota_view(quota("b", {"pods": "1"}, {"pods": "1"})).rancher_default


def test_recorded_originals_are_kept_not_replaced_by_raised_values() -> None:
    raised = quota_view(quota("a", {"requests.memory": "6Gi"}, {"requests.memory": "3Gi"}))
    status = {
        "additionalMigrationResources": {"requests.memory": "4Gi"},
        "originalBlockingResourceQuotas": [
            {"name": "a", "spec": {"hard": {"requests.memory": "2Gi"}}}
        ],
    }
    plan = plan_namespace(vmmrq({"requests.memory": "1Gi"}, status), [blocked("m2")], [raised])
    assert plan.originals[0].hard == {"requests.memory": "2Gi"}
    assert plan.budget == rl(requests_memory="4Gi"), "the budget the raise used, not spec's"


def test_nothing_blocked_restores_every_recorded_quota_and_unlocks() -> None:
    status = {
        "additionalMigrationResources": {"requests.memory": "1Gi"},
        "originalBlockingResourceQuotas": [
            {"name": "a", "spec": {"hard": {"requests.memory": "2Gi"}}}
        ],
    }
    plan = plan_namespace(vmmrq({"requests.memory": "1Gi"}, status), [], [])
    assert not plan.locks and [o.name for o in plan.restore] == ["a"]


def test_a_deleting_vmmrq_releases_nothing() -> None:
    full = quota_view(quota("rq", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"}))
    plan = plan_namespace(
        vmmrq({"requests.memory": "1Gi"}, deletionTimestamp="2026-01-01T00:00:00Z"),
        [blocked("m1")],
        [full],
    )
    assert not plan.locks and plan.migrations == {}


def test_the_budget_is_shared_first_come_the_second_target_is_refused() -> None:
    """A budget for one target: once the first target counts in used, the second does not fit."""
    after_first = quota_view(quota("rq", {"requests.memory": "3Gi"}, {"requests.memory": "3Gi"}))
    status = {
        "additionalMigrationResources": {"requests.memory": "1Gi"},
        "originalBlockingResourceQuotas": [
            {"name": "rq", "spec": {"hard": {"requests.memory": "2Gi"}}}
        ],
    }
    plan = plan_namespace(vmmrq({"requests.memory": "1Gi"}, status), [blocked("m2")], [after_first])
    assert "m2" in plan.refused and not plan.locks


def view(hard: ResourceList) -> QuotaView:
    return QuotaView("rq", hard, {}, {"hard": {}})


def test_raise_then_restore_without_edits_is_exactly_the_original() -> None:
    original = OriginalQuota("rq", {"hard": {"requests.memory": "2Gi", "pods": "4"}})
    budget = rl(requests_memory="1Gi")
    raised = raise_action(view(rl(requests_memory="2Gi", pods="4")), original, budget)
    assert raised == rl(requests_memory="3Gi", pods="4")
    assert raise_action(view(raised), original, budget) is None, "raised already"
    assert restore_action(view(raised), original, budget) == rl(requests_memory="2Gi", pods="4")
    assert restore_action(view(rl(requests_memory="2Gi", pods="4")), original, budget) is None


def test_a_quota_edited_since_it_was_recorded_is_not_raised() -> None:
    original = OriginalQuota("rq", {"hard": {"requests.memory": "2Gi"}})
    assert (
        raise_action(view(rl(requests_memory="5Gi")), original, rl(requests_memory="1Gi")) is None
    )


def test_an_admin_edit_during_the_window_is_kept_by_the_restore() -> None:
    original = rl(requests_memory="2Gi", requests_cpu="2", pods="4")
    raised = raise_hard(original, rl(requests_memory="1Gi", requests_cpu="1"))
    live = {**raised, "requests.cpu": Quantity.parse("8"), "limits.cpu": Quantity.parse("9")}
    del live["pods"]
    assert restored_hard(live, original, raised) == rl(
        requests_memory="2Gi", requests_cpu="8", limits_cpu="9"
    )


KEYS = st.sampled_from(["requests.cpu", "requests.memory", "limits.memory", "pods", "cpu"])
AMOUNTS = st.integers(min_value=0, max_value=10**6).map(Quantity.from_int)
LISTS = st.dictionaries(KEYS, AMOUNTS, max_size=5)


@given(original=LISTS, budget=LISTS)
def test_property_restore_after_raise_is_the_original(
    original: ResourceList, budget: ResourceList
) -> None:
    assert (
        restored_hard(raise_hard(original, budget), original, raise_hard(original, budget))
        == original
    )


@given(original=LISTS, budget=LISTS, edits=LISTS, removed=st.sets(KEYS))
def test_property_restore_keeps_every_edit_and_restores_every_other_key(
    original: ResourceList, budget: ResourceList, edits: ResourceList, removed: set[str]
) -> None:
    raised = raise_hard(original, budget)
    live = {k: v for k, v in {**raised, **edits}.items() if k not in removed or k in edits}
    restored = restored_hard(live, original, raised)
    for key in set(live) | set(original):
        edited = key in live and live[key] != raised.get(key)
        if edited:
            assert restored[key] == live[key]
        elif key in live:
            assert restored.get(key) == original.get(key)
    for key in removed - set(edits):
        if key in raised:
            assert key not in restored, "a key the admin removed stays removed"


@given(usage=LISTS, hard=LISTS, used=LISTS, budget=LISTS)
def test_property_releasable_means_it_fits_every_raised_quota_and_not_the_original(
    usage: ResourceList, hard: ResourceList, used: ResourceList, budget: ResourceList
) -> None:
    quota = QuotaView("rq", hard, used, {})
    verdict = evaluate(usage, [quota], {}, budget)
    raised = raise_hard(hard, budget)
    zero = Quantity()
    fits_raised = all(used.get(k, zero) + usage[k] <= raised[k] for k in hard if k in usage)
    fits_now = all(used.get(k, zero) + usage[k] <= hard[k] for k in hard if k in usage)
    assert verdict.releasable == (fits_raised and not fits_now)
    assert bool(verdict.short) == (not fits_raised)


def test_the_lock_round_trips_and_is_void_after_its_deadline() -> None:
    lock = Lock(NOW + datetime.timedelta(seconds=30), "budget", {"uid-1": "m1"})
    namespace = {
        "metadata": {
            "labels": {LABEL_LOCKED: "true"},
            "annotations": {ANNOTATION_LOCK: lock.annotation()},
        }
    }
    parsed = parse_lock(namespace)
    assert parsed == lock
    assert parsed.active(NOW) and not parsed.active(NOW + datetime.timedelta(seconds=30))
    assert parsed.admits_target_of("uid-1") and not parsed.admits_target_of("uid-2")


def test_an_unlabelled_namespace_is_not_locked_and_an_unreadable_lock_is_void() -> None:
    assert parse_lock({"metadata": {"annotations": {ANNOTATION_LOCK: "{}"}}}) is None
    broken = parse_lock(
        {"metadata": {"labels": {LABEL_LOCKED: "true"}, "annotations": {ANNOTATION_LOCK: "nope"}}}
    )
    assert broken is not None and not broken.active(NOW)
