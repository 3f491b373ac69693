"""Harvester's kinds (harvesterhci.io) the quota model reads: only its Settings."""

from __future__ import annotations

from typing import Final

from ..generic.controller import Controller, ControllerFactory
from ..generic.resource import Resource

GROUP: Final = "harvesterhci.io"

SETTINGS: Final = Resource(GROUP, "v1beta1", "settings", "Setting", namespaced=False)
"""Cluster-scoped; absent on a KubeVirt cluster without Harvester."""

RATIO_SETTING: Final = "additional-guest-memory-overhead-ratio"
"""The Setting Harvester copies into the KubeVirt CR's additionalGuestMemoryOverheadRatio."""


class HarvesterControllers:
    """Typed access to Harvester's kinds on a controller factory (see KubeVirtControllers)."""

    def __init__(self, factory: ControllerFactory) -> None:
        self._factory = factory

    def settings(self) -> Controller:
        """The one shared controller of settings."""
        return self._factory.for_resource(SETTINGS)
