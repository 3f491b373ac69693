"""deploy/chart rendered by helm (built like the cluster binaries): the manifest and its checks.

`python -m harvester_quota.testbench.localcluster.chart > deploy/harvester-quota.yaml` (`make manifest`)
regenerates the plain manifest from the chart with its default values, so the two never drift;
a test renders it again and compares.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from .binaries import build_helm
from .errors import ClusterError

REPO: Final = Path(__file__).resolve().parents[3]
CHART: Final = REPO / "deploy" / "chart" / "harvester-quota"
MANIFEST: Final = REPO / "deploy" / "harvester-quota.yaml"
RELEASE: Final = "harvester-quota"
NAMESPACE: Final = "harvester-system"
KUBE_VERSION: Final = "1.36.5"

HEADER: Final = """\
# harvester-quota: controllers and validating webhook.
#
# Generated from deploy/chart/harvester-quota with its default values (`make manifest`); edit the
# chart, not this file. With Helm: `helm install harvester-quota deploy/chart/harvester-quota
# --namespace harvester-system` (values: image, replicas, mode, KubeVirt's namespace, failure
# policies, resources, certificates from cert-manager or a Secret you provide).
#
# Apply with `kubectl apply -f deploy/harvester-quota.yaml` after creating the webhook's serving
# certificate as the Secret harvester-system/harvester-quota-webhook-tls (keys tls.crt, tls.key;
# e.g. from cert-manager or `kubectl create secret tls`) and putting its CA into caBundle below.
# Replace the image with the one you build from this repository.
#
# On Harvester, this replaces Harvester's migration and resourcequota controllers and the quota
# part of its namespace webhook: run one or the other, never both (two writers of one quota). It
# reads every annotation Harvester ever wrote and removes the stale ones on its first pass.
"""


def helm(*args: str) -> str:
    """Runs helm (built once per machine) and returns its output; ClusterError on failure."""
    done = subprocess.run(
        [str(build_helm()), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise ClusterError(f"helm {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def render(values: Mapping[str, Any] | None = None, namespace: str = NAMESPACE) -> str:
    """The chart rendered for `namespace` with `values` over the defaults, its crds/ included
    (MTQ's VirtualMachineMigrationResourceQuota), so the plain manifest installs them too."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["template", RELEASE, str(CHART), "--namespace", namespace, "--include-crds"]
        args += ["--kube-version", KUBE_VERSION]
        if values:
            path = Path(tmp) / "values.yaml"
            path.write_text(yaml.safe_dump(dict(values)))
            args += ["--values", str(path)]
        return helm(*args)


def manifest_text() -> str:
    """deploy/harvester-quota.yaml as it must be: the header, then the default rendering."""
    return HEADER + render()


if __name__ == "__main__":  # pragma: no cover - `make manifest`
    sys.stdout.write(manifest_text())
