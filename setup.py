"""Maps the `pkg/` folder (the layout mirrors Harvester's Go tree) to the import package `harvester_quota`.

setup.cfg maps the folder (`package_dir`); only the package list needs code, because `find:` cannot
rename what it finds.

The distribution is the product only: `pkg/testbench/` (the local cluster, simulators, scenarios,
scale, the Harvester baseline, the demo) is left out of it, so `pip install .` and the image carry
no bench module. In a source checkout, `make venv` installs the distribution in place (editable),
where `harvester_quota.testbench` is importable from the tree beside the product.
"""

from setuptools import find_namespace_packages, setup

IMPORT_NAME = "harvester_quota"
SOURCE_DIR = "pkg"
BENCH = "testbench"

subpackages = find_namespace_packages(
    SOURCE_DIR, exclude=["*.__pycache__", "*__pycache__*", BENCH, f"{BENCH}.*"]
)

setup(
    packages=[IMPORT_NAME, *(f"{IMPORT_NAME}.{name}" for name in subpackages)],
)
