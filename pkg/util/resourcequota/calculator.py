"""The VM-start check (Harvester's calculator.go): does a pod fit under the base?

Pure arithmetic over ResourceLists: the webhook words the denial, the numbers come from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..quantity import Quantity
from ..resources import ResourceList


@dataclass(frozen=True)
class Shortfall:
    """One quota key a pod does not fit on."""

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
