"""Which changes of a plan's inputs queue the namespace's plan at once, and which soon.

A plan reads every migration, VMI and pod of its namespace and its quota, and each change of
what it reads queues it. Most of those changes can only give room back or change nothing (a
target pod's arrival, a migration's end, quota admission's and kube-controller-manager's status
writes, our own writes coming back): queued at once, they made a plan each, 8 a migration, 84 %
writing nothing (bench/SCALE.md). They are queued soon (Controller.enqueue_soon, at most
`SOON_WINDOW` later), so a wave's burst of them is read by one plan. A change that can make a
room a target pod may be waiting for, or let the room-held label go, is queued at once:

- a migration not finished changed (its arrival, a quota refusal's start or end, its deletion);
- a migration finished or went while another migration of its VMI is not finished (the VMI's
  next migration may hold room only once the earlier one stops: rooms.py `_one_under_way_per_vmi`);
- a VMI changed (added, its rendered shape, whether it can migrate) while a migration of it is
  not finished;
- a launcher pod started Running, unless it is the target of a migration not finished (a
  migration's own target never makes its room: rooms.py `_can_migrate`);
- a quota added or removed, or its spec.hard written by anyone but us (Rancher's agent copying
  or resetting, an administrator): the raise may be gone; or the last release published
  (status.hard lowered, by our copy or kube-controller-manager's): the room-held label may go;
- a LimitRange, the KubeVirt CR, Harvester's overhead setting (they size every room).

A namespace without a managed quota is not queued by any of these: its plan is none whatever
its migrations, VMIs and pods do. Its quota's arrival, or the managed label's, queues it
(Controller.watch_related on quotas), and the plan then reads them as they stand. MTQ mode's
namespaces are queued by their migrations, VMIs and pods all the same (PlanInputs.also_queued):
its handler runs on the same controller and reads their VMIs, which it does not watch.

Whatever is queued soon is planned at most `SOON_WINDOW` after it (`RANCHER_SOON_WINDOW` while
a raise of the namespace through Rancher's annotation stands); a tenant can make its own
namespace's plans come sooner (a migration) or later (by at most the window), never another's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ...apis.kubevirt import is_finished
from ...generic.meta import annotations_of, as_mapping, metadata, spec, status
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object
from ...generic.store import Store
from ...generic.views import NamespaceViews
from ...util.quantity import Quantity
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE
from ...util.resourcequota.podindex import PodView
from ...util.resourcequota.raises import raise_records
from .reports import hard_changes

SOON_WINDOW: Final = 1.0
"""Seconds a change that cannot make room may wait for its plan (see the module docstring). What
waits is a release (held up to `Options.release_gather` anyway while other rooms stand, and the
webhook holds the namespace's pods to the base until it is written) or nothing: a second merges
a drain's quota status writes, pod steps and migration ends into a plan or two."""
RANCHER_SOON_WINDOW: Final = 0.1
"""`SOON_WINDOW` for a namespace whose raise went through Rancher's annotation and is not given
back yet (it carries ANNOTATION_RANCHER_BASE): its release is not gathered and may be what lets
a sibling's raise through within the Rancher project's room (projectdemands.py), so it waits no
longer than a moment."""

RAISED_THROUGH_RANCHER_VIEW: Final = "raised-through-rancher"


def soon_window(namespaces: Store) -> Callable[[str], float]:
    """The namespaces controller's soon window (Controller.set_soon_window) by namespace:
    `RANCHER_SOON_WINDOW` while the namespace as cached carries a raise through Rancher's
    annotation, `SOON_WINDOW` otherwise (one not cached included). Registers a view on
    `namespaces` (the namespace cache) that keeps the set of such namespaces as the cache
    changes, so an ask reads a set, not the namespace. Event loop only."""
    raised: set[str] = set()

    def listen(key: str, carries: bool | None) -> None:
        (raised.add if carries else raised.discard)(key)

    namespaces.add_view(RAISED_THROUGH_RANCHER_VIEW, _raised_through_rancher, listen)

    def window(namespace: str) -> float:
        return RANCHER_SOON_WINDOW if namespace in raised else SOON_WINDOW

    return window


def _raised_through_rancher(namespace: Object) -> bool:
    return ANNOTATION_RANCHER_BASE in annotations_of(namespace)


class PlanQueue:
    """Queues a namespace's plan at once (`at_once`) or soon (`soon`) by what changed, reading
    the namespace's migration views as they stand (`migrations`); a namespace for which
    `queues` is false (no managed quota, not MTQ mode's: PlanInputs.queues_namespace) is not
    queued. Event loop only."""

    def __init__(
        self,
        at_once: Callable[[str], None],
        soon: Callable[[str], None],
        migrations: NamespaceViews[Object],
        queues: Callable[[str], bool],
    ) -> None:
        self.at_once = at_once
        self.soon = soon
        self._migrations = migrations
        self._queues = queues

    def migration(self, namespace: str, old: Object | None, new: Object | None) -> None:
        """A migration's view changed in a way a plan acts on (`new` None: it went)."""
        if not self._queues(namespace):
            return
        if new is not None and not is_finished(new):
            self.at_once(namespace)
            return
        gone = new or old
        vmi = vmi_name(gone) if gone is not None else None
        but = str(metadata(gone).get("name")) if gone is not None else None
        self._by_vmi(namespace, vmi, but=but)

    def vmi(self, namespace: str, name: str) -> None:
        """A VMI's view changed, or it was added or went."""
        if self._queues(namespace):
            self._by_vmi(namespace, name)

    def pod(self, namespace: str, old: PodView | None, new: PodView | None) -> None:
        """A pod's view changed, or it was added or went."""
        if not self._queues(namespace):
            return
        if new is not None and _starts(old, new) and not self._targets(new, namespace):
            self.at_once(namespace)
        else:
            self.soon(namespace)

    def _by_vmi(self, namespace: str, vmi: str | None, *, but: str | None = None) -> None:
        """At once if a migration not finished of `vmi` (other than `but`) is listed, else
        soon."""
        views = self._migrations.by_name(namespace)
        waiting = vmi is not None and any(
            name != but and vmi_name(view) == vmi and not is_finished(view)
            for name, view in views.items()
        )
        (self.at_once if waiting else self.soon)(namespace)

    def _targets(self, pod: PodView, namespace: str) -> bool:
        """Whether `pod` is the target pod of a migration not finished (its label names it)."""
        if not pod.migration_uid:
            return False
        views = self._migrations.by_name(namespace)
        return any(
            metadata(view).get("uid") == pod.migration_uid and not is_finished(view)
            for view in views.values()
        )


def _starts(old: PodView | None, new: PodView) -> bool:
    """Whether `new` is a launcher pod that runs and `old` (its view before) did not."""
    return new.launcher and new.running and not (old is not None and old.running)


def quota_may_wait(ours: PendingWrites) -> Callable[[Object, Object], bool]:
    """Controller.watch_related's `may_wait` for quotas: an update that leaves spec.hard as it
    was, quantities compared by value (status writes, annotations), or that is our own write
    coming back (`ours`, the writes the room mode records), unless it publishes the last
    release. Anyone else's spec.hard write is at once, as are adds and deletes (watch_related's
    own), and the last release published (status.hard lowered, by our copy or by
    kube-controller-manager, on a quota that carries no record of a raise any more): the
    room-held label goes only then (resourcequota_controller.raise_down), and while it stands
    with the webhook down, its fail-closed rule refuses the namespace's pods. A release
    published while other rooms stand may wait: the label stays for them."""

    def may_wait(old: Object, new: Object) -> bool:
        if status_hard_lowers(old, new) and not raise_records(new, None):
            return False
        return not hard_changes(old, new) or ours.is_ours(new)

    return may_wait


def status_hard_lowers(old: Object, new: Object) -> bool:
    """Whether `new`'s status.hard is below `old`'s on some key, or lacks one it had; a value
    that cannot be read (not a quantity, an integer too long to print) counts as lowered: the
    side that plans at once, never an error in the informer's handler."""
    try:
        before, after = _status_hard(old), _status_hard(new)
        if before == after:
            return False
        return any(
            key not in after or Quantity.parse(after[key]) < Quantity.parse(value)
            for key, value in before.items()
        )
    except ValueError:
        return True


def _status_hard(quota: Object) -> dict[str, str]:
    hard = as_mapping(status(quota).get("hard"))
    return {str(key): str(value) for key, value in hard.items()}


def vmi_name(migration: Object) -> str | None:
    """The VMI the migration's view names (spec.vmiName), None if it names none."""
    name = spec(migration).get("vmiName")
    return name if isinstance(name, str) else None
