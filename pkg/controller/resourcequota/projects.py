"""Rancher projects, read when a raise goes through Rancher's annotation.

A namespace of a Rancher project names it in ``field.cattle.io/projectId`` (``<cluster>:<project>``);
the project is a management.cattle.io/v3 Project named ``<project>`` in namespace ``<cluster>``,
present where Rancher runs in the cluster itself (Harvester's embedded Rancher), absent on a
cluster imported into another Rancher. It is read only before a raise through the annotation and
while Rancher marks the namespace as not fitting (projectroom.py): a GET, kept `TTL` seconds. A
project that is not there (no such kind, no such project) is None for the same time; a refusal
(no RBAC for it) closes the reads for a backoff (permission.py), logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.permission import Permission
from ...util.rancherproject import PROJECTS, ProjectQuota, project_reference

log = logging.getLogger(__name__)

TTL: Final = 5.0
"""Seconds a project read (or its absence) is used: a raised project limit is seen that soon."""


class ProjectReader:
    """Reads the Rancher project of a namespace, with a short cache."""

    def __init__(self, client: ApiClient, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.permission = Permission(
            "read Rancher projects",
            "a raise through Rancher's annotation is written without checking the project's "
            "room; grant get on projects.management.cattle.io",
            clock,
        )
        self._cache: dict[tuple[str, str], tuple[float, ProjectQuota | None]] = {}

    async def project_of(self, namespace: Mapping[str, Any]) -> ProjectQuota | None:
        """The namespace's project, or None (none named, not there, not readable now)."""
        reference = project_reference(namespace)
        if reference is None:
            return None
        now = self.clock.monotonic()
        cached = self._cache.get(reference)
        if cached is not None and now - cached[0] < TTL:
            return cached[1]
        if not self.permission.allowed():
            return None
        cluster, name = reference
        try:
            found: ProjectQuota | None = ProjectQuota.from_object(
                await self.client.get(PROJECTS, name, cluster)
            )
        except errors.NotFound:
            found = None
        except errors.Forbidden as error:
            self.permission.refused(error)
            return None
        except errors.ApiError as error:
            log.info("cannot read Rancher project %s/%s now: %s", cluster, name, error)
            return None  # an optional check: the raise is not held up for it
        self.permission.granted()
        self._cache[reference] = (now, found)
        return found
