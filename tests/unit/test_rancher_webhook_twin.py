"""The rancher-webhook twin's answers (harvester_quota.testbench.sim.rancher.admission), checked against
rancher-webhook's own unit tests: the cases of pkg/resources/core/v1/resourcequota/validator_test.go
and limitrange/validator_test.go, replayed one by one with their inputs and expected answers (our
own names and code), then what its request handler (pkg/admission/admission.go) and the status
rule shipped in webhook v0.11.2-rc.3 / v0.10.x (rancher/webhook#1880, #1881) add.

One upstream case changed its answer between the test file we could read (da1a8449: "status update
of managed is allowed", for any user) and the validator Rancher ships: a status write by anyone
but the quota controller or the API server is refused ("status is immutable", rancher/rancher#56773).
The table carries the shipped answer and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from harvester_quota.testbench.sim.rancher.admission import (
    API_SERVER,
    BYPASS_GROUP,
    BYPASS_USER,
    CHANGING,
    CREATING,
    DELETING,
    NAMESPACE_CONTROLLER,
    PROMOTING,
    QUOTA_CONTROLLER,
    STATUS_IMMUTABLE,
    Kind,
    decide,
    review_response,
)
from harvester_quota.testbench.sim.rancher.twin import configuration, webhook_name
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA

RQ, LR = Kind.RESOURCE_QUOTAS, Kind.LIMIT_RANGES
USER = "kubernetes-admin"
"""An ordinary requester: rancher-webhook's tests leave userInfo empty; any user not exempt."""


def quota(name: str, *, marked: bool, cpu: str = "1") -> dict[str, Any]:
    labels = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"} if marked else None
    return {
        "metadata": {"name": name, "namespace": "test-ns", "labels": labels},
        "spec": {"hard": {"limits.cpu": cpu}},
    }


def limit_range(name: str, *, marked: bool) -> dict[str, Any]:
    labels = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"} if marked else None
    return {"metadata": {"name": name, "namespace": "test-ns", "labels": labels}, "spec": {}}


PLAIN_OLD = quota("rq", marked=False)
PLAIN = quota("rq", marked=False, cpu="100")
MANAGED = quota("rqmanaged", marked=True)
LR_PLAIN = limit_range("rq", marked=False)
LR_MANAGED = limit_range("rqmanaged", marked=True)


@dataclass(frozen=True)
class Case:
    name: str
    kind: Kind
    operation: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    allowed: bool
    message: str = ""
    sub_resource: str = ""
    user: str = USER
    groups: tuple[str, ...] = ("system:authenticated",)


UPSTREAM_CASES = [
    # resourcequota/validator_test.go, TestResourceQuotaValidator
    Case("create unmanaged is allowed", RQ, "CREATE", None, PLAIN, True),
    Case("create managed is denied", RQ, "CREATE", None, MANAGED, False, CREATING),
    Case("update unmanaged is allowed", RQ, "UPDATE", PLAIN_OLD, PLAIN, True),
    Case("update promotion to managed is denied", RQ, "UPDATE", PLAIN, MANAGED, False, PROMOTING),
    Case("update demotion to unmanaged is denied", RQ, "UPDATE", MANAGED, PLAIN, False, CHANGING),
    Case(
        "status update of managed, by a user: denied as shipped (allowed in da1a8449's table)",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        False,
        STATUS_IMMUTABLE,
        sub_resource="status",
    ),
    Case(
        "status update promotion to managed is denied",
        RQ,
        "UPDATE",
        PLAIN,
        MANAGED,
        False,
        PROMOTING,
        sub_resource="status",
    ),
    Case(
        "status update demotion to unmanaged is denied",
        RQ,
        "UPDATE",
        MANAGED,
        PLAIN,
        False,
        CHANGING,
        sub_resource="status",
    ),
    Case("delete unmanaged is allowed", RQ, "DELETE", PLAIN, None, True),
    Case("delete managed is denied", RQ, "DELETE", MANAGED, None, False, DELETING),
    Case(
        "delete managed is allowed to system controller",
        RQ,
        "DELETE",
        MANAGED,
        None,
        True,
        user=NAMESPACE_CONTROLLER,
    ),
    # limitrange/validator_test.go, TestLimitRangeValidator
    Case("limitrange: create unmanaged is allowed", LR, "CREATE", None, LR_PLAIN, True),
    Case("limitrange: create managed is denied", LR, "CREATE", None, LR_MANAGED, False, CREATING),
    Case("limitrange: update unmanaged is allowed", LR, "UPDATE", LR_PLAIN, LR_PLAIN, True),
    Case(
        "limitrange: update promotion to managed is denied",
        LR,
        "UPDATE",
        LR_PLAIN,
        LR_MANAGED,
        False,
        PROMOTING,
    ),
    Case(
        "limitrange: update demotion to unmanaged is denied",
        LR,
        "UPDATE",
        LR_MANAGED,
        LR_PLAIN,
        False,
        CHANGING,
    ),
    Case("limitrange: delete unmanaged is allowed", LR, "DELETE", LR_PLAIN, None, True),
    Case("limitrange: delete managed is denied", LR, "DELETE", LR_MANAGED, None, False, DELETING),
]

