"""JSON nested deeper than orjson decodes, planted by a tenant on KubeVirt's own CRDs (issue 38,
docs/security.md A2), on the cluster with the CRDs the cluster build generates from KubeVirt.

In those CRDs (v1.6 and v1.8 alike) the VMI's only field that keeps unknown fields
(x-kubernetes-preserve-unknown-fields) is spec.domain.clock; the VM's are
spec.template.metadata, spec.template.spec.domain.clock and spec.dataVolumeTemplates[].metadata.
A tenant with the edit roles writes a VMI whose spec.domain.clock holds JSON nested past 1024
levels; the product's VMI cache (the controller's informer with its transform) syncs, the VMI in
it without the clock, and takes other VMIs afterwards.

KubeVirt's virt-controller rewrites a new VMI whole (an update adding its finalizer) about 0.3 s
after it is created, and its Go types drop the unknown field: the VMI is deep only until then
(measured on this cluster: every planted VMI read back shallow after 0.27-0.32 s, the last update
virt-controller's). Once in a full run, loaded, that update came before the test's read. A tenant
can keep a VMI deep for longer (virt-controller down or behind, or VMIs planted faster than it
updates them); the test holds the deep VMIs as such a tenant would, with a policy refusing every
update of them in the test's namespace, so the informer's list meets them deep every time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import orjson
import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformerFactory
from harvester_quota.generic.intake import SkippedObject
from harvester_quota.testbench.decoding import depth_of
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.util.vmispec import strip_vmi_unread

from tests.helpers import eventually
from tests.integration.tenant import Tenant, tenant

DEPTHS = (5000, 2000, 1100)
"""Tried deepest first, the test takes the deepest the API server stores and fails unless it is
past orjson's 1024. Measured on this cluster (Kubernetes v1.36): the API server refuses 9999
and 10001 levels (its JSON decoder stops near 10000 levels) and stores 5000."""


@pytest.fixture
async def the_tenant(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[Tenant]:
    async with tenant(kubevirt_api, kubevirt_cluster, kubevirt_namespace) as found:
        yield found


def vmi_bytes(name: str, depth: int) -> bytes:
    """A minimal VMI whose spec.domain.clock.x holds `depth` nested arrays, as raw JSON (orjson
    will not encode it from dicts)."""
    head = orjson.dumps(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}},
        }
    )
    shallow = head[: -len(b"}}}")]  # inside spec.domain
    deep = b"[" * depth + b"]" * depth
    return shallow + b',"clock":{"utc":{},"x":' + deep + b"}}}}"


async def create_raw(the_tenant: Tenant, body: bytes) -> int:
    """POSTs `body` as the tenant; the HTTP status."""
    path = VIRTUAL_MACHINE_INSTANCES.path(the_tenant.namespace)
    async with the_tenant.api.rest.exchange("POST", path, data=body) as response:
        await response.read()
        return response.status


HOLD_POLICY = "harvester-quota-test-hold-deep-vmis"


def hold_policy(namespace: str) -> tuple[dict[str, object], dict[str, object]]:
    """A ValidatingAdmissionPolicy and its binding refusing every update of the VMIs named
    deep-* in `namespace` (virt-controller's included: it would drop the deep field)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": HOLD_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["kubevirt.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["virtualmachineinstances"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!object.metadata.name.startsWith('deep-')",
                    "message": "held deep for the test",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": HOLD_POLICY},
        "spec": {
            "policyName": HOLD_POLICY,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return policy, binding


POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


async def _send(api: ApiClient, method: str, path: str, body: object = None) -> int:
    data = None if body is None else orjson.dumps(body)
    async with api.rest.exchange(method, path, data=data) as response:
        await response.read()
        return response.status


async def _probe_refused(api: ApiClient, namespace: str) -> bool:
    """Whether an update of the probe VMI (a dry run) is refused: the policy is in force."""
    path = VIRTUAL_MACHINE_INSTANCES.path(namespace, "deep-probe")
    async with api.rest.exchange(
        "PATCH",
        path,
        params={"dryRun": "All"},
        data=b'{"metadata":{"labels":{"probe":"1"}}}',
        content_type="application/merge-patch+json",
    ) as response:
        body = await response.read()
        return response.status >= 400 and b"held deep for the test" in body


@contextlib.asynccontextmanager
async def deep_vmis_held(api: ApiClient, namespace: str) -> AsyncIterator[None]:
    """While inside, no VMI named deep-* in `namespace` can be updated (in force on entry)."""
    policy, binding = hold_policy(namespace)
    assert await _send(api, "POST", POLICIES, policy) == 201
    try:
        assert await _send(api, "POST", BINDINGS, binding) == 201
        try:
            probe = orjson.loads(vmi_bytes("deep-probe", 1))
            await api.create(VIRTUAL_MACHINE_INSTANCES, probe, namespace)
            await eventually(lambda: _probe_refused(api, namespace), what="the hold in force")
            yield
        finally:
            await _send(api, "DELETE", f"{BINDINGS}/{HOLD_POLICY}")
    finally:
        await _send(api, "DELETE", f"{POLICIES}/{HOLD_POLICY}")


async def plant_deepest(the_tenant: Tenant) -> int:
    for depth in DEPTHS:
        if await create_raw(the_tenant, vmi_bytes(f"deep-{depth}", depth)) == 201:
            return depth
    raise AssertionError(f"the API server stored none of {DEPTHS} levels")


async def test_a_tenants_vmi_nested_past_orjsons_limit_stops_no_vmi_cache(
    kubevirt_api: ApiClient, kubevirt_namespace: str, the_tenant: Tenant
) -> None:
    async with deep_vmis_held(kubevirt_api, kubevirt_namespace):
        await _deep_vmi_stops_no_vmi_cache(kubevirt_api, kubevirt_namespace, the_tenant)


async def _deep_vmi_stops_no_vmi_cache(
    kubevirt_api: ApiClient, kubevirt_namespace: str, the_tenant: Tenant
) -> None:
    depth = await plant_deepest(the_tenant)
    assert depth > 1024, "past orjson's decode limit"
    async with kubevirt_api.rest.exchange(
        "GET", VIRTUAL_MACHINE_INSTANCES.path(kubevirt_namespace, f"deep-{depth}")
    ) as response:
        status, body = response.status, await response.read()
    assert status == 200, f"the planted VMI read back as {status}: {body[:500]!r}"
    with pytest.raises(orjson.JSONDecodeError):  # what the product's reads met before
        orjson.loads(body)
    skips: list[SkippedObject] = []
    factory = SharedInformerFactory(kubevirt_api, namespace=kubevirt_namespace, skips=skips.append)
    vmis = factory.informer(VIRTUAL_MACHINE_INSTANCES, transform=strip_vmi_unread)
    factory.start()
    try:
        assert await factory.wait_for_cache_sync(60), "a fresh replica syncs"
        cached = vmis.store.get(f"{kubevirt_namespace}/deep-{depth}")
        assert cached is not None and "clock" not in cached["spec"]["domain"]
        assert depth_of(cached) < 20
        assert await create_raw(the_tenant, vmi_bytes("deep-later", depth)) == 201
        assert await create_raw(the_tenant, vmi_bytes("shallow-later", 3)) == 201
        await eventually(
            lambda: (
                {"deep-later", "shallow-later"}
                <= {key.split("/")[1] for key in vmis.store.list_keys()}
            ),
            what="VMIs created afterwards in the cache (through the watch)",
        )
        assert not skips
    finally:
        await factory.stop()
        for name in (f"deep-{depth}", "deep-later", "shallow-later", "deep-probe"):
            with contextlib.suppress(errors.NotFound):
                await kubevirt_api.delete(VIRTUAL_MACHINE_INSTANCES, name, kubevirt_namespace)
