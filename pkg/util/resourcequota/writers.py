"""Who wrote a managed quota's fields, read from its managedFields (pure).

The API server records on every object, per field manager (and operation, and subresource),
the fields that manager set last and when (metadata.managedFields): a write that changes a
field makes its writer that field's owner (an Update takes it from everyone else; an Apply
shares it with those who applied the same value), and moves its entry's time to the write's
second. That is what tells the controller's own writes (field manager FIELD_MANAGER, the API
server's name for our client's user agent) from anyone else's: Harvester's controllers running
beside us (under their binary's name, such as ``harvester``), Rancher's agent, a GitOps tool, a
person with kubectl.

Only the fields a plan writes are looked at (`FieldRef`): the keys of spec.hard and the
annotations ``harvesterhci.io/migrating*`` and ``harvester-quota.io/*``, without Harvester's
``harvesterhci.io/migratingUID-*``, which its migration controller records while a migration
is pending (expected beside Harvester, and removed by our plans anyway).

`foreign_writes` compares two versions of a quota (an update event's old and new): each changed
field is put down to its owner after the change, or, for a removed field (owned by nobody after),
to a writer whose entry's time moved in between. A field owned by us, or one nobody can be found
for (a writer that owns nothing afterwards keeps no entry: a bare removal leaves no trace), is
not foreign. Rancher's agent setting spec.hard to its base is the base changing, not a foreign
write: where the namespace has Rancher's annotation, a change that leaves every base key at the
base, and any change by a manager named as Rancher's, are left out.

The informer keeps no managedFields (they are often half a quota's size): `keep_writers`, the
quota cache's transform, replaces them with `WRITERS`, the entries reduced to these fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...generic.meta import annotations_of, metadata
from ...generic.resource import Object
from ...generic.rest import FIELD_MANAGER
from ...generic.store import strip_unread_fields
from ..annotations import (
    ANNOTATION_MIGRATING_UID_PREFIX,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    MIGRATING_PREFIX,
)
from ..quantity import Quantity
from ..resources import ResourceList

__all__ = [
    "ANNOTATION",
    "FIELD_MANAGER",
    "RANCHER_MANAGERS",
    "SPEC_HARD",
    "WRITERS",
    "FieldChange",
    "FieldRef",
    "ForeignWrite",
    "Writer",
    "field_changes",
    "foreign_writes",
    "is_plan_annotation",
    "is_rancher_manager",
    "keep_writers",
    "other_writers",
    "same_value",
    "writers_of",
]

SPEC_HARD: Final = "spec.hard"
ANNOTATION: Final = "annotation"
OUR_ANNOTATION_PREFIX: Final = "harvester-quota.io/"
WRITERS: Final = "harvesterQuotaWriters"
"""Where a cached quota keeps its writers (`keep_writers`): a key no Kubernetes object has, so
nothing mistakes it for the server's managedFields (a write of a cached quota would send them
back as the truth; this the API server drops as an unknown field)."""
RANCHER_MANAGERS: Final = frozenset({"rancher", "agent"})
"""The field managers of Rancher's server and of its cattle-cluster-agent (binaries `rancher`
and `agent`: client-go's default user agent starts with the binary's name, and the API server
takes a user agent's first part as the field manager)."""
STATUS: Final = "status"


@dataclass(frozen=True, order=True)
class FieldRef:
    """One field a plan writes: a key of spec.hard (SPEC_HARD) or an annotation (ANNOTATION)."""

    section: str
    key: str

    def __str__(self) -> str:
        return f"{self.section} {self.key}"


@dataclass(frozen=True)
class Writer:
    """One managedFields entry, reduced to the fields a plan writes that it owns."""

    manager: str
    operation: str
    time: str
    """RFC 3339, to the second ("" if the entry has none): when it last changed a field."""
    subresource: str
    fields: frozenset[FieldRef]


@dataclass(frozen=True)
class FieldChange:
    """A field's value before and after (None: absent)."""

    field: FieldRef
    old: str | None
    new: str | None

    def __str__(self) -> str:
        if self.new is None:
            return f"{self.field} {self.old} removed"
        return f"{self.field} {self.old if self.old is not None else '(none)'} -> {self.new}"


@dataclass(frozen=True)
class ForeignWrite:
    """The changes of one update that one writer other than us made."""

    writer: Writer
    changes: tuple[FieldChange, ...]

    def describe(self) -> str:
        """'spec.hard limits.cpu 3 -> 8; annotation harvester-quota.io/base removed'."""
        return "; ".join(str(change) for change in self.changes)


