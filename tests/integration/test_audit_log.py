"""The local cluster's audit log tells whose writes the real API server accepted and refused.

The admin patches a ResourceQuota; a tenant (a service account bound to `edit`, which grants no
write to quotas) tries the same update and is refused by RBAC. Read from a mark taken before, the
log holds exactly those two quota updates, with the right users, codes and refusal message, and
nothing the policy leaves out (reads, Leases).
"""

from __future__ import annotations

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import RESOURCE_QUOTAS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.audit import WRITE_VERBS, AuditLog, WriteKey

from tests.helpers import eventually
from tests.integration.tenant import tenant

pytestmark = pytest.mark.integration

QUOTA = "compute"


async def test_the_audit_log_counts_an_accepted_and_a_refused_quota_write(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> None:
    quota = {"metadata": {"name": QUOTA}, "spec": {"hard": {"pods": "10"}}}
    created = await api.create(RESOURCE_QUOTAS, quota, namespace)
    async with tenant(api, cluster, namespace, cluster_roles=("edit",)) as user:
        log = AuditLog(cluster.audit_log)
        mark = log.mark()
        # A patch: kube-controller-manager fills the new quota's status meanwhile, and an update
        # of the object as created would meet a conflict (it did, once in a full run).
        raised = {"spec": {"hard": {"pods": "20"}}}
        await api.patch(RESOURCE_QUOTAS, QUOTA, raised, namespace)
        created["spec"]["hard"]["pods"] = "30"
        with pytest.raises(errors.Forbidden):  # RBAC answers before any version check
            await user.api.update(RESOURCE_QUOTAS, created)

    admin_update = WriteKey("admin", "patch", "resourcequotas", accepted=True)
    tenant_update = WriteKey(user.user, "update", "resourcequotas", accepted=False)

    def quota_updates() -> dict[WriteKey, int] | None:
        counts = log.count_writes(mark, namespace=namespace)
        found = {key: n for key, n in counts.items() if key.resource == "resourcequotas"}
        return found if tenant_update in found and admin_update in found else None

    assert await eventually(quota_updates, what="both quota updates in the audit log") == {
        admin_update: 1,
        tenant_update: 1,
    }
    records = log.since(mark)
    (refused,) = [r for r in records if r.user == user.user and r.resource == "resourcequotas"]
    assert (refused.code, refused.namespace, refused.name) == (403, namespace, QUOTA)
    assert refused.message is not None and "forbidden" in refused.message
    assert f"system:serviceaccounts:{namespace}" in refused.groups
    (accepted,) = [r for r in records if r.write_key() == admin_update]
    assert accepted.code == 200 and accepted.message is None
    assert "system:masters" in accepted.groups
    assert all(r.verb in WRITE_VERBS and r.api_group != "coordination.k8s.io" for r in records)
