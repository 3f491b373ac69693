"""Harvester annotation keys and the tolerant reader of a ResourceQuota's annotations."""

from __future__ import annotations

import re

import pytest
from harvester_quota.util import annotations as ann
from harvester_quota.util.annotations import (
    MigrationAnnotations,
    adopted_migrating_vm_annotation_key,
    legacy_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
    migrating_vm_annotation_key,
    parse_migration_annotations,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import ResourceList
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.annotationkeys import is_valid_annotation_key

# Harvester's fixture for issue #7464 (vmim_controller_test.go): 75 characters.
LONG_NAME = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
UID = "8a7e5a1c-0b5e-4c1a-9f3e-2d6f1c0e9b7a"


def rl(**values: str) -> ResourceList:
    return {key.replace("_", "."): Quantity.parse(value) for key, value in values.items()}


def test_constants_match_harvester() -> None:
    assert ann.ANNOTATION_MIGRATING_NAME_PREFIX == "harvesterhci.io/migrating-"
    assert ann.ANNOTATION_MIGRATING_UID_PREFIX == "harvesterhci.io/migratingUID-"
    assert ann.ANNOTATION_MIGRATING_COMPENSATION == "harvesterhci.io/migratingCompensation"
    assert (
        ann.ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED
        == "harvesterhci.io/migratingScalingResyncNeeded"
    )
    assert (
        ann.ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING
        == "harvesterhci.io/skipResourceQuotaAutoScaling"
    )
    assert ann.ANNOTATION_MIGRATION_UID == "harvesterhci.io/migrationUID"
    assert ann.ANNOTATION_MIGRATION_STATE == "harvesterhci.io/migrationState"
    assert ann.MIGRATION_STATE_PENDING == "Pending migration"
    assert ann.MIGRATION_STATE_MIGRATING == "Migrating"
    assert ann.MIGRATION_STATE_ABORTING == "Aborting migration"
    assert ann.ANNOTATION_TIMESTAMP == "harvesterhci.io/timestamp"
    assert ann.CATTLE_ANNOTATION_RESOURCE_QUOTA == "field.cattle.io/resourceQuota"
    assert (
        ann.LABEL_DEFAULT_RESOURCE_QUOTA
        == "resourcequota.management.cattle.io/default-resource-quota"
    )
    for key in (
        ann.ANNOTATION_MIGRATING_COMPENSATION,
        ann.ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
        ann.ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
        ann.ANNOTATION_MIGRATION_UID,
        ann.ANNOTATION_MIGRATION_STATE,
        ann.ANNOTATION_TIMESTAMP,
        ann.CATTLE_ANNOTATION_RESOURCE_QUOTA,
        ann.LABEL_DEFAULT_RESOURCE_QUOTA,
    ):
        assert is_valid_annotation_key(key), key


# --------------------------------------------------------------------------- key validation


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("harvesterhci.io/migrating-vm1", True),
        (f"harvesterhci.io/migratingUID-{UID}", True),
        ("simple", True),
        ("a", True),
        ("A_b.c-D", True),
        ("Harvesterhci.IO/x", True),  # annotation keys are lower-cased before validation
        ("x" * 63, True),
        ("x" * 64, False),
        (f"{'p' * 253}/x", True),
        (f"{'p' * 254}/x", False),
        (f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 61}/name", True),  # 253-char prefix
        ("", False),
        ("/x", False),
        ("x/", False),
        ("a/b/c", False),
        ("-x", False),
        ("x-", False),
        ("x_", False),
        (".x", False),
        ("has space", False),
        ("bad_prefix/x", False),
        ("-bad.prefix/x", False),
        ("bad..prefix/x", False),
        ("x\n", False),
        ("café", False),
        (legacy_migrating_vm_annotation_key(LONG_NAME), False),  # issue #7464
        (legacy_migrating_vm_annotation_key("a" * 53), True),
        (legacy_migrating_vm_annotation_key("a" * 54), False),
    ],
)
def test_is_valid_annotation_key(key: str, valid: bool) -> None:
    assert is_valid_annotation_key(key) is valid


