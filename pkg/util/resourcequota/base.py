"""The managed quota of a namespace and its base: which quota we scale, what its spec.hard is
when no migration holds room, and whether a pod fits under it (`shortfalls`, the VM-start check's
arithmetic: the webhook words the denial, the numbers come from here).

- The managed quota is the one Rancher creates and Harvester scales: labelled
  resourcequota.management.cattle.io/default-resource-quota=true (`managed_quota`), never told by
  a label or name a tenant may set on another quota.
- With Rancher, the base is the namespace annotation ``field.cattle.io/resourceQuota``: the only
  source of truth Rancher keeps, and what it resets spec.hard to on every namespace event. All its
  fields are mapped as Rancher maps them; ``extended`` is parsed and ignored, as Harvester does.
  Keys of spec.hard outside the annotation are not ours: they pass through untouched.
  Where Rancher forbids everyone else to write its quota (2.14.6+/2.15.2+), a raise goes through
  the annotation itself (rancherpath.py); the annotation as it was is kept meanwhile in
  ``harvester-quota.io/rancher-base``, and stays the base for as long as the annotation is what we
  wrote (``harvester-quota.io/rancher-applied``). An edit by anyone else becomes the base.
- Without Rancher ("standalone"), the base is recorded once, from spec.hard, in an annotation of
  ours on the quota, and follows the user's own edits of spec.hard: an edit made while no
  migration holds room becomes the base; an edit made while one does moves the base by the same
  amount (we know what we applied, so the difference is the user's).

Harvester's calculator.go has no file of its own here; its jobs went where one plan per namespace
needs them:
- the VM-start check, `CheckIfVMCanStartByResourceQuota` (with `NewCalculator`, `VMPodsExist`,
  `getVMPods`, `getResourceQuota`), is webhook/resources/virtualmachine/validator.py's
  `validate_vm_start`; its arithmetic, `containsEnoughResourceQuotaToStartVM`, is `shortfalls`
  here, on every key the launcher pod uses, and error.go's `InsufficientResourceError` is the
  webhook's denial, worded from a `Shortfall`;
- the room of a migration, `CalculateScaleResourceQuotaWithVMI`, is rooms.py's `_room` (the
  target pod's usage, or the launcher pod KubeVirt would render, util/launcher/render.py, instead
  of `calculateVMActualOverhead`'s estimate);
- the quota a plan writes, `CalculateNewResourceQuotaFromBaseDelta` and
  `CalculateCompensationResourceQuotaWithVMI`, is plan.py's `desired_hard` over raises.py's
  `floor_of`; `CalculateRestoreResourceQuotaWithVMI` has no twin (nothing in Harvester calls it);
- the base, `getNamespaceResourceQuota`, is `rancher_base` here, and the annotations' sums,
  `GetVMIMResourcesFromRQAnnotation`, util/annotations.py's `MigrationAnnotations`;
- the storage check, `CheckStorageResourceQuota` with `calculateVMStorageQuantity`, is not ported:
  storage is never part of a room (docs/architecture.md says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ...generic.meta import annotations_of, is_deleting, labels
from ...generic.meta import name as object_name
from .. import resources
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_DEFAULT_RESOURCE_QUOTA
from ..quantity import Quantity
from ..rancher.annotation import parse_namespace_resource_quota
from ..resources import ResourceList

ANNOTATION_BASE = "harvester-quota.io/base"
"""Standalone: the recorded base (a ResourceList JSON)."""
ANNOTATION_APPLIED = "harvester-quota.io/applied"
"""Standalone, while rooms are held: the managed spec.hard we last wrote, to tell user edits apart."""

ANNOTATION_RANCHER_BASE = "harvester-quota.io/rancher-base"
"""On the Namespace, while a raise goes through Rancher's annotation: that annotation's own text
before the raise (the base)."""
ANNOTATION_RANCHER_APPLIED = "harvester-quota.io/rancher-applied"
"""On the Namespace, with ANNOTATION_RANCHER_BASE: the raised annotation text we wrote."""
ANNOTATION_RANCHER_GIVEN = "harvester-quota.io/rancher-given"
"""On the Namespace, with ANNOTATION_RANCHER_APPLIED: the uids of the migrations (sorted,
comma-separated) the raise we wrote was given for. A room of the namespace whose migration is not
among them has not been given by its Rancher project, even where the raised annotation would cover
it (the room of a migration that ended): it waits in KubeVirt's order across the project
(rancherpath.py). Prefixed with the Rancher project id that gave the rooms and a space
(rancherpath.given_text). Written by our controller, but not tenant-proof: Rancher lets a project
member who may create namespaces edit the project's namespaces (`<project>-namespaces-edit`), the
same power as editing Rancher's own annotation (docs/security.md row 5m')."""

Mode = Literal["auto", "rancher", "standalone"]
RANCHER = "rancher"
STANDALONE = "standalone"

Quota = TypeVar("Quota", bound=Mapping[str, Any])


def is_managed_quota(quota: Mapping[str, Any]) -> bool:
    """Labelled resourcequota.management.cattle.io/default-resource-quota=true (never selected by
    cattle.io/creator, which Rancher also sets on quotas it does not scale). With `resolve_base`,
    Harvester's `IsResourceQuotaManagedByNamespaceAnnotation`: a labelled quota with a base."""
    return labels(quota).get(LABEL_DEFAULT_RESOURCE_QUOTA) == "true"


