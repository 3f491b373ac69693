"""Writes of a managed quota's spec.hard by anyone but us (ForeignWriteReports in
controller/resourcequota/reports.py, util/resourcequota/conditional.py): the writer named from the
newest managedFields entries that own a key that changed, told once per quota per interval (a Warning, a log line, a
metric by manager), and listed by `explain`; our own writes, status writes and Rancher's agent
are not foreign."""

from __future__ import annotations

import json
import logging
import random
from types import SimpleNamespace
from typing import Any, cast

import pytest
from harvester_quota.config.metrics import FOREIGN_MANAGERS, QuotaMetrics
from harvester_quota.controller.resourcequota.reports import (
    EVENT_INTERVAL,
    FOREIGN_WRITE_NEXT,
    FOREIGN_WRITE_REASON,
    ForeignWriteReports,
    hard_changes,
    sets_rancher_base,
)
from harvester_quota.explain import explain, render_json, render_text
from harvester_quota.generic.client import ApiClient, WatchEvent
from harvester_quota.generic.informer import ResourceEventHandler, SharedInformer
from harvester_quota.generic.metrics import OTHER, CappedLabelValues
from harvester_quota.generic.perkeyinterval import PerKeyInterval
from harvester_quota.generic.rest import FIELD_MANAGER, USER_AGENT
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.resourcequota.base import ANNOTATION_BASE
from harvester_quota.util.resourcequota.conditional import (
    WRITERS,
    change_writers,
    hard_writers,
    keep_writers,
)
from prometheus_client import CollectorRegistry

from tests.objects import managed_quota, rancher_namespace
from tests.unit.fakes import HANG, ScriptedListerWatcher
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster

T0 = "2026-11-26T11:00:00Z"
T1 = "2026-11-26T11:07:36Z"
UID_KEY = "harvesterhci.io/migratingUID-0b7c"


def entry(
    manager: str,
    time: str,
    hard: tuple[str, ...] = (),
    annotations: tuple[str, ...] = (),
    *,
    operation: str = "Update",
    subresource: str = "",
    status: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A managedFields entry as the API server writes it."""
    fields: dict[str, Any] = {}
    if hard:
        fields["f:spec"] = {"f:hard": {".": {}, **{f"f:{k}": {} for k in hard}}}
    if annotations:
        fields["f:metadata"] = {"f:annotations": {".": {}, **{f"f:{k}": {} for k in annotations}}}
    if status:
        fields["f:status"] = {"f:hard": {f"f:{k}": {} for k in status}}
    found = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        found["subresource"] = subresource
    return found


def quota(
    hard: dict[str, str],
    writers: list[dict[str, Any]],
    annotations: dict[str, str] | None = None,
    rv: str = "1",
    status_hard: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A managed quota in namespace ns as the API server returns it (managedFields included)."""
    found = managed_quota("ns", hard, annotations)
    found["metadata"] |= {"uid": "u1", "resourceVersion": rv, "managedFields": writers}
    found["status"] = {"hard": dict(status_hard or hard)}
    return found


OURS_3 = entry(FIELD_MANAGER, T0, ("limits.cpu",))
BEFORE = quota({"limits.cpu": "3"}, [OURS_3])


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], kind, reason, message))


class Reports(SimpleNamespace):
    """ForeignWriteReports on fakes: a registry, a recorder, a clock."""

    reports: ForeignWriteReports
    registry: CollectorRegistry
    recorder: Recorder
    clock: FakeClock

    def count(self, manager: str) -> float:
        value = self.registry.get_sample_value(
            "harvester_quota_foreign_quota_writes_total", {"manager": manager}
        )
        return value or 0.0


def reports(*, leading: bool = True, namespace: dict[str, Any] | None = None) -> Reports:
    """`namespace`: what the namespace cache holds for every name (none by default)."""
    registry, recorder, clock = CollectorRegistry(), Recorder(), FakeClock()
    found = ForeignWriteReports(
        QuotaMetrics(registry),
        cast(Any, recorder),
        clock,
        namespace_of=lambda _name: namespace,
        standby=not leading,
    )
    return Reports(reports=found, registry=registry, recorder=recorder, clock=clock)


def gitops_raise(rv: str = "2", cpu: str = "8", time: str = T1) -> dict[str, Any]:
    """BEFORE after a GitOps tool set limits.cpu (it owns it now; we own nothing of spec.hard)."""
    return quota(
        {"limits.cpu": cpu},
        [entry(FIELD_MANAGER, T0, ()), entry("argocd-controller", time, ("limits.cpu",))],
        rv=rv,
    )


