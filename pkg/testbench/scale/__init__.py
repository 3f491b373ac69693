"""The scale run: a local cluster with kwok nodes and KubeVirt's virt-controller, filled with VMs
by counts, the product as deployed, migrations in steps, figures per step (``make scale``)."""