# --------------------------------------------------------------------------- per-VM keys


def test_short_names_keep_harvesters_key() -> None:
    assert migrating_vm_annotation_key("vm1") == "harvesterhci.io/migrating-vm1"
    name_53 = "v" * 52 + "1"
    assert migrating_vm_annotation_key(name_53) == f"harvesterhci.io/migrating-{name_53}"
    dotted = "web.frontend-01"
    assert migrating_vm_annotation_key(dotted) == f"harvesterhci.io/migrating-{dotted}"


def _name_part(key: str) -> str:
    prefix, _, name = key.partition("/")
    assert prefix == "harvesterhci.io"
    return name


def test_issue_7464_long_name_is_hashed_into_a_valid_key() -> None:
    key = migrating_vm_annotation_key(LONG_NAME)
    assert is_valid_annotation_key(key)
    name = _name_part(key)
    assert len(name) == 63
    assert re.fullmatch(r"migrating-a-very-long-name-exceeds-the-63-length-and-[0-9a-f]{10}", name)
    assert key == migrating_vm_annotation_key(LONG_NAME)  # stable
    # Pinned: keys written before an upgrade must be found again after it.
    assert key == "harvesterhci.io/migrating-a-very-long-name-exceeds-the-63-length-and-11e086f797"
    assert key.startswith(ann.ANNOTATION_MIGRATING_NAME_PREFIX)  # Harvester still sums it


def test_54_character_name_is_the_first_to_be_hashed() -> None:
    name = "v" * 54
    key = migrating_vm_annotation_key(name)
    assert key != legacy_migrating_vm_annotation_key(name)
    assert _name_part(key).startswith("migrating-" + "v" * 42 + "-")


def test_253_character_name() -> None:
    name = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(name) == 253
    key = migrating_vm_annotation_key(name)
    assert is_valid_annotation_key(key)
    assert _name_part(key).startswith("migrating-" + "a" * 42 + "-")


@pytest.mark.parametrize(
    "name",
    [
        "a" * 41 + "." + "b" * 30,  # the cut falls just after a '.'
        "a" * 41 + "-" + "b" * 30,  # ... or a '-'
        "a" * 40 + "-." + "b" * 30,
        "a" * 42 + "-" + "b" * 30,  # ... or just before one
        "a" + "-" * 60 + "b",
        "a" + "." * 60 + "b",
    ],
)
def test_truncation_never_leaves_a_dangling_separator(name: str) -> None:
    key = migrating_vm_annotation_key(name)
    assert is_valid_annotation_key(key)
    readable = re.fullmatch(r"migrating-(.*)-[0-9a-f]{10}", _name_part(key))
    assert readable is not None
    assert readable.group(1)[-1].isalnum()
    assert name.startswith(readable.group(1))


def test_names_that_are_not_dns_names_still_get_valid_keys() -> None:
    for name in ("vm-", "vm.", "-vm", "UPPER_case", "sp ace", "x/y", "émile", "-", "...", "_"):
        key = migrating_vm_annotation_key(name)
        assert is_valid_annotation_key(key), (name, key)
    assert migrating_vm_annotation_key("UPPER_case") == "harvesterhci.io/migrating-UPPER_case"
    with pytest.raises(ValueError, match="empty"):
        migrating_vm_annotation_key("")


def test_similar_long_names_get_different_keys() -> None:
    a = LONG_NAME
    b = LONG_NAME[:-1] + "m"
    assert migrating_vm_annotation_key(a) != migrating_vm_annotation_key(b)
    # Same 42-character readable prefix, told apart by the digest.
    assert (
        _name_part(migrating_vm_annotation_key(a))[:53]
        == _name_part(migrating_vm_annotation_key(b))[:53]
    )


DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
DNS_SUBDOMAIN = (
    st.lists(DNS_LABEL, min_size=1, max_size=6).map(".".join).filter(lambda name: len(name) <= 253)
)


