"""The raise standing (util/resourcequota/raises.py), as the webhook's handover to MTQ mode
reads it: a namespace with a VMMRQ stays under the room mode's pod rules until nothing of the
room mode's raise is left, status.hard included."""

from __future__ import annotations

import json

from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.resourcequota.base import ANNOTATION_BASE
from harvester_quota.util.resourcequota.raises import (
    ANNOTATION_ROOMS_SINCE,
    raise_enforced,
    raise_stands,
)
from harvester_quota.util.resources import parse_resource_list
from harvester_quota.webhook.caches import WebhookCaches

from tests.objects import managed_quota
from tests.unit.fakes import upsert

BASE = {"limits.cpu": "3"}
RAISED = {"limits.cpu": "5"}


def quota(spec: dict[str, str], status: dict[str, str], **annotations: str) -> Object:
    found = managed_quota("ns", spec, {ANNOTATION_BASE: json.dumps(BASE), **annotations})
    found["status"] = {"hard": dict(status), "used": {"limits.cpu": "3"}}
    return found


def vmmrq() -> Object:
    return {
        "apiVersion": "mtq.kubevirt.io/v1alpha1",
        "kind": "VirtualMachineMigrationResourceQuota",
        "metadata": {"namespace": "ns", "name": "budget", "uid": "vmmrq-1"},
        "spec": {"additionalMigrationResources": {"limits.cpu": "2"}},
    }


def caches_with(found: Object) -> WebhookCaches:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    caches = WebhookCaches(client, clock=FakeClock(), mtq=True)
    assert caches.vmmrqs is not None
    upsert(caches.vmmrqs.store, vmmrq())
    upsert(caches.quotas.store, found)
    return caches


def test_a_namespace_with_a_budget_keeps_the_room_rules_while_status_hard_lags_the_release() -> (
    None
):
    """The MTQ handover moment: the release write removed our records and lowered spec.hard,
    status.hard still enforces the raise. The room mode's pod rules keep the namespace (its
    managed quota is the webhook's) until status.hard is down too; then MTQ mode's."""
    lagging = quota(BASE, RAISED)
    assert caches_with(lagging).managed_quota("ns") is not None
    down = quota(BASE, BASE)
    assert caches_with(down).managed_quota("ns") is None


def test_records_alone_keep_a_raise_standing_and_an_administrators_raise_is_none() -> None:
    """Abuse of the rule's exemption: only our records (which a tenant cannot write: it may not
    edit quotas) or a lagging status.hard make a raise ours; an administrator's raise with
    spec.hard and status.hard both at it is the new limit."""
    base = parse_resource_list(BASE)
    in_window = quota(RAISED, RAISED, **{ANNOTATION_ROOMS_SINCE: "2026-11-27T10:00:00Z"})
    assert raise_stands(in_window, None)
    assert raise_enforced(in_window, None, base, rancher=False)
    administrators = quota(RAISED, RAISED)
    assert not raise_stands(administrators, None)
    assert not raise_enforced(administrators, None, base, rancher=False)
    assert raise_enforced(administrators, None, base, rancher=True)  # Rancher resets spec.hard
    at_base = quota(BASE, BASE, **{ANNOTATION_ROOMS_SINCE: "2026-11-27T10:00:00Z"})
    assert not raise_enforced(at_base, None, base, rancher=False)


def test_without_the_applied_record_a_standing_raise_is_never_taken_for_an_edit() -> None:
    """The base as the controller and the webhook read it (base.standalone_base): with a raise
    of ours recorded but not the spec.hard we applied (an earlier controller's, Harvester's
    beside us), spec.hard above the recorded base is not followed as the user's edit; with the
    applied record, an edit beyond it is; with no record of a raise, spec.hard is the user's."""
    from harvester_quota.util.resourcequota.base import ANNOTATION_APPLIED, standalone_base

    keyed = quota(RAISED, RAISED, **{"harvesterhci.io/migrating-vm1": '{"limits.cpu":"2"}'})
    found = standalone_base(keyed, raise_recorded=True, recorded_rooms=None)
    assert found is not None and found.hard == parse_resource_list(BASE)
    edited = quota({"limits.cpu": "6"}, RAISED, **{ANNOTATION_APPLIED: json.dumps(RAISED)})
    found = standalone_base(edited, raise_recorded=True, recorded_rooms=None)
    assert found is not None and found.hard == parse_resource_list({"limits.cpu": "4"})
    administrators = quota(RAISED, RAISED)
    found = standalone_base(administrators, raise_recorded=False, recorded_rooms=None)
    assert found is not None and found.hard == parse_resource_list(RAISED)


def test_on_rancher_s_path_a_budgeted_namespace_keeps_the_room_rules_until_rancher_copies() -> None:
    """The MTQ handover on Rancher's protected path: the release went through Rancher's
    annotation (back at the base, our records gone from the namespace in the same write) and
    Rancher's agent has not copied it to spec.hard yet. The room rules keep the namespace until
    spec.hard and status.hard are at Rancher's base; then it is MTQ mode's."""
    from tests.objects import rancher_namespace

    raised = managed_quota("ns", {"limits.cpu": "5"}, {})
    raised["status"] = {"hard": {"limits.cpu": "5"}, "used": {"limits.cpu": "3"}}
    caches = caches_with(raised)
    upsert(caches.namespaces.store, rancher_namespace("ns", {"limitsCpu": "3"}))
    assert caches.managed_quota("ns") is not None
    copied = managed_quota("ns", {"limits.cpu": "3"}, {})
    copied["status"] = {"hard": {"limits.cpu": "3"}, "used": {"limits.cpu": "3"}}
    caches = caches_with(copied)
    upsert(caches.namespaces.store, rancher_namespace("ns", {"limitsCpu": "3"}))
    assert caches.managed_quota("ns") is None
