"""KubeVirt feature gates that change the launcher pod, decided as each KubeVirt version decides.

How a gate's state is read from the KubeVirt CR's developerConfiguration changed twice
(pkg/virt-config/feature-gates.go and featuregate/feature-gates.go of each release):

- up to v1.7 a gate that is not GA is on only when ``featureGates`` lists it;
- v1.8 also reads ``disabledFeatureGates``: listed there (and not in ``featureGates``), off;
  a Beta gate listed in neither is still off;
- from v1.9 a Beta gate listed in neither is **on** (``IsEnabled``): a cluster's defaults change
  the launcher pod without any edit of the CR.

``featureGates`` wins over ``disabledFeatureGates`` in every version that reads both (KubeVirt's
webhook refuses a gate in both lists; the controller checks the enabled list first).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from ..kubevirtversion import KubeVirtVersion


@dataclass(frozen=True)
class Gate:
    """One feature gate and the releases that changed it."""

    name: str
    introduced: tuple[int, int]
    """The first minor release that registers the gate (older releases ignore the name)."""
    beta: tuple[int, int]
    """The first minor release where the gate is Beta (on by default from v1.9)."""


IMAGE_VOLUME: Final = Gate("ImageVolume", introduced=(1, 6), beta=(1, 7))
"""Container disks as Kubernetes image volumes: no container-disk containers in the launcher."""
EXTERNAL_NET_RESOURCE_INJECTION: Final = Gate(
    "ExternalNetResourceInjection", introduced=(1, 8), beta=(1, 8)
)
"""virt-controller leaves the network device-plugin resources of a Multus network to an external
injector: the launcher's compute container does not request them."""

_DISABLED_LIST_SINCE: Final = (1, 8)
_BETA_ON_SINCE: Final = (1, 9)


def gate_enabled(
    gate: Gate,
    version: KubeVirtVersion,
    enabled: Collection[str],
    disabled: Collection[str],
) -> bool:
    """Whether KubeVirt ``version`` treats ``gate`` as on, given the CR's ``featureGates``
    (``enabled``) and ``disabledFeatureGates`` (``disabled``). Pure."""
    if not version.at_least(*gate.introduced):
        return False
    if gate.name in enabled:
        return True
    if version.at_least(*_DISABLED_LIST_SINCE) and gate.name in disabled:
        return False
    return version.at_least(*_BETA_ON_SINCE) and version.at_least(*gate.beta)