@given(DNS_SUBDOMAIN)
def test_every_vm_name_gets_a_valid_stable_key(name: str) -> None:
    key = migrating_vm_annotation_key(name)
    assert is_valid_annotation_key(key)
    assert key == migrating_vm_annotation_key(name)
    if len(name) <= 53:
        assert key == legacy_migrating_vm_annotation_key(name)


@given(st.text(min_size=1, max_size=300))
def test_any_text_gets_a_valid_key(name: str) -> None:
    assert is_valid_annotation_key(migrating_vm_annotation_key(name))


@given(st.sets(DNS_SUBDOMAIN, min_size=2, max_size=20))
def test_different_names_get_different_keys(names: set[str]) -> None:
    assert len({migrating_vm_annotation_key(name) for name in names}) == len(names)


def test_the_uid_key_is_harvesters_and_valid() -> None:
    assert migrating_uid_annotation_key(UID) == f"harvesterhci.io/migratingUID-{UID}"
    assert is_valid_annotation_key(migrating_uid_annotation_key(UID))


def test_the_adopted_key_is_never_harvesters_name_key_and_still_a_migrating_key() -> None:
    """Harvester's migration controller deletes `migrating-<vm>` (its name key) when it records
    its UID key and when a migration ends: the key we write on an adopted quota is another one,
    which Harvester's readers still sum (the `migrating-` prefix), and for a name over 53
    characters the same as the one we always wrote. The abuse: a tenant's VM named like our key
    for another VM (`vm1-<digest>`) gets a name key of its own, never ours: '_' is in no VM name."""
    key = adopted_migrating_vm_annotation_key("vm1")
    assert key != legacy_migrating_vm_annotation_key("vm1")
    assert key.startswith("harvesterhci.io/migrating-vm1_")
    assert is_valid_annotation_key(key)
    assert adopted_migrating_vm_annotation_key(LONG_NAME) == migrating_vm_annotation_key(LONG_NAME)
    lookalike = key.removeprefix("harvesterhci.io/migrating-").replace("_", "-")
    assert legacy_migrating_vm_annotation_key(lookalike) != key
    assert parse_migration_annotations({key: '{"limits.cpu":"1"}'}).name_keyed == {
        key: {"limits.cpu": Quantity.parse("1")}
    }


# --------------------------------------------------------------------------- parsing


def test_empty_annotations() -> None:
    for empty in (None, {}):
        parsed = parse_migration_annotations(empty)
        assert parsed == MigrationAnnotations()
        assert not parsed.migrating_keys
        assert parsed.migrating_total() == {}
        assert not parsed.skip_auto_scaling
        assert parsed.compensation is None


