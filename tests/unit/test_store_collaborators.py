"""The store's bookkeeping on its own: its indexes (storeindex.py) and its views (storeviews.py).

The store's behaviour through them is tested with the informer (test_informer.py), the pod index
(test_podindex.py) and the plan views (test_plan_views.py); here, what each promises alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Store
from harvester_quota.generic.storeindex import StoreIndex
from harvester_quota.generic.storeviews import StoreViews
from harvester_quota.testbench.codecs import JsonCodec

from tests.unit.fakes import pod, upsert


def labels(obj: Object) -> list[str]:
    return list(obj["metadata"].get("labels", {}).values())


def update(index: StoreIndex, key: str, obj: Object) -> None:
    """What the store's write does: the values computed first, then indexed."""
    index.update_prepared(key, index.values_of(obj), lambda: obj)


def test_an_index_counts_each_value_once_and_lists_keys_sorted() -> None:
    index = StoreIndex()
    index.add_indexer("labels", labels, [("ns/b", pod("b", "1", labels={"x": "v", "y": "v"}))])
    update(index, "ns/a", pod("a", "1", labels={"x": "v"}))

    assert index.index_keys("labels", "v") == ["ns/a", "ns/b"]
    assert index.values_of(pod("c", "1", labels={"x": "v", "y": "w", "z": "v"})) == {
        "labels": ("v", "w")
    }
    assert index.has_index("labels") and not index.has_index("other")
    with pytest.raises(KeyError):
        index.index_keys("other", "v")
    with pytest.raises(KeyError):
        index.indexed_values("other")


def test_updates_and_deletes_leave_no_empty_values_behind() -> None:
    index = StoreIndex()
    index.add_indexer("labels", labels, [])
    update(index, "ns/a", pod("a", "1", labels={"x": "old"}))
    update(index, "ns/a", pod("a", "2", labels={"x": "new"}))
    assert index.indexed_values("labels") == ["new"]

    index.delete("ns/a")
    index.delete("ns/never-indexed")

    assert index.indexed_values("labels") == []
    assert index.index_keys("labels", "new") == []


def test_a_taken_index_name_is_refused_before_anything_is_read() -> None:
    index = StoreIndex()
    index.add_indexer("labels", labels, [])
    read: list[str] = []

    def existing() -> Any:
        read.append("read")
        yield "ns/a", pod("a", "1")

    with pytest.raises(ValueError, match="exists already"):
        index.add_indexer("labels", labels, existing())
    assert read == []


def test_prepared_values_are_used_and_only_a_later_index_decodes_once() -> None:
    index = StoreIndex()
    index.add_indexer("labels", labels, [])
    obj = pod("a", "1", labels={"x": "v"})
    prepared = index.values_of(obj)
    index.add_indexer("names", lambda o: [o["metadata"]["name"]], [])
    index.add_indexer("namespaces", lambda o: [o["metadata"]["namespace"]], [])
    decoded: list[Object] = []

    def decode() -> Object:
        decoded.append(obj)
        return obj

    index.update_prepared("ns/a", prepared, decode)

    assert len(decoded) == 1
    assert index.index_keys("labels", "v") == index.index_keys("names", "a") == ["ns/a"]
    assert index.index_keys("namespaces", "ns") == ["ns/a"]
    index.update_prepared("ns/a", index.values_of(obj), decode)
    assert len(decoded) == 1, "nothing left to compute: no decode"


class Heard:
    def __init__(self, name: str, log: list[tuple[str, str, Any]]) -> None:
        self.name = name
        self.log = log

    def __call__(self, key: str, value: Any) -> None:
        self.log.append((self.name, key, value))


def test_views_tell_listeners_in_the_order_they_were_added() -> None:
    log: list[tuple[str, str, Any]] = []
    views = StoreViews()
    assert views.derive(pod("a", "1")) is None, "no views: nothing to carry"
    views.add("rv", lambda o: o["metadata"]["resourceVersion"], Heard("rv", log), [])
    views.add(
        "name", lambda o: o["metadata"]["name"], Heard("name", log), [("ns/b", pod("b", "7"))]
    )
    assert log == [("name", "ns/b", "b")], "a new view hears of what is stored at once"
    log.clear()

    stored = pod("a", "2")
    views.stored_prepared("ns/a", views.derive(stored), lambda: stored)
    views.removed("ns/a")

    assert log == [
        ("rv", "ns/a", "2"),
        ("name", "ns/a", "a"),
        ("rv", "ns/a", None),
        ("name", "ns/a", None),
    ]
    with pytest.raises(ValueError, match="exists already"):
        views.add("rv", lambda o: None, Heard("again", log), [])


