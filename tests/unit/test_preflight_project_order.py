"""`preflight` hands a Rancher project's scarce room across the project's namespaces as the
controller does (issue 41, item 3; harvester_quota.preflight.projectorder): the drain's
evacuations (system-critical on KubeVirt v1.9) before an older user migration in a sibling, an
earlier evacuation before a later one, and the report names whom a VM waits behind and whom it
goes ahead of, with each one's priority. Two namespaces a and b of one project, each with one
2-core 4Gi VM filling its Rancher base (3 CPU, 5000Mi); the project has room for one
migration's raise (about 2 CPU, 4.5Gi), not two."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from harvester_quota.preflight import (
    ClusterState,
    Plan,
    PreflightReport,
    VmVerdict,
    compute,
    preflight,
)
from harvester_quota.preflight.report import render_json, render_text
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.rancher.project import PROJECT_ID_ANNOTATION
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)

from ..objects import launcher_pod, managed_quota, migration, vmi
from .test_preflight import migratable, node

Object = dict[str, Any]
PROJECT = "c-1:p-1"
SEED = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
ROOM_FOR_ONE = {"limitsCpu": "8500m", "limitsMemory": "16000Mi"}
"""Two bases (6 CPU, 10000Mi) and one migration's raise (2015m, ~4575Mi), not two."""
ROOM_FOR_TWO = {"limitsCpu": "10500m", "limitsMemory": "20000Mi"}
NOW = datetime.datetime(2026, 1, 1, 0, 10, tzinfo=datetime.UTC)
EARLY, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
"""Both before NOW, when the cluster was read."""


class Project:
    """Namespaces of one Rancher project, each with one VM and its launcher, as preflight
    reads them (the managed quota's status.used what the launcher uses)."""

    def __init__(self, limit: dict[str, str]) -> None:
        self.project = {
            "metadata": {"name": "p-1", "namespace": "c-1"},
            "spec": {
                "resourceQuota": {"limit": dict(limit)},
                "namespaceDefaultResourceQuota": {"limit": dict(SEED)},
            },
        }
        self.namespaces: list[Object] = []
        self.vmis: dict[str, Object] = {}
        self.pods: list[Object] = []
        self.quotas: list[Object] = []
        self.migrations: list[Object] = []
        self.vmmrqs: list[Object] = []

    def namespace(
        self, name: str, node_name: str, memory: str = "4Gi", base: dict[str, str] = SEED
    ) -> Object:
        """Namespace `name` with VM `vm-<name>` (2 cores, `memory`) running on `node_name`, its
        Rancher base `base` (its quota's hard)."""
        self.namespaces.append(
            {
                "metadata": {
                    "name": name,
                    "annotations": {
                        PROJECT_ID_ANNOTATION: PROJECT,
                        CATTLE_ANNOTATION_RESOURCE_QUOTA: json.dumps({"limit": base}),
                    },
                }
            }
        )
        instance = migratable(vmi(f"vm-{name}", name, node=node_name, memory=memory))
        instance["metadata"]["creationTimestamp"] = EARLY
        pod = launcher_pod(instance, f"virt-launcher-vm-{name}", node=node_name)
        hard = {"limits.cpu": base["limitsCpu"], "limits.memory": base["limitsMemory"]}
        quota = managed_quota(name, hard)
        used = pod_quota_usage(pod)
        quota["status"] = {"hard": hard, "used": {k: str(used[k]) for k in hard if k in used}}
        self.vmis[name] = instance
        self.pods.append(pod)
        self.quotas.append(quota)
        return instance

    def migrate(self, namespace: str, name: str, created: str, priority: str | None) -> Object:
        """A migration of the namespace's VM under way, its target pod not made yet (its room
        not given: the namespace's annotation stands at its base)."""
        made = migration(name, self.vmis[namespace])
        made["metadata"]["creationTimestamp"] = created
        if priority is not None:
            made["spec"]["priority"] = priority
        self.migrations.append(made)
        return made

    def state(self, version: str = "1.9", now: datetime.datetime | None = NOW) -> ClusterState:
        """The cluster as preflight reads it, KubeVirt at `version`, read at `now`."""
        return ClusterState(
            nodes=[node("n1"), node("n2"), node("n3")],
            vmis=list(self.vmis.values()),
            pods=self.pods,
            quotas=self.quotas,
            namespaces=self.namespaces,
            projects=[self.project],
            migrations=self.migrations,
            vmmrqs=self.vmmrqs,
            kubevirt_version=version,
            now=now,
        )

    def drain(self, *nodes: str) -> PreflightReport:
        return preflight(self.state(), Plan("drain", list(nodes)))