def managed_quota(quotas: Iterable[Quota]) -> Quota | None:
    """The namespace's managed quota: the first labelled, not deleting one by name, as Rancher
    picks it. Deterministic whatever order the cache lists them in. Harvester's
    `getResourceQuota` picks the first labelled one too; its `isNamespaceManagedByResourceQuota`
    holds for any quota of the namespace, labelled or not."""
    candidates = sorted(
        (q for q in quotas if is_managed_quota(q) and not is_deleting(q)),
        key=object_name,
    )
    return candidates[0] if candidates else None


class BaseError(ValueError):
    """The base cannot be known; the message says why, for a Warning event. The quota is left
    exactly as it is."""


@dataclass(frozen=True)
class Base:
    """The base of the managed keys, where it came from, and whether it must be (re)recorded."""

    hard: ResourceList
    source: str
    record: bool = False
    notes: tuple[str, ...] = ()


def spec_hard(quota: Mapping[str, Any]) -> ResourceList:
    """spec.hard parsed (a bad value raises ValueError naming it)."""
    return resources.parse_resource_list((quota.get("spec") or {}).get("hard") or {})


def rancher_base_text(namespace: Mapping[str, Any]) -> str | None:
    """The text of Rancher's annotation that is the base: the one recorded before our raise while
    the annotation is still the raise we wrote, else the annotation itself."""
    annotations = annotations_of(namespace)
    current = annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    recorded = annotations.get(ANNOTATION_RANCHER_BASE)
    if recorded is not None and current == annotations.get(ANNOTATION_RANCHER_APPLIED):
        return recorded
    return current


def rancher_base(namespace: Mapping[str, Any]) -> ResourceList | None:
    """The base from Rancher's annotation; None when the namespace has none (or it is empty).
    Harvester's `getNamespaceResourceQuota`, every field Rancher maps (not limits.cpu and
    limits.memory alone); BaseError for an annotation that does not parse or is negative."""
    text = rancher_base_text(namespace)
    if text is None or not text.strip():
        return None
    name = (namespace.get("metadata") or {}).get("name", "?")
    try:
        base = parse_namespace_resource_quota(text)
    except ValueError as error:
        raise BaseError(
            f"namespace {name}: {CATTLE_ANNOTATION_RESOURCE_QUOTA} is not valid ({error}); "
            "the quota is left as it is until the annotation is fixed"
        ) from error
    negative = resources.negative_keys(base)
    if negative:
        raise BaseError(
            f"namespace {name}: {CATTLE_ANNOTATION_RESOURCE_QUOTA} has negative limits "
            f"({', '.join(negative)}); the quota is left as it is until the annotation is fixed"
        )
    return base or None


def resolve_base(
    namespace: Mapping[str, Any],
    quota: Mapping[str, Any],
    *,
    mode: Mode = "auto",
    raise_recorded: bool,
    recorded_rooms: ResourceList | None = None,
) -> Base | None:
    """The base for this namespace's managed quota, or None when nothing is to be managed.

    ``recorded_rooms`` is what the quota's per-VM annotations say was added (used only to adopt,
    mid-migration, a quota nobody recorded a base for: spec.hard minus those rooms).

    Harvester's `scaleResourceQuotaOnDemand` takes the base from Rancher's annotation alone, and
    only where `IsResourceQuotaManagedByNamespaceAnnotation` holds; here, without Rancher's
    annotation, a base recorded on the quota stands in.
    """
    if mode != STANDALONE:
        base = rancher_base(namespace)
        if base is not None:
            return Base(hard=base, source=RANCHER)
        if mode == RANCHER:
            return None
    return standalone_base(quota, raise_recorded=raise_recorded, recorded_rooms=recorded_rooms)