SHIPPED_AND_HANDLER_CASES = [
    # The status rule as shipped (#1880/#1881): the quota controller and the API server only,
    # on every quota, labelled or not.
    Case(
        "status update of managed by the quota controller is allowed",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        True,
        sub_resource="status",
        user=QUOTA_CONTROLLER,
    ),
    Case(
        "status update of managed by the API server (quota admission) is allowed",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        True,
        sub_resource="status",
        user=API_SERVER,
        groups=("system:masters",),
    ),
    Case(
        "status update of an unmanaged quota by a user is denied too",
        RQ,
        "UPDATE",
        PLAIN,
        PLAIN,
        False,
        STATUS_IMMUTABLE,
        sub_resource="status",
    ),
    Case(
        "the quota controller may not demote through status either",
        RQ,
        "UPDATE",
        MANAGED,
        PLAIN,
        False,
        CHANGING,
        sub_resource="status",
        user=QUOTA_CONTROLLER,
    ),
    # The handler's bypass (admission.go bypassValidation): the sudo user and system:masters.
    Case(
        "rancher's sudo identity in system:masters updates managed",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        True,
        user=BYPASS_USER,
        groups=(BYPASS_GROUP, "system:authenticated"),
    ),
    Case(
        "rancher's sudo identity writes status too",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        True,
        sub_resource="status",
        user=BYPASS_USER,
        groups=(BYPASS_GROUP,),
    ),
    Case(
        "the sudo user without system:masters (its service account token) is denied",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        False,
        CHANGING,
        user=BYPASS_USER,
        groups=("system:serviceaccounts", "system:authenticated"),
    ),
    Case(
        "system:masters without the sudo user (a cluster admin) is denied",
        RQ,
        "DELETE",
        MANAGED,
        None,
        False,
        DELETING,
        groups=(BYPASS_GROUP,),
    ),
    Case(
        "the namespace controller deletes a managed limitrange",
        LR,
        "DELETE",
        LR_MANAGED,
        None,
        True,
        user=NAMESPACE_CONTROLLER,
    ),
    Case(
        "the namespace controller may not update a managed quota",
        RQ,
        "UPDATE",
        MANAGED,
        MANAGED,
        False,
        CHANGING,
        user=NAMESPACE_CONTROLLER,
    ),
]


def request(case: Case) -> dict[str, Any]:
    return {
        "uid": "b9a2",
        "kind": {"group": "", "version": "v1", "kind": "ResourceQuota"},
        "operation": case.operation,
        "subResource": case.sub_resource,
        "namespace": "test-ns",
        "userInfo": {"username": case.user, "groups": list(case.groups)},
        "object": case.new,
        "oldObject": case.old,
    }


@pytest.mark.parametrize(
    "case", UPSTREAM_CASES + SHIPPED_AND_HANDLER_CASES, ids=lambda case: case.name
)
def test_the_twin_answers_as_rancher_webhook(case: Case) -> None:
    verdict = decide(case.kind, request(case))
    assert verdict.allowed is case.allowed
    if case.allowed:
        assert verdict.code == 200 and verdict.message == ""
    else:
        assert (verdict.code, verdict.reason, verdict.message) == (400, "BadRequest", case.message)


