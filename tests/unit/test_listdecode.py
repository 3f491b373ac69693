"""The streamed list decoder gives exactly what a whole decode gives, for any chunking."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from harvester_quota.generic import listdecode
from harvester_quota.generic.listdecode import ListDecodeError, ListSplitter
from harvester_quota.testbench.decoding import split_list
from hypothesis import given, settings
from hypothesis import strategies as st


def _pod(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": name},
                {"apiVersion": "v1", "kind": "Node", "name": "n"},
            ],
            "annotations": {"tricky": 'x},{"metadata":{}}] and }] and [{"a":1}]'},
        },
        "spec": {"containers": [{"name": "compute"}, {"name": "sidecar"}]},
        **extra,
    }


def _pod_list(items: list[dict[str, Any]]) -> bytes:
    """As the API server writes a built-in kind's list: header first, items without kind."""
    body = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "4711", "continue": "abc"},
        "items": items,
    }
    return orjson.dumps(body)


def _custom_resource_list(items: list[dict[str, Any]]) -> bytes:
    """As the API server writes an unstructured list: keys sorted, metadata after the items."""
    body = {
        "apiVersion": "kubevirt.io/v1",
        "items": [
            {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", **item}
            for item in items
        ],
        "kind": "VirtualMachineInstanceList",
        "metadata": {"resourceVersion": "99", "continue": ""},
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("encode", [_pod_list, _custom_resource_list])
@pytest.mark.parametrize("count", [0, 1, 2, 7])
@pytest.mark.parametrize("chunk", [1, 13, 4096])
def test_items_and_list_metadata_match_a_whole_decode(encode: Any, count: int, chunk: int) -> None:
    raw = encode([_pod(f"p{index}") for index in range(count)])
    whole = orjson.loads(raw)

    list_object, items = split_list(raw, chunk=chunk)

    assert items == whole.pop("items")
    assert list_object == whole


def test_each_is_applied_as_items_arrive_and_its_results_kept() -> None:
    raw = _pod_list([_pod("a"), _pod("b"), _pod("c")])
    splitter = ListSplitter(lambda item: item["metadata"]["name"])
    seen_after_first_half: list[Any] = []

    splitter.feed(raw[: len(raw) // 2])
    seen_after_first_half.extend(splitter.items)
    splitter.feed(raw[len(raw) // 2 :])
    splitter.finish()

    assert seen_after_first_half  # at least one item was ready before the response ended
    assert splitter.items == ["a", "b", "c"]


def test_pretty_printed_list_falls_back_to_a_whole_decode() -> None:
    body = {"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [_pod("a")]}
    raw = json.dumps(body, indent=2).encode()

    list_object, items = split_list(raw, chunk=7)

    assert items == [_pod("a")]
    assert list_object["metadata"]["resourceVersion"] == "5"


def test_items_starting_with_different_keys_still_decode() -> None:
    items = [{"metadata": {"name": "a"}}, {"apiVersion": "v1", "metadata": {"name": "b"}}]
    raw = orjson.dumps({"items": items, "metadata": {"resourceVersion": "1"}})

    list_object, decoded = split_list(raw, chunk=5)

    assert decoded == items
    assert list_object == {"metadata": {"resourceVersion": "1"}}


@pytest.mark.parametrize("chunk", [3, 4096])
def test_an_items_array_nested_before_the_lists_own_is_not_taken_for_it(chunk: int) -> None:
    """Only the List's own items are items: a nested "items" array ahead of them is part of the
    header, and the real items are neither lost nor replaced by it."""
    decoy = [{"metadata": {"name": "decoy-" + "x" * 80}}, {"metadata": {"name": "decoy2"}}]
    body = {"kind": "List", "metadata": {"x": {"items": decoy}}, "items": [_pod("real")]}
    raw = orjson.dumps(body)

    list_object, items = split_list(raw, chunk=chunk)

    assert items == [_pod("real")]
    assert list_object == {"kind": "List", "metadata": {"x": {"items": decoy}}}


def test_an_object_with_only_a_nested_items_array_is_not_a_list() -> None:
    raw = orjson.dumps({"kind": "ConfigMap", "spec": {"items": [_pod("a"), _pod("b")]}})

    with pytest.raises(ListDecodeError):
        split_list(raw, chunk=16)


@pytest.mark.parametrize("cut", [1, 40, -200, -3, -1])
def test_a_truncated_list_is_an_error_not_a_short_list(cut: int) -> None:
    raw = _pod_list([_pod("a"), _pod("b")])

    with pytest.raises(ListDecodeError):
        split_list(raw[:cut], chunk=16)


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[1,2]", b'{"kind":"Status"}', b'{"items":[1,2]}', b'{"items":{}}'],
)
def test_what_is_not_a_list_of_objects_is_an_error(raw: bytes) -> None:
    with pytest.raises(ListDecodeError):
        split_list(raw)


@pytest.mark.parametrize("chunk", [1, 4096])
def test_null_items_is_an_empty_list_as_go_encodes_it(chunk: int) -> None:
    raw = b'{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":null}'
    list_object, items = split_list(raw, chunk=chunk)
    assert items == []
    assert list_object["metadata"]["resourceVersion"] == "7"


def test_an_unparseable_item_stops_searching_after_bounded_tries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A corrupt item would make every later candidate fail too; the decoder gives up early and
    lets the whole decode report the error instead of parsing ever longer prefixes."""
    monkeypatch.setattr(listdecode, "MAX_TRIES_PER_ITEM", 3)
    good = _pod_list([_pod(f"p{index}") for index in range(50)])
    corrupt = good.replace(b'"name":"p1",', b'"name":"p1",,', 1)
    attempts = 0
    real_loads = orjson.loads

    def counting_loads(data: Any) -> Any:
        nonlocal attempts
        attempts += 1
        return real_loads(data)

    monkeypatch.setattr(listdecode.orjson, "loads", counting_loads)

    with pytest.raises(ListDecodeError):
        split_list(corrupt, chunk=len(corrupt))

    assert attempts <= 1 + 4 + 1  # item p0, four tries on p1, one whole decode


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(alphabet='{}[],:"\\ab'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["metadata", "apiVersion", "x"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(st.dictionaries(st.sampled_from(["metadata", "spec"]), json_values), max_size=5),
    chunk=st.integers(min_value=1, max_value=64),
    sort_keys=st.booleans(),
)
def test_any_list_of_objects_decodes_like_orjson(
    items: list[dict[str, Any]], chunk: int, sort_keys: bool
) -> None:
    body = {"kind": "List", "metadata": {"resourceVersion": "3"}, "items": items}
    raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS if sort_keys else 0)

    list_object, decoded = split_list(raw, chunk=chunk)

    assert decoded == items
    assert list_object == {"kind": "List", "metadata": {"resourceVersion": "3"}}


def deep_and_wide_vmi(name: str, levels: int = 1100, width: int = 2000) -> bytes:
    """A VMI (a custom resource: its keys sorted, so list items start with "apiVersion") whose
    clock holds `levels` nested arrays around `width` small objects that start with
    "apiVersion" too: every `},{"apiVersion":` between them looks like an item's end."""
    wide = b",".join(b'{"apiVersion":"v%d","k":"]}"}' % i for i in range(width))
    deep = b"[" * levels + wide + b"]" * levels
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"domain": {"clock": {"deep": "@DEEP@"}, "cpu": {"sockets": 2}}},
    }
    return orjson.dumps(vmi).replace(b'"@DEEP@"', deep)


def deep_vmi_list(names: list[str], deep: set[str], width: int = 2000) -> bytes:
    items = [
        deep_and_wide_vmi(name, width=width)
        if name in deep
        else orjson.dumps({"apiVersion": "kubevirt.io/v1", "metadata": {"name": name}})
        for name in names
    ]
    head = b'{"apiVersion":"kubevirt.io/v1","items":['
    return head + b",".join(items) + b'],"kind":"VirtualMachineInstanceList","metadata":{}}'


def test_a_deep_item_costs_one_depth_pass_not_one_per_candidate_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """M4: a depth error on a candidate end ran deepjson.cut_bytes (a Python loop over every
    token) on each of up to 64 candidate prefixes: 10.7 s on the event loop for one 844 KB VMI.
    Not a timed check: it counts the depth passes (cut_bytes calls and DepthScan passes, one
    resumed pass as the chunks arrive counts once) per deep item, in the middle and last."""
    from harvester_quota.generic import deepjson

    passes: list[str] = []
    real_cut, real_scan = deepjson.cut_bytes, getattr(deepjson, "DepthScan", None)

    def counted_cut(raw: bytes, max_depth: int) -> tuple[bytes, int]:
        passes.append("cut_bytes")
        return real_cut(raw, max_depth)

    def counted_scan(*args: Any, **kwargs: Any) -> Any:
        passes.append("DepthScan")
        assert real_scan is not None
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(deepjson, "cut_bytes", counted_cut)
    monkeypatch.setattr(deepjson, "DepthScan", counted_scan, raising=False)
    raw = deep_vmi_list(["a", "deep1", "b", "deep2"], {"deep1", "deep2"})
    listed, items = split_list(raw, chunk=1 << 14)
    assert [i["metadata"]["name"] for i in items] == ["a", "deep1", "b", "deep2"]
    assert items[1]["spec"]["domain"]["cpu"] == {"sockets": 2}
    assert listed["kind"] == "VirtualMachineInstanceList"
    assert len(passes) == 2, f"{len(passes)} depth passes for 2 deep items: {passes[:5]}"


def test_a_deep_item_decodes_as_a_whole_cut_decode_does() -> None:
    """The one-pass path gives what deepjson.loads gives the item alone, for any chunking."""
    from harvester_quota.generic import deepjson

    raw = deep_vmi_list(["deep0", "a", "deep1"], {"deep0", "deep1"}, width=50)
    expected = [deepjson.loads(deep_and_wide_vmi(n, width=50))[0] for n in ("deep0", "deep1")]
    for chunk in (7, 1000, 1 << 16, len(raw)):
        splitter = ListSplitter()
        for start in range(0, len(raw), chunk):
            splitter.feed(raw[start : start + chunk])
        splitter.finish()
        assert [splitter.items[0], splitter.items[2]] == expected, chunk
        assert splitter.items[1] == {"apiVersion": "kubevirt.io/v1", "metadata": {"name": "a"}}
        assert splitter.cut == 2