# Detection --------------------------------------------------------------------------------------


def test_a_foreign_update_of_spec_hard_is_told_once_with_its_manager_and_fields() -> None:
    found = reports()
    found.reports.on_update(BEFORE, gitops_raise())
    assert found.count("argocd-controller") == 1
    [(name, kind, reason, message)] = found.recorder.events
    assert (name, kind, reason) == ("default-abcde", "Warning", FOREIGN_WRITE_REASON)
    assert message == (
        f"written by argocd-controller (Update, {T1}), not by harvester-quota: "
        f"spec.hard limits.cpu 3 -> 8; {FOREIGN_WRITE_NEXT}"
    )


def test_the_entry_owning_the_changed_key_names_the_writer_not_the_newest_entry() -> None:
    """argocd changes limits.cpu; kubectl-edit, which owns only pods (unchanged), wrote in the
    same second and is listed later: argocd is named. Our write back after argocd's: not told."""
    before = quota(
        {"limits.cpu": "3", "pods": "20"}, [OURS_3, entry("kubectl-edit", T1, ("pods",))]
    )
    cpu_by_argocd = quota(
        {"limits.cpu": "8", "pods": "20"},
        [
            entry("argocd-controller", T1, ("limits.cpu",)),
            entry(FIELD_MANAGER, T0, ()),
            entry("kubectl-edit", T1, ("pods",)),
        ],
        rv="2",
    )
    found = reports()
    found.reports.on_update(before, cpu_by_argocd)
    assert (found.count("argocd-controller"), found.count("kubectl-edit")) == (1, 0)
    written_back = quota(
        {"limits.cpu": "3"},
        [entry("argocd-controller", T0, ()), entry(FIELD_MANAGER, T1, ("limits.cpu",))],
        rv="3",
    )
    found.reports.on_update(gitops_raise(), written_back)
    assert found.count(FIELD_MANAGER) == 0 and len(found.recorder.events) == 1


def test_harvester_resetting_a_key_in_the_second_of_our_raise_is_told() -> None:
    """We raised limits.cpu and requests.cpu; in the same second Harvester's controller
    (manager `harvester`, listed before ours) resets limits.cpu: Harvester is named."""
    raised = quota(
        {"limits.cpu": "5", "requests.cpu": "5"},
        [entry(FIELD_MANAGER, T1, ("limits.cpu", "requests.cpu"))],
    )
    reset = quota(
        {"limits.cpu": "3", "requests.cpu": "5"},
        [entry("harvester", T1, ("limits.cpu",)), entry(FIELD_MANAGER, T1, ("requests.cpu",))],
        rv="2",
    )
    found = reports()
    found.reports.on_update(raised, reset)
    assert (found.count("harvester"), found.count(FIELD_MANAGER)) == (1, 0)
    assert found.recorder.events[0][3].startswith(f"written by harvester (Update, {T1})")


def test_an_apply_in_the_second_of_our_write_is_told() -> None:
    """An Apply entry is listed before our Update of the same second; the Apply changed
    limits.cpu (ours owns only requests.cpu after it): argocd is named."""
    ours = quota(
        {"limits.cpu": "5", "requests.cpu": "5"},
        [entry(FIELD_MANAGER, T1, ("limits.cpu", "requests.cpu"))],
    )
    applied = quota(
        {"limits.cpu": "8", "requests.cpu": "5"},
        [
            entry("argocd-controller", T1, ("limits.cpu",), operation="Apply"),
            entry(FIELD_MANAGER, T1, ("requests.cpu",)),
        ],
        rv="2",
    )
    found = reports()
    found.reports.on_update(ours, applied)
    assert found.count("argocd-controller") == 1
    assert found.recorder.events[0][3].startswith(f"written by argocd-controller (Apply, {T1})")


def test_our_write_back_in_the_second_of_a_person_s_edit_of_another_key_is_not_told() -> None:
    """kubectl-edit set pods and we wrote limits.cpu back in the same second; kubectl-edit is
    listed after us: the write of limits.cpu is ours, nothing is told."""
    edited = quota(
        {"limits.cpu": "8", "pods": "20"},
        [
            entry("argocd-controller", T0, ("limits.cpu",)),
            entry(FIELD_MANAGER, T0, ()),
            entry("kubectl-edit", T1, ("pods",)),
        ],
    )
    written_back = quota(
        {"limits.cpu": "3", "pods": "20"},
        [entry(FIELD_MANAGER, T1, ("limits.cpu",)), entry("kubectl-edit", T1, ("pods",))],
        rv="2",
    )
    found = reports()
    found.reports.on_update(edited, written_back)
    assert found.recorder.events == [] and found.count("kubectl-edit") == 0


