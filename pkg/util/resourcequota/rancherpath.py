"""A raise through Rancher's own annotation, for Rancher versions that protect the default quota.

Rancher 2.14.6+ and 2.15.2+ deny every write of the ResourceQuota labelled
``resourcequota.management.cattle.io/default-resource-quota`` that does not come from Rancher's
``rancher-webhook-sudo`` account (rancher/rancher#54690). Rancher's source of truth stays writable:
the namespace annotation ``field.cattle.io/resourceQuota``, checked against the project's limits
and copied to the quota by Rancher's agent. So the raise a plan wants goes there instead:

- raising: the annotation gets the plan's values on the keys it limits (other fields, such as
  ``extended``, kept as they are); the annotation's text before the first raise is recorded in
  ``harvester-quota.io/rancher-base``, what we wrote in ``harvester-quota.io/rancher-applied``,
  and the Rancher project and migrations it was given for in ``harvester-quota.io/rancher-given``
  (written again when they change, even where the text does not, and where a raise of an older
  version lacks it);
- releasing: the recorded text goes back exactly, and the records go;
- an annotation someone else changed meanwhile is theirs: it is the base from then on
  (base.rancher_base_text) and the stale records are dropped.

Pure: `annotation_patch` computes the namespace's metadata.annotations merge patch from the
namespace and the plan; the caller writes it, conditional on the annotations it reads
(conditional.annotation_patch_if), not on the namespace's resourceVersion.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ...generic.meta import annotations_of
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..quantity import Quantity
from ..rancher.annotation import NamespaceResourceQuota, parse_namespace_resource_quota_details
from ..rancher.project import PROJECT_ID_ANNOTATION
from .base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
    rancher_base_text,
)
from .plan import QuotaPlan


def raised_annotation(base_text: str, hard: Mapping[str, str]) -> str:
    """The base annotation with the plan's values on the keys the base limits (the same text
    as the base when the values are the base's)."""
    details = parse_namespace_resource_quota_details(base_text)
    fixed = dict(details.raw_limit)
    for key, current in details.limit.items():
        wanted = hard.get(key)
        if wanted is not None and Quantity.parse(wanted) != current:
            fixed[key] = wanted
    if fixed == details.raw_limit:
        return base_text
    return NamespaceResourceQuota(raw_limit=fixed, extended=details.extended).canonical_text()


def annotation_patch(namespace: Mapping[str, Any], plan: QuotaPlan) -> dict[str, Any] | None:
    """The namespace annotations that carry the plan through Rancher, or None if they do."""
    annotations = annotations_of(namespace)
    current = annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    base_text = rancher_base_text(namespace)
    if not plan.managed or plan.base is None or current is None or base_text is None:
        return None
    if ANNOTATION_RANCHER_BASE in annotations and current != annotations.get(
        ANNOTATION_RANCHER_APPLIED
    ):
        return {
            ANNOTATION_RANCHER_BASE: None,
            ANNOTATION_RANCHER_APPLIED: None,
            ANNOTATION_RANCHER_GIVEN: None,
        }
    wanted = raised_annotation(base_text, plan.hard) if plan.holds_room else base_text
    if wanted != base_text:
        given = given_text(plan, annotations.get(PROJECT_ID_ANNOTATION))
        raise_it = {
            CATTLE_ANNOTATION_RESOURCE_QUOTA: wanted,
            ANNOTATION_RANCHER_BASE: base_text,
            ANNOTATION_RANCHER_APPLIED: wanted,
            ANNOTATION_RANCHER_GIVEN: given,
        }
        # A raise of ours without the record (written before it existed) gets one now: the
        # rooms given are frozen at the migrations it covers at the first reconcile that finds
        # it missing, so no later migration inherits a room of one that ended.
        stands = wanted == current and annotations.get(ANNOTATION_RANCHER_GIVEN) == given
        return None if stands else raise_it
    return _release(annotations, base_text)


def given_text(plan: QuotaPlan, project: str | None = None) -> str:
    """ANNOTATION_RANCHER_GIVEN's value for a raise of `plan`: the Rancher project it was given
    by (the namespace's field.cattle.io/projectId), a space, its rooms' migration uids."""
    uids = ",".join(sorted({room.migration_uid for room in plan.rooms.rooms}))
    return f"{project} {uids}" if project else uids


def given_migrations(namespace: Mapping[str, Any]) -> frozenset[str] | None:
    """The migration uids our raise standing on the namespace was given for: empty unless the
    annotation is still the raise we wrote (someone else's edit gives nothing of ours) and the
    record names the project the namespace is in now (a namespace moved to another project was
    given nothing by it); None for a raise of ours without the record (written by a version
    before it): every room it covers counts as given then, until the next reconcile writes it
    (annotation_patch). A record without a project (written by the version before that) counts
    for the namespace's project."""
    annotations = annotations_of(namespace)
    current = annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    if current is None or current != annotations.get(ANNOTATION_RANCHER_APPLIED):
        return frozenset()
    text = annotations.get(ANNOTATION_RANCHER_GIVEN)
    if text is None:
        return None
    project, _, uids = text.rpartition(" ")
    if project and project != annotations.get(PROJECT_ID_ANNOTATION):
        return frozenset()
    return frozenset(uid for uid in uids.split(",") if uid)


def unjudged_record(
    namespace: Mapping[str, Any], changes: Mapping[str, Any], given: Collection[str]
) -> dict[str, Any] | None:
    """`changes` (a raise) written without the project's judgment (its project could not be
    read now): the record names only the rooms given already (`given`, their migrations'
    uids), so the others still
    wait in the project's order and are judged once it can be read; None where that leaves
    nothing to write."""
    if changes.get(ANNOTATION_RANCHER_GIVEN) is None:
        return dict(changes)
    annotations = annotations_of(namespace)
    uids = ",".join(sorted(set(given)))
    project = annotations.get(PROJECT_ID_ANNOTATION)
    written = {**changes, ANNOTATION_RANCHER_GIVEN: f"{project} {uids}" if project else uids}
    if all(annotations.get(key) == value for key, value in written.items()):
        return None
    return written


def _release(annotations: Mapping[str, str], base_text: str) -> dict[str, Any] | None:
    """Back to the recorded text, records dropped (nothing to do when there are none)."""
    if ANNOTATION_RANCHER_BASE not in annotations:
        return None
    return {
        CATTLE_ANNOTATION_RESOURCE_QUOTA: base_text,
        ANNOTATION_RANCHER_BASE: None,
        ANNOTATION_RANCHER_APPLIED: None,
        ANNOTATION_RANCHER_GIVEN: None,
    }
