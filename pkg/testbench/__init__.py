"""The test bench: everything that proves the product and is not the product.

The local cluster built from real Kubernetes (localcluster), the KubeVirt and Rancher simulators
and the driver of KubeVirt's real virt-controller (sim), incident scenarios (scenario), the scale
run (scale), Harvester's own algorithm as a baseline (strategy), and the demo, with their command
line (cli, run as `python -m harvester_quota.testbench`).

The fence: the bench imports the product by its public names (`harvester_quota.<package>`), and
no product module ever imports the bench (tests/unit/test_layers.py). A plain install of the
distribution (`pip install .`, the image) carries the product only; the bench runs from a source
checkout, where `make venv` installs it in place.
"""
