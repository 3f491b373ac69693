"""Maps the `pkg/` folder (the layout mirrors Harvester's Go tree) to the import package `harvester_quota`.

setup.cfg maps the folder (`package_dir`); only the package list needs code, because `find:` cannot
rename what it finds.
"""

from setuptools import find_namespace_packages, setup

IMPORT_NAME = "harvester_quota"
SOURCE_DIR = "pkg"

# Namespace discovery also lists the data folders (crds/, gomod/*/, stages/), so setuptools ships
# their files as package data without a warning per folder.
subpackages = find_namespace_packages(SOURCE_DIR, exclude=["*.__pycache__", "*__pycache__*"])

setup(
    packages=[IMPORT_NAME, *(f"{IMPORT_NAME}.{name}" for name in subpackages)],
)
