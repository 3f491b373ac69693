"""Harvester's annotation and label keys, and a tolerant reader of every key it ever wrote.

We take over from Harvester's quota controllers (or run beside them, adopting the quotas we
manage: resourcequota/plan.py `adoption_changes`), so we read all historic keys on a
ResourceQuota (name keys from v1.2, UID keys from v1.4.2, compensation and the resync flag from
v1.9, the skip switch from v1.4.2) and write per-VM keys whose value stays a plain ResourceList JSON,
so that Harvester's own readers (the VM-start check, the namespace webhook) still sum them.

The mirror of Harvester's Go: `pkg/util/constants.go`, `pkg/util/annotationkey.go` and
`pkg/util/resourcequota/utils.go`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from . import resources
from .resources import ResourceList

__all__ = [
    "ANNOTATION_ADOPTED",
    "ANNOTATION_MIGRATING_COMPENSATION",
    "ANNOTATION_MIGRATING_NAME_PREFIX",
    "ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED",
    "ANNOTATION_MIGRATING_UID_PREFIX",
    "ANNOTATION_MIGRATION_STATE",
    "ANNOTATION_MIGRATION_UID",
    "ANNOTATION_ROOM_MIGRATIONS",
    "ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING",
    "ANNOTATION_TIMESTAMP",
    "CATTLE_ANNOTATION_RESOURCE_QUOTA",
    "FALSE",
    "HARVESTER_PREFIX",
    "LABEL_DEFAULT_RESOURCE_QUOTA",
    "MIGRATING_PREFIX",
    "MIGRATION_STATE_ABORTING",
    "MIGRATION_STATE_MIGRATING",
    "MIGRATION_STATE_PENDING",
    "TRUE",
    "MigrationAnnotations",
    "adopted_migrating_vm_annotation_key",
    "is_valid_qualified_name_part",
    "legacy_migrating_vm_annotation_key",
    "migrating_uid_annotation_key",
    "migrating_vm_annotation_key",
    "parse_migration_annotations",
    "room_migrations",
]

HARVESTER_PREFIX: Final = "harvesterhci.io"
MIGRATING_PREFIX: Final = f"{HARVESTER_PREFIX}/migrating"
"""Every key Harvester ever wrote for migrations starts with this (name, UID, compensation, flag)."""

# --- on the ResourceQuota --------------------------------------------------------------------------

ANNOTATION_MIGRATING_NAME_PREFIX: Final = f"{HARVESTER_PREFIX}/migrating-"
"""`harvesterhci.io/migrating-<vm name>`: room held by one migrating VM (v1.2+, kept for reading and
deleting by v1.4.2+). Value: ResourceList JSON, e.g. '{"limits.cpu":"1","limits.memory":"1236Mi"}'.
Harvester matches it by prefix: every key that starts with it counts as a migrating VM."""

ANNOTATION_MIGRATING_UID_PREFIX: Final = f"{HARVESTER_PREFIX}/migratingUID-"
"""`harvesterhci.io/migratingUID-<vmi uid>`: the same, keyed by VMI UID (v1.4.2+,
harvester/harvester#7464: a name key is invalid for VM names over 53 characters). Not a prefix
of, nor prefixed by, the name key."""

ANNOTATION_MIGRATING_COMPENSATION: Final = f"{HARVESTER_PREFIX}/migratingCompensation"
"""Extra room (ResourceList JSON, only limits.memory is read) for VMs already over quota (v1.9+).
Harvester treats an empty value as absent."""

ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED: Final = (
    f"{HARVESTER_PREFIX}/migratingScalingResyncNeeded"
)
"""Harvester v1.9's ping-pong flag between its VMIM and RQ controllers: "true" until the RQ
controller has applied the scale-up, then "false" (the key stays). Never written or read here:
`SetAnnotationMigratingScalingResyncNeeded`, `ClearAnnotationMigratingScalingResyncNeeded` and
`IsMigratingScalingResyncNeeded` have no twin (one writer needs no flag); a plan removes it."""

ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: Final = (
    f"{HARVESTER_PREFIX}/skipResourceQuotaAutoScaling"
)
"""Set to exactly "true" to stop all automatic changes to that ResourceQuota (v1.4.2+)."""

ANNOTATION_ADOPTED: Final = "harvester-quota.io/adopted-from-harvester"
"""Set ("true") by our controller beside Harvester's skip annotation when it set that annotation
itself, to stop Harvester's resourcequota controller on a quota it manages
(resourcequota/plan.py): a skip annotation with this marker is ours and no opt-out; one without it is an administrator's.
Only administrators and controllers may write a ResourceQuota (Kubernetes' edit and admin roles
only read them), so a tenant can set neither."""

ANNOTATION_ROOM_MIGRATIONS: Final = "harvester-quota.io/room-migrations"
"""Written by our controller in the same write as the rooms it records (raised above the base
or not), removed with the last room: the uids of the migrations whose room the plan holds, sorted,
comma-separated. A quota whose copy names a migration was written by a plan that read it; the
controller gives that room
back only once the migration is done (util/resourcequota/rooms.py), so while its target pod is
being created no release of it can be newer than that copy (webhook/resources/pod/targets.py).
Only administrators and controllers may write a ResourceQuota: a tenant cannot set it."""


def room_migrations(annotations: Mapping[str, str] | None) -> frozenset[str]:
    """The migration uids ANNOTATION_ROOM_MIGRATIONS names (empty when absent)."""
    value = (annotations or {}).get(ANNOTATION_ROOM_MIGRATIONS) or ""
    return frozenset(uid for uid in value.split(",") if uid)


# --- on the VirtualMachineInstance -----------------------------------------------------------------

ANNOTATION_MIGRATION_UID: Final = f"{HARVESTER_PREFIX}/migrationUID"
"""The UID of the VMIM currently migrating this VMI."""

ANNOTATION_MIGRATION_STATE: Final = f"{HARVESTER_PREFIX}/migrationState"
"""One of the MIGRATION_STATE_* values, shown by Harvester's UI."""

MIGRATION_STATE_PENDING: Final = "Pending migration"  # VMIM phase unset or Pending
MIGRATION_STATE_MIGRATING: Final = "Migrating"  # Scheduling .. Running
MIGRATION_STATE_ABORTING: Final = "Aborting migration"

ANNOTATION_TIMESTAMP: Final = f"{HARVESTER_PREFIX}/timestamp"
"""Harvester's "touch" annotation: writing a fresh value forces an update event."""

# --- Rancher ---------------------------------------------------------------------------------------

CATTLE_ANNOTATION_RESOURCE_QUOTA: Final = "field.cattle.io/resourceQuota"
"""On the Namespace: Rancher's `{"limit": {...}}`, the base quota (see harvester_quota.util.rancher)."""

LABEL_DEFAULT_RESOURCE_QUOTA: Final = "resourcequota.management.cattle.io/default-resource-quota"
"""On the ResourceQuota Rancher manages (value "true"). Rancher and Harvester find the RQ by this
label only, first match; the name (default-xxxxx) is generated."""

LABEL_ROOM_HELD: Final = "harvester-quota.io/room-held"
"""Set ("true") by the controller on a namespace from before it raises the quota for a migration
until after it has given the room back, and for good on one whose Rancher quota it raises
directly (set there between rooms: controller/resourcequota). The webhook's room-held-pods rule selects these
namespaces with failurePolicy Fail, so with the webhook down no pod but KubeVirt's targets gets in
while room is held (docs/design.md, "Pods while room is held")."""

LABEL_PAUSED: Final = "harvester-quota.io/paused"
"""The per-namespace opt-out (value "true") on a Namespace: every room of the namespace is given
back and none is raised while it is set, as under the controller's global switch (`run
--paused`). Only administrators may set or remove it (the chart's paused-label policy:
docs/security.md, row 5k); Harvester's skip annotation on the quota is the tenant-visible other."""

ANNOTATION_PAUSED: Final = "harvester-quota.io/paused"
"""On the controllers' leader Lease (value "true"): the leader runs with `--paused`, so that
`explain` can say so."""

TRUE: Final = "true"
FALSE: Final = "false"


def opted_out(namespace: Mapping[str, Any] | None) -> bool:
    """Whether `namespace` (a Namespace object; None: no) carries the opt-out label
    LABEL_PAUSED, exactly "true"."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return bool(labels.get(LABEL_PAUSED) == TRUE)


"""Harvester compares flags to exactly "true" (Go `==`): "True" or "TRUE" are false. So do we."""

# --- key validation --------------------------------------------------------------------------------

_QUALIFIED_NAME_MAX_LENGTH: Final = 63
_QUALIFIED_NAME_RE: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_NAME_PART_CHAR_RE: Final = re.compile(r"[^-A-Za-z0-9_.]")


def is_valid_qualified_name_part(name: str) -> bool:
    """The name part of a label or annotation key: 1..63 chars, alphanumeric at both ends."""
    return len(name) <= _QUALIFIED_NAME_MAX_LENGTH and bool(_QUALIFIED_NAME_RE.fullmatch(name))


# --- per-VM keys -----------------------------------------------------------------------------------

_NAME_PART_PREFIX: Final = ANNOTATION_MIGRATING_NAME_PREFIX.split("/", 1)[1]  # "migrating-"
_DIGEST_HEX_CHARS: Final = 10
"""40 bits of sha256: a collision needs about a million long-named VMs in one namespace."""

_READABLE_MAX: Final = _QUALIFIED_NAME_MAX_LENGTH - len(_NAME_PART_PREFIX) - 1 - _DIGEST_HEX_CHARS
"""42: "migrating-" + readable + "-" + digest fills the 63-character name part exactly."""


def legacy_migrating_vm_annotation_key(vm_name: str) -> str:
    """Harvester's name key, verbatim (`GenerateAnnotationKeyMigratingVMName`).

    Invalid for names over 53 characters, so it is only for reading and deleting what Harvester
    (or a Harvester whose write failed) may have left; write `migrating_vm_annotation_key`.
    """
    return ANNOTATION_MIGRATING_NAME_PREFIX + vm_name


def migrating_vm_annotation_key(vm_name: str) -> str:
    """The per-VM key we write: always a valid annotation key, the same name always the same key.

    `harvesterhci.io/migrating-<vm name>` when that is a valid key (the VM name is at most 53
    characters), exactly as Harvester's `GenerateAnnotationKeyMigratingVMName` writes it.
    Otherwise the first 42 characters of the name (without trailing '-', '.' or '_'), '-', and 10
    hex characters of the sha256 of the whole name:
    `harvesterhci.io/migrating-a-very-long-name-exceeds-the-63-length-and-11e086f797` for the
    75-character name of harvester/harvester#7464. Harvester's readers still see a `migrating-`
    key and sum its value.
    The scheme must never change: a key written before an upgrade is found again by name after it.
    """
    if not vm_name:
        raise ValueError("a VM name must not be empty")
    legacy = legacy_migrating_vm_annotation_key(vm_name)
    if is_valid_qualified_name_part(_NAME_PART_PREFIX + vm_name):
        return legacy
    return _digest_key(vm_name, "-")


def adopted_migrating_vm_annotation_key(vm_name: str) -> str:
    """The per-VM key we write on a quota adopted from Harvester (resourcequota/plan.py):
    never Harvester's own name key of any VM, which Harvester's migration controller deletes when
    it records its UID key and when the migration ends (and skips its own key for a VM whose
    name key is there). For a name of at most 53 characters: the digest form with '_' before the
    digest (`harvesterhci.io/migrating-vm1_7b11e3d1b4`), which no VM name can hold; for a longer
    name, the same key as `migrating_vm_annotation_key`. Harvester's readers still sum it. The
    scheme must never change either."""
    if not vm_name:
        raise ValueError("a VM name must not be empty")
    if is_valid_qualified_name_part(_NAME_PART_PREFIX + vm_name):
        return _digest_key(vm_name, "_")
    return migrating_vm_annotation_key(vm_name)


def _digest_key(vm_name: str, separator: str) -> str:
    """`harvesterhci.io/migrating-<readable><separator><digest>`, at most 63 characters in the
    name part."""
    digest = hashlib.sha256(vm_name.encode("utf-8")).hexdigest()[:_DIGEST_HEX_CHARS]
    # A VM name (a DNS subdomain) only holds key characters; from any other text they are dropped.
    readable = _NAME_PART_CHAR_RE.sub("", vm_name)[:_READABLE_MAX].rstrip("-_.")
    name_part = (
        f"{_NAME_PART_PREFIX}{readable}{separator}{digest}"
        if readable
        else _NAME_PART_PREFIX + digest
    )
    return f"{HARVESTER_PREFIX}/{name_part}"


def migrating_uid_annotation_key(vmi_uid: str) -> str:
    """Harvester v1.4.2+'s key for a migrating VMI (`GenerateAnnotationKeyMigratingVMUID`)."""
    return ANNOTATION_MIGRATING_UID_PREFIX + vmi_uid


# --- reading a ResourceQuota's annotations ---------------------------------------------------------


@dataclass(frozen=True)
class MigrationAnnotations:
    """What Harvester (or we) recorded on one ResourceQuota.

    The per-VM dicts are keyed by the full annotation key, so the caller can delete exactly what it
    read. A key whose value does not parse is not in them but in `invalid` (key -> message), so the
    caller can emit a Warning event and leave the quota alone; it still counts in `migrating_keys`,
    because Harvester's checks (namespace webhook, `HasMigratingVM`) look at keys only.
    """

    name_keyed: dict[str, ResourceList] = field(default_factory=dict)
    """`harvesterhci.io/migrating-*`: Harvester's name keys and our (possibly hashed) keys."""
    uid_keyed: dict[str, ResourceList] = field(default_factory=dict)
    """`harvesterhci.io/migratingUID-*`: Harvester v1.4.2+ keys."""
    compensation: ResourceList | None = None
    """None when absent or empty (Harvester treats "" as absent). Harvester's
    `HasMigratingCompensation`, `getResourceListOfMigratingCompensation` and
    `GetCompensationFromResourceQuota` read it; here it is read only to be removed (a plan's
    floor is the compensation, resourcequota/raises.py)."""
    skip_auto_scaling: bool = False
    """The skip switch is exactly "true" (Harvester's `IsResourceQuotaAutoScalingDisabled`; "True"
    does not count) and it is an opt-out: not ours (`adopted`)."""
    adopted: bool = False
    """The skip switch is exactly "true" and carries our marker ANNOTATION_ADOPTED: we set it to
    stop Harvester's resourcequota controller, and the quota is ours to raise."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Annotation key -> why its value was not understood."""
    migrating_keys: frozenset[str] = frozenset()
    """Every per-VM key present (name or UID), valid or not; any at all is Harvester's
    `HasMigratingVM`, whatever its value."""

    def migrating_total(self) -> ResourceList:
        """The sum of all readable per-VM entries (what Harvester adds to the base): Harvester's
        `GetVMIMResourcesFromRQAnnotation` (`getVMIMResourcesFromRQAnnotation`,
        `getRunningVMIMResources`). Ours reads the usage without targets from the rooms; these
        are summed only for the base of a quota adopted mid-migration."""
        return resources.total([*self.name_keyed.values(), *self.uid_keyed.values()])


def parse_migration_annotations(annotations: Mapping[str, str] | None) -> MigrationAnnotations:
    """Classify a ResourceQuota's annotations; never raises on bad values (see `invalid`).
    Harvester's `getResourceListFromMigratingVMs` reads the same per-VM keys, but fails the
    whole read on one unreadable value."""
    if not annotations:
        return MigrationAnnotations()
    name_keyed: dict[str, ResourceList] = {}
    uid_keyed: dict[str, ResourceList] = {}
    invalid: dict[str, str] = {}
    migrating_keys: set[str] = set()
    compensation: ResourceList | None = None

    for key, value in annotations.items():
        if key.startswith(ANNOTATION_MIGRATING_UID_PREFIX):
            target = uid_keyed
        elif key.startswith(ANNOTATION_MIGRATING_NAME_PREFIX):
            target = name_keyed
        elif key == ANNOTATION_MIGRATING_COMPENSATION:
            if value:
                compensation = _read_resource_list(key, value, invalid)
            continue
        else:
            continue
        migrating_keys.add(key)
        parsed = _read_resource_list(key, value, invalid)
        if parsed is not None:
            target[key] = parsed

    skip_value = annotations.get(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING)
    adopted = skip_value == TRUE and annotations.get(ANNOTATION_ADOPTED) == TRUE
    return MigrationAnnotations(
        name_keyed=name_keyed,
        uid_keyed=uid_keyed,
        compensation=compensation,
        skip_auto_scaling=skip_value == TRUE and not adopted,
        adopted=adopted,
        invalid=invalid,
        migrating_keys=frozenset(migrating_keys),
    )


def _read_resource_list(key: str, value: object, invalid: dict[str, str]) -> ResourceList | None:
    if not isinstance(value, str):
        invalid[key] = f"annotation value must be a string, not {type(value).__name__}"
        return None
    try:
        parsed = resources.loads(value)
    except ValueError as err:
        invalid[key] = str(err)
        return None
    negative = resources.negative_keys(parsed)
    if negative:
        invalid[key] = f"negative quantities for {', '.join(negative)} in {value!r}"
        return None
    return parsed
