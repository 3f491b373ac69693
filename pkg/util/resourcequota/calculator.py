"""The arithmetic of the VM-start check: does a pod fit under the base?

Pure arithmetic over ResourceLists: the webhook words the denial, the numbers come from here.

Named after Harvester's calculator.go, whose jobs went where one plan per namespace needs them:
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
- the base, `getNamespaceResourceQuota`, is base.py's `rancher_base`, and the annotations' sums,
  `GetVMIMResourcesFromRQAnnotation`, util/annotations.py's `MigrationAnnotations`;
- the storage check, `CheckStorageResourceQuota` with `calculateVMStorageQuantity`, is not ported:
  storage is never part of a room (docs/architecture.md says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..quantity import Quantity
from ..resources import ResourceList


@dataclass(frozen=True)
class Shortfall:
    """One quota key a pod does not fit on: the numbers the webhook's denial words, where
    Harvester's `InsufficientResourceError` names only the resource (`IsInsufficientResourceError`
    tells it from other errors; the webhook's Denied is their twin)."""

    key: str
    needed: Quantity
    in_use: Quantity
    limit: Quantity

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