# managedFields ----------------------------------------------------------------------------------


def is_plan_annotation(key: str) -> bool:
    """Whether a plan writes the annotation (Harvester's UID keys aside: see the docstring):
    the room keys, ours, and Harvester's skip annotation (an adopted quota carries it)."""
    if key.startswith(ANNOTATION_MIGRATING_UID_PREFIX):
        return False
    if key == ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING:
        return True
    return key.startswith((MIGRATING_PREFIX, OUR_ANNOTATION_PREFIX))


def _owned(fields_v1: object) -> frozenset[FieldRef]:
    """The fields a plan writes among a fieldsV1 set (``{"f:spec": {"f:hard": {"f:k": {}}}}``)."""
    if not isinstance(fields_v1, Mapping):
        return frozenset()
    found: set[FieldRef] = set()
    for section, path in (
        (SPEC_HARD, ("f:spec", "f:hard")),
        (ANNOTATION, ("f:metadata", "f:annotations")),
    ):
        node: object = fields_v1
        for step in path:
            node = node.get(step) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        for name in node:
            if not isinstance(name, str) or not name.startswith("f:"):
                continue
            key = name[2:]
            if section == SPEC_HARD or is_plan_annotation(key):
                found.add(FieldRef(section, key))
    return frozenset(found)


def _entry_writer(entry: object) -> Writer | None:
    if not isinstance(entry, Mapping):
        return None
    return Writer(
        manager=str(entry.get("manager") or ""),
        operation=str(entry.get("operation") or ""),
        time=str(entry.get("time") or ""),
        subresource=str(entry.get("subresource") or ""),
        fields=_owned(entry.get("fieldsV1")),
    )


def _kept_writer(entry: object) -> Writer | None:
    if not isinstance(entry, Mapping):
        return None
    fields = entry.get("fields")
    refs = frozenset(
        FieldRef(str(f[0]), str(f[1]))
        for f in fields or ()
        if isinstance(f, Sequence) and len(f) == 2
    )
    return Writer(
        manager=str(entry.get("manager") or ""),
        operation=str(entry.get("operation") or ""),
        time=str(entry.get("time") or ""),
        subresource=str(entry.get("subresource") or ""),
        fields=refs,
    )


def writers_of(quota: Mapping[str, Any]) -> list[Writer]:
    """The quota's writers: from its managedFields as the API server returns them, or from
    WRITERS on a cached quota (`keep_writers`). Malformed entries are passed over."""
    kept = quota.get(WRITERS)
    if isinstance(kept, list):
        found = [_kept_writer(entry) for entry in kept]
    else:
        entries = metadata(quota).get("managedFields")
        found = [_entry_writer(entry) for entry in entries] if isinstance(entries, list) else []
    return [writer for writer in found if writer is not None]


def keep_writers(quota: Object) -> Object:
    """The quota cache's transform: managedFields replaced by WRITERS (each entry's manager,
    operation, time, subresource and the fields a plan writes it owns), then what every cache
    strips (store.strip_unread_fields). A few hundred bytes where managedFields take kilobytes."""
    quota[WRITERS] = [
        {
            "manager": w.manager,
            "operation": w.operation,
            "time": w.time,
            "subresource": w.subresource,
            "fields": [[f.section, f.key] for f in sorted(w.fields)],
        }
        for w in writers_of(quota)
    ]
    return strip_unread_fields(quota)


# What changed -----------------------------------------------------------------------------------


def _hard(quota: Mapping[str, Any]) -> Mapping[str, Any]:
    hard = (quota.get("spec") or {}).get("hard")
    return hard if isinstance(hard, Mapping) else {}


def same_value(old: str | None, new: str | None) -> bool:
    """Whether two values of a field are the same (None: absent; quantities by value)."""
    if old is None or new is None:
        return old is new
    if old == new:
        return True
    try:
        return Quantity.parse(old) == Quantity.parse(new)
    except ValueError:
        return False


