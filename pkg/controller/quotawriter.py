"""The one place this process writes quota changes from: both modes' writes and their gates.

The room mode (controller/resourcequota/) and MTQ mode (controller/mtq/) plan differently, on
disjoint namespaces (a namespace is MTQ mode's once the room mode has given its raise back,
util/resourcequota/raises.py), and write through the same `QuotaWriter`:

- `patch_as_planned`: the room mode's write of spec.hard and its annotations, one JSON patch
  whose ``test`` operations carry the quota's uid, spec, labels and read annotations as the plan
  saw them (util/resourcequota/conditional.py); a failed test is a Conflict.
- `patch_hard_at_version`: MTQ mode's write of spec.hard, a merge patch conditional on the
  resourceVersion read (its plan reads the whole quota); dry runs included.
- `patch_rancher_annotation`: a raise through Rancher's namespace annotation, which Rancher
  copies into the quota (util/resourcequota/rancherpath.py), one JSON patch whose ``test``
  operations carry the namespace's uid and the annotations the raise reads and writes
  (conditional.annotation_patch_if), not its resourceVersion, which Rancher's agent moves.
- `copy_hard_to_status`: the copy of a new spec.hard into status.hard, conditional on spec.hard
  being still the one written, behind the `status_permission` gate.
- `label_room_held`: the room-held label on the namespace, behind the `label_permission` gate.

The two gates (generic/permission.py) are for writes that help but are not required: a refusal
closes one for a backoff and never fails the reconcile. What a mode counts and logs stays with
the mode, which records what the writer returns (what the API server stored) in the kind's
pending writes (generic/pendingwrites.py). Both modes share one instance (pkg/app.py): a
refusal either meets holds for the other too (RBAC is the one service account's;
rancher-webhook refuses every status write but kube-controller-manager's and the API server's,
on every quota, labelled or not), so one gate learns it and one warning says it. Each write
request is counted by kind as it is sent (`count_write`, harvester_quota_api_writes_total), dry
runs not. Not thread-safe: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..generic import errors
from ..generic.client import ApiClient
from ..generic.clock import Clock
from ..generic.meta import labels, metadata
from ..generic.permission import Permission
from ..generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object
from ..util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_ROOM_HELD
from ..util.resourcequota import conditional
from ..util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)

log = logging.getLogger(__name__)

RANCHER_PATH_ANNOTATIONS = (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_GIVEN,
)
"""The namespace annotations a raise through Rancher reads and writes: its write is conditional
on them alone."""


def _uncounted(kind: str) -> None:
    """No count (a writer whose caller keeps no metrics)."""


class QuotaWriter:
    """Sends quota changes, each conditional on what its plan read (see the module docstring)."""

    def __init__(
        self, client: ApiClient, clock: Clock, count_write: Callable[[str], None] = _uncounted
    ) -> None:
        self.client = client
        self.count_write = count_write
        """Told the kind of every write request as it is sent (config.metrics.WRITE_KINDS)."""
        self.label_permission = Permission(
            "label namespaces",
            "with the webhook down, pods are not refused while room is held; grant patch on "
            "namespaces",
            clock,
        )
        """Whether room-held label writes are tried (closed for a backoff after a refusal, as
        right after an API server restart or without RBAC for it)."""
        self.status_permission = Permission(
            "write resourcequotas/status",
            "quota admission sees a raise only once kube-controller-manager copies it; grant "
            "patch on resourcequotas/status",
            clock,
        )
        """Whether copies into status.hard are tried."""

    async def patch_as_planned(self, quota: Object, merge_patch: Mapping[str, Any]) -> Object:
        """Applies `merge_patch` (spec.hard and annotations, None removing a key) to `quota` only
        if it is still as the plan read it (conditional.conditional_patch); returns the quota as
        stored. A failed condition raises errors.Conflict; other API errors propagate."""
        meta = metadata(quota)
        self.count_write("spec")
        try:
            return await self.client.patch(
                RESOURCE_QUOTAS,
                str(meta["name"]),
                conditional.conditional_patch(quota, merge_patch),
                str(meta["namespace"]),
                patch_type="json",
            )
        except errors.ApiError as error:
            if isinstance(error, errors.Conflict) or not conditional.failed_test(error):
                raise
            raise errors.Conflict(str(error)) from error

    async def patch_hard_at_version(
        self,
        namespace: str,
        name: str,
        read: Object,
        hard: Mapping[str, str],
        *,
        dry_run: bool = False,
        annotations: Mapping[str, str | None] | None = None,
    ) -> Object:
        """Sets quota `namespace`/`name`'s spec.hard to `hard` (keys of `read`'s it lacks
        removed), and its `annotations` (None removing one) in the same write, conditional on
        the resourceVersion of `read`, the quota as the plan read it; returns the answer (with
        `dry_run`, what would be stored). A Conflict propagates, like every API error."""
        current = (read.get("spec") or {}).get("hard") or {}
        patch_hard: dict[str, Any] = {k: None for k in current if k not in hard}
        patch_hard.update(hard)
        meta: dict[str, Any] = {"resourceVersion": str(metadata(read).get("resourceVersion"))}
        if annotations:
            meta["annotations"] = dict(annotations)
        if not dry_run:
            self.count_write("spec")
        return await self.client.patch(
            RESOURCE_QUOTAS,
            name,
            {"metadata": meta, "spec": {"hard": patch_hard}},
            namespace,
            dry_run=dry_run,
        )

    async def patch_rancher_annotation(
        self, namespace: Object, changes: Mapping[str, Any]
    ) -> Object:
        """Writes `changes` into the namespace's annotations (Rancher's quota annotation and our
        records of the raise), conditional on those annotations being as the plan read them
        (conditional.annotation_patch_if), not on the namespace's resourceVersion: Rancher's
        agent writes the namespace on every sync (its conditions, its project's bookkeeping), and
        a write conditional on the version lost to it again and again, each Conflict a longer
        backoff. A failed condition raises errors.Conflict; other API errors propagate."""
        patch = conditional.annotation_patch_if(namespace, changes, RANCHER_PATH_ANNOTATIONS)
        self.count_write("rancher")
        try:
            return await self.client.patch(
                NAMESPACES, str(metadata(namespace).get("name")), patch, patch_type="json"
            )
        except errors.ApiError as error:
            if isinstance(error, errors.Conflict) or not conditional.failed_test(error):
                raise
            raise errors.Conflict(str(error)) from error

    async def copy_hard_to_status(self, written: Object) -> Object:
        """Copies the new spec.hard into status.hard at once; returns the quota as stored after
        (or `written`, when nothing was copied).

        Quota admission checks status.hard, which kube-controller-manager copies from spec.hard
        only a moment later: a target pod arriving in between would be refused once although the
        room is there. The copy is one JSON patch whose test is that spec.hard is still the one
        written (conditional.publish_patch): kube-controller-manager's own status write right
        after our spec write does not make it fail; if spec.hard changed, the new writer's
        value is theirs to publish, and a quota deleted since is nothing to copy into. Refused
        (RBAC's 403, or rancher-webhook's 400 "status is immutable" for every status write but
        kube-controller-manager's), the copy is left to kube-controller-manager and tried
        again after the gate's backoff, logged once. Other API errors propagate.
        """
        if not self.status_permission.allowed():
            return written
        try:
            published = await _copy_hard_to_status(self.client, written, self.count_write)
        except (errors.Forbidden, errors.BadRequest) as error:
            self.status_permission.refused(error)
            return written
        self.status_permission.granted()
        return published

    async def label_room_held(self, namespace: Object, held: bool) -> Object:
        """Sets or removes LABEL_ROOM_HELD on the namespace, if it differs; returns the namespace
        as stored after, or `namespace` itself when nothing was written (equal already, or the
        gate closed). A refusal closes the gate and is not an error: the label guards the room,
        it must never stand between a migration and its raise. Other API errors propagate."""
        if (labels(namespace).get(LABEL_ROOM_HELD) == "true") == held:
            return namespace
        if not self.label_permission.allowed():
            return namespace
        patch = {"metadata": {"labels": {LABEL_ROOM_HELD: "true" if held else None}}}
        self.count_write("label")
        try:
            written = await self.client.patch(NAMESPACES, str(metadata(namespace)["name"]), patch)
        except errors.Forbidden as error:
            self.label_permission.refused(error)
            return namespace
        self.label_permission.granted()
        return written

    def label_retry_in(self) -> float:
        """Seconds until label writes may be tried again (0 if they may now)."""
        return self.label_permission.retry_in()


async def _copy_hard_to_status(
    client: ApiClient, written: Object, count_write: Callable[[str], None] = _uncounted
) -> Object:
    """Copies `written`'s spec.hard into its status.hard (`publish_patch`); returns the quota as
    stored after, or `written` when there was nothing to copy: status.hard already equal, the
    quota gone since, or spec.hard changed since (the new writer's to copy). Forbidden (no RBAC
    for resourcequotas/status) and other API errors propagate."""
    hard = (written.get("spec") or {}).get("hard") or {}
    if (written.get("status") or {}).get("hard") == hard:
        return written
    meta = metadata(written)
    count_write("status")
    try:
        return await client.patch(
            RESOURCE_QUOTAS,
            str(meta["name"]),
            conditional.publish_patch(written),
            str(meta["namespace"]),
            subresource="status",
            patch_type="json",
        )
    except errors.NotFound:
        return written
    except errors.ApiError as error:
        if not conditional.failed_test(error):
            raise
        return written
