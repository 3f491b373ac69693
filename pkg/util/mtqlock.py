"""KubeVirt MTQ's own namespace locks, found after a move from KubeVirt MTQ to this controller.

KubeVirt MTQ locks a namespace with a ValidatingWebhookConfiguration named ``lock.<namespace>.com``
(labelled ``mtq-lock-server``): one webhook, failurePolicy Fail, selecting the namespace by
``kubernetes.io/metadata.name``, calling MTQ's ``mtq-lock`` Service for every pod create, every
ResourceQuota update and every VMMRQ create or delete there. MTQ deletes it when the window ends,
but nothing else does: a lock left when MTQ was uninstalled (or died mid-window) refuses all of
those in the namespace for good, since the Service it calls is gone, our own quota writes
included. This controller never creates such a lock (its own is a namespace label, mtq.py), so
any one found is KubeVirt MTQ's; the only cure is to delete it.

Pure: which namespaces a configuration locks, and the words that say what to delete.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..apis.mtq import LOCK_LABEL, LOCK_SERVICE
from ..generic.meta import labels, metadata
from .vmispec import parse_time

LEFTOVER_AFTER: Final = 60.0
"""Seconds a lock must have existed before it is reported: KubeVirt MTQ holds one only until its
migration's target pod is created (its own e2e test fails a lock older than 10 s), so an older one
is a leftover, or a KubeVirt MTQ still running beside us and stuck (worth a Warning too)."""
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
REASON: Final = "LeftoverMtqLock"
"""Warning event reason, on the Namespace a leftover lock blocks."""

_NAME: Final = re.compile(r"lock\.(.+)\.com")


@dataclass(frozen=True)
class MtqLock:
    """One namespace locked by a KubeVirt MTQ lock configuration."""

    configuration: str
    """The ValidatingWebhookConfiguration's name (what to delete)."""
    namespace: str
    service: str
    """The Service it calls, ``namespace/name`` ("" if it calls a URL)."""
    created: datetime.datetime | None

    def age(self, now: datetime.datetime) -> float | None:
        """Seconds since it was created (None if its creation time is unknown)."""
        return None if self.created is None else (now - self.created).total_seconds()

    def is_leftover(self, now: datetime.datetime, after: float = LEFTOVER_AFTER) -> bool:
        """Older than `after` seconds (or of unknown age)."""
        age = self.age(now)
        return age is None or age >= after

    def delete_command(self) -> str:
        return f"kubectl delete validatingwebhookconfiguration {self.configuration}"

    def message(self) -> str:
        """What the lock does and what to delete, for an event, a log line or explain."""
        calls = f"calling service {self.service}" if self.service else "calling its webhook"
        return (
            f"KubeVirt MTQ's namespace lock, ValidatingWebhookConfiguration {self.configuration} "
            f"({calls}, failurePolicy Fail), is still in place: every pod create, ResourceQuota "
            f"update (ours included) and VirtualMachineMigrationResourceQuota create or delete "
            f"in namespace {self.namespace} fails while nothing answers it. harvester-quota "
            "never creates such a lock; once KubeVirt MTQ is uninstalled, delete it: "
            f"{self.delete_command()}"
        )


def is_mtq_lock(configuration: Mapping[str, Any]) -> bool:
    """Labelled as KubeVirt MTQ labels its locks, or named ``lock.<ns>.com`` and calling its
    ``mtq-lock`` Service."""
    if LOCK_LABEL in labels(configuration):
        return True
    name = str(metadata(configuration).get("name") or "")
    return _NAME.fullmatch(name) is not None and any(
        _service(webhook).endswith(f"/{LOCK_SERVICE}") for webhook in _webhooks(configuration)
    )


def mtq_locks(configuration: Mapping[str, Any]) -> list[MtqLock]:
    """The namespaces a KubeVirt MTQ lock configuration locks ([] for any other): those its
    webhooks select by name, else the one its name carries."""
    if not is_mtq_lock(configuration):
        return []
    name = str(metadata(configuration).get("name") or "")
    created = _created(configuration)
    locks = {}
    for webhook in _webhooks(configuration):
        selector = webhook.get("namespaceSelector")
        match = (selector or {}).get("matchLabels") if isinstance(selector, Mapping) else None
        namespace = match.get(NAMESPACE_NAME_LABEL) if isinstance(match, Mapping) else None
        if isinstance(namespace, str) and namespace:
            locks[namespace] = MtqLock(name, namespace, _service(webhook), created)
    named = _NAME.fullmatch(name)
    if not locks and named is not None:
        services = [_service(w) for w in _webhooks(configuration)]
        locks[named.group(1)] = MtqLock(name, named.group(1), next(iter(services), ""), created)
    return [locks[ns] for ns in sorted(locks)]


def locked_namespaces(configuration: Mapping[str, Any]) -> list[str]:
    """The namespaces `configuration` locks, if it is KubeVirt MTQ's (an index function)."""
    return [lock.namespace for lock in mtq_locks(configuration)]


def locks_of(namespace: str, configurations: Iterable[Mapping[str, Any]]) -> list[MtqLock]:
    """KubeVirt MTQ's locks of `namespace` among `configurations`, by configuration name."""
    found = [lock for c in configurations for lock in mtq_locks(c) if lock.namespace == namespace]
    return sorted(found, key=lambda lock: lock.configuration)


def _webhooks(configuration: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    webhooks = configuration.get("webhooks")
    if not isinstance(webhooks, list):
        return []
    return [w for w in webhooks if isinstance(w, Mapping)]


def _service(webhook: Mapping[str, Any]) -> str:
    config = webhook.get("clientConfig")
    service = config.get("service") if isinstance(config, Mapping) else None
    if not isinstance(service, Mapping):
        return ""
    return f"{service.get('namespace', '')}/{service.get('name', '')}"


def _created(configuration: Mapping[str, Any]) -> datetime.datetime | None:
    try:
        return parse_time(metadata(configuration).get("creationTimestamp"), "creationTimestamp")
    except ValueError:
        return None
