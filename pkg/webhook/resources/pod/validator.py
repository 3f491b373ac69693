"""Pod rules: while a migration holds room, a pod that is not a migration target may not push the
namespace's usage (targets excluded) above the base. Target pods (labelled
kubevirt.io/migrationJobUID, created by KubeVirt's controller) always pass. What this process
admitted a moment ago counts even before its caches show it (ledger.py).
"""

from __future__ import annotations

from ....apis.kubevirt import LABEL_MIGRATION_JOB
from ....util.podusage import pod_quota_usage
from ...admission import Denied, Request
from ..common import Identities, Lookups, base_of, check_fits_base, view_of
from .ledger import AdmissionLedger


def is_migration_target(request: Request, identities: Identities) -> bool:
    labels = ((request.obj or {}).get("metadata") or {}).get("labels") or {}
    return LABEL_MIGRATION_JOB in labels and request.username in identities.target_creators


def validate_pod_create(
    request: Request, lookups: Lookups, identities: Identities, ledger: AdmissionLedger
) -> None:
    """Non-target pods may not take the room migrations hold (see module docstring). Runs to the
    end without awaiting, so one process's decisions are serialized; an admitted pod is entered
    in `ledger`."""
    if is_migration_target(request, identities):
        return
    quota = lookups.managed_quota(request.namespace)
    if quota is None:
        return
    view = view_of(lookups, request.namespace, quota)
    if not view.holds_room:
        return  # quota admission at hard == base is all the protection needed
    try:
        needed = pod_quota_usage(request.obj or {})
    except ValueError as error:
        raise Denied(f"pod {request.name}: {error}", code=422) from error
    base = base_of(lookups, request.namespace, view)
    holders = frozenset(room.migration_uid for room in view.rooms.rooms)
    in_use = ledger.in_use(request.namespace, view.used_without_targets(), holders)
    check_fits_base(
        f"pod {request.name or '(generated name)'} would take room reserved for the live migration "
        f"of {view.holders()}",
        needed,
        base,
        view,
        in_use=in_use,
    )
    ledger.admitted(request.namespace, in_use, needed, holders)
