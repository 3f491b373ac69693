"""The benchmark's streamed list splitter returns exactly what one whole-body decode returns."""

from __future__ import annotations

import orjson
import pytest

from bench.streaming_list import ItemSplitter, ListSplitError, split_all


def _pod(index: int) -> dict[str, object]:
    return {
        "metadata": {"name": f"pod-{index}", "namespace": "ns", "resourceVersion": str(index)},
        "spec": {"note": 'text with },{"metadata": inside a string', "list": [1, {"a": "]"}]},
    }


def _statefulset(index: int) -> dict[str, object]:
    # A nested list of objects whose first key is "metadata": the one place the item boundary
    # bytes occur inside an item.
    templates = [{"metadata": {"name": f"data-{i}"}, "spec": {}} for i in range(3)]
    return {"metadata": {"name": f"sts-{index}"}, "spec": {"volumeClaimTemplates": templates}}


def _list(items: list[dict[str, object]]) -> bytes:
    body = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}}
    return orjson.dumps({**body, "items": items}) + b"\n"


@pytest.mark.parametrize("chunk_size", [1, 7, 13, 64, 1 << 20])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_split_matches_whole_decode(chunk_size: int, count: int) -> None:
    items = [_pod(i) if i % 2 else _statefulset(i) for i in range(count)]
    raw = _list(items)
    assert split_all(raw, chunk_size) == orjson.loads(raw)["items"]


def test_list_metadata_is_read_from_the_header() -> None:
    splitter = ItemSplitter()
    list(splitter.feed(_list([_pod(1)])))
    assert splitter.list_metadata == {"resourceVersion": "42"}


def test_truncated_response_is_an_error() -> None:
    raw = _list([_pod(1), _pod(2)])
    with pytest.raises(ListSplitError):
        split_all(raw[: len(raw) // 2])


def test_response_without_items_is_an_error() -> None:
    with pytest.raises(ListSplitError):
        split_all(b'{"kind":"Status","code":500}')
