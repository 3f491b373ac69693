"""Whether a pod admission needs the room computation at all, decided from the quota and the
namespace alone.

The pod rule holds a pod to the base while room is held or a raise is still enforced
(validator.py `check_rooms`). Working that out plans every migration's room, and that cost grew with
what the tenant created. Most namespaces hold nothing, and there quota admission at a hard no
higher than the base already refuses everything the rule would (it charges targets too, so it is
the stricter of the two). So the rooms are computed only where one of these says room may be
held or a raise may be enforced, each read in a lookup or two:

1. the namespace carries the room-held label (the controller writes it before it raises; Rancher
   namespaces raised directly keep it for good);
2. the quota carries our records of a raise or a room (`raise_records`: per-VM room keys, ours
   or an earlier controller's, the applied base, the room period), or the namespace Rancher's
   annotation text it was raised through;
3. a hard is above the base on a key of the base (spec.hard raised, or status.hard, which quota
   admission enforces), or status.hard above spec.hard (a lowering not yet copied): the raise
   stands or is still being given back;
4. a migration of the namespace is under way: it exists before the controller raises for it, so
   a raise may reach quota admission before it reaches this replica's cache.

When none holds, no room of ours can be enforced by quota admission, so passing the pod here loses
nothing: quota admission judges it against a hard at or below the base.
"""

from __future__ import annotations

from ....generic.meta import labels as labels_of
from ....generic.resource import Object
from ....util.annotations import LABEL_ROOM_HELD, TRUE
from ....util.resourcequota.raises import above, limits, raise_records
from ....util.resourcequota.rooms import RoomPlan
from ....util.resources import ResourceList, parse_resource_list_leniently
from ..common import Lookups, NamespaceView, quota_base, rancher_base_of, view_of


def room_check_needed(
    lookups: Lookups, namespace: str, quota: Object, from_rancher: ResourceList | None
) -> bool:
    """Whether room may be held or a raise enforced in `namespace` (see the module docstring),
    `from_rancher` being `rancher_base_of` the namespace. Errs toward True."""
    ns = lookups.namespace(namespace)
    if labels_of(ns).get(LABEL_ROOM_HELD) == TRUE or raise_records(quota, ns):
        return True
    if lookups.migrations_under_way(namespace):
        return True
    hard, enforced = limits(quota)
    base = quota_base(quota, hard, from_rancher)
    return above(hard, base) or above(enforced, base) or above(enforced, hard)


def quiet_view(lookups: Lookups, namespace: str, quota: Object) -> NamespaceView:
    """`view_of` the namespace, its rooms worked out only where `room_check_needed` says room
    may be held or a raise enforced; elsewhere none is, so the view without rooms is the same
    view at the cost of a few lookups (the VM rule's check on every running VM's create)."""
    if room_check_needed(lookups, namespace, quota, rancher_base_of(lookups, namespace)):
        return view_of(lookups, namespace, quota)
    return NamespaceView(
        quota=quota,
        hard=parse_resource_list_leniently((quota.get("spec") or {}).get("hard")),
        used=parse_resource_list_leniently((quota.get("status") or {}).get("used")),
        rooms=RoomPlan(),
    )
