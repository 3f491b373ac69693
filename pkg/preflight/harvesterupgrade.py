"""What Harvester's own upgrade does with each VM on the node it upgrades (`preflight upgrade` on
a Harvester cluster names it beside each VM's quota verdict).

Read in Harvester's `package/upgrade/upgrade_node.sh` (v1.7.0 to v1.8.2) and its upgrade
helper. A node's pre-drain:

1. shuts down the VMs Harvester's detector finds not live-migratable
   (`upgrade-helper vm-live-migrate-detector --shutdown`): every VM when one node that is not a
   witness is left, else a VMI with a nodeSelector, with host devices, or whose required node
   affinity no other schedulable node (other than the one its status names) meets;
2. taints the node `kubevirt.io/drain`, so that KubeVirt evacuates what it will;
3. waits, with no timeout, until no VMI is left on the node, looking every 5 s: an evacuation
   migration (`kubevirt-evacuation-*`) that Failed with a FailedMigration warning has its VM
   stopped (`virtctl stop`); a Pending or Scheduling one is only logged.

So a VM whose target pod quota admission refuses stalls the upgrade for good (its migration stays
Pending: KubeVirt's pending-pod timeouts start only once a target pod exists), and one whose
target pod is created but fits no node is shut down once KubeVirt fails the migration: it deletes
a target pod unschedulable for UNSCHEDULABLE_TIMEOUT seconds (its default; a migration may carry
its own in an annotation). A VM KubeVirt does not evacuate (eviction strategy None or External,
or LiveMigrate while not live-migratable) stays on the node, and the pre-drain waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..generic.meta import labels, name, spec
from ..generic.resource import Object
from .nodes import required_affinity_matches
from .report import UPGRADE_MIGRATES, UPGRADE_SHUTS_DOWN, UPGRADE_STALLS, VmVerdict

WITNESS_LABEL: Final = "node-role.harvesterhci.io/witness"
"""A Harvester witness node (etcd only, runs no VM): Harvester's detector leaves it out."""
UNSCHEDULABLE_TIMEOUT: Final = 300
"""Seconds KubeVirt's migration controller lets a target pod stay unschedulable before it
deletes it and the migration fails (defaultUnschedulablePendingTimeoutSeconds)."""

MIGRATES: Final = UPGRADE_MIGRATES
SHUT_DOWN: Final = UPGRADE_SHUTS_DOWN
STALLS: Final = UPGRADE_STALLS


def detector_shuts_down(vmi: Object, nodes: Sequence[Object], here: str) -> str | None:
    """Why Harvester's upgrade detector finds `vmi`, running on node `here`, not
    live-migratable (so the pre-drain shuts it down before the evacuation), or None. Harvester
    reads the node from the VMI's status, which is where the VM runs by then: the preflight's
    location of it, in an upgrade's later steps too."""
    others = [n for n in nodes if WITNESS_LABEL not in labels(n)]
    if len(others) == 1:
        return "one node that is not a witness: Harvester shuts every VM down"
    vmi_spec = spec(vmi)
    if vmi_spec.get("nodeSelector") is not None:
        return "it has a nodeSelector"
    devices = (vmi_spec.get("domain") or {}).get("devices") or {}
    if devices.get("hostDevices") is not None:
        return "it has host (PCIe or USB) devices"
    if not _another_node_meets_affinity(vmi, others, here):
        return "no other schedulable node meets its required node affinity"
    return None


def _another_node_meets_affinity(vmi: Object, nodes: Sequence[Object], here: str) -> bool:
    candidates = [n for n in nodes if name(n) != here]
    return any(
        not spec(n).get("unschedulable") and required_affinity_matches(spec(vmi).get("affinity"), n)
        for n in candidates
    )


def upgrade_outcome(verdict: VmVerdict, shut_down_because: str | None) -> tuple[str, str]:
    """(outcome, sentence): what Harvester's upgrade of `verdict.node` does with the VM, given
    the preflight's verdict and the detector's reason to shut it down (None: it does not)."""
    node = verdict.node
    if shut_down_because is not None:
        return SHUT_DOWN, f"will be shut down by node {node}'s pre-drain: {shut_down_because}"
    causes = {b.cause for b in verdict.blockers}
    if verdict.action == "migrate" and "quota" in causes:
        return STALLS, (
            f"stalls node {node}'s pre-drain: quota admission refuses its target pod, so its "
            "evacuation stays Pending, and Harvester's upgrade waits for it without a timeout"
        )
    if verdict.action == "migrate" and "node-fit" in causes:
        return SHUT_DOWN, (
            f"will be shut down during node {node}'s pre-drain: its target pod fits no node, "
            f"KubeVirt fails the evacuation after {UNSCHEDULABLE_TIMEOUT} s unschedulable, and "
            "Harvester stops a VM whose evacuation failed (virtctl stop)"
        )
    if verdict.action == "migrate":
        return MIGRATES, f"live-migrates off node {node}"
    return STALLS, (
        f"stalls node {node}'s pre-drain: KubeVirt does not evacuate it ({_why_left(verdict)}) "
        "and Harvester's detector does not shut it down; stop it before the upgrade"
    )


def _why_left(verdict: VmVerdict) -> str:
    if verdict.action == "blocks-drain":
        return f"not live-migratable: {verdict.migratable_reason}"
    return f"eviction strategy {verdict.eviction_strategy}"


def note_upgrade_outcomes(
    verdicts: Sequence[VmVerdict],
    vmis: Mapping[str, Any],
    nodes: Sequence[Object],
    warnings: list[str],
) -> None:
    """Sets each verdict's Harvester upgrade outcome; `vmis` by key (namespace/name). A VMI whose
    fields cannot be read as Harvester's detector reads them (a tenant's odd spec) gets no
    outcome and a line in `warnings`: one VMI never fails the preflight."""
    for verdict in verdicts:
        vmi = vmis.get(verdict.key)
        try:
            reason = detector_shuts_down(vmi, nodes, verdict.node) if vmi is not None else None
        except (AttributeError, TypeError, ValueError) as error:
            warnings.append(
                f"{verdict.key}: cannot predict what Harvester's upgrade does with it "
                f"({type(error).__name__}: {error}); check it by hand"
            )
            continue
        verdict.harvester_upgrade, verdict.harvester_upgrade_says = upgrade_outcome(verdict, reason)