def test_every_historic_key_is_classified() -> None:
    hashed = migrating_vm_annotation_key(LONG_NAME)
    annotations = {
        # Harvester v1.2 - v1.4.1 (its own unit-test value)
        "harvesterhci.io/migrating-vm1": '{"limits.cpu":"1","limits.memory":"1236Mi"}',
        # Harvester v1.4.2+ (PR #7504's test log value)
        f"harvesterhci.io/migratingUID-{UID}": '{"limits.cpu":"1","limits.memory":"1456469952"}',
        # ours, for a long name
        hashed: '{"limits.cpu":"2","limits.memory":"4531245057"}',
        "harvesterhci.io/migratingCompensation": '{"limits.memory":"134217728"}',
        "harvesterhci.io/migratingScalingResyncNeeded": "true",
        "harvesterhci.io/skipResourceQuotaAutoScaling": "true",
        # not ours
        "harvesterhci.io/migrationUID": "x",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "harvesterhci.io/migratingFoo": "{bad",
    }
    parsed = parse_migration_annotations(annotations)
    assert parsed.invalid == {}
    assert parsed.name_keyed == {
        "harvesterhci.io/migrating-vm1": rl(limits_cpu="1", limits_memory="1236Mi"),
        hashed: rl(limits_cpu="2", limits_memory="4531245057"),
    }
    assert parsed.uid_keyed == {
        f"harvesterhci.io/migratingUID-{UID}": rl(limits_cpu="1", limits_memory="1456469952"),
    }
    assert parsed.compensation == rl(limits_memory="128Mi")
    assert parsed.skip_auto_scaling
    assert parsed.migrating_keys == {
        "harvesterhci.io/migrating-vm1",
        f"harvesterhci.io/migratingUID-{UID}",
        hashed,
    }
    assert parsed.migrating_total() == rl(limits_cpu="4", limits_memory="7283754945")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{bad", "not valid JSON"),
        ('{"limits.memory":"2Gi invalid"}', "limits.memory"),
        ('{"limits.cpu":"10000m invalid"}', "10000m invalid"),
        ("[]", "not a JSON object"),
        ('"2Gi"', "not a JSON object"),
        ("", "invalid resource list JSON"),
        ('{"limits.cpu":true}', "limits.cpu"),
        ('{"limits.cpu":NaN}', "NaN"),
        ('{"limits.cpu":"-1"}', "negative quantities for limits.cpu"),
        ('{"limits.cpu":"1","limits.memory":-5}', "negative quantities for limits.memory"),
    ],
)
def test_invalid_values_are_collected_not_raised(value: str, fragment: str) -> None:
    good = "harvesterhci.io/migrating-vm1"
    bad = "harvesterhci.io/migrating-vm2"
    bad_uid = f"harvesterhci.io/migratingUID-{UID}"
    parsed = parse_migration_annotations(
        {
            good: '{"limits.cpu":"1"}',
            bad: value,
            bad_uid: value,
            "harvesterhci.io/migratingCompensation": value,
        }
    )
    # An empty compensation is absent for Harvester, not invalid.
    compensation = {"harvesterhci.io/migratingCompensation"} if value else set()
    assert set(parsed.invalid) == {bad, bad_uid} | compensation
    assert fragment in parsed.invalid[bad]
    assert parsed.name_keyed == {good: rl(limits_cpu="1")}
    assert parsed.uid_keyed == {}
    assert parsed.compensation is None
    # Harvester's checks look at keys only: an unreadable key still means "a VM is migrating".
    assert parsed.migrating_keys == {good, bad, bad_uid}
    assert parsed.migrating_total() == rl(limits_cpu="1")


def test_go_json_details_of_values() -> None:
    parsed = parse_migration_annotations(
        {
            "harvesterhci.io/migrating-a": "null",  # Go: a nil list, no error
            "harvesterhci.io/migrating-b": '{"limits.cpu": 2, "limits.memory": " 1Gi "}',
            "harvesterhci.io/migrating-": "{}",  # an empty VM name still matches the prefix
        }
    )
    assert parsed.invalid == {}
    assert parsed.name_keyed["harvesterhci.io/migrating-a"] == {}
    assert parsed.name_keyed["harvesterhci.io/migrating-b"] == rl(
        limits_cpu="2", limits_memory="1Gi"
    )
    assert "harvesterhci.io/migrating-" in parsed.migrating_keys


def test_compensation_empty_is_absent() -> None:
    parsed = parse_migration_annotations({"harvesterhci.io/migratingCompensation": ""})
    assert parsed.compensation is None
    assert parsed.invalid == {}
    assert not parsed.migrating_keys  # compensation is not a per-VM key


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("false", False), ("True", False), ("TRUE", False), ("", False), ("1", False)],
)
def test_flags_compare_to_exactly_true_like_harvester(value: str, expected: bool) -> None:
    parsed = parse_migration_annotations(
        {
            "harvesterhci.io/skipResourceQuotaAutoScaling": value,
            "harvesterhci.io/migratingScalingResyncNeeded": value,
        }
    )
    assert parsed.skip_auto_scaling is expected


def test_absent_flags() -> None:
    parsed = parse_migration_annotations({"other": "x"})
    assert not parsed.skip_auto_scaling and not parsed.adopted
