"""ResourceQuota rules: direct edits of the managed quota's spec.hard follow the namespace rules
(no lowering below usage, none while a migration holds room), except our own controller's writes.

Harvester's resourcequota validator.go at this path validates its own harvesterhci.io/v1beta1
ResourceQuota (VM snapshot limits), another kind: this file shares its path, not its job.
"""

from __future__ import annotations

from ....generic.meta import spec
from ....util import resources
from ....util.resources import parse_resource_list_leniently
from ...admission import Denied, Request
from ..common import Identities, Lookups, check_lowering, view_of


def validate_quota_update(request: Request, lookups: Lookups, identities: Identities) -> None:
    """Direct edits of the managed quota's spec.hard follow the same rules, except our own."""
    if request.username in identities.controllers:
        return
    old_hard = parse_resource_list_leniently(spec(request.old).get("hard"))
    try:
        new_hard = resources.parse_resource_list(spec(request.obj).get("hard") or {})
    except ValueError as error:
        raise Denied(f"quota {request.name}: {error}") from error
    quota = lookups.managed_quota(request.namespace) or request.old or {}
    try:
        view = view_of(lookups, request.namespace, quota)
    except ValueError as error:  # only a forged review's old quota can be one no API server has
        raise Denied(f"quota {request.name}: {error}", code=400) from error
    check_lowering(
        "quota", f"{request.namespace}/{request.name}", old=old_hard, new=new_hard, view=view
    )
