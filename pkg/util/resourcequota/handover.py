"""When a namespace may pass from the room mode to MTQ mode: once the room mode's raise is gone.

A namespace with a VirtualMachineMigrationResourceQuota (VMMRQ) is MTQ mode's. One created while
the room mode held room there made the room mode step away at once, its raise still in spec.hard,
and with it the webhook's pod checks: the tenant's pods could then take the raise (issue 25). So
the room mode keeps the namespace until it has given its raise back, and only then MTQ mode (its
controller, its lock, the webhook's MTQ rules) takes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...generic.meta import annotations_of
from .base import ANNOTATION_APPLIED, ANNOTATION_RANCHER_BASE
from .floor import ANNOTATION_ROOMS_SINCE
from .plan import MIGRATING_PREFIX


def room_raise_left(quota: Mapping[str, Any] | None, namespace: Mapping[str, Any] | None) -> bool:
    """Whether the room mode's raise still stands: the quota carries its per-VM rooms or its
    records of a raise, or the namespace the Rancher annotation text it raised through."""
    if ANNOTATION_RANCHER_BASE in annotations_of(namespace):
        return True
    return any(
        key.startswith(MIGRATING_PREFIX) or key in (ANNOTATION_APPLIED, ANNOTATION_ROOMS_SINCE)
        for key in annotations_of(quota)
    )
