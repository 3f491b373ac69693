"""The Rancher simulator's project publish retries a Conflict with its own usedLimit write (seen
once in a loaded full run: test_sim_rancher's project change met the sync's usedLimit update)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.sim.rancher.derive import Project
from harvester_quota.testbench.sim.rancher.projects import PUBLISH_TRIES, ProjectObjects


class RacingClient:
    """A project object that someone else writes between our read and our update, `races`
    times; it counts the updates that got through."""

    def __init__(self, races: int) -> None:
        self.races = races
        self.stored: dict[str, Any] = {
            "metadata": {"name": "p-1", "namespace": "c-1", "resourceVersion": "1"},
            "spec": {"resourceQuota": {"usedLimit": {"limitsCpu": "1"}}},
        }
        self.updates: list[dict[str, Any]] = []

    async def create(self, resource: Any, obj: Any, namespace: str | None = None) -> Any:
        raise errors.AlreadyExists("exists")

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.stored)

    async def update(self, resource: Any, obj: Any) -> Any:
        if self.races:
            self.races -= 1
            raise errors.Conflict("the object has been modified")
        self.updates.append(obj)
        return obj


def publisher(client: RacingClient) -> ProjectObjects:
    objects = ProjectObjects(cast(ApiClient, client))
    objects._ready = True  # no CRD to install here
    return objects


async def test_a_conflict_with_the_syncs_own_write_is_read_again_and_retried() -> None:
    client = RacingClient(races=2)
    await publisher(client).publish(Project("c-1:p-1"))
    assert len(client.updates) == 1


async def test_conflicts_past_the_bound_are_the_callers() -> None:
    client = RacingClient(races=PUBLISH_TRIES)
    with pytest.raises(errors.Conflict):
        await publisher(client).publish(Project("c-1:p-1"))
    assert not client.updates
