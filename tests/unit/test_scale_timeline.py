"""A migration's timeline in the scale report: its moments assembled from audit records and the
webhook's log, the hops between them, and the hop the quota arm waits on."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from harvester_quota.testbench.localcluster.audit import AuditRecord
from harvester_quota.testbench.localcluster.deploy import CONTROLLER_USER
from harvester_quota.testbench.scale import timeline
from harvester_quota.testbench.scale.observe import room_keys
from harvester_quota.testbench.scale.stats import ARM_NONE, ARM_OURS, StepResult
from harvester_quota.testbench.scale.timeline import (
    KCM_QUOTA_USER,
    VIRT_CONTROLLER_USER,
    Migration,
    Timeline,
    WebhookAnswer,
)
from harvester_quota.util.annotations import migrating_vm_annotation_key

from tests.unit.scalesteps import step_result

NS = "scale-000"
T0 = datetime(2026, 11, 27, 19, 0, tzinfo=UTC)
ROOM_PATH = "/metadata/annotations/" + migrating_vm_annotation_key("vm-1").replace("/", "~1")


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def record(
    ms: float,
    verb: str,
    resource: str,
    *,
    user: str = "admin",
    name: str | None = None,
    code: int = 200,
    took: float = 5,
    body: Any = None,
    subresource: str | None = None,
    namespace: str = NS,
) -> AuditRecord:
    """One finished request received `ms` after T0 and completed `took` ms later."""
    return AuditRecord(
        audit_id=f"{verb}-{resource}-{ms}",
        user=user,
        groups=(),
        impersonated_user=None,
        verb=verb,
        api_group="",
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        code=code,
        message=None,
        user_agent=None,
        received=at(ms),
        completed=at(ms + took),
        request_object=body,
    )


def vmim(ms: float, name: str = "vm-1-m") -> AuditRecord:
    return record(ms, "create", "virtualmachineinstancemigrations", name=name)


def raise_(ms: float, path: str = ROOM_PATH, op: str = "add") -> AuditRecord:
    body = [{"op": "test", "path": "/spec", "value": {}}, {"op": op, "path": path, "value": "{}"}]
    return record(ms, "patch", "resourcequotas", user=CONTROLLER_USER, name="q", body=body)


def status(ms: float, user: str = KCM_QUOTA_USER) -> AuditRecord:
    return record(ms, "update", "resourcequotas", user=user, name="q", subresource="status")


def pod_create(ms: float, vm: str = "vm-1", *, code: int = 201, took: float = 5) -> AuditRecord:
    body = {
        "metadata": {"generateName": f"virt-launcher-{vm}-", "labels": {"vm.kubevirt.io/name": vm}}
    }
    return record(ms, "create", "pods", user=VIRT_CONTROLLER_USER, code=code, took=took, body=body)


def migration(*, webhook: bool = True, succeeded: datetime | None = None) -> Migration:
    return Migration(NS, "vm-1", "vm-1-m", room_keys("vm-1"), succeeded, webhook)


def test_every_moment_of_a_migration_is_found_in_its_steps_records() -> None:
    records = [
        vmim(0),
        pod_create(10, code=403),  # refused: the room is not in status.hard yet
        raise_(20),
        status(40),
        pod_create(60, took=150),
    ]
    answers = [WebhookAnswer(NS, "vm-1", at(200))]

    (found,) = timeline.assemble([migration(succeeded=at(900))], records, answers)

    assert found == Timeline(
        created=at(0),
        raised=at(25),
        hard=at(45),
        hard_by=KCM_QUOTA_USER,
        tried=at(10),
        refusals=1,
        last_try=at(60),
        answered=at(200),
        admitted=at(210),
        succeeded=at(900),
    )


def test_a_raise_is_the_first_write_that_adds_the_vms_room() -> None:
    other_vm = "/metadata/annotations/" + migrating_vm_annotation_key("vm-2").replace("/", "~1")
    records = [
        vmim(0),
        raise_(10, path=other_vm),  # another VM's room
        raise_(20, op="remove"),  # a room given back
        record(30, "patch", "resourcequotas", user=CONTROLLER_USER, body={"metadata": {}}),
        record(
            40,
            "patch",
            "resourcequotas",
            user=CONTROLLER_USER,
            body=[
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": {migrating_vm_annotation_key("vm-1"): "x"},
                }
            ],
        ),
        raise_(50),
    ]

    (found,) = timeline.assemble([migration()], records)

    assert found.raised == at(45)  # the whole map added at once


def test_a_merge_patch_raise_counts_and_a_refused_one_does_not() -> None:
    key = migrating_vm_annotation_key("vm-1")
    merge = {"metadata": {"annotations": {key: "{}"}}, "spec": {"hard": {}}}
    records = [
        vmim(0),
        record(10, "patch", "resourcequotas", user=CONTROLLER_USER, body=merge, code=409),
        record(20, "patch", "resourcequotas", user=CONTROLLER_USER, body=merge),
    ]

    (found,) = timeline.assemble([migration()], records)

    assert found.raised == at(25)


def test_status_hard_follows_with_the_first_status_write_received_after_the_raise() -> None:
    records = [
        vmim(0),
        raise_(10),  # completes at 15
        status(12),  # received before the raise completed: it may not hold it
        status(20, user="system:apiserver"),  # quota admission's usage, not status.hard
        status(30, user=CONTROLLER_USER),
        status(40),
    ]

    (found,) = timeline.assemble([migration()], records)

    assert (found.hard, found.hard_by) == (at(35), CONTROLLER_USER)


def test_target_tries_are_the_vms_pod_creates_after_its_migration_was_created() -> None:
    records = [
        pod_create(0, code=403),  # before the migration: another story
        vmim(5),
        pod_create(10, vm="vm-2"),
        pod_create(20, code=403),
        pod_create(30, code=409),
        pod_create(40),
        pod_create(50, code=403),  # after the accepted one: not a refusal of this target
    ]

    (found,) = timeline.assemble([migration()], records)

    assert (found.tried, found.refusals, found.last_try, found.admitted) == (
        at(20),
        2,
        at(40),
        at(45),
    )


def test_a_pod_the_webhook_let_through_at_once_was_answered_on_receipt() -> None:
    records = [vmim(0), pod_create(10, took=20)]
    late = [WebhookAnswer(NS, "vm-1", at(500))]  # a later try's line, not this request's

    (served,) = timeline.assemble([migration()], records, late)
    (unserved,) = timeline.assemble([migration(webhook=False)], records, late)

    assert served.answered == at(10)
    assert unserved.answered is None


def test_a_migration_whose_create_is_not_in_the_records_has_no_moments() -> None:
    (found,) = timeline.assemble([migration(succeeded=at(9))], [vmim(0, name="other")])

    assert found == Timeline(succeeded=at(9))


def test_hops_are_the_spans_whose_both_ends_were_seen() -> None:
    full = Timeline(
        created=at(0),
        raised=at(20),
        hard=at(50),
        tried=at(10),
        last_try=at(60),
        answered=at(160),
        admitted=at(170),
        succeeded=at(1170),
    )
    unserved = Timeline(created=at(0), tried=at(30), last_try=at(30), admitted=at(40))

    hops = timeline.hop_seconds([full, unserved])

    assert hops["created → first try"] == (0.01, 0.03)
    assert hops["raised → status.hard"] == (0.03,)
    assert hops["accepted try → webhook answered"] == (0.1,)
    assert hops["status.hard → admitted"] == (0.12,)
    assert hops["admitted → Succeeded"] == (1.0,)
    assert hops["created → admitted"] == (0.04, 0.17)


def test_counts_say_whose_room_came_before_the_first_try_and_who_copied_status_hard() -> None:
    early = Timeline(created=at(0), hard=at(20), hard_by=KCM_QUOTA_USER, tried=at(30))
    late = Timeline(created=at(0), hard=at(40), hard_by=CONTROLLER_USER, tried=at(30))
    never_tried = Timeline(created=at(0), hard=at(10), hard_by=CONTROLLER_USER)

    assert timeline.counts([early, late, never_tried, Timeline()]) == {
        "migrations": 3,
        "room before first try": 1,
        "status.hard by kube-controller-manager": 1,
        "status.hard by our controller": 2,
    }


def test_the_waited_hop_is_the_one_longest_beyond_no_quota() -> None:
    none = {"created → first try": (0.01,), "accepted try → admitted": (0.02,)}
    quota = {"created → first try": (0.05,), "accepted try → admitted": (0.3,)}

    assert timeline.waited_hop(quota, none) == ("accepted try → admitted", pytest.approx(0.28))
    assert timeline.waited_hop(none, quota) is None
    assert timeline.waited_hop(quota, {}) is None


def test_webhook_answers_are_its_json_lines_about_target_pods(tmp_path: Path) -> None:
    log = tmp_path / "webhook.log"
    lines = [
        {
            "time": "2026-11-27T18:59:59.000Z",
            "message": "migration target pod a fitted after 0.10s",
            "namespace": NS,
            "vm": "vm-0",
        },
        {
            "time": "2026-11-27T19:00:00.250Z",
            "message": "migration target pod b fitted after 0.20s",
            "namespace": NS,
            "vm": "vm-1",
        },
        {"time": "2026-11-27T19:00:01.000Z", "message": "serving", "namespace": NS, "vm": "vm-1"},
    ]
    log.write_bytes(b"not json\n" + b"\n".join(orjson.dumps(line) for line in lines) + b"\n")

    assert timeline.webhook_answers(log, T0) == [WebhookAnswer(NS, "vm-1", at(250))]
    assert timeline.webhook_answers(tmp_path / "missing.log", T0) == []


def step_with(
    name: str, hops: dict[str, tuple[float, ...]], found: dict[str, int] | None = None
) -> StepResult:
    return step_result(name, migrations=2, succeeded=2, timeline=hops, timeline_counts=found or {})


def test_the_table_gives_each_hop_per_arm_and_names_the_waited_hop() -> None:
    quota = step_with(
        "drain-1", {"created → raised": (0.01, 0.02), "accepted try → admitted": (0.2, 0.4)}
    )
    quota = replace(quota, timeline_counts={"migrations": 2, "room before first try": 1})
    none = step_with("drain-1", {"accepted try → admitted": (0.01, 0.03)})

    rendered = timeline.table(ARM_OURS, {ARM_OURS: [quota], ARM_NONE: [none]})

    assert "| drain-1 | created → raised | 10 / 20 | - |" in rendered
    assert "| drain-1 | accepted try → admitted | 200 / 400 | 10 / 30 |" in rendered
    assert rendered.endswith(
        "drain-1: accepted try → admitted (+190 ms at the median; room before the first try 1 of 2)."
    )
    assert timeline.table(ARM_OURS, {ARM_OURS: [step_with("s", {})]}) == ""
