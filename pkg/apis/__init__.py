"""The API groups this project reads and writes beyond Kubernetes' core, declared as data.

The framework (`generic`) knows only Kubernetes' own kinds; KubeVirt's and Harvester's kinds, labels,
conditions and phases live here, one module per API group, with typed controller accessors in the
wrangler style (`KubeVirtControllers(factory).virtual_machine_instance_migrations()`).
"""
