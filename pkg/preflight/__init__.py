"""`harvester-quota preflight drain NODE... | upgrade`: before maintenance, which VMs will not
migrate and why (read-only).

- `compute.preflight(ClusterState, Plan) -> PreflightReport`: the pure computation, the Python API.
- `read.read_cluster`, `read.detect_strategy`: what it reads, from the API server.
- `report.PreflightReport`, `report.render_text`, `report.render_json`: the report, as data and
  for a person or a program.

The rules: `compute` (eviction strategy, LiveMigratable, steps, what Harvester's upgrade does
with each VM), `admission` (quota admission of each target pod with each strategy's room),
`nodes` (first fit on the nodes left), `delays` (the step over time: KubeVirt's parallel limits,
the duration estimate, targets that wait beside their namespace's others), `projectorder` (a
Rancher project's room across its namespaces, in the controller's order).
"""

from .admission import STRATEGIES, NamespaceContext, Strategy
from .compute import ClusterState, Plan, UnknownNode, preflight, upgrade_order
from .report import Blocker, DrainStep, PreflightReport, QuotaShortfall, VmVerdict

__all__ = [
    "STRATEGIES",
    "Blocker",
    "ClusterState",
    "DrainStep",
    "NamespaceContext",
    "Plan",
    "PreflightReport",
    "QuotaShortfall",
    "Strategy",
    "UnknownNode",
    "VmVerdict",
    "preflight",
    "upgrade_order",
]