def test_every_upstream_case_is_ported() -> None:
    """validator_test.go has 11 cases for ResourceQuotas, 7 for LimitRanges."""
    assert sum(c.kind is RQ for c in UPSTREAM_CASES) == 11
    assert sum(c.kind is LR for c in UPSTREAM_CASES) == 7


def test_a_refusal_is_a_bad_request_in_the_review_status() -> None:
    verdict = decide(RQ, request(UPSTREAM_CASES[1]))
    assert review_response("u1", verdict) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "u1",
            "allowed": False,
            "status": {
                "status": "Failure",
                "message": CREATING,
                "reason": "BadRequest",
                "code": 400,
            },
        },
    }
    allowed = decide(RQ, request(UPSTREAM_CASES[0]))
    assert review_response("u2", allowed)["response"] == {"uid": "u2", "allowed": True}


@pytest.mark.parametrize(
    ("old", "new", "allowed", "message"),
    [
        (LR_MANAGED, LR_MANAGED, True, ""),
        (LR_PLAIN, LR_PLAIN, True, ""),
        (LR_MANAGED, LR_PLAIN, False, CHANGING),
        (LR_PLAIN, LR_MANAGED, False, PROMOTING),
    ],
    ids=["managed-kept", "unmanaged", "demotion", "promotion"],
)
def test_a_limit_range_status_write_is_refused_only_a_marker_change(
    old: dict[str, Any], new: dict[str, Any], allowed: bool, message: str
) -> None:
    """limitrange/validator.go (04e02b84) registers limitranges/status and, there, guards the
    marker alone: no allow list, unlike a quota's status."""
    case = Case("lr status", LR, "UPDATE", old, new, allowed, sub_resource="status")
    verdict = decide(LR, request(case))
    assert (verdict.allowed, verdict.message) == (allowed, message)


@pytest.mark.parametrize("operation", ["CONNECT", ""])
def test_an_operation_the_validator_does_not_handle_is_an_error(operation: str) -> None:
    case = Case("connect", RQ, operation, None, MANAGED, False, user=BYPASS_USER)
    verdict = decide(RQ, request(case))
    assert (verdict.allowed, verdict.code, verdict.reason) == (False, 500, "InternalError")
    assert "unsupported operation" in verdict.message


def test_an_object_that_cannot_be_read_is_an_error_not_an_answer() -> None:
    broken = {"metadata": {"labels": ["not", "a", "map"]}}
    case = Case("broken", RQ, "CREATE", None, broken, False)
    verdict = decide(RQ, request(case))
    assert (verdict.allowed, verdict.code) == (False, 500)
    assert verdict.message.startswith("failed to decode resourcequotas")


def test_a_label_other_than_true_does_not_make_a_quota_rancher_s() -> None:
    other = quota("rq", marked=False)
    other["metadata"]["labels"] = {LABEL_DEFAULT_RESOURCE_QUOTA: "false"}
    assert decide(RQ, request(Case("false", RQ, "CREATE", None, other, True))).allowed


def test_the_registration_is_rancher_webhook_s() -> None:
    """TestResourceQuotaValidatingWebhookIncludesStatusSubresource, and the defaults of
    admission.NewDefaultValidatingWebhook; narrowed to the given namespaces."""
    document = configuration("rancher.cattle.io-t1", "https://127.0.0.1:9443", b"pem", ["b", "a"])
    quotas, ranges = document["webhooks"]
    assert quotas["name"] == webhook_name(RQ) == "rancher.cattle.io.resourcequotas"
    assert ranges["name"] == "rancher.cattle.io.limitranges"
    assert quotas["rules"][0]["resources"] == ["resourcequotas", "resourcequotas/status"]
    assert ranges["rules"][0]["resources"] == ["limitranges", "limitranges/status"]
    for webhook, kind in ((quotas, "resourcequotas"), (ranges, "limitranges")):
        assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]
        assert webhook["rules"][0]["scope"] == "Namespaced"
        assert (webhook["failurePolicy"], webhook["matchPolicy"]) == ("Fail", "Equivalent")
        assert webhook["clientConfig"]["url"].endswith(f"/v1/webhook/validation/{kind}")
        assert "timeoutSeconds" not in webhook
        values = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == ["a", "b"]
    assert json.dumps(document)  # serialisable as sent
