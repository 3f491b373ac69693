"""What a scale run does, described by counts (pure).

A `ScalePlan` names no VM: it says how many kwok nodes, how many VMs in each namespace, how many
migrations each step creates at once and how many waves the drain has. `steps` turns it into the
run's steps:

- one step per distinct namespace size, smallest first: `per_size` migrations created at once in
  the first namespace of that size (the controller's cost per migration, and the VMIM-to-raise
  latency, as a function of namespace size);
- `waves` drain waves: `in_flight` migrations created at once, spread round-robin over every
  namespace (what a node drain or a KubeVirt upgrade does to the controller).

A VM may migrate in several steps: a step starts only after the previous one settled.

With a baseline, every namespace has a twin without any ResourceQuota (``<prefix>noquota-000``,
...) holding the same VMs, and `baseline_of` turns each step into the same step in the twins:
what the same migrations cost a namespace with no quota at all. The headroom arm adds a third
twin (``<prefix>headroom-000``, ...): a ResourceQuota on the same keys, wide open, which nothing of
ours manages (`headroom_of`): what a quota costs when no controller writes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

NAMESPACE_PREFIX: Final = "scale-"
BASELINE_INFIX: Final = "noquota-"
HEADROOM_INFIX: Final = "headroom-"
STRATEGIES: Final = ("ours", "harvester")
"""What keeps a scale run's quotas: the product as deployed, or Harvester's own controllers in its
place (`harvester.HarvesterRealProduct`)."""
HARVESTER_VERSION: Final = "v1.8.2"
"""The Harvester release whose controllers a Harvester scale run starts its cluster with (the one
the suite and the scenarios run)."""


@dataclass(frozen=True)
class ScalePlan:
    """A scale run by counts. Every count is validated on construction (ValueError)."""

    nodes: int
    namespaces: tuple[int, ...]
    """VMs in each namespace, in the order they are named (``scale-000``, ``scale-001``, ...)."""
    per_size: int
    """Migrations created at once in one namespace of each size."""
    in_flight: int
    """Migrations created at once in each drain wave, over all namespaces."""
    waves: int = 1
    vm_cores: int = 1
    vm_memory: str = "1Gi"
    migration_seconds: float = 2.0
    """How long each migration runs on the node side (the virt-handler stand-in)."""
    create_concurrency: int = 32
    """VM creations in flight while setting up."""
    prefix: str = NAMESPACE_PREFIX

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"a migration needs 2 nodes at least, not {self.nodes}")
        if not self.namespaces or min(self.namespaces) < 1:
            raise ValueError(f"every namespace needs a VM at least: {self.namespaces!r}")
        for name in ("per_size", "in_flight", "waves", "vm_cores", "create_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be 1 or more, not {getattr(self, name)!r}")
        if self.per_size > min(self.namespaces):
            raise ValueError(
                f"{self.per_size} migrations at once do not fit the smallest namespace "
                f"({min(self.namespaces)} VMs)"
            )
        if self.in_flight > self.vms:
            raise ValueError(f"{self.in_flight} migrations in flight, but only {self.vms} VMs")
        if self.migration_seconds < 0:
            raise ValueError(f"migration_seconds must be >= 0, not {self.migration_seconds!r}")

    @property
    def vms(self) -> int:
        return sum(self.namespaces)

    def namespace(self, index: int) -> str:
        return f"{self.prefix}{index:03d}"

    def baseline_namespace(self, index: int) -> str:
        """The twin of namespace `index` without a quota (see the module docstring)."""
        return f"{self.prefix}{BASELINE_INFIX}{index:03d}"

    def headroom_namespace(self, index: int) -> str:
        """The twin of namespace `index` with a quota of its own that no controller manages."""
        return f"{self.prefix}{HEADROOM_INFIX}{index:03d}"

    def twin_key(self, namespace: str, vm: str) -> str:
        """What a migration of `vm` in `namespace` shares with its twins in every arm (the quota
        namespace, its no-quota and headroom twins): the namespace's index and the VM's name,
        ``003/vm-00007``. A step and its twins (`baseline_of`, `headroom_of`) hold the same keys,
        each once. ValueError for a namespace of no arm of this plan."""
        rest = namespace.removeprefix(self.prefix)
        for infix in (BASELINE_INFIX, HEADROOM_INFIX):
            rest = rest.removeprefix(infix)
        if rest == namespace or not rest.isdigit() or int(rest) >= len(self.namespaces):
            raise ValueError(f"{namespace!r} is no namespace of this plan's arms")
        return f"{int(rest):03d}/{vm}"

    def baseline_vms(self) -> Iterator[tuple[str, str]]:
        """(twin namespace, VM name) of every VM of the baseline, namespace by namespace."""
        return self._twin_vms(BASELINE_INFIX)

    def headroom_vms(self) -> Iterator[tuple[str, str]]:
        """(headroom twin namespace, VM name) of every VM of the headroom arm."""
        return self._twin_vms(HEADROOM_INFIX)

    def _twin_vms(self, infix: str) -> Iterator[tuple[str, str]]:
        for index, count in enumerate(self.namespaces):
            for vm in range(count):
                yield f"{self.prefix}{infix}{index:03d}", self.vm(vm)

    def baseline_of(self, step: Step) -> Step:
        """`step` in the twin namespaces: the same VMs, named alike, in namespaces without a
        quota."""
        return self._twin_of(step, BASELINE_INFIX)

    def headroom_of(self, step: Step) -> Step:
        """`step` in the headroom twins: the same VMs, in namespaces whose quota no controller
        manages and no target needs raised."""
        return self._twin_of(step, HEADROOM_INFIX)

    def _twin_of(self, step: Step, infix: str) -> Step:
        twins = {
            self.namespace(i): f"{self.prefix}{infix}{i:03d}" for i in range(len(self.namespaces))
        }
        return Step(
            step.name,
            tuple((twins[namespace], vm) for namespace, vm in step.migrations),
            namespace_size=step.namespace_size,
        )

    @staticmethod
    def vm(index: int) -> str:
        return f"vm-{index:05d}"

    def all_vms(self) -> Iterator[tuple[str, str]]:
        """(namespace, VM name) of every VM, namespace by namespace."""
        for index, count in enumerate(self.namespaces):
            for vm in range(count):
                yield self.namespace(index), self.vm(vm)

    def steps(self) -> list[Step]:
        """The measured steps, in the order they run."""
        steps: list[Step] = []
        for size in sorted(set(self.namespaces)):
            index = self.namespaces.index(size)
            ns = self.namespace(index)
            picks = tuple((ns, self.vm(vm)) for vm in range(self.per_size))
            steps.append(Step(f"{size} VMs/ns", picks, namespace_size=size))
        for wave in range(self.waves):
            steps.append(
                Step(f"drain wave {wave + 1}", self._spread(self.in_flight, wave), namespace_size=0)
            )
        return steps

    def _spread(self, count: int, wave: int) -> tuple[tuple[str, str], ...]:
        """`count` VMs taken round-robin over the namespaces; each wave takes the next VMs."""
        picks: list[tuple[str, str]] = []
        taken = [0] * len(self.namespaces)
        index = 0
        while len(picks) < count:
            size = self.namespaces[index]
            if taken[index] < size:
                vm = (wave * count // len(self.namespaces) + taken[index]) % size
                picks.append((self.namespace(index), self.vm(vm)))
                taken[index] += 1
            index = (index + 1) % len(self.namespaces)
        return tuple(picks)


@dataclass(frozen=True)
class Step:
    """Migrations created at once, then awaited until done and settled."""

    name: str
    migrations: tuple[tuple[str, str], ...]
    """(namespace, VM name) of each migration; no VM twice."""
    namespace_size: int = 0
    """VMs in the step's one namespace; 0 for a step over many namespaces."""


PRESETS: Final = {
    "tiny": ScalePlan(nodes=4, namespaces=(12, 6, 6), per_size=3, in_flight=12),
    "small": ScalePlan(nodes=100, namespaces=(300, 100, *([60] * 10)), per_size=20, in_flight=100),
    "full": ScalePlan(
        nodes=1000, namespaces=(3000, 1000, *([100] * 60)), per_size=50, in_flight=500
    ),
}
"""tiny: a counts-only run (tests/integration/test_scale.py runs it at a third of its VMs);
small: ``make scale``; full: ``make scale SIZE=full``, the issue's 1,000 nodes and 10,000 VMs
with one namespace of 3,000 and 500 migrations in flight."""

_NAMESPACES_TERM = re.compile(r"^(\d+)(?:x(\d+))?$")


def parse_namespaces(text: str) -> tuple[int, ...]:
    """``3000,1000,100x60``: VMs per namespace, ``NxK`` for K namespaces of N VMs."""
    counts: list[int] = []
    for term in text.replace(" ", "").split(","):
        match = _NAMESPACES_TERM.match(term)
        if match is None:
            raise ValueError(f"not a namespace count: {term!r} (want N or NxK, as in 100x60)")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return tuple(counts)
