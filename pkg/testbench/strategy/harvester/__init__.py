"""Harvester v1.9's own quota algorithm, ported faithfully, failures included.

A second strategy next to our controllers: any scenario can run with `HarvesterStrategy` instead of
`harvester_quota.app.ControllerApp`, and the difference shows where Harvester fails. Nothing here is fixed or
improved; where Harvester's Go behaves oddly, so does this port (each such place says so).

What ports what (harvester/harvester after v1.9.0, PR #10197 included):

| here | Harvester |
|---|---|
| `strategy.HarvesterStrategy` | `pkg/controller/master/migration/register.go`, `pkg/controller/master/resourcequota/register.go` |
| `migration.MigrationHandler.on_vmim_changed` and the methods it calls | `pkg/controller/master/migration/vmim_controller.go` (OnVmimChanged, handlePendingMigration, handleFinishedMigration, setVmiMigrationUIDAnnotation, syncVM, scaleResourceQuota[WithVMI], isNamespaceManagedByResourceQuota, restoreResourceQuota[WithVMI], compensatePendingMigration, compensateResourceQuotaBase, isAbortRequest, resetHarvesterMigrationStateInVmiAndSyncVM) |
| `migration.MigrationHandler.on_vmi_changed`, `reset_migration_state_in_vmi` | `pkg/controller/master/migration/vmi_controller.go` (OnVmiChanged, resetHarvesterMigrationStateInVMI) |
| `resourcequota.ResourceQuotaHandler`, `scale_resource_quota_on_demand` | `pkg/controller/master/resourcequota/resourcequota_controller.go` |
| `calculator` | `pkg/util/resourcequota/calculator.go` (CalculateScale/Compensation..., CalculateNewResourceQuotaFromBaseDelta, GetVMIMResourcesFromRQAnnotation, GetCompensationFromResourceQuota, the VM-start check) and `pkg/util/setting.go` GetAdditionalGuestMemoryOverheadRatioWithoutError |
| `rqutils` | `pkg/util/resourcequota/utils.go`, `pkg/util/annotationkey.go`, Rancher's `v3.NamespaceResourceQuota` decoding |
| `cluster.HarvesterCluster` / `InformerCluster` | the wrangler caches and clients the handlers use |

The memory overhead is KubeVirt's KVM GetMemoryOverhead (Harvester calls the one of the KubeVirt it
vendors, v1.8.3) with the ratio from Harvester's setting; here it is `harvester_quota.util.overhead` for the
cluster's KubeVirt: `Options.kubevirt_version`, else the KubeVirt CR's observedKubeVirtVersion,
else 1.8.3.

Known failures this port reproduces (numbers are the failure scenarios of
shared/reference/rancher-and-harvester-issues.md, part 2):

1. Room released at Succeeded (6, the v1.2.1 seed): the VM's key and the compensation are removed
   the moment the VMIM is Succeeded or Failed, while the source pod (or a failed migration's target
   pod) still counts against the quota; a concurrent migration's target pod is refused meanwhile.
2. Only limits.cpu and limits.memory are scaled (7): requests.*, pods, ephemeral storage never,
   so a quota on requests.memory blocks the target pod with no action from Harvester.
3. Compute container only (8): the share is the VMI's limits plus the compute overhead; the
   guest-console-log sidecar (+15m CPU, +60M memory) is not covered. A namespace at 100 % CPU
   stays blocked: compensation is memory-only.
4. Ratio raised after the VM started (9): the first migration uses the spare room; later ones are
   refused once, then compensated (used + share - hard + 128Mi on memory) and go through. The
   running VM stays above the base, and the same VM cannot cold-start again.
5. Compensation is not cumulative: it is recomputed against a spec.hard that already includes the
   previous one and replaces it, and any migration that finishes removes it, whichever VM it
   belonged to.
6. Skip annotation (13): restore still removes the key, the ResourceQuota handler does nothing, so
   spec.hard stays inflated until the skip goes or Rancher resets the quota.
7. Leaked keys (15): a VMIM whose VMI is gone returns early; a VMIM deleted before a final phase
   is never restored; a restarted VM has a new VMI UID. The old UID key stays forever and keeps
   spec.hard inflated.
8. Keys per VMI, not per migration (16): re-processing an old finished VMIM (a restart, any
   event) deletes the key and compensation of a newer migration of the same VM, and clears that
   migration's VMI annotations; the key only comes back while the new VMIM is still Pending.
9. Two writers and a ping-pong flag: an isolated migration costs four quota writes (six with a
   compensation), and the two handlers can conflict on the same object.
10. Every event of the quota forces limits.cpu/limits.memory to the annotation (17), lifting
    Rancher's zeroing of an oversubscribed namespace and adding keys Rancher left out.
11. A namespace annotation that is not JSON is retried forever (18); invalid quantities or keys
    only skip scaling, after clearing the flag.
12. Ratio setting "0" (KubeVirt adds no ratio) makes Harvester scale for 1.5; any VMIM phase not
    in its switch (newer KubeVirt phases) is ignored; the share is frozen at the first Pending
    sighting; the namespace counts as "managed" as soon as it has any ResourceQuota.

Rancher resetting spec.hard mid-migration (2) is handled, as in Harvester v1.4.2+: the next event
of the quota recomputes base + keys.
"""

from .strategy import HarvesterStrategy

__all__ = ["HarvesterStrategy"]
