"""Pod rules: while a migration holds room, a pod that is not a migration target may not push the
namespace's usage (targets excluded) above the base, neither by its create nor by growing in place
(pods/resize). KubeVirt's own launcher pods of new VMIs are held to the base like any other pod,
and so is the target pod of a decentralized migration (the VM arriving for good); only the target
pods of migrations within the namespace (labelled kubevirt.io/migrationJobUID, a label only
KubeVirt's controller may set, and created by KubeVirt's controller) pass. What was admitted a
moment ago counts even before the caches show it: in this process (ledger.py), or in every
replica (reservations.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ....apis.kubevirt import LABEL_MIGRATION_JOB
from ....generic.meta import labels as labels_of
from ....generic.resource import Object
from ....util.podusage import QuotaFeatures, pod_quota_usage
from ....util.quotascope import applies_to
from ....util.resourcequota.raises import raise_enforced
from ....util.resourcequota.rooms import decentralized_side
from ....util.resources import ResourceList, subtract_non_negative
from ...admission import Denied, Request
from ..common import (
    Identities,
    Lookups,
    NamespaceView,
    base_given,
    check_fits_base,
    rancher_base_of,
    view_of,
)
from .ledger import AdmissionLedger
from .quiet import room_check_needed

RESIZE = "resize"
"""The pods subresource of an in-place resize (GA in Kubernetes 1.35): a pod grows without a
create, so it is checked like one, for what it adds."""


def is_migration_target(request: Request, identities: Identities) -> bool:
    """A migration target pod being created by KubeVirt's controller (the API server's userInfo;
    the label is one only KubeVirt may set, see the kubevirt-labels admission policy)."""
    labels = labels_of(request.obj)
    return (
        request.operation == "CREATE"
        and LABEL_MIGRATION_JOB in labels
        and request.username in identities.target_creators
    )


def is_room_target(request: Request, lookups: Lookups, identities: Identities) -> bool:
    """A migration target pod (`is_migration_target`) that replaces a launcher pod of this
    namespace, so it may use its migration's room: not the pod of a decentralized migration,
    whose target is the VM arriving in the namespace for good (util/resourcequota/rooms.py) and
    meets the pod rules like a launcher pod of a VM that starts. Its migration is found in the
    cache by the uid in its label (an index, not a scan). One the cache does not hold counts as
    replacing: a receive waits for its peer's sync long before virt-controller creates its pod,
    and should such a pod get in on a raise all the same, the controller's floor counts it as
    an arrival and raises nothing for it (util/resourcequota/raises.py)."""
    if not is_migration_target(request, identities):
        return False
    uid = str(labels_of(request.obj).get(LABEL_MIGRATION_JOB))
    migration = lookups.migration(request.namespace, uid)
    return migration is None or decentralized_side(migration) is None


def requested_usage(request: Request, features: QuotaFeatures) -> ResourceList:
    """What the request adds to the namespace's quota usage, charged as an API server with
    `features` charges it: the whole pod for a create, what an in-place resize grows on each
    key (nothing for what it shrinks) for a resize. ValueError for a pod quota could not read."""
    needed = pod_quota_usage(request.obj or {}, features=features)
    if request.operation == "CREATE":
        return needed
    before = pod_quota_usage(request.old or {}, features=features)
    grown = subtract_non_negative(needed, before)
    return {key: value for key, value in grown.items() if value.sign() > 0}


@dataclass(frozen=True)
class PodCheck:
    """One non-target pod to decide while migrations (`holders`, their uids) hold room."""

    namespace: str
    subject: str
    needed: ResourceList
    base: ResourceList
    view: NamespaceView
    holders: frozenset[str]
    uid: str = ""
    """The pod's metadata.uid (the API server sets it before validating admission; "" if the
    review has none): what the reservation credits once the pod is seen going."""

    def cached_in_use(self) -> ResourceList:
        """What the namespace uses without targets, as the quota in the cache shows it."""
        return self.view.used_without_targets()

    def decide(self, in_use: ResourceList) -> None:
        """Raises Denied, with every key and its numbers, unless the pod fits next to `in_use`."""
        check_fits_base(self.subject, self.needed, self.base, self.view, in_use=in_use)


@dataclass(frozen=True)
class RoomsQuestion:
    """A pod whose namespace may hold room: its managed quota and Rancher's base, as read."""

    quota: Object
    from_rancher: ResourceList | None


def rooms_question(
    request: Request, lookups: Lookups, identities: Identities
) -> RoomsQuestion | None:
    """Whether the pod needs its namespace's rooms worked out, decided in a few lookups whatever
    the namespace holds: not for a migration target that replaces a launcher pod here
    (`is_room_target`), any other update, no managed quota, a pod outside its scopes (it charges
    the quota nothing), or nothing that could be held or raised by the quota and namespace alone
    (quiet.py `room_check_needed`)."""
    if is_room_target(request, lookups, identities):
        return None
    if request.operation != "CREATE" and request.sub_resource != RESIZE:
        return None
    quota = lookups.managed_quota(request.namespace)
    if quota is None or not applies_to(quota, request.obj or {}):
        return None
    from_rancher = rancher_base_of(lookups, request.namespace)  # read once, used thrice
    if not room_check_needed(lookups, request.namespace, quota, from_rancher):
        return None  # nothing held or raised: no rooms to work out (quiet.py)
    return RoomsQuestion(quota, from_rancher)


def check_rooms(request: Request, lookups: Lookups, question: RoomsQuestion) -> PodCheck | None:
    """The costly part (every migration's room): None when no room is held and no raise of ours
    stands above the base (quota admission at hard == base is all the protection needed then;
    a raise outlives its room until both spec.hard and status.hard are down, and pods are held to
    the base throughout: util/resourcequota/raises.py `raise_enforced`), or for a resize that
    grows nothing; Denied (422) for a pod whose quantities cannot be read."""
    view = view_of(lookups, request.namespace, question.quota)
    base = base_given(view, question.from_rancher)
    if not view.holds_room and not raise_enforced(
        view.quota,
        lookups.namespace(request.namespace),
        base,
        rancher=question.from_rancher is not None,
    ):
        return None
    try:
        needed = requested_usage(request, lookups.quota_features())
    except ValueError as error:
        raise Denied(f"pod {request.name}: {error}", code=422) from error
    if not needed:
        return None
    doing = "resized" if request.sub_resource == RESIZE else ""
    return PodCheck(
        namespace=request.namespace,
        subject=f"pod {request.name or '(generated name)'}{' ' + doing if doing else ''} would take "
        f"room reserved for the live migration of {view.holders()}",
        needed=needed,
        base=base,
        view=view,
        holders=frozenset(room.migration_uid for room in view.rooms.rooms),
        uid=str(((request.obj or {}).get("metadata") or {}).get("uid") or ""),
    )


def admit_locally(check: PodCheck, ledger: AdmissionLedger, *, dry_run: bool = False) -> None:
    """Decides `check` on the cache and this process's ledger; enters the pod if admitted,
    unless it is a dry run (nothing will be created: nothing may be reserved)."""
    in_use = ledger.in_use(check.namespace, check.cached_in_use(), check.holders)
    check.decide(in_use)
    if not dry_run:
        ledger.admitted(check.namespace, in_use, check.needed, check.holders, check.uid)
