"""Who last wrote a managed quota's spec.hard, read from its managedFields (pure).

The API server records on every object, per field manager and operation, the fields that
manager owns and the second it last changed one of them (metadata.managedFields). Of the entries
that own a key of spec.hard, those that own a key a write changed name its writer
(`change_writers`: a write that changes a field takes its ownership): ours (FIELD_MANAGER, the
API server's name for our client's user agent), Rancher's (RANCHER_MANAGERS), or anyone else's
(controller/resourcequota/foreignwrites.py tells those). Status writes own status.hard, never spec.hard.

The informer keeps no managedFields (they are often half a quota's size): `keep_writers`, the
quota cache's transform, replaces them with WRITERS, the entries that own a key of spec.hard
reduced to their manager, operation, time and keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from ...generic.meta import metadata
from ...generic.resource import Object
from ...generic.rest import FIELD_MANAGER
from ...generic.store import strip_unread_fields

__all__ = [
    "FIELD_MANAGER",
    "RANCHER_MANAGERS",
    "WRITERS",
    "Writer",
    "change_writers",
    "hard_writers",
    "keep_writers",
]

WRITERS: Final = "harvesterQuotaWriters"
"""Where a cached quota keeps its writers of spec.hard (`keep_writers`): a key no Kubernetes
object has, so nothing mistakes it for the server's managedFields."""
RANCHER_MANAGERS: Final = frozenset({"rancher", "agent"})
"""The field managers of Rancher's server and of its cattle-cluster-agent (binaries `rancher`
and `agent`: the API server takes a user agent's first part as the field manager)."""


@dataclass(frozen=True)
class Writer:
    """One managedFields entry that owns keys of spec.hard."""

    manager: str
    operation: str
    time: str
    """RFC 3339, to the second ("" if the entry has none): when it last changed a field."""
    keys: tuple[str, ...]
    """The keys of spec.hard it owns, sorted."""


def _hard_keys(fields_v1: object) -> tuple[str, ...]:
    """The keys of spec.hard in a fieldsV1 set (``{"f:spec": {"f:hard": {"f:k": {}}}}``)."""
    spec = fields_v1.get("f:spec") if isinstance(fields_v1, Mapping) else None
    hard = spec.get("f:hard") if isinstance(spec, Mapping) else None
    if not isinstance(hard, Mapping):
        return ()
    return tuple(sorted(k[2:] for k in hard if isinstance(k, str) and k.startswith("f:")))


def _writer(entry: object) -> Writer | None:
    if not isinstance(entry, Mapping) or entry.get("subresource"):
        return None
    keys = entry.get("keys")
    found = Writer(
        manager=str(entry.get("manager") or ""),
        operation=str(entry.get("operation") or ""),
        time=str(entry.get("time") or ""),
        keys=tuple(map(str, keys)) if isinstance(keys, list) else _hard_keys(entry.get("fieldsV1")),
    )
    return found if found.keys else None


def hard_writers(quota: Mapping[str, Any]) -> list[Writer]:
    """The quota's writers of spec.hard in managedFields order: from its managedFields as the
    API server returns them, or from WRITERS on a cached quota. Malformed entries are passed
    over."""
    entries = quota.get(WRITERS)
    if not isinstance(entries, list):
        entries = metadata(quota).get("managedFields")
    found = [_writer(entry) for entry in entries] if isinstance(entries, list) else []
    return [writer for writer in found if writer is not None]


def change_writers(
    old: Mapping[str, Any], new: Mapping[str, Any], keys: Iterable[str]
) -> list[Writer]:
    """Who may have made the change of spec.hard's `keys` between `old` and `new`: of `new`'s
    writers that own one of `keys` (a write that changes a field takes its ownership: an Update
    always, an Apply when forced, which a changed value needs), or, where none does (a key
    removed is owned by nobody), of those whose entry differs from every entry of `old`, all
    of the newest second, in managedFields order. The API server orders managedFields by
    operation, second and manager name, not by write order, so of one second which wrote last
    is unknown: each is a candidate. Empty when no entry is left to name."""
    wanted = set(keys)
    found = [writer for writer in hard_writers(new) if wanted & set(writer.keys)]
    if not found:
        before = hard_writers(old)
        found = [writer for writer in hard_writers(new) if writer not in before]
    newest = max((writer.time for writer in found), default="")
    return [writer for writer in found if writer.time == newest]


def keep_writers(quota: Object) -> Object:
    """The quota cache's transform: managedFields replaced by WRITERS (`hard_writers`), then
    what every cache strips (store.strip_unread_fields)."""
    quota[WRITERS] = [
        {**asdict(writer), "keys": list(writer.keys)} for writer in hard_writers(quota)
    ]
    return strip_unread_fields(quota)
