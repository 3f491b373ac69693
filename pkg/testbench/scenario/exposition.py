"""metrics.prom: the Prometheus text of the processes a scenario run of strategy ``ours`` ran.

A run starts one controller (a `ControllerApp`) per start or restart and one webhook, each on a
registry of its own. Their expositions are merged into one text, each sample labelled with the
process it came from (``process="controller-1"``, ``controller-2`` after a restart, ...,
``webhook``), so that one parser reads the file and a series is told apart by its process.
Every controller of the run is kept (its registry outlives its stop): counters are per process,
as a scrape of each would see them, never summed.

A run's namespaces carry its run id (``ns-3f2a1``); the ``namespace`` label gets the scenario's
own name back, so that two runs of one scenario name the same series alike.

Written once, after the run's teardown: the processes are stopped, nothing updates the
registries any more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

PROCESS_LABEL = "process"
"""The label added to every sample: which of the run's processes exported it."""
NAMESPACE_LABEL = "namespace"


def exposition(sources: Sequence[tuple[str, CollectorRegistry]], rename: Mapping[str, str]) -> str:
    """The text exposition of every registry in `sources` (process name, registry), in their
    order, each sample labelled ``process=<name>``; a ``namespace`` label value found in
    `rename` (run namespace -> scenario name) is replaced. A metric family several processes
    export is written once, its samples in the sources' order."""
    merged = CollectorRegistry()
    merged.register(_Merged(sources, rename))
    return generate_latest(merged).decode()


class _Merged(Collector):
    """The families of every source registry, relabelled (see `exposition`)."""

    def __init__(
        self, sources: Sequence[tuple[str, CollectorRegistry]], rename: Mapping[str, str]
    ) -> None:
        self.sources, self.rename = sources, rename

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for process, registry in self.sources:
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for sample in family.samples:
                    merged.samples.append(sample._replace(labels=self._labels(process, sample)))
        yield from families.values()

    def _labels(self, process: str, sample: Sample) -> dict[str, str]:
        labels = dict(sample.labels)
        if NAMESPACE_LABEL in labels:
            labels[NAMESPACE_LABEL] = self.rename.get(
                labels[NAMESPACE_LABEL], labels[NAMESPACE_LABEL]
            )
        labels[PROCESS_LABEL] = process
        return labels
