"""Writes of a managed quota: ours conditional on what the plan read, not on the quota's whole
resourceVersion, and who made each write of spec.hard (from managedFields, below).

A plan reads a quota's spec, labels and the annotations under Harvester's and our prefixes; it
never reads its status. kube-controller-manager rewrites the status (status.hard and used) right
after each spec change and each pod admitted or gone, so a write conditional on the
resourceVersion lost to it whenever a burst of migrations needed a second raise a moment after
the first (measured: one Conflict, a new plan and another write in most 50-migration bursts).

`conditional_patch` turns a plan's merge patch into a JSON patch (RFC 6902) whose ``test``
operations carry that condition: the quota's uid, its spec, its labels, and each annotation the
plan read or writes, as the plan saw them. The API server applies the whole patch or nothing, on
the quota as stored when it applies it; a failed test answers 422 without causes
(`failed_test`), which the caller treats as a Conflict: plan again from what is there now.
Nothing anyone else wrote is overwritten: a concurrent spec, label or annotation change of
those the plan read fails the test. An annotation outside the read prefixes, added meanwhile, is
kept (the patch names only the keys it changes).

`publish_patch` is the same idea for the copy of a raise into status.hard: conditional on
spec.hard being still the one written, not on the resourceVersion that kube-controller-manager's
own status write moves right after.

Who last wrote a managed quota's spec.hard is read from its managedFields. The API server records
on every object, per field manager and operation, the fields that manager owns and the second it
last changed one of them (metadata.managedFields). Of the entries that own a key of spec.hard,
those that own a key a write changed name its writer (`change_writers`: a write that changes a
field takes its ownership): ours (FIELD_MANAGER, the API server's name for our client's user
agent), Rancher's (RANCHER_MANAGERS), or anyone else's (controller/resourcequota/reports.py
ForeignWriteReports tells those). Status writes own status.hard, never spec.hard.

The informer keeps no managedFields (they are often half a quota's size): `keep_writers`, the
quota cache's transform, replaces them with WRITERS, the entries that own a key of spec.hard
reduced to their manager, operation, time and keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from ...generic import errors
from ...generic.meta import annotations_of, labels, metadata
from ...generic.resource import Object
from ...generic.store import strip_unread_fields
from ..annotations import ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING, HARVESTER_PREFIX

READ_PREFIXES: Final = (f"{HARVESTER_PREFIX}/", "harvester-quota.io/")
"""Annotation prefixes a quota plan reads (Harvester's keys and ours)."""
ALWAYS_TESTED: Final = (ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,)
"""Annotations tested even when absent: added meanwhile, they change the plan."""

Operation = dict[str, Any]


def pointer(*parts: str) -> str:
    """An RFC 6901 JSON pointer to the parts (``~`` and ``/`` escaped)."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def conditional_patch(quota: Mapping[str, Any], merge_patch: Mapping[str, Any]) -> list[Operation]:
    """The JSON patch applying `merge_patch` (spec.hard and metadata.annotations, None removing
    a key, as `patch_for` makes them) to the quota only if it is still `quota` as the plan read
    it (see the module docstring)."""
    changes = merge_patch.get("metadata", {}).get("annotations") or {}
    hard = (merge_patch.get("spec") or {}).get("hard") or {}
    return [
        *_tests(quota, changes),
        *_map_operations(_annotations(quota), ("metadata", "annotations"), changes),
        *_map_operations((quota.get("spec") or {}).get("hard"), ("spec", "hard"), hard),
    ]


def _annotations(quota: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = metadata(quota).get("annotations")
    return value if isinstance(value, Mapping) else None


def _tests(quota: Mapping[str, Any], changes: Mapping[str, Any]) -> list[Operation]:
    meta = metadata(quota)
    tests: list[Operation] = [
        {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
        {"op": "test", "path": "/spec", "value": quota.get("spec")},
        {"op": "test", "path": "/metadata/labels", "value": dict(labels(quota)) or None},
    ]
    current = annotations_of(quota)
    if _annotations(quota) is None:
        # No annotations at all: one test that there still are none (a test of a key under a
        # missing map would fail whatever it expects).
        tests.append({"op": "test", "path": "/metadata/annotations", "value": None})
        return tests
    read = {k for k in current if k.startswith(READ_PREFIXES)} | set(changes) | set(ALWAYS_TESTED)
    for key in sorted(read):
        tests.append(
            {
                "op": "test",
                "path": pointer("metadata", "annotations", key),
                "value": current.get(key),
            }
        )
    return tests


def _map_operations(
    current: Mapping[str, Any] | None, where: tuple[str, str], changes: Mapping[str, Any]
) -> list[Operation]:
    """Operations setting (value) or removing (None) `changes` in the map at `where`, which
    holds `current` (None: the map does not exist and is added whole)."""
    if not changes:
        return []
    if current is None:
        added = {k: v for k, v in changes.items() if v is not None}
        return [{"op": "add", "path": pointer(*where), "value": added}] if added else []
    operations: list[Operation] = []
    for key, value in changes.items():
        path = pointer(*where, key)
        if value is not None:
            operations.append({"op": "add", "path": path, "value": value})
        elif key in current:
            operations.append({"op": "remove", "path": path})
    return operations


def annotation_patch_if(
    obj: Mapping[str, Any], changes: Mapping[str, Any], read: Iterable[str]
) -> list[Operation]:
    """The JSON patch setting (value) or removing (None) the annotations `changes` on `obj` only
    if it is still the same object (uid) and the annotations `read`, and those changed, are as
    `obj` has them (an absent one still absent): a write of anything else of the object, such as
    Rancher's agent's conditions on a namespace, does not fail it."""
    uid: Operation = {"op": "test", "path": "/metadata/uid", "value": metadata(obj).get("uid")}
    return [uid, *metadata_map_patch_if(obj, "annotations", changes, read)]


def metadata_map_patch_if(
    obj: Mapping[str, Any], field: str, changes: Mapping[str, Any], read: Iterable[str] = ()
) -> list[Operation]:
    """Operations setting (value) or removing (None) `changes` in metadata.`field` (labels,
    annotations) of `obj`, after tests that the keys `read` and those changed are as `obj` has
    them (absent: still absent); without such a map, a test that there is still none and the map
    added whole."""
    value = metadata(obj).get(field)
    current = value if isinstance(value, Mapping) else None
    if current is None:
        tests: list[Operation] = [{"op": "test", "path": pointer("metadata", field), "value": None}]
    else:
        tests = [
            {"op": "test", "path": pointer("metadata", field, key), "value": current.get(key)}
            for key in sorted(set(read) | set(changes))
        ]
    return tests + _map_operations(current, ("metadata", field), changes)


def publish_patch(written: Mapping[str, Any]) -> list[Operation]:
    """The JSON patch (for the status subresource) copying `written`'s spec.hard into
    status.hard, only if spec.hard is still that: a status written by someone else meanwhile
    (kube-controller-manager's, after every spec change) does not fail it. (The API server
    always serializes a quota's status, so /status exists; were it missing, the add fails like
    a test, and kube-controller-manager's copy counts.)"""
    hard = (written.get("spec") or {}).get("hard") or {}
    return [
        {"op": "test", "path": "/spec/hard", "value": hard},
        {"op": "add", "path": "/status/hard", "value": hard},
    ]


def failed_test(error: errors.ApiError) -> bool:
    """Whether the API server refused a conditional patch because a test failed: 422 Invalid
    without causes (a patch that applied but made an invalid object lists its causes)."""
    if not isinstance(error, errors.Invalid):
        return False
    causes = error.details.get("causes") if isinstance(error.details, Mapping) else None
    return not causes


WRITERS: Final = "harvesterQuotaWriters"
"""Where a cached quota keeps its writers of spec.hard (`keep_writers`): a key no Kubernetes
object has, so nothing mistakes it for the server's managedFields."""
RANCHER_MANAGERS: Final = frozenset({"rancher", "agent"})
"""The field managers of Rancher's server and of its cattle-cluster-agent (binaries `rancher`
and `agent`: the API server takes a user agent's first part as the field manager)."""


@dataclass(frozen=True)
class _Writer:
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


def _writer(entry: object) -> _Writer | None:
    if not isinstance(entry, Mapping) or entry.get("subresource"):
        return None
    keys = entry.get("keys")
    found = _Writer(
        manager=str(entry.get("manager") or ""),
        operation=str(entry.get("operation") or ""),
        time=str(entry.get("time") or ""),
        keys=tuple(map(str, keys)) if isinstance(keys, list) else _hard_keys(entry.get("fieldsV1")),
    )
    return found if found.keys else None


def hard_writers(quota: Mapping[str, Any]) -> list[_Writer]:
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
) -> list[_Writer]:
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
