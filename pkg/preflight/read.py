"""Reading what a preflight needs from the cluster (read-only; any kubeconfig that may list the
kinds below will do).

Listed cluster-wide: Nodes, VMIs, Pods (reduced to what quota and scheduling read), quotas,
LimitRanges, Namespaces, the KubeVirt CR and, when the cluster serves them, VMMRQs, Rancher
Projects, Harvester's overhead-ratio setting and VirtualMachineInstanceMigrations (those under
way compete with a drain's evacuations for a Rancher project's room). A kind the server does not serve reads as none;
one this kubeconfig may not list is a warning for the optional kinds and an error for the others.
"""

from __future__ import annotations

import datetime

from ..apis.harvester import RATIO_SETTING, SETTINGS
from ..apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ..apis.mtq import VMMRQS
from ..generic import errors
from ..generic.client import ApiClient
from ..generic.discovery import list_if_served
from ..generic.meta import name
from ..generic.resource import (
    LIMIT_RANGES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_QUOTAS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Object,
    Resource,
)
from ..util.podusage import strip_pod_to_quota_fields
from ..util.rancher.project import PROJECTS
from .admission import Strategy
from .compute import ClusterState

OUR_WEBHOOK_NAME = "harvester-quota"
"""The chart's ValidatingWebhookConfiguration is named after the release (`hq.name`)."""


async def _optional(client: ApiClient, resource: Resource, warnings: list[str]) -> list[Object]:
    try:
        return await list_if_served(client, resource)
    except errors.Forbidden as error:
        warnings.append(f"cannot list {resource.name}: {error}; read as none")
        return []


async def read_cluster(
    client: ApiClient,
    *,
    kubevirt_version: str | None = None,
    now: datetime.datetime | None = None,
) -> tuple[ClusterState, list[str]]:
    """The cluster's state as a preflight reads it, and warnings about what could not be read.
    Errors from the API (unreachable, forbidden on a required kind) propagate. `now`: when it
    was read (default: this machine's clock as the reading begins)."""
    warnings: list[str] = []
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        vmis = list((await client.list_all(VIRTUAL_MACHINE_INSTANCES)).items)
    except errors.NotFound:
        vmis = []
        warnings.append("the cluster serves no KubeVirt VirtualMachineInstances: no VM to judge")
    pods = (await client.list_all(PODS, each=lambda p: strip_pod_to_quota_fields(dict(p)))).items
    kubevirts = await list_if_served(client, KUBEVIRTS)
    settings = await _optional(client, SETTINGS, warnings)
    state = ClusterState(
        nodes=await list_if_served(client, NODES),
        vmis=vmis,
        pods=list(pods),
        quotas=await list_if_served(client, RESOURCE_QUOTAS),
        limit_ranges=await list_if_served(client, LIMIT_RANGES),
        namespaces=await list_if_served(client, NAMESPACES),
        kubevirt=kubevirts[0] if kubevirts else None,
        vmmrqs=await _optional(client, VMMRQS, warnings),
        projects=await _optional(client, PROJECTS, warnings),
        harvester_ratio_setting=next((s for s in settings if name(s) == RATIO_SETTING), None),
        kubevirt_version=kubevirt_version,
        harvester=bool(settings),
        migrations=await _optional(client, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, warnings),
        now=now,
    )
    if not kubevirts:
        warnings.append("no KubeVirt CR found: KubeVirt's defaults assumed")
    return state, warnings


async def detect_strategy(client: ApiClient, state: ClusterState) -> tuple[Strategy, str]:
    """What raises quotas for migrations in this cluster: our webhook's configuration means
    ours; else Harvester's settings mean Harvester's controllers; else nothing (plain KubeVirt)."""
    try:
        configurations = await list_if_served(client, VALIDATING_WEBHOOK_CONFIGURATIONS)
    except errors.Forbidden:
        configurations = []
    ours = [name(c) for c in configurations if OUR_WEBHOOK_NAME in name(c)]
    if ours:
        return "ours", f"auto: harvester-quota's webhook configuration {ours[0]} is installed"
    if state.harvester_ratio_setting is not None:
        return (
            "harvester",
            "auto: Harvester's settings are served and harvester-quota is not installed",
        )
    return "none", "auto: neither harvester-quota nor Harvester is installed (no quota raises)"