def test_a_removed_key_is_put_down_to_the_entry_that_changed() -> None:
    """A key removed is owned by nobody: the writer is the entry that differs from before."""
    before = quota(
        {"limits.cpu": "3", "pods": "20", "requests.memory": "1Gi"},
        [OURS_3, entry("kubectl-edit", T0, ("pods", "requests.memory"))],
    )
    removed = quota(
        {"limits.cpu": "3", "requests.memory": "1Gi"},
        [OURS_3, entry("kubectl-edit", T1, ("requests.memory",))],
        rv="2",
    )
    assert [w.manager for w in change_writers(before, removed, ["pods"])] == ["kubectl-edit"]
    found = reports()
    found.reports.on_update(before, removed)
    assert "spec.hard pods 20 -> (removed)" in found.recorder.events[0][3]


def test_the_warning_goes_with_a_log_line_naming_quota_manager_and_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        reports().reports.on_update(BEFORE, gitops_raise())
    [record] = [r for r in caplog.records if "argocd-controller" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "quota ns/default-abcde" in record.getMessage()
    assert (record.namespace, record.quota, record.manager) == (  # type: ignore[attr-defined]
        "ns",
        "default-abcde",
        "argocd-controller",
    )
    assert record.fields == ["spec.hard limits.cpu"]  # type: ignore[attr-defined]


def test_our_own_write_is_not_foreign() -> None:
    found = reports()
    ours = quota({"limits.cpu": "5"}, [entry(FIELD_MANAGER, T1, ("limits.cpu",))], rv="2")
    found.reports.on_update(BEFORE, ours)
    assert found.recorder.events == [] and found.count(FIELD_MANAGER) == 0


def test_our_field_manager_is_what_the_api_server_makes_of_our_user_agent() -> None:
    assert FIELD_MANAGER == "harvester-quota" and USER_AGENT.startswith(FIELD_MANAGER + "/")


def test_a_status_only_change_is_not_foreign() -> None:
    found = reports()
    status_write = entry(
        "kube-controller-manager", T1, subresource="status", status=("limits.cpu",)
    )
    after = quota(
        {"limits.cpu": "3"}, [OURS_3, status_write], rv="2", status_hard={"limits.cpu": "9"}
    )
    assert hard_changes(BEFORE, after) == {}
    found.reports.on_update(BEFORE, after)
    assert found.recorder.events == [] and found.count("kube-controller-manager") == 0


def rancher() -> dict[str, Any]:
    return rancher_namespace("ns", {"limitsCpu": "3000m"})


def test_rancher_agent_is_never_foreign_and_anyone_else_is() -> None:
    """Our raise to 5, reset by Rancher's agent (or its server) to the annotation's 3, or set
    to 4: not foreign by Rancher's managers; by a person, foreign."""
    raised = quota({"limits.cpu": "5"}, [entry(FIELD_MANAGER, T0, ("limits.cpu",))])
    for manager, cpu in (("agent", "3"), ("rancher", "3"), ("agent", "4")):
        by_rancher = reports()
        by_rancher.reports.on_update(
            raised, quota({"limits.cpu": cpu}, [entry(manager, T1, ("limits.cpu",))], rv="2")
        )
        assert by_rancher.recorder.events == [], (manager, cpu)
    by_person = reports()
    by_person.reports.on_update(
        raised, quota({"limits.cpu": "4"}, [entry("kubectl-edit", T1, ("limits.cpu",))])
    )
    assert by_person.count("kubectl-edit") == 1


def test_a_write_of_the_rancher_base_is_rancher_s_whatever_its_manager_but_harvester_s() -> None:
    """Our raise to 5 set back to the namespace's Rancher base (3) by a manager not named
    Rancher's: not told; set to 4 by it: told. Harvester's controller, which sets spec.hard
    back to the base too, is told even when it writes the base."""
    raised = quota({"limits.cpu": "5"}, [entry(FIELD_MANAGER, T0, ("limits.cpu",))])
    for manager, cpu, told in (
        ("cattle-cluster-agent", "3", 0),
        ("cattle-cluster-agent", "4", 1),
        ("harvester", "3", 1),
    ):
        found = reports(namespace=rancher())
        after = quota({"limits.cpu": cpu}, [entry(manager, T1, ("limits.cpu",))], rv="2")
        found.reports.on_update(raised, after)
        assert (found.count(manager), len(found.recorder.events)) == (told, told), (manager, cpu)
    assert sets_rancher_base(rancher(), quota({"limits.cpu": "3000m"}, []), ["limits.cpu"])
    assert not sets_rancher_base(None, quota({"limits.cpu": "3"}, []), ["limits.cpu"])
    broken = rancher_namespace("ns", {"limitsCpu": "3000m"})
    broken["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA] = "{not json"
    assert not sets_rancher_base(broken, quota({"limits.cpu": "3"}, []), ["limits.cpu"])


def test_an_annotation_write_is_not_told_but_a_spec_hard_write_is() -> None:
    """Harvester's UID annotation (or any annotation) changes no key of spec.hard: not told;
    Harvester's write of spec.hard is."""
    found = reports()
    noted = quota(
        {"limits.cpu": "3"},
        [OURS_3, entry("harvester", T1, annotations=(UID_KEY,))],
        {UID_KEY: json.dumps({"limits.cpu": "2"})},
        rv="2",
    )
    found.reports.on_update(BEFORE, noted)
    assert found.recorder.events == []
    raised = quota(
        {"limits.cpu": "5"},
        [entry(FIELD_MANAGER, T0), entry("harvester", T1, ("limits.cpu",), (UID_KEY,))],
        {UID_KEY: json.dumps({"limits.cpu": "2"})},
        rv="3",
    )
    found.reports.on_update(noted, raised)
    assert found.count("harvester") == 1
    assert "spec.hard limits.cpu 3 -> 5;" in found.recorder.events[0][3]


def test_a_quota_without_managed_fields_or_unmanaged_or_seen_by_a_standby_is_not_told() -> None:
    plain_before, plain_after = (
        managed_quota("ns", {"limits.cpu": "3"}),
        managed_quota("ns", {"limits.cpu": "8"}),
    )
    found = reports()
    found.reports.on_update(plain_before, plain_after)
    unlabelled = gitops_raise()
    unlabelled["metadata"]["labels"] = {}
    found.reports.on_update(BEFORE, unlabelled)
    assert found.recorder.events == [] and found.count("argocd-controller") == 0
    standby = reports(leading=False)
    standby.reports.on_update(BEFORE, gitops_raise())
    assert standby.recorder.events == [] and standby.count("argocd-controller") == 0


# The cache's form of managedFields ----------------------------------------------------------------


def test_the_cache_keeps_the_writers_of_spec_hard_and_drops_managed_fields() -> None:
    live = quota(
        {"limits.cpu": "8"},
        [
            entry("argocd-controller", T1, ("limits.cpu",), operation="Apply"),
            entry(FIELD_MANAGER, T0, (), (ANNOTATION_BASE, UID_KEY, "other.io/x")),
            entry("kube-controller-manager", T1, subresource="status", status=("limits.cpu",)),
        ],
    )
    cached = keep_writers(json.loads(json.dumps(live)))
    assert "managedFields" not in cached["metadata"]
    assert hard_writers(cached) == hard_writers(live)
    assert [(w.manager, w.keys) for w in hard_writers(cached)] == [
        ("argocd-controller", ("limits.cpu",))
    ]
    assert len(json.dumps(cached[WRITERS])) < len(json.dumps(live["metadata"]["managedFields"]))


async def test_through_the_informer_a_foreign_write_is_found_between_cached_versions() -> None:
    """The quota cache's transform and the update handler together: what the informer hands
    the handler (both versions transformed) is enough to tell the writer."""
    clock = FakeClock()
    lw = ScriptedListerWatcher()
    lw.add_list(BEFORE, rv="1")
    lw.add_watch(WatchEvent("MODIFIED", gitops_raise()), HANG)
    informer = SharedInformer(
        lw, name="resourcequotas", clock=clock, rng=random.Random(1), transform=keep_writers
    )
    found = reports()
    informer.add_event_handler(ResourceEventHandler(on_update=found.reports.on_update))
    informer.start()
    await settle(200)
    await informer.stop()
    assert found.count("argocd-controller") == 1 and len(found.recorder.events) == 1


# Rate and label limits ---------------------------------------------------------------------


def test_one_warning_per_quota_per_interval_the_rest_counted_in_the_next() -> None:
    found = reports()
    found.reports.on_update(BEFORE, gitops_raise("2", "8", T1))
    found.clock.step(EVENT_INTERVAL / 2)
    found.reports.on_update(BEFORE, gitops_raise("4", "9", T1))
    found.reports.on_update(BEFORE, gitops_raise("6", "10", T1))
    assert len(found.recorder.events) == 1
    assert found.count("argocd-controller") == 3
    found.clock.step(EVENT_INTERVAL / 2)
    found.reports.on_update(BEFORE, gitops_raise("8", "11", T1))
    assert len(found.recorder.events) == 2
    assert found.recorder.events[1][3].endswith(
        f"; {FOREIGN_WRITE_NEXT} (2 more foreign writes of this quota since the last such event)"
    )
    other = quota({"limits.cpu": "8"}, [entry("argocd-controller", T1, ("limits.cpu",))])
    other["metadata"]["name"] = "another"
    found.reports.on_update(BEFORE, other)
    assert len(found.recorder.events) == 3  # another quota has its own interval


def test_the_interval_forgets_ended_keys_first_and_stays_bounded() -> None:
    clock = FakeClock()
    interval = PerKeyInterval(clock, 60.0, max_keys=2)
    assert interval.admit("a") == 0 and interval.admit("a") is None
    clock.step(60)
    assert interval.admit("b") == 0 and interval.admit("c") == 0
    assert interval.admit("b") is None and interval.admit("c") is None
    assert interval.admit("a") == 0  # forgotten: its interval had ended, its count with it


def test_past_the_bound_the_key_admitted_longest_ago_goes_even_within_its_interval() -> None:
    clock = FakeClock()
    interval = PerKeyInterval(clock, 60.0, max_keys=2)
    assert interval.admit("a") == 0 and interval.admit("b") == 0
    assert interval.admit("b") is None  # counted, not moved
    assert interval.admit("c") == 0  # three keys: "a", admitted longest ago, goes
    assert interval.admit("b") is None and interval.admit("a") == 0
    clock.step(60)
    assert interval.admit("c") == 0, "c's interval ended with nothing refused"


def test_the_manager_label_is_normalised_and_capped_with_an_other_bucket() -> None:
    capped = CappedLabelValues(3)
    assert capped("kubectl-edit") == "kubectl-edit"
    assert capped("Go http client é") == "Go_http_client__"
    assert capped("x" * 200) == "x" * 63
    assert capped("") == OTHER  # the fourth distinct value
    assert capped("kubectl-edit") == "kubectl-edit"
    registry = CollectorRegistry()
    metrics = QuotaMetrics(registry)
    for index in range(FOREIGN_MANAGERS + 5):
        metrics.count_foreign_write(f"writer-{index}")
    samples = [
        s
        for m in registry.collect()
        for s in m.samples
        if s.name == "harvester_quota_foreign_quota_writes_total"
    ]
    assert len(samples) == FOREIGN_MANAGERS + 1
    assert (
        registry.get_sample_value("harvester_quota_foreign_quota_writes_total", {"manager": OTHER})
        == 5
    )


# explain ------------------------------------------------------------------------------------


async def test_explain_lists_the_quotas_other_writers_of_what_the_plan_writes() -> None:
    live = quota(
        {"limits.cpu": "8", "pods": "10"},
        [
            entry("kubectl-create", T0, ("pods",)),
            entry(FIELD_MANAGER, T0, ()),
            entry("harvester", T1, ("limits.cpu",)),
            entry("kube-controller-manager", T1, subresource="status", status=("limits.cpu",)),
        ],
    )
    cluster = ReadOnlyCluster({"namespaces": [rancher()], "resourcequotas": [live]})
    found = await explain(cast(ApiClient, cluster), "ns", kubevirt_version="1.6")
    assert found.other_writers == [
        {
            "manager": "harvester",
            "operation": "Update",
            "time": T1,
            "fields": ["spec.hard limits.cpu"],
        }
    ]
    assert f"also written by: harvester (Update, {T1}: spec.hard limits.cpu)" in render_text(found)
    assert json.loads(render_json(found))["other_writers"] == found.other_writers
    assert [w.manager for w in hard_writers(live)] == ["kubectl-create", "harvester"]
    alone = quota({"limits.cpu": "3"}, [OURS_3])
    cluster = ReadOnlyCluster({"namespaces": [rancher()], "resourcequotas": [alone]})
    found = await explain(cast(ApiClient, cluster), "ns", kubevirt_version="1.6")
    assert "also written by: nobody else" in render_text(found)
