"""What every KubeVirt the test bench drives has in common: the simulator's and the real one's.

`KubeVirtSimulator` (simulator.py) plays virt-controller itself; `VirtControllerDriver`
(testbench/virtcontroller.py) drives KubeVirt's real virt-controller. Scenarios, the scale run and
the tests use either through the same calls; this base holds the parts that do not depend on which:
the VM specs by key (for migration durations), reading a VMI, the migration log built by watching,
creating and aborting migrations as users do, waiting for a migration's outcome, and the async
context that starts and stops the driver.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

from ....apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, VIRTUAL_MACHINE_INSTANCES
from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import Clock
from ....generic.meta import name as name_of
from ....generic.resource import Object
from .objects import LABEL_VMI_NAME, VMSpec, render_migration
from .record import MigrationLog, MigrationRecord


class KubeVirtDriver(ABC):
    """Starts, stops and waits on a KubeVirt. One event loop; not thread-safe.

    Subclasses implement `start`, `stop` and `_ns`, and record every VM they create with
    `_remember` so that migrations take the VM's own duration.
    """

    def __init__(self, client: ApiClient, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.records = MigrationLog(clock)
        """Every migration seen, with its moments, as observed (never as told)."""
        self._specs: dict[str, VMSpec] = {}

    @abstractmethod
    async def start(self) -> None:
        """Starts watching (and, for the simulator, reconciling); returns once caches synced."""

    @abstractmethod
    async def stop(self) -> None:
        """Stops everything `start` started and undoes what the driver changed on the cluster."""

    @abstractmethod
    def _ns(self, namespace: str | None) -> str:
        """The namespace a call means: the one given, else the driver's own; ValueError if
        neither says."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _remember(self, namespace: str, spec: VMSpec) -> None:
        self._specs[f"{namespace}/{spec.name}"] = spec

    def _spec(self, namespace: str, name: str) -> VMSpec | None:
        return self._specs.get(f"{namespace}/{name}")

    async def _read_vmi(self, namespace: str, name: str) -> Object | None:
        """The VMI as the API server has it now (one GET, not the watch cache); None if none."""
        try:
            return await self.client.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        except errors.NotFound:
            return None

    def migration_duration(self, namespace: str, vmi_name: str) -> float | None:
        """The VM's own migration duration, if its spec set one (None: the default timings)."""
        spec = self._spec(namespace, vmi_name)
        return None if spec is None else spec.migration_duration

    async def migrate(
        self,
        vmi_name: str,
        namespace: str | None = None,
        *,
        target_node: str | None = None,
        name: str | None = None,
    ) -> str:
        """Creates a VirtualMachineInstanceMigration (generateName `<vmi>-`, or `name`), as
        `virtctl migrate` or Harvester's migrate action does; `target_node` becomes its
        addedNodeSelector. Returns its name."""
        ns = self._ns(namespace)
        body = render_migration(ns, vmi_name, name=name, target_node=target_node)
        # virt-api's mutator labels every migration with its VMI's name, too long or not: the API
        # server then refuses a migration of a VMI named with more than 63 characters.
        body["metadata"].setdefault("labels", {})[LABEL_VMI_NAME] = vmi_name
        return name_of(await self.client.create(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, body, ns))

    async def _unfinished_story(self, namespace: str, name: str) -> str:
        """What is known of a migration that did not finish: its record (phases, refusals,
        failed creates) and the migration's status as the API server has it now."""
        record = self.records.get(namespace, name)
        recorded = "no record" if record is None else str(record.as_dict())
        try:
            live = await self.client.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
        except errors.ApiError as error:
            return f"{recorded}; the migration could not be read: {error}"
        return f"{recorded}; its status now: {live.get('status')}"

    async def abort(self, name: str, namespace: str | None = None) -> None:
        """Cancels a migration by deleting it, as `virtctl migrate-cancel` and Harvester do."""
        await self.client.delete(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, self._ns(namespace))

    async def wait_migration(
        self, name: str, namespace: str | None = None, *, timeout: float | None = 60.0
    ) -> MigrationRecord:
        """Waits until the migration has an outcome; TimeoutError after `timeout` clock seconds."""
        ns = self._ns(namespace)

        def done() -> bool:
            record = self.records.get(ns, name)
            return record is not None and record.done

        if not await self.records.wait_for(done, timeout):
            raise TimeoutError(
                f"migration {ns}/{name} did not finish within {timeout}s: "
                f"{await self._unfinished_story(ns, name)}"
            )
        record = self.records.get(ns, name)
        assert record is not None
        return record