def _diff(section: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[FieldChange]:
    for key in sorted(set(old) | set(new)):
        before = None if old.get(key) is None else str(old[key])
        after = None if new.get(key) is None else str(new[key])
        if not same_value(before, after):
            yield FieldChange(FieldRef(section, key), before, after)


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """The fields a plan writes whose value differs between `old` and `new`: cheap (two small
    maps compared), and empty for a status write, a label, any other annotation."""
    old_hard, new_hard = _hard(old), _hard(new)
    changes = [] if old_hard == new_hard else list(_diff(SPEC_HARD, old_hard, new_hard))
    old_notes = {k: v for k, v in annotations_of(old).items() if is_plan_annotation(k)}
    new_notes = {k: v for k, v in annotations_of(new).items() if is_plan_annotation(k)}
    if old_notes != new_notes:
        changes += _diff(ANNOTATION, old_notes, new_notes)
    return changes


# Who changed it ---------------------------------------------------------------------------------


def is_rancher_manager(manager: str) -> bool:
    """Whether a field manager is Rancher's (RANCHER_MANAGERS)."""
    return manager in RANCHER_MANAGERS


def _moved(old: Sequence[Writer], new: Sequence[Writer]) -> list[Writer]:
    """The writers of the main resource whose entry is new or whose time moved: those who
    changed a field between the two versions."""
    before = {(w.manager, w.operation, w.subresource): w.time for w in old}
    return [
        w
        for w in new
        if w.subresource != STATUS and before.get((w.manager, w.operation, w.subresource)) != w.time
    ]


def _newest(writers: Iterable[Writer]) -> Writer | None:
    return max(writers, key=lambda w: (w.time, w.manager, w.operation), default=None)


def _writer_of(
    change: FieldChange, owners: Sequence[Writer], moved: Sequence[Writer], ours: str
) -> Writer | None:
    """Who made `change`, if not us and if anyone can be found (see the module docstring)."""
    if change.new is not None:
        owning = [w for w in owners if change.field in w.fields]
        if owning:
            return None if any(w.manager == ours for w in owning) else _newest(owning)
    return _newest(w for w in moved if w.manager != ours)


def _at_base(quota: Mapping[str, Any], base: ResourceList) -> bool:
    """Whether spec.hard holds every key of Rancher's base at the base."""
    hard = _hard(quota)
    for key, value in base.items():
        text = hard.get(key)
        try:
            if text is None or Quantity.parse(str(text)) != value:
                return False
        except ValueError:
            return False
    return True


def _ours_to_judge(
    changes: Iterable[FieldChange], new: Mapping[str, Any], rancher_base: ResourceList | None
) -> list[FieldChange]:
    """The changes that are a plan's business: with Rancher's base, only its keys of spec.hard,
    and none when spec.hard is back at that base (Rancher's agent syncing it)."""
    if rancher_base is None:
        return list(changes)
    synced = _at_base(new, rancher_base)
    return [
        c
        for c in changes
        if c.field.section != SPEC_HARD or (c.field.key in rancher_base and not synced)
    ]


def foreign_writes(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    rancher_base: ResourceList | None,
    ours: str = FIELD_MANAGER,
    changes: Sequence[FieldChange] | None = None,
) -> list[ForeignWrite]:
    """What writers other than `ours` (and other than Rancher's) changed of the fields a plan
    writes between two versions of a quota, one ForeignWrite per writer, oldest first; [] for
    our own writes, status writes and Rancher's syncs to `rancher_base` (the base from the
    namespace's Rancher annotation, None without one). `changes`: `field_changes(old, new)`
    when the caller has it already."""
    judged = _ours_to_judge(
        field_changes(old, new) if changes is None else changes, new, rancher_base
    )
    if not judged:
        return []
    writers = [w for w in writers_of(new) if w.subresource != STATUS]
    moved = _moved(writers_of(old), writers)
    found: dict[Writer, list[FieldChange]] = {}
    for change in judged:
        writer = _writer_of(change, writers, moved, ours)
        if writer is not None and not is_rancher_manager(writer.manager):
            found.setdefault(writer, []).append(change)
    ordered = sorted(found.items(), key=lambda item: (item[0].time, item[0].manager))
    return [ForeignWrite(writer, tuple(changes)) for writer, changes in ordered]


def other_writers(
    quota: Mapping[str, Any], hard_keys: Iterable[str] | None, ours: str = FIELD_MANAGER
) -> list[Writer]:
    """The quota's writers other than `ours` that own a field a plan writes (of spec.hard, only
    `hard_keys`, every key when None), each reduced to those fields, oldest first: what
    `explain` lists. Status writers own none."""
    keys = None if hard_keys is None else frozenset(hard_keys)
    found = []
    for writer in writers_of(quota):
        if writer.manager == ours or writer.subresource == STATUS:
            continue
        owned = frozenset(
            f for f in writer.fields if f.section != SPEC_HARD or keys is None or f.key in keys
        )
        if owned:
            found.append(
                Writer(writer.manager, writer.operation, writer.time, writer.subresource, owned)
            )
    return sorted(found, key=lambda w: (w.time, w.manager))
