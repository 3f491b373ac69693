"""Rancher's model of namespace quotas, pure: everything Rancher-only below the room model.

- `annotation`: the namespace annotation `field.cattle.io/resourceQuota`, Rancher's base quota
  (its JSON, its field names, the ResourceQuota keys they map to);
- `project`: a Rancher project's accounting of its namespaces' quotas, as Rancher's agent does it,
  and whether a raise through the annotation fits the namespace's project.

The raise through the annotation (util/resourcequota/rancherpath.py) reads the quota plan and
lives with it; the controller's Rancher code is controller/resourcequota/rancher.py, MTQ mode's
controller/mtq/rancher.py.
"""
