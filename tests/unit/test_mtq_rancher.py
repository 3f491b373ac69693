"""MTQ mode where Rancher 2.14.6+/2.15.2+ protects its default quota: rancher-webhook refuses
every write of it but its own (400 BadRequest; our ValidatingAdmissionPolicy twin answers 403).
The quota is left out of MTQ's plan: no lock is taken for a raise that cannot happen, one
Warning on the VMMRQ says what to do, and a refusal met mid-window ends the window at once and
for good (no lock, restore, unlock, back off, lock again loop)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Resource
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from harvester_quota.util.mtq import (
    ANNOTATION_LOCK,
    LABEL_LOCKED,
    RANCHER_PROTECTED_REASON,
    parse_lock,
)

from tests.unit.mtq_fakes import Harness, Obj, harness
from tests.unit.test_mtq_controller import (
    assert_back_to_original,
    lock_and_raise,
    namespace_labels,
    quota_hard,
    setup,
    target_pod_appears,
    vmmrq,
)

RANCHER_LABELS = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}
DENIAL = (
    'admission webhook "rancher.cattle.io.resourcequotas" denied the request: '
    "users are forbidden from changing resources managed by Rancher"
)


def rancher_webhook(
    status: int = 400, *, dry_runs: bool = True
) -> Callable[[Resource, Obj, str, bool], errors.ApiError | None]:
    """rancher-webhook's rule: no write of a labelled quota's spec but Rancher's own (400, as
    the real webhook answers; 403 as our admission policy twin). `dry_runs` False: the
    protection came after our dry run (a Rancher upgrade in between)."""
    kind = errors.BadRequest if status == 400 else errors.Forbidden

    def admit(
        resource: Resource, current: Obj, subresource: str, dry_run: bool
    ) -> errors.ApiError | None:
        labelled = (current["metadata"].get("labels") or {}).get(LABEL_DEFAULT_RESOURCE_QUOTA)
        if resource != RESOURCE_QUOTAS or labelled != "true" or subresource:
            return None
        if dry_run and not dry_runs:
            return None
        return kind(DENIAL, status=status)

    return admit


def rancher_events(h: Harness) -> list[tuple[str, str]]:
    return [
        (name, message) for name, reason, message in h.events if reason == RANCHER_PROTECTED_REASON
    ]


@pytest.mark.parametrize("status", [400, 403])
async def test_a_quota_only_rancher_may_write_takes_no_lock_and_is_said_once(status: int) -> None:
    h = harness()
    s = setup(h, quota_labels=RANCHER_LABELS)
    h.cluster.admission = rancher_webhook(status)
    reconciler = h.reconciler()
    for _ in range(4):
        await h.reconcile(reconciler)
        await h.clock.advance(120)
    assert not any(w.startswith("namespaces") for w in h.cluster.writes), "never locked"
    assert not any(w.startswith("resourcequotas") for w in h.cluster.writes)
    assert quota_hard(h) == s["original"]
    assert h.cluster.dry_runs == ["resourcequotas tenant/rq"], "asked once, by a dry run"
    ((name, message),) = rancher_events(h)
    assert name == "budget"
    assert "Rancher protects ResourceQuota rq in namespace tenant" in message
    assert "managed by Rancher" in message and "field.cattle.io/resourceQuota" in message
    assert "delete budget" in message
    status_ = (vmmrq(h) or {}).get("status") or {}
    assert not status_.get("originalBlockingResourceQuotas")
    assert not status_.get("migrationsToBlockingResourceQuotas"), "not releasable"
    assert reconciler.stats.locks == 0 and reconciler.stats.rancher_refusals == 1


async def test_a_raise_refused_mid_window_ends_it_at_once_and_for_good() -> None:
    """The dry run passed (no protection yet), then Rancher refuses the real raise: the window
    ends in the next reconcile, not at its deadline, and no window follows."""
    h = harness()
    s = setup(h, quota_labels=RANCHER_LABELS)
    h.cluster.admission = rancher_webhook(dry_runs=False)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    assert reconciler.stats.locks == 1 and reconciler.stats.rancher_refusals == 1
    assert ("tenant", 0.0) in h.namespaces.delayed, "planned again at once"
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    h.cluster.writes.clear()
    for _ in range(3):  # the backoff's end, the migration changing: no new window
        await h.clock.advance(700)
        target = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq") or {}
        h.cluster.put(RESOURCE_QUOTAS, target)
        await h.reconcile(reconciler)
    assert LABEL_LOCKED not in namespace_labels(h)
    assert reconciler.stats.locks == 1
    assert not any(w.startswith("namespaces") for w in h.cluster.writes)
    assert len(rancher_events(h)) == 1


async def test_a_window_left_by_a_dead_controller_is_closed_without_a_write_to_rancher() -> None:
    """A process locked and recorded the labelled quota before Rancher protected it, then died;
    its successor learns of the protection from its dry run and releases the namespace."""
    h = harness()
    s = setup(h, quota_labels=RANCHER_LABELS)
    first = h.reconciler()
    await h.reconcile(first)  # the lock
    assert parse_lock(h.cluster.get(NAMESPACES, "tenant")) is not None
    h.cluster.admission = rancher_webhook()
    successor = h.reconciler()
    await h.reconcile(successor)
    assert_back_to_original(h, s)
    assert not any(w.startswith("resourcequotas") for w in h.cluster.writes)


async def test_a_labelled_quota_rancher_lets_us_write_is_raised_as_any_other() -> None:
    """Rancher before 2.14.6 protects nothing: the dry run passes, and is not asked again."""
    h = harness()
    s = setup(h, quota_labels=RANCHER_LABELS)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    assert reconciler.stats.quota_writes == 2 and rancher_events(h) == []
    assert h.cluster.dry_runs == ["resourcequotas tenant/rq"]


async def test_another_refusal_with_rancher_words_on_a_plain_quota_is_not_rancher() -> None:
    """Only Rancher's labelled quota can be Rancher's: a refusal of another quota propagates
    (the workqueue retries with backoff) and nothing is learned."""
    h = harness()
    setup(h)

    def refuse_all(
        resource: Resource, current: Obj, subresource: str, dry_run: bool
    ) -> errors.ApiError | None:
        return (
            errors.BadRequest(DENIAL, status=400)
            if resource == RESOURCE_QUOTAS and not subresource
            else None
        )

    h.cluster.admission = refuse_all
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    with pytest.raises(errors.BadRequest):
        await h.reconcile(reconciler)
    assert reconciler.stats.rancher_refusals == 0 and rancher_events(h) == []


async def test_a_namespace_deleted_and_created_again_is_asked_again() -> None:
    """What Rancher refused is learned per namespace while it exists: one created again under
    the name (in a project whose quota we may write, say) gets its own dry run, not the old
    namespace's verdict, and the learned set does not grow with namespaces gone."""
    h = harness()
    s = setup(h, quota_labels=RANCHER_LABELS)
    h.cluster.admission = rancher_webhook()
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    assert "tenant" in reconciler.rancher.protected
    assert await reconciler.reconcile("tenant", None) is None, "the namespace deleted"
    assert "tenant" not in reconciler.rancher.protected
    h.cluster.admission = None
    await lock_and_raise(h, reconciler)
    assert h.cluster.dry_runs == ["resourcequotas tenant/rq"] * 2, "asked again"
    assert quota_hard(h) != s["original"], "raised: Rancher lets this one be written"


