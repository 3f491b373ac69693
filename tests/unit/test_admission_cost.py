"""Issue 38 item 2: what a pod admission costs does not grow with what a tenant creates.

No rooms are computed where nothing is held or raised (pod/quiet.py), every signal of a held room
or a raise still leads to the full check, and the webhook's caches render a VMI's launcher once
per VMI version and settings (renders.py), again when the VMI or the settings change."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_ROOM_HELD, TRUE
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.resourcequota.raises import ANNOTATION_ROOMS_SINCE
from harvester_quota.webhook.admission import Denied, Request
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.renders import LauncherRenders
from harvester_quota.webhook.resources.common import Identities

from tests.objects import (
    launcher_pod,
    managed_quota,
    migration,
    plain_namespace,
    rancher_namespace,
    vmi,
)
from tests.unit.fakes import pod_check, upsert
from tests.unit.test_webhook import FakeLookups, plain_pod, quota_with, running_vm

BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def create(name: str = "p", cpu: str = "1", namespace: str = "ns") -> Request:
    pod = plain_pod(name, cpu, "1Gi")
    pod["metadata"]["namespace"] = namespace
    return Request(
        uid="u1",
        kind="Pod",
        operation="CREATE",
        namespace=namespace,
        name=name,
        username="tenant",
        groups=(),
        obj=pod,
        old=None,
        dry_run=False,
    )


@dataclass
class CountingLookups(FakeLookups):
    """FakeLookups that count what only the room computation reads."""

    room_reads: int = 0

    def migrations(self, namespace: str) -> Sequence[Object]:
        self.room_reads += 1
        return super().migrations(namespace)

    def kubevirt_settings(self) -> LauncherSettings:
        self.room_reads += 1
        return super().kubevirt_settings()


def quiet_namespace() -> CountingLookups:
    """A managed quota at its base, used well below it; finished migrations only."""
    lookups = CountingLookups(quotas={"ns": quota_with({"limits.cpu": "1"}, BASE)})
    lookups.quotas["ns"]["status"]["hard"] = dict(BASE)
    lookups.namespaces["ns"] = plain_namespace("ns")
    instance = running_vm(lookups)
    lookups.migration_list += [migration(f"done{i}", instance, phase="Succeeded") for i in range(3)]
    return lookups


def test_a_pod_where_nothing_is_held_or_raised_computes_no_rooms() -> None:
    """Before: every pod create in a namespace with a managed quota planned every migration's
    room (reading the migrations, the VMIs and the cluster's launcher settings, rendering each
    launcher) only to find nothing held. Now the quota and the namespace say so first."""
    lookups = quiet_namespace()
    assert pod_check(create(), lookups, Identities()) is None
    assert lookups.room_reads == 0


def _labelled(lookups: CountingLookups) -> None:
    lookups.namespaces["ns"]["metadata"]["labels"] = {LABEL_ROOM_HELD: TRUE}


def _recorded(lookups: CountingLookups) -> None:
    annotations = lookups.quotas["ns"]["metadata"]["annotations"]
    annotations[ANNOTATION_ROOMS_SINCE] = "2026-01-01T00:00:00Z"


def _spec_raised(lookups: CountingLookups) -> None:
    """spec.hard above Rancher's annotation, the base (a raise of ours written directly: no
    record of ours on a quota Rancher's agent resets). Without Rancher, spec.hard above a
    recorded base with no record of a raise is an administrator's edit, the new base."""
    lookups.quotas["ns"]["spec"]["hard"]["limits.cpu"] = "5"
    lookups.namespaces["ns"] = rancher_namespace(
        "ns", {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
    )


def _status_lagging(lookups: CountingLookups) -> None:
    lookups.quotas["ns"]["status"]["hard"]["limits.cpu"] = "5"


def _under_way(lookups: CountingLookups) -> None:
    lookups.migration_list.append(migration("m", lookups.vmi_list[0], phase="Running"))


@pytest.mark.parametrize(
    "signal", [_labelled, _recorded, _spec_raised, _status_lagging, _under_way]
)
def test_every_sign_of_a_held_room_or_a_raise_still_computes_the_rooms(signal: Any) -> None:
    """The cheap test errs toward the check: the room-held label, our records on the quota, a
    hard above the base, status.hard above spec.hard, a migration under way."""
    lookups = quiet_namespace()
    signal(lookups)
    with contextlib.suppress(Denied):
        pod_check(create(), lookups, Identities())
    assert lookups.room_reads > 0


def test_a_migration_not_yet_raised_for_still_holds_pods_to_the_base() -> None:
    """A migration is created before the controller raises for it, and the raise may reach quota
    admission before this replica's cache: a pod that would eat into the room being raised is
    denied as before, with no label, record or raise on the quota yet."""
    lookups = quiet_namespace()
    lookups.quotas["ns"]["status"]["used"] = {"limits.cpu": "2", "limits.memory": "4000Mi"}
    _under_way(lookups)
    with pytest.raises(Denied) as denied:
        check = pod_check(create(cpu="2"), lookups, Identities())
        assert check is not None
        check.decide(check.cached_in_use())
    assert "would take room reserved for the live migration of vm1" in denied.value.message


# The render cache on the webhook's own caches -------------------------------------------------


def caches() -> WebhookCaches:
    """WebhookCaches on a client that never connects; the tests write their stores."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    return WebhookCaches(client, clock=FakeClock(), kubevirt_version="1.6")


def versioned(obj: Object, version: int) -> Object:
    copied = copy.deepcopy(obj)
    copied["metadata"]["resourceVersion"] = str(version)
    return copied


def pending_migration_namespace(webhook: WebhookCaches) -> Object:
    """ns: a raised quota, vm1 running with a migration waiting for its target; the VMI."""
    quota = managed_quota("ns", {"limits.cpu": "100", "limits.memory": "100Gi"})
    quota["status"] = {"used": {"limits.cpu": "1"}, "hard": quota["spec"]["hard"]}
    upsert(webhook.quotas.store, quota)
    upsert(webhook.namespaces.store, plain_namespace("ns"))
    instance = versioned(vmi("vm1"), 1)
    upsert(webhook.pods.store, launcher_pod(instance, "vm1-src"))
    upsert(webhook._migrations.store, migration("m1", instance))
    upsert(webhook._vmis.store, instance)
    return instance


def room_cpu(webhook: WebhookCaches) -> str:
    check = pod_check(create(cpu="1m"), webhook, Identities())
    assert check is not None and check.view.rooms.holds_room
    return str(check.view.rooms.total()["limits.cpu"])


def test_a_vmis_launcher_is_rendered_once_per_version_and_again_when_it_changes() -> None:
    """Before: every admission rendered every pending migration's launcher again. Now once per
    VMI version; a VMI edited (a new resourceVersion) or new launcher settings render anew, and
    the room follows the new rendering."""
    webhook = caches()
    instance = pending_migration_namespace(webhook)
    first = room_cpu(webhook)
    for _ in range(3):
        assert room_cpu(webhook) == first
    assert webhook.renders.renders == 1
    bigger = versioned(instance, 2)
    bigger["spec"]["domain"]["resources"]["limits"]["cpu"] = "8"
    upsert(webhook._vmis.store, bigger)
    grown = room_cpu(webhook)
    assert webhook.renders.renders == 2
    assert grown != first
    upsert(
        webhook.kubevirts.store,
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "9"},
            "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": "3.0"}},
            "status": {"observedKubeVirtVersion": "v1.6.0"},
        },
    )
    room_cpu(webhook)
    assert webhook.renders.renders == 3, "new cluster settings render anew"


def test_the_render_cache_is_bounded_and_keeps_no_failure() -> None:
    renders = LauncherRenders(maxsize=2)
    settings = LauncherSettings(kubevirt_version="1.6")
    for index in range(5):
        renders.usage(versioned(vmi(f"vm{index}"), 1), settings)
    assert len(renders) == 2
    broken = versioned(vmi("broken"), 1)
    broken["spec"]["domain"]["resources"]["limits"]["memory"] = "not a quantity"
    for _ in range(2):
        with pytest.raises(ValueError):
            renders.usage(broken, settings)
    assert renders.renders == 7


def test_the_index_of_migrations_under_way_follows_the_cache() -> None:
    webhook = caches()
    instance = vmi("vm1")
    assert not webhook.migrations_under_way("ns")
    upsert(webhook._migrations.store, migration("m1", instance, phase="Running"))
    assert webhook.migrations_under_way("ns") and not webhook.migrations_under_way("other")
    upsert(webhook._migrations.store, migration("m1", instance, phase="Succeeded"))
    assert not webhook.migrations_under_way("ns")
    upsert(webhook._migrations.store, migration("m1", instance, phase="Pending"))
    webhook._migrations.store.delete("ns/m1")
    assert not webhook.migrations_under_way("ns")
