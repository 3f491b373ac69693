"""`WebhookOptions`: everything `harvester-quota webhook` can be told, in one object, as
`config.management.Options` is for `harvester-quota run`. The command line fills it (main.py);
`server.serve` runs with it. Plain data: nothing here talks to the cluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..util.podusage import KUBERNETES_1_36, QuotaFeatures
from ..util.resourcequota.base import Mode
from .certkeeper import SelfSigned
from .metrics import METRICS_PORT
from .resources.common import Identities
from .resources.pod.targets import TARGET_ROOM_WAIT
from .tls import ClientAuth


@dataclass(frozen=True)
class WebhookOptions:
    """The webhook process's settings, each with its default: the one settings object of
    `harvester-quota webhook`, which main.py fills from the flags: `identities` from
    --controller-user and --target-creator, `client_auth` from --client-ca-file and
    --client-name, `metrics_address` from --metrics-host and --metrics-port, `self_signed` from
    --self-signed-secret and its companions, every other field from the flag of its name."""

    cert_file: Path
    """The serving certificate (PEM), reloaded when it changes; written by the CertificateKeeper
    with `self_signed`."""
    key_file: Path
    identities: Identities
    """Whose quota writes skip the quota rule (the controllers) and whose migration target pods
    skip the pod rules (KubeVirt's controller)."""
    host: str = "0.0.0.0"  # the API server calls in through a Service
    port: int = 8443
    client_auth: ClientAuth | None = None
    """Require a client certificate from the API server (--client-ca-file, --client-name)."""
    metrics_address: tuple[str, int] = ("0.0.0.0", METRICS_PORT)
    """/metrics, /healthz and /readyz over plain HTTP, apart from the admission port."""
    kubevirt_version: str | None = None
    """None: read from the KubeVirt CR, as the controller does."""
    mode: Mode = "auto"
    """The controller's --mode: where the base comes from (WebhookCaches)."""
    quota_features: QuotaFeatures = KUBERNETES_1_36
    """The controller's --quota-feature-gates: what quota charges a pod (WebhookCaches)."""
    target_room_wait: float = TARGET_ROOM_WAIT
    """The longest a migration target pod's admission waits for its room (pod/targets.py)."""
    namespace: str = "harvester-system"
    """Its own namespace: the reservation Leases the replicas share, the self-signed Secret."""
    mtq: bool = True
    """Serve MTQ mode's lock rule where a VMMRQ's CRD is served."""
    self_signed: SelfSigned | None = None
    """Make and rotate the serving certificate with a CA of its own (certkeeper.py)."""
