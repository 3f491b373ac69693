"""The quota write's JSON patch: what it tests, what it changes (conditional.py). The API server
applying it is tested on the real cluster (test_controllers.py); here, an RFC 6902 applier of
the operations it uses checks the result and the condition on any quota."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.util.resourcequota.conditional import conditional_patch, failed_test, pointer
from hypothesis import given
from hypothesis import strategies as st


class PatchTestFailed(Exception):
    pass


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[part]
    return doc, parts[-1]


def apply(doc: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """add, remove and test as RFC 6902 defines them (a test of a missing member expects null;
    a missing parent fails, as on the API server)."""
    doc = copy.deepcopy(doc)
    for op in operations:
        parent, key = _parent(doc, op["path"])
        if op["op"] == "test":
            if parent.get(key) != op["value"]:
                raise PatchTestFailed(op["path"])
        elif op["op"] == "add":
            parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[key]
    return doc


def quota(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "q", "namespace": "ns", "uid": "u1", "labels": {"l": "1"}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"hard": {"limits.cpu": "3", "pods": "10"}}}


def merge(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """What the merge patch means (RFC 7386, one level of maps under spec.hard/annotations)."""
    doc = copy.deepcopy(doc)
    had_annotations = "annotations" in doc["metadata"]
    for where, changes in (
        (doc["spec"].setdefault("hard", {}), (patch.get("spec") or {}).get("hard") or {}),
        (
            doc["metadata"].setdefault("annotations", {}),
            (patch.get("metadata") or {}).get("annotations") or {},
        ),
    ):
        for key, value in changes.items():
            if value is None:
                where.pop(key, None)
            else:
                where[key] = value
    if not had_annotations and not doc["metadata"]["annotations"]:
        del doc["metadata"]["annotations"]
    return doc


KEYS = st.sampled_from(
    ["harvesterhci.io/migrating-vm1", "harvester-quota.io/base", "other.io/x", "a/b~c"]
)
VALUES = st.one_of(st.none(), st.sampled_from(["1", "2"]))


@given(
    st.one_of(st.none(), st.dictionaries(KEYS, st.sampled_from(["1", "2"]))),
    st.dictionaries(KEYS, VALUES),
    st.dictionaries(st.sampled_from(["limits.cpu", "pods", "requests.memory"]), VALUES),
)
def test_the_patch_does_what_the_merge_patch_says_on_the_quota_it_was_planned_from(
    annotations: dict[str, str] | None, annotation_changes: dict[str, Any], hard: dict[str, Any]
) -> None:
    planned = quota(annotations)
    patch: dict[str, Any] = {
        "spec": {"hard": hard},
        "metadata": {"annotations": annotation_changes},
    }
    result = apply(planned, conditional_patch(planned, patch))
    assert result == merge(planned, patch)


@pytest.mark.parametrize(
    "edit",
    [
        lambda q: q["spec"]["hard"].update({"limits.cpu": "4"}),
        lambda q: q["spec"].update({"scopes": ["Terminating"]}),
        lambda q: q["metadata"]["labels"].pop("l"),
        lambda q: q["metadata"]["annotations"].update({"harvester-quota.io/base": "{}"}),
        lambda q: q["metadata"]["annotations"].update({"harvesterhci.io/migrating-vm1": "{}"}),
        lambda q: q["metadata"]["annotations"].update(
            {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}
        ),
        lambda q: q["metadata"].pop("annotations"),
        lambda q: q["metadata"].update({"uid": "u2"}),
    ],
    ids=[
        "spec.hard",
        "scopes",
        "label",
        "read-annotation",
        "written-annotation",
        "skip-added",
        "annotations-gone",
        "recreated",
    ],
)
def test_any_change_the_plan_read_fails_the_patch(edit: Any) -> None:
    planned = quota({"harvester-quota.io/base": '{"limits.cpu":"3"}'})
    patch = {
        "spec": {"hard": {"limits.cpu": "5"}},
        "metadata": {"annotations": {"harvesterhci.io/migrating-vm1": '{"limits.cpu":"2"}'}},
    }
    operations = conditional_patch(planned, patch)
    stored = copy.deepcopy(planned)
    edit(stored)
    with pytest.raises((PatchTestFailed, KeyError)):
        apply(stored, operations)


def test_status_and_unread_metadata_do_not_fail_the_patch() -> None:
    planned = quota({"harvester-quota.io/base": "{}"})
    patch = {"spec": {"hard": {"limits.cpu": "5"}}}
    stored = copy.deepcopy(planned)
    stored["status"] = {"hard": {"limits.cpu": "3"}, "used": {"limits.cpu": "2"}}
    stored["metadata"]["resourceVersion"] = "99"
    stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    result = apply(stored, conditional_patch(planned, patch))
    assert result["spec"]["hard"]["limits.cpu"] == "5"
    assert "kubectl.kubernetes.io/last-applied-configuration" in result["metadata"]["annotations"]


def test_pointers_escape_tilde_and_slash() -> None:
    assert pointer("metadata", "annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"


def test_only_a_422_without_causes_is_a_failed_test() -> None:
    assert failed_test(errors.Invalid("the server rejected our request", status=422))
    invalid = errors.Invalid(
        "ResourceQuota is invalid", status=422, details={"causes": [{"field": "spec.hard"}]}
    )
    assert not failed_test(invalid)
    assert not failed_test(errors.Conflict("stale", status=409))