def verdict(report: PreflightReport, key: str) -> VmVerdict:
    return next(vm for vm in report.vms if vm.key == key)


def test_the_evacuation_goes_ahead_of_an_older_user_migration_in_a_sibling_and_says_so() -> None:
    """b's user migration (default priority) is older than the drain, its room not given yet;
    the project has room for one: vm-a's evacuation (system-critical) gets it, and the report
    names the user migration it holds back; with room for both, nothing is held back."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "user-mig", EARLY, None)
    vm = verdict(project.drain("n1"), "a/vm-a")
    assert vm.migration_priority == "system-critical"
    assert not vm.blocked and vm.delay is None
    (note,) = vm.notes
    assert "ahead of b/user-mig (priority default, created 2026-01-01T00:00:00Z)" in note
    project.project["spec"]["resourceQuota"]["limit"] = dict(ROOM_FOR_TWO)
    assert verdict(project.drain("n1"), "a/vm-a").notes == []


def test_the_evacuation_waits_behind_an_earlier_evacuation_in_a_sibling_named_with_priority() -> (
    None
):
    """b's evacuation (system-critical, created before the drain, from another node's drain)
    waits for the project's room: vm-a's evacuation, later, waits behind it, a delay (it moves
    once b's room is given back), naming b's migration and its priority as the controller's
    WaitingForEarlierMigrationsInProject does; the text says it too."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    report = project.drain("n1")
    vm = verdict(report, "a/vm-a")
    assert not vm.blocked and vm.delay is not None and vm.delay.cause == "project"
    named = "b/evacuation-b (priority system-critical, created 2026-01-01T00:05:00Z)"
    assert vm.delay.behind == [named]
    assert vm.delay.wait_seconds_at_most > 0
    assert report.delayed == [vm] and not report.blocks
    assert (
        f"project: fits its Rancher project alone, but the project's room goes first to {named}"
        in (render_text(report))
    )
    raw = json.loads(render_json(report))["steps"][0]["vms"][0]
    assert raw["delay"]["cause"] == "project" and raw["delay"]["behind"] == [named]
    project.project["spec"]["resourceQuota"]["limit"] = dict(ROOM_FOR_TWO)
    assert verdict(project.drain("n1"), "a/vm-a").delay is None


def test_an_earlier_evacuation_that_fits_once_a_later_given_room_is_back_holds_the_drain_back() -> (
    None
):
    """The controller's rule (rancherpath.MemberTotals.eventual), predicted: b's
    evacuation (created before the drain, 8Gi) does not fit the project now, but would once c's
    room, given to a user migration created after it, is back; so it holds vm-a's evacuation
    (4Gi, which fits now) back, and preflight says vm-a waits behind it. Without c's given room
    counted (preflight passing siblings' waiting steps only), b's room could never fit, held
    no one back, and vm-a went ahead: the starvation the review found."""
    bigger = {"limitsCpu": "3000m", "limitsMemory": "10000Mi"}
    given_raise = {"limitsCpu": "5100m", "limitsMemory": "9700Mi"}
    project = Project({"limitsCpu": "14100m", "limitsMemory": "30700Mi"})
    project.namespace("a", "n1")
    project.namespace("b", "n2", memory="8Gi", base=bigger)
    project.namespace("c", "n3")
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    running = project.migrate("c", "user-c", "2026-01-01T00:07:00Z", None)
    running["status"]["phase"] = "Running"
    raised = json.dumps({"limit": given_raise})
    c = next(ns for ns in project.namespaces if ns["metadata"]["name"] == "c")
    c["metadata"]["annotations"] |= {
        CATTLE_ANNOTATION_RESOURCE_QUOTA: raised,
        ANNOTATION_RANCHER_BASE: json.dumps({"limit": SEED}),
        ANNOTATION_RANCHER_APPLIED: raised,
        ANNOTATION_RANCHER_GIVEN: f"{PROJECT} {running['metadata']['uid']}",
    }
    vm = verdict(project.drain("n1"), "a/vm-a")
    assert not vm.blocked and vm.delay is not None and vm.delay.cause == "project"
    assert vm.delay.behind == [
        "b/evacuation-b (priority system-critical, created 2026-01-01T00:05:00Z)"
    ]
    c["metadata"]["annotations"][ANNOTATION_RANCHER_GIVEN] = f"{PROJECT} someone-else"
    assert verdict(project.drain("n1"), "a/vm-a").delay is None, "c's room not given: b never fits"


def test_two_evacuations_of_one_drain_in_two_namespaces_go_one_after_the_other() -> None:
    """vm-a and vm-b on the drained node, in two namespaces of the project, room for one: the
    first in the step's order gets it; the second waits behind it, named as this drain's
    evacuation with its priority."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n1")
    report = project.drain("n1")
    first, second = verdict(report, "a/vm-a"), verdict(report, "b/vm-b")
    assert first.delay is None and not first.blocked
    assert second.delay is not None and second.delay.cause == "project"
    assert second.delay.behind == ["a/vm-a's evacuation in this drain (priority system-critical)"]


def test_an_older_user_migration_in_the_sibling_goes_first_before_kubevirts_priority_queue() -> (
    None
):
    """On KubeVirt v1.6 (no priority queue) a drain's evacuation has the default priority: an
    older user migration in b then comes first, and vm-a's evacuation waits behind it."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "user-mig", EARLY, None)
    state_report = preflight(project.state(version="1.6"), Plan("drain", ["n1"]))
    vm = verdict(state_report, "a/vm-a")
    assert vm.migration_priority == "default"
    assert vm.delay is not None and vm.delay.behind == [
        "b/user-mig (priority default, created 2026-01-01T00:00:00Z)"
    ]


def test_a_tenants_labels_annotations_priority_and_name_in_the_sibling_gain_it_nothing() -> None:
    """A tenant of b dresses its user migration as urgent: labels and annotations naming
    system-critical, a spec.priority KubeVirt does not know (the default), a name that sorts
    first; and names its VM to sort first. The drain's evacuation in a still goes first, and
    b's migration is what it holds back."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    sneaky = project.migrate("b", "0000-first", EARLY, "i-am-important")
    sneaky["metadata"]["labels"]["kubevirt.io/migration-priority"] = "system-critical"
    sneaky["metadata"]["annotations"] = {"kubevirt.io/priority": "system-critical"}
    project.namespaces[1]["metadata"].setdefault("labels", {})["priority"] = "system-critical"
    vm = verdict(project.drain("n1"), "a/vm-a")
    assert vm.delay is None and not vm.blocked
    (note,) = vm.notes
    assert "ahead of b/0000-first (priority default" in note


def test_a_sibling_outside_the_project_or_in_mtq_mode_holds_no_one_back() -> None:
    """b's earlier evacuation counts only while b is of the same project and on Rancher's path:
    moved to another project, or handed to MTQ mode by a VMMRQ, it claims nothing."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    assert verdict(project.drain("n1"), "a/vm-a").delay is not None
    project.vmmrqs.append(
        {
            "metadata": {"name": "budget", "namespace": "b", "uid": "u"},
            "spec": {"additionalMigrationResources": {"limits.memory": "8Gi"}},
        }
    )
    assert verdict(project.drain("n1"), "a/vm-a").delay is None
    project.vmmrqs.clear()
    annotations = project.namespaces[1]["metadata"]["annotations"]
    annotations[PROJECT_ID_ANNOTATION] = "c-1:p-other"
    assert verdict(project.drain("n1"), "a/vm-a").delay is None


def test_a_terminating_sibling_holds_no_one_back() -> None:
    """b's earlier evacuation counts only while b is not being deleted (rancherpath.asks_project):
    a Terminating namespace's rooms are never given."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    assert verdict(project.drain("n1"), "a/vm-a").delay is not None
    project.namespaces[1]["metadata"]["deletionTimestamp"] = LATER
    assert verdict(project.drain("n1"), "a/vm-a").delay is None


def test_a_vm_behind_two_siblings_names_both_in_kubevirts_order_and_waits_for_both() -> None:
    """Three namespaces, room for one migration beyond their bases: c's evacuation under way
    (created before the drain) goes first, then a's of this drain, then b's, which names both,
    c's first, and may wait for both one after the other (the sum of their waits)."""
    project = Project({"limitsCpu": "11500m", "limitsMemory": "21000Mi"})
    project.namespace("a", "n1")
    project.namespace("b", "n1")
    project.namespace("c", "n2")
    project.migrate("c", "evacuation-c", LATER, "system-critical")
    report = project.drain("n1")
    first, second = verdict(report, "a/vm-a"), verdict(report, "b/vm-b")
    assert first.delay is not None and second.delay is not None
    c_evacuation = "c/evacuation-c (priority system-critical, created 2026-01-01T00:05:00Z)"
    assert first.delay.behind == [c_evacuation]
    assert second.delay.behind == [
        c_evacuation,
        "a/vm-a's evacuation in this drain (priority system-critical)",
    ]
    assert second.delay.wait_seconds_at_most == 2 * first.delay.wait_seconds_at_most


def test_a_state_without_its_reading_time_creates_the_evacuations_after_every_migration() -> None:
    """A state built by hand without `now`: the drain's evacuations are created after the
    newest creationTimestamp it shows, so b's evacuation under way still goes first."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    state = project.state(now=None)
    vm = verdict(preflight(state, Plan("drain", ["n1"])), "a/vm-a")
    assert vm.delay is not None and [b.split(" ")[0] for b in vm.delay.behind] == ["b/evacuation-b"]


def test_a_member_whose_plan_fails_claims_nothing_and_its_project_is_still_ordered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A third namespace of the project whose plan raises (an object of its own that cannot be
    read) is named in a warning and skipped, as the controller skips such a sibling: a's wait
    behind b's earlier evacuation still stands, instead of the whole project's order dropped."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", "n1")
    project.namespace("b", "n2")
    project.namespace("c", "n2", base={"limitsCpu": "100m", "limitsMemory": "100Mi"})
    project.migrate("b", "evacuation-b", LATER, "system-critical")
    real_plan = compute.NamespacePlanner.plan

    def plan(self: compute.NamespacePlanner, namespace: dict[str, Any]) -> Any:
        if namespace["metadata"]["name"] == "c":
            raise ValueError("a quantity c's tenant wrote that cannot be read")
        return real_plan(self, namespace)

    monkeypatch.setattr(compute.NamespacePlanner, "plan", plan)
    report = project.drain("n1")
    vm = verdict(report, "a/vm-a")
    assert vm.delay is not None and [b.split(" ")[0] for b in vm.delay.behind] == ["b/evacuation-b"]
    assert any(
        w.startswith("c: not planned for its Rancher project's order") for w in report.warnings
    )
