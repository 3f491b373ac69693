"""ResourceQuota rules: direct edits of the managed quota's spec.hard follow the namespace rules
(no lowering below usage, none while a migration holds room), except our own controller's writes.
"""

from __future__ import annotations

from ....util import resources
from ....util.resources import parse_resource_list_leniently
from ...admission import Denied, Request
from ..common import Identities, Lookups, check_lowering, view_of


def validate_quota_update(request: Request, lookups: Lookups, identities: Identities) -> None:
    """Direct edits of the managed quota's spec.hard follow the same rules, except our own."""
    if request.username in identities.controllers:
        return
    old_hard = parse_resource_list_leniently(((request.old or {}).get("spec") or {}).get("hard"))
    try:
        new_hard = resources.parse_resource_list(
            ((request.obj or {}).get("spec") or {}).get("hard") or {}
        )
    except ValueError as error:
        raise Denied(f"quota {request.name}: {error}") from error
    quota = lookups.managed_quota(request.namespace) or request.old or {}
    view = view_of(lookups, request.namespace, quota)
    check_lowering(
        "quota", f"{request.namespace}/{request.name}", old=old_hard, new=new_hard, view=view
    )
