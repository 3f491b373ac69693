"""Namespace rules (Harvester's namespace validator.go, quota part): Rancher's annotation
``field.cattle.io/resourceQuota`` is the base; lowering it below usage, or at all while a migration
holds room, is denied; raising is allowed; removing it is allowed.
"""

from __future__ import annotations

from ....generic.meta import annotations_of
from ....util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ....util.resourcequota.base import BaseError, rancher_base
from ...admission import Denied, Request
from ..common import RANCHER_NAMES, Lookups, check_lowering, view_of


def validate_namespace_update(request: Request, lookups: Lookups) -> None:
    """Rancher's quota annotation is the base: guard lowering it (Harvester's namespace check,
    on every key, plus the migration-room rule): Harvester's `Update` and its
    `resourceQuotaValidation`."""
    old_text = annotations_of(request.old).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
    new_text = annotations_of(request.obj).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
    if not new_text.strip() or old_text == new_text:
        return  # unchanged, or removed (removing the annotation is always allowed)
    try:
        new_base = rancher_base(request.obj or {}) or {}
    except BaseError as error:
        raise Denied(
            str(error).replace(" the quota is left as it is until the annotation is fixed", "")
        ) from error
    try:
        old_base = rancher_base(request.old or {}) or {}
    except BaseError:
        old_base = {}
    quota = lookups.managed_quota(request.name)
    view = view_of(lookups, request.name, quota) if quota is not None else None
    check_lowering(
        "namespace", request.name, old=old_base, new=new_base, view=view, names=RANCHER_NAMES
    )
