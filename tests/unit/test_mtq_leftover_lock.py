"""KubeVirt MTQ's namespace locks left behind: recognised as MTQ builds them (and only those),
reported once on the Namespace with what to delete once older than a live MTQ window, and shown
by `explain`."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any, cast

from harvester_quota.config.management import Management
from harvester_quota.controller.mtq.leftover_lock import INDEX, LeftoverLockReporter
from harvester_quota.explain import Explanation, render_text
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.mtqlock import (
    LEFTOVER_AFTER,
    REASON,
    is_mtq_lock,
    locked_namespaces,
    locks_of,
    mtq_locks,
)

from tests.objects import kubevirt_mtq_lock as mtq_lock

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_a_lock_as_mtq_builds_it_names_its_namespace_service_and_the_cure() -> None:
    (lock,) = mtq_locks(mtq_lock("tenant"))
    assert (lock.configuration, lock.namespace, lock.service) == (
        "lock.tenant.com",
        "tenant",
        "mtq/mtq-lock",
    )
    assert lock.created == START
    message = lock.message()
    assert "kubectl delete validatingwebhookconfiguration lock.tenant.com" in message
    assert "every pod create" in message and "namespace tenant" in message


def test_an_unlabelled_lock_calling_mtqs_service_is_still_mtqs() -> None:
    assert locked_namespaces(mtq_lock("tenant", labelled=False)) == ["tenant"]


def test_other_webhook_configurations_are_not_mtq_locks() -> None:
    ours = {"metadata": {"name": "harvester-quota"}, "webhooks": [{"name": "pods.hq.io"}]}
    lookalike = mtq_lock("tenant", labelled=False, service="something-else")
    assert not is_mtq_lock(ours) and mtq_locks(lookalike) == []
    assert locks_of("tenant", [ours, lookalike, mtq_lock("other")]) == []


def test_a_lock_is_a_leftover_only_past_a_live_windows_length() -> None:
    (lock,) = mtq_locks(mtq_lock("tenant"))
    young = START + datetime.timedelta(seconds=LEFTOVER_AFTER - 1)
    assert not lock.is_leftover(young)
    assert lock.is_leftover(START + datetime.timedelta(seconds=LEFTOVER_AFTER))
    unknown = mtq_lock("tenant")
    unknown["metadata"]["creationTimestamp"] = "yesterday"
    assert mtq_locks(unknown)[0].is_leftover(young), "a lock of unknown age is reported"


class Fakes:
    """The reporter's Management: one store of configurations, a recorder, delayed enqueues."""

    def __init__(self, configurations: list[dict[str, Any]]) -> None:
        self.configurations = configurations
        self.clock = FakeClock(wall=START)
        self.events: list[tuple[str, str, str, str]] = []
        self.delayed: list[tuple[str, float]] = []
        store = SimpleNamespace(
            has_index=lambda name: True,
            by_index=lambda index, value: [
                c for c in self.configurations if index == INDEX and value in locked_namespaces(c)
            ],
        )
        namespaces = SimpleNamespace(
            enqueue_after=lambda _ns, name, delay: self.delayed.append((name, delay)),
            watch_related=lambda *_, **__: None,
            on_change=lambda *_: None,
        )
        self.management = cast(
            Management,
            SimpleNamespace(
                clock=self.clock,
                informers=SimpleNamespace(informer=lambda *_, **__: SimpleNamespace(store=store)),
                controllers=SimpleNamespace(namespaces=lambda: namespaces),
                recorder=SimpleNamespace(
                    event=lambda obj, kind, reason, message: self.events.append(
                        (obj["metadata"]["name"], kind, reason, message)
                    )
                ),
            ),
        )


async def test_a_leftover_is_reported_once_on_its_namespace_after_a_live_windows_length() -> None:
    fakes = Fakes([mtq_lock("tenant"), mtq_lock("elsewhere")])
    reporter = LeftoverLockReporter(fakes.management)
    namespace = {"metadata": {"name": "tenant", "uid": "ns-uid"}}
    await fakes.clock.advance(10)
    await reporter.reconcile("tenant", namespace)
    assert fakes.events == [], "10 s old: maybe a live KubeVirt MTQ window"
    assert fakes.delayed == [("tenant", LEFTOVER_AFTER - 10 + 0.05)], "looked at again then"
    await fakes.clock.advance(LEFTOVER_AFTER)
    await reporter.reconcile("tenant", namespace)
    await reporter.reconcile("tenant", namespace)
    ((name, kind, reason, message),) = fakes.events
    assert (name, kind, reason) == ("tenant", "Warning", REASON)
    assert "kubectl delete validatingwebhookconfiguration lock.tenant.com" in message


async def test_a_namespace_without_a_lock_is_left_alone() -> None:
    fakes = Fakes([mtq_lock("elsewhere")])
    reporter = LeftoverLockReporter(fakes.management)
    await fakes.clock.advance(LEFTOVER_AFTER * 2)
    assert await reporter.reconcile("tenant", {"metadata": {"name": "tenant"}}) is not None
    assert fakes.events == [] and fakes.delayed == []


def test_explain_names_the_lock_and_what_to_delete_even_without_a_managed_quota() -> None:
    (lock,) = mtq_locks(mtq_lock("tenant"))
    entry = {"configuration": lock.configuration, "message": lock.message()}
    text = render_text(Explanation("tenant", None, managed=False, mtq_locks=[entry]))
    assert "KubeVirt MTQ lock left" in text
    assert "kubectl delete validatingwebhookconfiguration lock.tenant.com" in text
    managed = render_text(Explanation("tenant", "default-quota", managed=True, mtq_locks=[entry]))
    assert "kubectl delete validatingwebhookconfiguration lock.tenant.com" in managed