def standalone_base(
    quota: Mapping[str, Any], *, raise_recorded: bool, recorded_rooms: ResourceList | None
) -> Base | None:
    """The recorded base of a quota without Rancher's annotation, following the user's edits
    of spec.hard; spec.hard less `recorded_rooms` the first time. With no record of a raise of
    ours on the quota (`raise_recorded` False: standing.raise_records), spec.hard differs from
    the recorded base only by the user's edits; while one stands, by the edits made since we
    applied the spec.hard recorded with it (ANNOTATION_APPLIED), and where that record is
    missing (a quota raised by an earlier controller, or by Harvester's beside us) the raise
    cannot be told from an edit, so none is followed until the raise is given back. None
    without spec.hard; BaseError for a spec.hard that cannot be read. The controller's plan
    and the webhook read the base through this one function."""
    name = (quota.get("metadata") or {}).get("name", "?")
    try:
        hard = spec_hard(quota)
    except ValueError as error:
        raise BaseError(f"quota {name}: spec.hard is not valid ({error})") from error
    notes: list[str] = []
    recorded = _read(quota, ANNOTATION_BASE, notes)
    if recorded is None:
        if not hard:
            return None
        # First sight: adopt spec.hard, less whatever room an earlier controller recorded.
        adopted = resources.subtract_non_negative(hard, recorded_rooms or {})
        adopted = {key: adopted.get(key, value) for key, value in hard.items()}
        return Base(hard=adopted, source=STANDALONE, record=True, notes=tuple(notes))
    if raise_recorded:
        applied = _read(quota, ANNOTATION_APPLIED, notes)
        followed = (
            _follow_edits(recorded, applied, hard)
            if applied is not None
            else {key: recorded.get(key, value) for key, value in hard.items()}
        )
    else:
        followed = _follow_edits(recorded, recorded, hard)
    changed = not resources.equal(followed, recorded)
    return Base(hard=followed, source=STANDALONE, record=changed, notes=tuple(notes))


def _read(quota: Mapping[str, Any], key: str, notes: list[str]) -> ResourceList | None:
    text = annotations_of(quota).get(key)
    if text is None:
        return None
    try:
        return resources.loads(text)
    except ValueError as error:
        notes.append(f"ignored invalid annotation {key}: {error}")
        return None


def _follow_edits(
    recorded: ResourceList, applied: ResourceList, hard: ResourceList
) -> ResourceList:
    """The base after the user's edits: spec.hard differs from what we applied by the edit."""
    base: ResourceList = {}
    for key, value in hard.items():
        if key not in applied:
            base[key] = value  # a key the user added
        elif value == applied[key]:
            base[key] = recorded.get(key, value)
        else:
            edited = recorded.get(key, applied[key]) + (value - applied[key])
            base[key] = edited if edited.sign() >= 0 else value
    return base


@dataclass(frozen=True)
class Shortfall:
    """One key of a quota a pod does not fit under: `needed` more does not fit beside `in_use`
    within `limit`. The VM-start check's (`shortfalls`, against the base) are the numbers the
    webhook's denial words, where Harvester's `InsufficientResourceError` names only the resource
    (`IsInsufficientResourceError` tells it from other errors; the webhook's Denied is their
    twin). MTQ mode's (mtq.evaluate) name the quota, and `limit` includes the VMMRQ's `budget`."""

    key: str
    needed: Quantity
    in_use: Quantity
    limit: Quantity
    quota: str = ""
    """The quota the key is of; "" for the base."""
    budget: Quantity = field(default_factory=Quantity)
    """What a VMMRQ's budget adds to `limit`; zero for the base."""

    @property
    def free(self) -> Quantity:
        """What is left under the limit (never negative)."""
        left = self.limit - self.in_use
        return left if left.sign() > 0 else Quantity.from_int(0)


def shortfalls(
    needed: Mapping[str, Quantity], base: Mapping[str, Quantity], in_use: ResourceList
) -> list[Shortfall]:
    """Every key of `base` on which `needed` more does not fit next to `in_use`, sorted by key.

    Keys `needed` does not use (or uses zero or less of) never fall short; a key absent from
    `in_use` counts as zero in use.

    Harvester's `containsEnoughResourceQuotaToStartVM`, the arithmetic of its
    `CheckIfVMCanStartByResourceQuota`, on limits.cpu and limits.memory; this is on every key of
    the base. Pure, over the caches the caller reads, so `NewCalculator` has no twin.
    """
    short = []
    for key, limit in sorted(base.items()):
        want = needed.get(key)
        if want is None or want.sign() <= 0:
            continue
        used = in_use.get(key, want * 0)
        if used + want > limit:
            short.append(Shortfall(key, want, used, limit))
    return short
