"""The test bench binds every shipped policy that names KubeVirt's controller with the user the
local cluster's virt-controller runs as: applied as shipped (Harvester's account), the
migration-priority policy refused every evacuation KubeVirt v1.9.0's real virt-controller
creates (they carry spec.priority), and no drain moved a VM there."""

from __future__ import annotations

from harvester_quota.testbench.localcluster.cluster import VIRT_CONTROLLER_USER
from harvester_quota.testbench.localcluster.deploy import (
    KUBEVIRT_POLICIES,
    KUBEVIRT_USER,
    documents,
    kubevirt_policies,
)


def test_every_shipped_policy_naming_kubevirts_controller_is_bound_per_namespace() -> None:
    naming = {
        d["metadata"]["name"]
        for d in documents()
        if d["kind"] == "ValidatingAdmissionPolicy" and KUBEVIRT_USER in str(d["spec"])
    }
    assert naming and naming <= set(KUBEVIRT_POLICIES)


def test_the_migration_priority_policy_lets_the_local_virt_controller_set_a_priority() -> None:
    bound = kubevirt_policies({"team": "a"}, kubevirt_user=VIRT_CONTROLLER_USER, name="t")
    policy = next(d for d in bound if d["metadata"]["name"] == "t-priority")
    (binding,) = (d for d in bound if d["spec"].get("policyName") == "t-priority")
    (exempt,) = (c for c in policy["spec"]["matchConditions"] if c["name"] == "not-kubevirt")
    assert VIRT_CONTROLLER_USER in exempt["expression"]
    assert KUBEVIRT_USER not in str(policy)
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {"team": "a"}
