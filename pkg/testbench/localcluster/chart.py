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
TEMPLATE_VALUES: Final = {"kubevirt": {"namespace": NAMESPACE}}
"""What the manifest is rendered with beyond the defaults: `helm template` looks in no cluster,
so the chart cannot find KubeVirt's namespace and needs it given (Harvester's)."""

HEADER: Final = """\
# harvester-quota: controllers and validating webhook.
#
# Generated from deploy/chart/harvester-quota with its default values (`make manifest`); edit the
# chart, not this file. With Helm: `helm install harvester-quota deploy/chart/harvester-quota
# --namespace harvester-system` (values: image, replicas, mode, KubeVirt's namespace, failure
# policies, resources, certificates from cert-manager or a Secret you provide instead of the
# webhook's own); Helm finds KubeVirt's namespace in the cluster and refuses a wrong one.
#
# This file names KubeVirt's namespace as Harvester's, harvester-system: on plain KubeVirt
# (namespace kubevirt) replace every "serviceaccount:harvester-system:kubevirt-" with
# "serviceaccount:kubevirt:kubevirt-", or its policies refuse every launcher pod and every
# virt-handler status write, and drop the controller's --adopt-harvester-quotas (there is no
# Harvester to adopt quotas from).
#
# Apply with `kubectl apply -f deploy/harvester-quota.yaml`: the webhook makes and renews its
# own CA and serving certificate (in the Secret harvester-system/harvester-quota-webhook-ca) and
# fills the caBundle of its configuration; nothing to create first. Replace the image with the
# one you build from this repository.
#
# On Harvester, it runs beside Harvester's own migration and resourcequota controllers, which no
# Harvester release can turn off: it adopts the quotas it manages (--adopt-harvester-quotas:
# Harvester's skip annotation with our marker). Before deleting it, give them back (docs/
# operations.md, "On Harvester"), or Harvester never raises them again.
"""


def helm(*args: str) -> str:
    """Runs helm (built once per machine) and returns its output; ClusterError on failure."""
    done = subprocess.run(
        [str(build_helm()), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise ClusterError(f"helm {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def render(
    values: Mapping[str, Any] | None = None,
    namespace: str = NAMESPACE,
    *,
    kubeconfig: Path | None = None,
) -> str:
    """The chart rendered for `namespace` with `values` over the defaults, its crds/ included
    (MTQ's VirtualMachineMigrationResourceQuota), so the plain manifest installs them too.

    Without `kubeconfig`, `helm template` looks in no cluster: `values` go over TEMPLATE_VALUES
    (as the manifest is rendered). With it, helm renders against that cluster
    (`--dry-run=server`: its lookups see the cluster, nothing is written) and only `values` go
    over the defaults. ClusterError if the chart refuses (its `fail` message in it)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["template", RELEASE, str(CHART), "--namespace", namespace, "--include-crds"]
        args += ["--kube-version", KUBE_VERSION]
        layers: list[Mapping[str, Any]] = [values or {}]
        if kubeconfig is None:
            layers.insert(0, TEMPLATE_VALUES)
        else:
            args += ["--dry-run=server", "--kubeconfig", str(kubeconfig)]
        for index, layer in enumerate(layers):
            path = Path(tmp) / f"values-{index}.yaml"
            path.write_text(yaml.safe_dump(dict(layer)))
            args += ["--values", str(path)]
        return helm(*args)


def manifest_text() -> str:
    """deploy/harvester-quota.yaml as it must be: the header, then the default rendering."""
    return HEADER + render()


if __name__ == "__main__":  # pragma: no cover - `make manifest`
    sys.stdout.write(manifest_text())
