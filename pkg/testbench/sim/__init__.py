"""Simulators of the components harvester-quota lives beside, run against a real API server.

- ``harvester_quota.testbench.sim.kubevirt``: virt-controller and virt-handler as far as quotas see them: VMs, VMIs and
  their virt-launcher pods, live migrations (target pod admission under quota, phases, parallel
  limits, abort, node drain), with the numbers the seeds report.
- ``harvester_quota.testbench.sim.rancher``: Rancher's namespace resource-quota sync (the default ResourceQuota derived
  from ``field.cattle.io/resourceQuota``, reset on namespace events and on agent restarts).

They work with or without harvester-quota's own controllers running: a namespace without a quota,
or with a quota raised by hand, lets migrations through.
"""
