"""MTQ mode's collaborators on their own: lock windows that ended (windows.py) and the Warnings
once per change (reports.py). The whole flow is tested through the reconcile in
test_mtq_controller.py."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

from harvester_quota.apis.mtq import decode_vmmrq
from harvester_quota.controller.mtq.reports import MtqWarnings
from harvester_quota.controller.mtq.windows import RETRY_AFTER_EXPIRY, RETRY_CAP, ExpiredWindows
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.mtq import Lock, MtqPlan
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.base import Shortfall

ZERO = Quantity()

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def migration(uid: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"m-{uid}",
            "namespace": "tenant",
            "uid": uid,
            "resourceVersion": version,
        }
    }


def windows(targets: set[str]) -> tuple[ExpiredWindows, FakeClock, list[tuple[str, float]]]:
    clock, queued = FakeClock(), []
    expired = ExpiredWindows(
        clock, lambda uid: uid in targets, lambda ns, seconds: queued.append((ns, seconds))
    )
    return expired, clock, queued


def test_a_window_that_ended_without_its_target_pod_makes_its_migration_wait_doubling() -> None:
    expired, clock, queued = windows(targets=set())
    lock = Lock(NOW, "budget", {"u1": "m-u1"})
    expired.expire(lock, [migration("u1")])
    assert expired.waiting([migration("u1")]) == ["m-u1"]
    assert queued == [("tenant", RETRY_AFTER_EXPIRY)], "the namespace runs again when it is due"
    expired.expire(lock, [migration("u1")])
    assert len(queued) == 1, "a retried reconcile records the same end once"
    clock.step(RETRY_AFTER_EXPIRY)
    assert expired.waiting([migration("u1")]) == [], "due: it may have another window"
    expired.expire(lock, [migration("u1")])
    assert queued[-1] == ("tenant", 2 * RETRY_AFTER_EXPIRY), "the next wait doubles"
    for _ in range(10):
        clock.step(RETRY_CAP)
        expired.expire(lock, [migration("u1")])
    assert queued[-1] == ("tenant", RETRY_CAP), "up to the cap"


def test_a_change_of_the_migration_or_its_target_pod_ends_the_wait() -> None:
    expired, _clock, queued = windows(targets={"u2"})
    lock = Lock(NOW, "budget", {"u1": "m-u1", "u2": "m-u2"})
    expired.expire(lock, [migration("u1"), migration("u2"), migration("u3")])
    assert [ns for ns, _ in queued] == ["tenant"], "u2 has its pod, u3 was not in the window"
    assert expired.waiting([migration("u1", version="2")]) == [], "changed since: no wait"


def test_each_warning_is_sent_once_per_change_of_its_text() -> None:
    events: list[tuple[str, str, str]] = []
    recorder: Any = SimpleNamespace(
        event=lambda obj, _kind, reason, message: events.append((obj["name"], reason, message))
    )
    warnings = MtqWarnings(recorder)
    for _ in range(3):
        warnings.once("k", {"name": "a"}, "Reason", "short by 1 CPU")
    warnings.once("k", {"name": "a"}, "Reason", "short by 2 CPU")
    warnings.once("other", {"name": "b"}, "Reason", "short by 2 CPU")
    assert events == [
        ("a", "Reason", "short by 1 CPU"),
        ("a", "Reason", "short by 2 CPU"),
        ("b", "Reason", "short by 2 CPU"),
    ]


def test_warnings_forget_deleted_migrations_and_namespaces_without_a_budget() -> None:
    """Item 5 of issue 38: the memory of what was reported kept an entry per migration ever
    refused, deleted ones included, so a tenant that creates and deletes migrations the budget
    cannot release grew the controller's memory without bound. It now holds the migrations
    still listed, and nothing of a namespace without a VMMRQ."""
    recorder: Any = SimpleNamespace(event=lambda *_args: None)
    warnings = MtqWarnings(recorder)
    budget = decode_vmmrq(
        {
            "metadata": {"name": "budget", "namespace": "tenant"},
            "spec": {"additionalMigrationResources": {"requests.cpu": "1"}},
        }
    )
    short = (Shortfall("requests.cpu", Quantity.parse("2"), ZERO, ZERO, quota="rq", budget=ZERO),)
    for round_ in range(10):
        listed = [migration(f"u{round_}-{i}") for i in range(100)]
        refused = {str(m["metadata"]["name"]): short for m in listed}
        plan = MtqPlan({}, {}, {}, refused, {}, (), ())
        warnings.not_enough(budget, plan, listed, None)
    assert len(warnings) == 100, "only the migrations still listed are remembered"
    warnings.not_enough(budget, MtqPlan({}, {}, {}, {}, {}, (), ()), [], None)
    assert len(warnings) == 0
    warnings.once("rancher/budget", {"metadata": {"namespace": "tenant"}}, "R", "m")
    warnings.forget("tenant")
    assert len(warnings) == 0
