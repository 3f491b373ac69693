"""KubeVirt Managed-Tenant-Quota's kind (mtq.kubevirt.io/v1alpha1), decoded into typed values.

A VirtualMachineMigrationResourceQuota (VMMRQ) gives a namespace a migration budget:
``spec.additionalMigrationResources`` may be added, for a short window, to the ResourceQuotas that
block a migration's target pod. The status fields are MTQ's own, so objects written by MTQ (or by
a user following its documentation) decode unchanged:

- ``status.additionalMigrationResources``: the budget the current raise uses;
- ``status.migrationsToBlockingResourceQuotas``: migration name -> the quotas that block it;
- ``status.originalBlockingResourceQuotas``: each raised quota's spec before the raise.

Decoding checks structure only (quantities stay strings here: this layer parses no quantity); a
malformed object raises `VmmrqError` naming the field path and what was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from ..generic.resource import Object, Resource

GROUP: Final = "mtq.kubevirt.io"
VERSION: Final = "v1alpha1"
KIND: Final = "VirtualMachineMigrationResourceQuota"
VMMRQS: Final = Resource(GROUP, VERSION, "virtualmachinemigrationresourcequotas", KIND)
"""Namespaced; absent on a cluster that never installed the CRD (an optional kind)."""

LOCK_LABEL: Final = "mtq-lock-server"
"""KubeVirt MTQ labels each namespace lock it creates (a ValidatingWebhookConfiguration named
``lock.<namespace>.com``) ``mtq-lock-server: mtq-lock-server``."""
LOCK_SERVICE: Final = "mtq-lock"
"""The Service (in MTQ's namespace) MTQ's lock webhooks call."""


class VmmrqError(ValueError):
    """A VMMRQ that does not decode: the message names the object, the field and the value."""


@dataclass(frozen=True)
class OriginalQuota:
    """One entry of status.originalBlockingResourceQuotas: a quota's name and its spec before
    the raise (the whole ResourceQuotaSpec: hard, scopes, scopeSelector), as JSON."""

    name: str
    spec: Mapping[str, Any]

    @property
    def hard(self) -> Mapping[str, str]:
        """spec.hard of the original, quantities as written."""
        hard = self.spec.get("hard")
        return hard if isinstance(hard, Mapping) else {}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "spec": dict(self.spec)}


@dataclass(frozen=True)
class VmmrqStatus:
    """status of a VMMRQ; every field empty when status is absent."""

    additional: Mapping[str, str] = field(default_factory=dict)
    migrations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    originals: tuple[OriginalQuota, ...] = ()

    def original(self, quota: str) -> OriginalQuota | None:
        """The recorded original of `quota`, or None."""
        return next((o for o in self.originals if o.name == quota), None)

    def to_json(self) -> dict[str, Any]:
        """The status as MTQ writes it (empty fields omitted, as Go's omitempty does)."""
        out: dict[str, Any] = {}
        if self.additional:
            out["additionalMigrationResources"] = dict(self.additional)
        if self.migrations:
            out["migrationsToBlockingResourceQuotas"] = {
                k: list(v) for k, v in sorted(self.migrations.items())
            }
        if self.originals:
            out["originalBlockingResourceQuotas"] = [o.to_json() for o in self.originals]
        return out


@dataclass(frozen=True)
class Vmmrq:
    """A decoded VMMRQ: identity, the budget asked for (spec) and the recorded status."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    additional: Mapping[str, str]
    status: VmmrqStatus
    deleting: bool = False


def _fail(where: str, what: str, value: object) -> NoReturn:
    raise VmmrqError(f"{where}: {what}, got {value!r}")


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _fail(where, "must be an object", value)
    return value


def _quantities(value: object, where: str) -> dict[str, str]:
    """A ResourceList as written: names to quantity text (an integer is kept as its text)."""
    out: dict[str, str] = {}
    for key, quantity in _object(value, where).items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int):
            _fail(f"{where}[{key!r}]", "must be a quantity (string or integer)", quantity)
        out[str(key)] = str(quantity)
    return out


def _names(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, "must be a list of quota names", value)
    return tuple(value)


def _original(value: object, where: str) -> OriginalQuota:
    entry = _object(value, where)
    quota = entry.get("name")
    if not isinstance(quota, str) or not quota:
        _fail(f"{where}.name", "must be a quota name", quota)
    spec = dict(_object(entry.get("spec"), f"{where}.spec"))
    spec["hard"] = _quantities(spec.get("hard"), f"{where}.spec.hard")
    return OriginalQuota(quota, spec)


def decode_status(value: object, where: str = "status") -> VmmrqStatus:
    """status as typed values; VmmrqError on a malformed field."""
    raw = _object(value, where)
    migrations = _object(
        raw.get("migrationsToBlockingResourceQuotas"), f"{where}.migrationsToBlockingResourceQuotas"
    )
    originals = raw.get("originalBlockingResourceQuotas")
    if originals is not None and not isinstance(originals, list):
        _fail(f"{where}.originalBlockingResourceQuotas", "must be a list", originals)
    return VmmrqStatus(
        additional=_quantities(
            raw.get("additionalMigrationResources"), f"{where}.additionalMigrationResources"
        ),
        migrations={
            str(k): _names(v, f"{where}.migrationsToBlockingResourceQuotas[{k!r}]")
            for k, v in migrations.items()
        },
        originals=tuple(
            _original(v, f"{where}.originalBlockingResourceQuotas[{i}]")
            for i, v in enumerate(originals or [])
        ),
    )


def decode_vmmrq(obj: Object) -> Vmmrq:
    """A VMMRQ as typed values; VmmrqError naming ``namespace/name`` and the bad field."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        raise VmmrqError(f"a {KIND} needs metadata, got {obj!r:.80}")
    where = f"{KIND} {meta.get('namespace')}/{meta.get('name')}"
    try:
        spec = _object(obj.get("spec"), "spec")
        return Vmmrq(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            additional=_quantities(
                spec.get("additionalMigrationResources"), "spec.additionalMigrationResources"
            ),
            status=decode_status(obj.get("status")),
            deleting=bool(meta.get("deletionTimestamp")),
        )
    except VmmrqError as error:
        raise VmmrqError(f"{where}: {error}") from None
