"""Builders for the KubeVirt, Harvester and Rancher objects tests need, shaped as the API returns them.

VMIs get the spec Harvester's VM mutator writes (limits, requests from the overcommit settings,
guest memory); launcher pods get exactly the containers KubeVirt renders for the VMI (harvester_quota.util).
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Mapping
from typing import Any

from harvester_quota.apis.kubevirt import LABEL_CREATED_BY, LABEL_MIGRATION_JOB, LABEL_VM_NAME
from harvester_quota.testbench.harvestervm import (
    HARVESTER_DEFAULT_OVERCOMMIT,
    harvester_guest_memory,
    harvester_vm_requests,
)
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)
from harvester_quota.util.launcher import LauncherSettings, launcher_pod_resources
from harvester_quota.util.resourcequota.rooms import MigrationRoom

Object = dict[str, Any]
_EPOCH_2026 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _name_label(key: str, name: str) -> dict[str, str]:
    """A label whose value is a name, left out when the name is longer than a label value may
    be (63 characters): VM names may be up to 253."""
    return {key: name} if len(name) <= 63 else {}


def new_uid() -> str:
    return str(uuid.uuid4())


def vmi(
    name: str,
    namespace: str = "ns",
    *,
    cores: int = 2,
    memory: str = "4Gi",
    uid: str | None = None,
    overcommit: Mapping[str, int] = HARVESTER_DEFAULT_OVERCOMMIT,
    ratio_set: bool = True,
    node: str = "kwok-node-0",
) -> Object:
    requests = harvester_vm_requests(str(cores), memory, overcommit)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or new_uid(),
            "labels": _name_label("harvesterhci.io/vmName", name),
        },
        "spec": {
            "domain": {
                "cpu": {"cores": cores, "sockets": 1, "threads": 1},
                "memory": {
                    "guest": str(harvester_guest_memory(memory, overhead_ratio_set=ratio_set))
                },
                "resources": {
                    "limits": {"cpu": str(cores), "memory": memory},
                    "requests": {k: str(v) for k, v in requests.items()},
                },
                "devices": {},
            },
            "evictionStrategy": "LiveMigrate",
        },
        "status": {"phase": "Running", "nodeName": node},
    }


def launcher_pod(
    instance: Object,
    name: str,
    *,
    ratio: str | None = "1.5",
    kubevirt_version: str = "1.6",
    node: str = "kwok-node-0",
    migration: Object | None = None,
    phase: str = "Running",
    deletion_timestamp: str | None = None,
    grace: int = 30,
) -> Object:
    rendered = launcher_pod_resources(
        instance, LauncherSettings(ratio=ratio, kubevirt_version=kubevirt_version)
    )
    meta = instance["metadata"]
    labels = {
        "kubevirt.io": "virt-launcher",
        LABEL_CREATED_BY: meta["uid"],
        **_name_label(LABEL_VM_NAME, meta["name"]),
    }
    if migration is not None:
        labels[LABEL_MIGRATION_JOB] = migration["metadata"]["uid"]
    pod = _pod(
        instance,
        name,
        labels,
        {"nodeName": node, "terminationGracePeriodSeconds": grace, **rendered["spec"]},
        phase,
    )
    for container in pod["spec"]["containers"]:
        container.setdefault("image", "virt-launcher")
    for container in pod["spec"].get("initContainers", []):
        container.setdefault("image", "virt-launcher")
    if deletion_timestamp is not None:
        pod["metadata"]["deletionTimestamp"] = deletion_timestamp
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
    # As the API server would have it: a target pod is created once its migration exists.
    created = (migration or instance)["metadata"].get("creationTimestamp")
    if created is not None:
        pod["metadata"]["creationTimestamp"] = created
    return pod


def _pod(instance: Object, name: str, labels: dict[str, str], spec: Object, phase: str) -> Object:
    """A pod of `instance`'s namespace, created when the VMI was (if it says when)."""
    meta = instance["metadata"]
    pod: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "uid": new_uid(),
            "labels": labels,
        },
        "spec": spec,
        "status": {"phase": phase},
    }
    if "creationTimestamp" in meta:
        pod["metadata"]["creationTimestamp"] = meta["creationTimestamp"]
    return pod


def bare_launcher(
    instance: Object, name: str, *, cpu: str = "100m", memory: str = "64Mi"
) -> Object:
    """A Running launcher pod of `instance` with a small fixed usage, for tests about
    something other than its size (the source pod a migration under way needs)."""
    labels = {"kubevirt.io": "virt-launcher", LABEL_CREATED_BY: instance["metadata"]["uid"]}
    limits = {"cpu": cpu, "memory": memory}
    spec = {"containers": [{"name": "compute", "resources": {"limits": limits}}]}
    return _pod(instance, name, labels, spec, "Running")


def migration(
    name: str,
    instance: Object,
    *,
    phase: str = "Pending",
    uid: str | None = None,
    rejected: bool = False,
    source_pod: str | None = None,
) -> Object:
    status: Object = {"phase": phase}
    if rejected:
        status["conditions"] = [{"type": "migrationRejectedByResourceQuota", "status": "True"}]
    if source_pod is not None:
        status["migrationState"] = {"sourcePod": source_pod}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": name,
            "namespace": instance["metadata"]["namespace"],
            "uid": uid or new_uid(),
            "labels": _name_label("kubevirt.io/vmi-name", instance["metadata"]["name"]),
        },
        "spec": {"vmiName": instance["metadata"]["name"]},
        "status": status,
    }


def rancher_namespace(name: str, limit: Mapping[str, str]) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "annotations": {CATTLE_ANNOTATION_RESOURCE_QUOTA: json.dumps({"limit": dict(limit)})},
        },
    }


def plain_namespace(name: str) -> Object:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def managed_quota(
    namespace: str,
    hard: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    name: str = "default-abcde",
) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"},
            "annotations": dict(annotations or {}),
        },
        "spec": {"hard": dict(hard)},
    }


def kubevirt_mtq_lock(
    namespace: str,
    *,
    created: datetime.datetime | None = None,
    labelled: bool = True,
    service: str = "mtq-lock",
) -> dict[str, Any]:
    """A lock as KubeVirt MTQ's LockNamespace creates it (validating-webhook-lock.go)."""
    webhook = {
        "name": f"lock.{namespace}.com",
        "admissionReviewVersions": ["v1", "v1beta1"],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": ["*"],
                "apiVersions": ["*"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "clientConfig": {
            "service": {"namespace": "mtq", "name": service, "path": "/validate-pods", "port": 443}
        },
    }
    return {
        "metadata": {
            "name": f"lock.{namespace}.com",
            "labels": {"mtq-lock-server": "mtq-lock-server"} if labelled else {},
            "creationTimestamp": (created or _EPOCH_2026).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "webhooks": [webhook],
    }


def pods_of(room: MigrationRoom, kind: str) -> tuple[str, ...]:
    """The real pods of the room's part of `kind` (a PartKind's name), () while there are none."""
    return next((part.pods for part in room.parts if part.kind == kind), ())
