"""bench/handoff_hops.py: a migration's moments after its target pod, from audit log lines shaped
as kube-apiserver writes them (level Metadata, pod creates at Request level)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from bench import handoff_hops
from bench.handoff_hops import NODE_SIDE, VIRT_CONTROLLER

START = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _line(
    at: float,
    user: str,
    verb: str,
    obj: tuple[str, str, str | None],
    *,
    subresource: str | None = None,
    code: int = 200,
    body: Any = None,
) -> bytes:
    resource, namespace, name = obj
    when = (START + timedelta(seconds=at)).isoformat().replace("+00:00", "Z")
    ref = {"resource": resource, "namespace": namespace, "name": name, "subresource": subresource}
    event = {
        "stage": "ResponseComplete",
        "auditID": f"{at}-{user}-{verb}",
        "user": {"username": user},
        "verb": verb,
        "objectRef": {k: v for k, v in ref.items() if v is not None},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": when,
        "stageTimestamp": when,
        **({"requestObject": body} if body is not None else {}),
    }
    return orjson.dumps(event) + b"\n"


def _migration(namespace: str, vm: str, step: int, at: float, *, handoff: float) -> list[bytes]:
    """One migration's writes: created at `at`, target pod `at`+1, hand-off `handoff` later."""
    vmim, pod_body = f"{vm}-abc123-{step}", {"metadata": {"labels": {"vm.kubevirt.io/name": vm}}}
    admitted = at + 1
    return [
        _line(at, NODE_SIDE, "create", ("virtualmachineinstancemigrations", namespace, vmim)),
        _line(
            at + 0.5, VIRT_CONTROLLER, "create", ("pods", namespace, None), code=403, body=pod_body
        ),
        _line(
            admitted, VIRT_CONTROLLER, "create", ("pods", namespace, None), code=201, body=pod_body
        ),
        _line(admitted + 0.1, VIRT_CONTROLLER, "patch", ("virtualmachineinstances", namespace, vm)),
        _line(
            admitted + handoff, VIRT_CONTROLLER, "patch", ("virtualmachineinstances", namespace, vm)
        ),
        _line(
            admitted + handoff + 0.2, NODE_SIDE, "patch", ("virtualmachineinstances", namespace, vm)
        ),
        _line(
            admitted + handoff + 3, NODE_SIDE, "patch", ("virtualmachineinstances", namespace, vm)
        ),
        _line(
            admitted + handoff + 3.1,
            VIRT_CONTROLLER,
            "update",
            ("virtualmachineinstancemigrations", namespace, vmim),
            subresource="status",
            code=409,
        ),
        _line(
            admitted + handoff + 3.5,
            VIRT_CONTROLLER,
            "update",
            ("virtualmachineinstancemigrations", namespace, vmim),
            subresource="status",
        ),
    ]


def test_each_hop_after_admission_is_told_per_arm_and_a_vms_next_migration_starts_afresh(
    tmp_path: Path,
) -> None:
    lines = [
        *_migration("scale-000", "vm-1", 0, 0, handoff=2),
        *_migration("scale-noquota-000", "vm-1", 0, 0.2, handoff=1),
        _line(0.3, "system:serviceaccount:kube-system:kwok", "patch", ("pods", "scale-000", "x")),
        *_migration("scale-000", "vm-1", 1, 20, handoff=4),
    ]
    log = tmp_path / "audit.log"
    log.write_bytes(b"".join(lines))
    p50s = handoff_hops.hop_p50s(handoff_hops.migrations(handoff_hops.records([log])))
    ours = p50s[("abc123", 0, "ours")]
    assert ours == {
        "migrations": 1,
        "created → admitted": 1000,
        "admitted → handed off": 2000,
        "handed off → target ready": 200,
        "target ready → node done": 2800,
        "node done → status written": 500,
    }, "the refused create, the earlier VMI patch and the 409 status write are not moments"
    assert p50s[("abc123", 0, "no quota")]["admitted → handed off"] == 1000
    assert p50s[("abc123", 1, "ours")]["admitted → handed off"] == 4000, (
        "the VM's second migration reads only its own writes"
    )
    text = handoff_hops.report(p50s)
    assert "| 0 | ours | 1 | 1000 | 2000 | 200 | 2800 | 500 |" in text


def test_a_migration_without_a_target_pod_counts_with_no_hop(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(
        _line(0, NODE_SIDE, "create", ("virtualmachineinstancemigrations", "scale-000", "vm-2-r-3"))
    )
    p50s = handoff_hops.hop_p50s(handoff_hops.migrations(handoff_hops.records([log])))
    assert p50s == {("r", 3, "ours"): {"migrations": 1}}