def rancher_synced(h: Harness, status: str) -> None:
    """Rancher's agent writing the namespace (its project label, its conditions), as on every
    sync."""
    namespace = h.cluster.get(NAMESPACES, "tenant")
    assert namespace is not None
    newer = {**namespace, "metadata": dict(namespace["metadata"])}
    newer["metadata"]["labels"] = {"field.cattle.io/projectId": "p-abcde"}
    newer["metadata"]["annotations"] = {"cattle.io/status": status}
    h.cluster.put(NAMESPACES, newer)


async def test_a_lock_is_not_lost_to_rancher_s_agent_writing_the_namespace_meanwhile() -> None:
    """The lock is conditional on itself as read, not on the namespace's resourceVersion,
    which Rancher's agent moves on every sync: a lock conditional on the version lost to it,
    each Conflict a backoff. What the agent wrote stays."""
    h = harness()
    setup(h)
    rancher_synced(h, "first")
    read = h.cluster.get(NAMESPACES, "tenant") or {}
    rancher_synced(h, "second")
    await h.reconciler().reconcile("tenant", read)
    namespace = h.cluster.get(NAMESPACES, "tenant") or {}
    assert parse_lock(namespace) is not None and namespace_labels(h)[LABEL_LOCKED] == "true"
    assert namespace["metadata"]["annotations"]["cattle.io/status"] == "second", "theirs kept"
    assert namespace_labels(h)["field.cattle.io/projectId"] == "p-abcde"


async def test_a_lock_that_changed_since_it_was_read_is_a_conflict() -> None:
    h = harness()
    setup(h)
    rancher_synced(h, "first")
    read = h.cluster.get(NAMESPACES, "tenant") or {}
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    taken = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert taken is not None
    with pytest.raises(errors.Conflict):
        await h.reconciler().reconcile("tenant", read)  # a stale read: no lock seen
    after = h.cluster.get(NAMESPACES, "tenant") or {}
    assert after["metadata"]["annotations"][ANNOTATION_LOCK] == taken.annotation(), "kept"