def test_prepared_views_are_told_as_derived_and_a_later_view_derives_from_one_decode() -> None:
    log: list[tuple[str, str, Any]] = []
    views = StoreViews()
    views.add("rv", lambda o: o["metadata"]["resourceVersion"], Heard("rv", log), [])
    obj = pod("a", "3")
    prepared = views.derive(obj)
    views.add("name", lambda o: o["metadata"]["name"], Heard("name", log), [])
    views.add("ns", lambda o: o["metadata"]["namespace"], Heard("ns", log), [])
    decoded: list[Object] = []

    def decode() -> Object:
        decoded.append(obj)
        return obj

    views.stored_prepared("ns/a", prepared, decode)

    assert log == [("rv", "ns/a", "3"), ("name", "ns/a", "a"), ("ns", "ns/a", "ns")]
    assert len(decoded) == 1


def test_the_store_keeps_objects_indexes_and_views_in_step_through_a_relist() -> None:
    """What each write of the store hands its index and views, seen from outside."""
    heard: dict[str, Any] = {}
    store = Store(indexers={"labels": labels}, codec=JsonCodec())
    store.add_view("rv", lambda o: o["metadata"]["resourceVersion"], heard.__setitem__)
    upsert(store, pod("gone", "1", labels={"x": "v"}))
    upsert(store, pod("kept", "2", labels={"x": "v"}))

    changes = store.replace([pod("kept", "3", labels={"x": "w"}), pod("new", "4")])

    assert [(c.key, c.new is None) for c in changes] == [
        ("ns/kept", False),
        ("ns/new", False),
        ("ns/gone", True),
    ]
    assert store.index_keys("labels", "w") == ["ns/kept"]
    assert store.indexed_values("labels") == ["w"]
    assert store.has_index("labels") and store.has_index("namespace")
    assert heard == {"ns/gone": None, "ns/kept": "3", "ns/new": "4"}


class Raises:
    """A listener that raises on one key's values (not on forgetting it)."""

    def __init__(self, key: str, log: list[tuple[str, str, Any]]) -> None:
        self.key = key
        self.log = log

    def __call__(self, key: str, value: Any) -> None:
        if key == self.key and value is not None:
            raise RuntimeError("this listener cannot take it")
        self.log.append(("raises", key, value))


def test_a_listener_that_raises_leaves_no_write_half_applied() -> None:
    """Abuse: a listener raises inside Store.upsert. The object, its indexes and every other
    listener take the write whole, the raising listener is told None (forgets the key) and
    `view_failed` is told; before, the write stopped half-way (indexed, later views untold)."""
    log: list[tuple[str, str, Any]] = []
    failed: list[tuple[str, str, str]] = []
    store = Store(
        indexers={"labels": labels},
        codec=JsonCodec(),
        view_failed=lambda view, key, error: failed.append((view, key, str(error))),
    )
    store.add_view("first", lambda o: o["metadata"]["resourceVersion"], Heard("first", log))
    store.add_view("raises", lambda o: o["metadata"]["resourceVersion"], Raises("ns/bad", log))
    store.add_view("last", lambda o: o["metadata"]["resourceVersion"], Heard("last", log))

    assert upsert(store, pod("bad", "1", labels={"x": "v"})) is None
    upsert(store, pod("good", "2"))

    assert sorted(store.list_keys()) == ["ns/bad", "ns/good"]
    assert store.index_keys("labels", "v") == ["ns/bad"]
    assert log == [
        ("first", "ns/bad", "1"),
        ("raises", "ns/bad", None),
        ("last", "ns/bad", "1"),
        ("first", "ns/good", "2"),
        ("raises", "ns/good", "2"),
        ("last", "ns/good", "2"),
    ]
    assert failed == [("raises", "ns/bad", "this listener cannot take it")]
    changes = store.replace([pod("bad", "3")])
    assert [c.key for c in changes] == ["ns/bad", "ns/good"], "a relist goes on past it too"
    assert len(failed) == 2
