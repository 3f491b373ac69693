"""OwnWrites: a write is preferred over an older cache, and only over an older one."""

from __future__ import annotations

from harvester_quota.generic.ownwrites import OwnWrites
from harvester_quota.generic.resource import Object


def obj(version: str, uid: str = "u1", value: str = "") -> Object:
    return {"metadata": {"uid": uid, "resourceVersion": version}, "value": value}


def test_the_write_stands_until_the_cache_reaches_it_then_is_forgotten() -> None:
    writes = OwnWrites()
    writes.wrote("ns", "10", obj("12", value="ours"))
    assert writes.newest("ns", obj("10"))["value"] == "ours"
    assert writes.newest("ns", obj("11"))["value"] == "ours"
    assert writes.newest("ns", obj("12", value="cached"))["value"] == "cached"
    assert writes.newest("ns", obj("10", value="cached"))["value"] == "cached", "forgotten"


def test_an_object_created_again_is_never_taken_for_ours() -> None:
    writes = OwnWrites()
    writes.wrote("ns", "10", obj("12", value="ours"))
    assert writes.newest("ns", obj("5", uid="u2", value="new"))["value"] == "new"


def test_opaque_versions_count_only_the_replaced_one_as_older() -> None:
    writes = OwnWrites()
    writes.wrote("ns", "abc", obj("def", value="ours"))
    assert writes.newest("ns", obj("abc"))["value"] == "ours"
    assert writes.newest("ns", obj("xyz", value="cached"))["value"] == "cached"


def test_a_forgotten_write_leaves_the_cache_in_charge() -> None:
    writes = OwnWrites()
    writes.wrote("ns", "10", obj("12", value="ours"))
    writes.forget("ns")
    assert writes.newest("ns", obj("10", value="cached"))["value"] == "cached"
