"""Managed-Tenant-Quota lock rules: while a namespace is locked, only KubeVirt's target pods of
the migrations the lock is held for are created there; ResourceQuota edits, VirtualMachineMigrationResourceQuota
creates and deletes, writes of its status subresource (the originals and budget the restore
used to read, since a tenant may write that status), and removals of the VMMRQ's restore finalizer are refused, except our
controller's. Each denial says why and until when.

The lock is read from the Namespace (util/mtq.py): its label selects the webhook
rule in deploy/ (failure policy Fail: with the webhook down, nothing but our controller changes a
locked namespace), its annotation carries the deadline and the migrations. The lock is enforced
for as long as the namespace carries it, past its deadline too: the deadline ends the window in
which the controller raises, and the controller removes the lock only once it has restored the
quotas (a lock that ended at its deadline let pods into quotas still raised). One whose
annotation cannot be read is enforced the same (the label and annotation are ours alone; the
controller restores and unlocks it).
"""

from __future__ import annotations

import datetime
from typing import Final

from ....apis.kubevirt import LABEL_MIGRATION_JOB
from ....apis.mtq import KIND as VMMRQ_KIND
from ....generic.meta import labels as labels_of
from ....generic.meta import metadata
from ....util.mtq import FINALIZER, Lock, format_time, parse_lock
from ....util.podusage import QuotaFeatures
from ...admission import Denied, Request
from ..common import Identities, Lookups
from ..pod.validator import RESIZE, requested_usage

KINDS: Final = frozenset({"Pod", "ResourceQuota", VMMRQ_KIND})
"""What the lock endpoint decides; anything else sent to it is a configuration error."""


def active_lock(lookups: Lookups, namespace: str) -> Lock | None:
    """The namespace's lock, in force until the controller removes it (module docstring)."""
    return parse_lock(lookups.namespace(namespace))


def _why(namespace: str, lock: Lock, now: datetime.datetime) -> str:
    migrations = ", ".join(sorted(lock.migrations.values())) or "none"
    if lock.active(now):
        seconds = max(0, int((lock.until - now).total_seconds() + 0.999))
        until = (
            f"until {format_time(lock.until)} (at most {seconds}s from now) and the quotas are "
            "restored"
        )
    else:
        until = f"until the quotas are restored (its window ended at {format_time(lock.until)})"
    return (
        f"namespace {namespace} is locked by the Managed-Tenant-Quota mode "
        f"(VirtualMachineMigrationResourceQuota {lock.vmmrq or '?'}) while its quotas are raised "
        f"for the target pods of live migrations {migrations}, {until}; retry after that"
    )


def is_lock_target(request: Request, identities: Identities, lock: Lock) -> bool:
    """A pod KubeVirt's controller creates for one of the lock's migrations."""
    labels = labels_of(request.obj)
    uid = labels.get(LABEL_MIGRATION_JOB)
    return (
        request.username in identities.target_creators
        and isinstance(uid, str)
        and lock.admits_target_of(uid)
    )


def validate_locked(request: Request, lookups: Lookups, identities: Identities) -> None:
    """Denies what the namespace's lock forbids (module docstring); allows the rest."""
    if request.kind not in KINDS:
        raise Denied(f"the MTQ lock rules do not cover {request.kind} objects", code=400)
    lock = active_lock(lookups, request.namespace)
    if lock is None or request.username in identities.controllers:
        return
    why = _why(request.namespace, lock, lookups.now())
    if request.kind == "Pod":
        _check_pod(request, identities, lock, why, lookups.quota_features())
    elif request.kind == "ResourceQuota":
        if request.operation == "UPDATE":
            raise Denied(f"quota {request.name} cannot be edited while {why}")
    elif request.sub_resource == "status":
        raise Denied(
            f"{VMMRQ_KIND} {request.name}: its status may not be written while {why} (the "
            "controller records the originals it restores there)"
        )
    elif request.operation in ("CREATE", "DELETE"):
        raise Denied(
            f"{VMMRQ_KIND} {request.name}: {request.operation.lower()} is not allowed while {why}"
        )
    elif _drops_finalizer(request):
        raise Denied(
            f"{VMMRQ_KIND} {request.name}: its finalizer {FINALIZER} may not be removed while {why}"
        )


def _drops_finalizer(request: Request) -> bool:
    """An update that takes FINALIZER off a VMMRQ that had it (only our controller may, once
    the quotas are restored)."""

    def has(obj: object) -> bool:
        finalizers = metadata(obj).get("finalizers") if isinstance(obj, dict) else None
        return isinstance(finalizers, list) and FINALIZER in finalizers

    return request.operation == "UPDATE" and has(request.old) and not has(request.obj)


def _check_pod(
    request: Request, identities: Identities, lock: Lock, why: str, features: QuotaFeatures
) -> None:
    """While locked only the lock's target pods are created, and no pod grows in place
    (pods/resize): a resize into the budget would take what the migrations were given."""
    name = request.name or "(generated name)"
    if request.operation == "CREATE":
        if not is_lock_target(request, identities, lock):
            raise Denied(f"pod {name}: only the migration target pods are created while {why}")
        return
    if request.sub_resource != RESIZE:
        return
    try:
        grown = requested_usage(request, features)
    except ValueError as error:
        raise Denied(f"pod {name}: {error}", code=422) from error
    if grown:
        raise Denied(f"pod {name}: no pod may grow in place while {why}")
