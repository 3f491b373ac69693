"""The MTQ lock rules: only the lock's migration target pods, created by KubeVirt, pass in a
locked namespace; quota edits and VMMRQ creates and deletes are refused, saying why and until
when; our controller passes; the deadline is honoured by the webhook itself."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import orjson
import pytest
from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.util.mtq import ANNOTATION_LOCK, FINALIZER, LABEL_LOCKED, Lock
from harvester_quota.webhook.admission import Denied, Request
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.mtq.validator import validate_locked
from harvester_quota.webhook.server import WebhookServer
from prometheus_client import CollectorRegistry

from tests.unit.test_webhook import KUBEVIRT_CONTROLLER, FakeLookups, plain_pod, request

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
CONTROLLER = "system:serviceaccount:harvester-system:harvester-quota"


def locked(until: datetime.datetime = NOW + datetime.timedelta(seconds=20)) -> FakeLookups:
    lock = Lock(until, "budget", {"mig-uid": "mig0"})
    namespace = {
        "metadata": {
            "name": "ns",
            "labels": {LABEL_LOCKED: "true"},
            "annotations": {ANNOTATION_LOCK: lock.annotation()},
        }
    }
    return FakeLookups(namespaces={"ns": namespace})


def pod(migration_uid: str | None = None) -> dict[str, Any]:
    labels = {LABEL_MIGRATION_JOB: migration_uid} if migration_uid else {}
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels}}


def check(lookups: FakeLookups, kind: str, obj: Any, *, user: str, operation: str) -> None:
    validate_locked(request(kind, obj, user=user, operation=operation), lookups, Identities())


def test_the_lock_s_target_pod_from_kubevirt_passes() -> None:
    check(locked(), "Pod", pod("mig-uid"), user=KUBEVIRT_CONTROLLER, operation="CREATE")


@pytest.mark.parametrize(
    ("labelled", "user"),
    [
        (None, "tenant"),
        (None, KUBEVIRT_CONTROLLER),  # a new VM's launcher: not a migration target
        ("mig-uid", "tenant"),  # the label, but not KubeVirt: a squatter
        ("other-migration", KUBEVIRT_CONTROLLER),  # a migration the lock is not held for
    ],
)
def test_every_other_pod_is_refused_saying_why_and_until_when(
    labelled: str | None, user: str
) -> None:
    with pytest.raises(Denied) as denied:
        check(locked(), "Pod", pod(labelled), user=user, operation="CREATE")
    message = denied.value.message
    assert "only the migration target pods are created" in message
    assert "VirtualMachineMigrationResourceQuota budget" in message and "mig0" in message
    assert (
        "until 2026-01-01T00:00:20Z (at most 20s from now) and the quotas are restored" in message
    )


def test_quota_edits_and_vmmrq_creates_and_deletes_are_refused_except_our_controller_s() -> None:
    quota = {"metadata": {"name": "rq", "namespace": "ns"}}
    with pytest.raises(Denied, match="quota rq cannot be edited while namespace ns is locked"):
        check(locked(), "ResourceQuota", quota, user="admin", operation="UPDATE")
    check(locked(), "ResourceQuota", quota, user=CONTROLLER, operation="UPDATE")
    vmmrq = {"metadata": {"name": "budget", "namespace": "ns"}}
    for operation in ("CREATE", "DELETE"):
        with pytest.raises(Denied, match=f"{operation.lower()} is not allowed while"):
            check(
                locked(),
                "VirtualMachineMigrationResourceQuota",
                vmmrq,
                user="admin",
                operation=operation,
            )
    check(locked(), "VirtualMachineMigrationResourceQuota", vmmrq, user="admin", operation="UPDATE")


def resize(old_cpu: str, new_cpu: str, user: str = "tenant") -> Request:
    return Request(
        uid="u",
        kind="Pod",
        operation="UPDATE",
        namespace="ns",
        name="p",
        username=user,
        groups=(),
        obj=plain_pod("p", new_cpu, "1Gi"),
        old=plain_pod("p", old_cpu, "1Gi"),
        dry_run=False,
        sub_resource="resize",
    )


def test_no_pod_grows_in_place_while_locked_not_even_kubevirts_and_shrinks_pass() -> None:
    """Review finding 5: a tenant with pods/resize grew a pod into the budget while the
    namespace was locked (the lock rule saw creates only)."""
    with pytest.raises(Denied) as denied:
        validate_locked(resize("1", "8"), locked(), Identities())
    assert "no pod may grow in place while" in denied.value.message
    with pytest.raises(Denied):
        validate_locked(resize("1", "8", KUBEVIRT_CONTROLLER), locked(), Identities())
    validate_locked(resize("8", "1"), locked(), Identities())
    validate_locked(resize("1", "8"), FakeLookups(), Identities())


def test_past_its_deadline_the_lock_holds_until_the_controller_has_restored_and_unlocked() -> None:
    """Issue 38 item 4: the webhook let the lock go at its deadline, while the quotas stayed
    raised until the controller's restore (a moment later, or never with the controller
    dead): a tenant who created pods right at the deadline took the budget. The lock now holds
    until the controller removes it, which it does only after the restore."""
    expired = locked(until=NOW)
    with pytest.raises(Denied) as denied:
        check(expired, "Pod", pod(), user="tenant", operation="CREATE")
    assert "until the quotas are restored (its window ended at 2026-01-01T00:00:00Z)" in (
        denied.value.message
    )
    vmmrq = {"metadata": {"name": "budget", "namespace": "ns"}}
    with pytest.raises(Denied):
        check(expired, "VirtualMachineMigrationResourceQuota", vmmrq, user="t", operation="DELETE")
    check(
        expired, "ResourceQuota", {"metadata": {"name": "rq"}}, user=CONTROLLER, operation="UPDATE"
    )
    check(expired, "Pod", pod("mig-uid"), user=KUBEVIRT_CONTROLLER, operation="CREATE")


def test_no_one_but_our_controller_takes_the_restore_finalizer_off_while_locked() -> None:
    """The tenant lies by omission: with update rights on its VMMRQ it removed the finalizer,
    so the VMMRQ (and the originals its status records) could go before the restore. Other
    updates pass; so does any update once unlocked."""
    held = {"metadata": {"name": "budget", "namespace": "ns", "finalizers": [FINALIZER]}}
    stripped = {"metadata": {"name": "budget", "namespace": "ns", "finalizers": []}}
    kind = "VirtualMachineMigrationResourceQuota"

    def update(lookups: FakeLookups, user: str, new: Any) -> None:
        validate_locked(
            request(kind, new, held, user=user, operation="UPDATE"), lookups, Identities()
        )

    with pytest.raises(Denied, match=f"its finalizer {FINALIZER} may not be removed"):
        update(locked(), "tenant", stripped)
    relabelled = {"metadata": {**held["metadata"], "labels": {"team": "b"}}}
    update(locked(), "tenant", relabelled)
    update(locked(), CONTROLLER, stripped)
    update(FakeLookups(), "tenant", stripped)


def test_no_one_but_our_controller_writes_a_vmmrqs_status_while_locked() -> None:
    """Review M6: a tenant with rights on its VMMRQ's status wrote originals and a budget that
    sum to the raised value, so the restore left the budget in the quota. While locked, only
    our controller writes the status; once unlocked anyone with the rights may."""
    kind = "VirtualMachineMigrationResourceQuota"
    old = {"metadata": {"name": "budget", "namespace": "ns", "finalizers": [FINALIZER]}}
    new = {**old, "status": {"originalBlockingResourceQuotas": []}}

    def update_status(lookups: FakeLookups, user: str) -> None:
        status = dataclasses.replace(
            request(kind, new, old, user=user, operation="UPDATE"), sub_resource="status"
        )
        validate_locked(status, lookups, Identities())

    with pytest.raises(Denied, match="its status may not be written"):
        update_status(locked(), "tenant")
    update_status(locked(), CONTROLLER)
    update_status(FakeLookups(), "tenant")


def test_an_unlocked_namespace_admits_everything_and_an_unknown_kind_is_an_error() -> None:
    check(FakeLookups(), "Pod", pod(), user="tenant", operation="CREATE")
    with pytest.raises(Denied, match="do not cover Secret"):
        check(locked(), "Secret", {"metadata": {"name": "s"}}, user="tenant", operation="CREATE")


def review(kind: str, obj: Any, user: str) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "operation": "CREATE",
                "namespace": "ns",
                "userInfo": {"username": user},
                "object": obj,
            },
        }
    )


async def test_the_server_s_lock_endpoint_answers_any_kind_and_the_pod_endpoint_skips_the_wait() -> (
    None
):
    server = WebhookServer(locked(), registry=CollectorRegistry())
    answer = orjson.loads((await server.review("mtq-lock", review("Pod", pod(), "tenant"))).body)
    assert answer["response"]["allowed"] is False
    assert "locked" in answer["response"]["status"]["message"]
    target = review("Pod", pod("mig-uid"), KUBEVIRT_CONTROLLER)
    for endpoint in ("mtq-lock", "pods"):
        answer = orjson.loads((await server.review(endpoint, target)).body)
        assert answer["response"]["allowed"] is True
