"""The store's default codec: zstd, with a dictionary trained on the cache's first objects."""

from __future__ import annotations

import copy
import logging
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from harvester_quota.generic.store import Store
from harvester_quota.generic.zstdcodec import MIN_SAMPLES, TRAINING_SAMPLES, ZstdCodec
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fakes import upsert


def launcher_pod(index: int) -> dict[str, Any]:
    """A pod shaped like KubeVirt's launcher pods: the objects a Harvester cache holds most."""
    vm = f"vm-{index:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{vm}-abcde",
            "namespace": f"tenant-{index % 7}",
            "uid": f"0d6a1c2e-{index:04x}-4f0b-9d7e-5c1b2a3f4e5d",
            "resourceVersion": str(1000 + index),
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": vm},
            "annotations": {
                "kubevirt.io/domain": vm,
                "kubectl.kubernetes.io/default-container": "compute",
            },
        },
        "spec": {
            "nodeName": f"node-{index % 50}",
            "containers": [
                {
                    "name": "compute",
                    "image": "quay.io/kubevirt/virt-launcher:v1.8.4",
                    "resources": {
                        "limits": {"cpu": "1", "memory": "2262Mi", "devices.kubevirt.io/kvm": "1"},
                        "requests": {"cpu": "100m", "memory": "2262Mi"},
                    },
                }
            ],
        },
        "status": {"phase": "Running", "podIP": f"10.42.{index % 250}.{index % 200}"},
    }


def test_objects_stored_before_the_dictionary_still_decode_after_it() -> None:
    codec = ZstdCodec()
    before = [codec.encode(launcher_pod(i)) for i in range(TRAINING_SAMPLES)]
    assert codec._trained is not None, "the encode that reached the samples trained a dictionary"
    assert codec._plain is None, "the compressor without the dictionary is dropped"
    after = [codec.encode(launcher_pod(i)) for i in range(TRAINING_SAMPLES, 2 * TRAINING_SAMPLES)]
    assert [codec.decode(v) for v in before] == [launcher_pod(i) for i in range(TRAINING_SAMPLES)]
    assert [codec.decode(v) for v in after] == [
        launcher_pod(i) for i in range(TRAINING_SAMPLES, 2 * TRAINING_SAMPLES)
    ]


def test_the_dictionary_makes_alike_objects_smaller_than_without_it() -> None:
    codec = ZstdCodec()
    plain = [len(codec.encode(launcher_pod(i))) for i in range(TRAINING_SAMPLES)]
    trained = [
        len(codec.encode(launcher_pod(i))) for i in range(TRAINING_SAMPLES, 2 * TRAINING_SAMPLES)
    ]
    assert sum(trained) < sum(plain) / 2, (sum(trained), sum(plain))


def test_a_cache_of_small_objects_trains_on_their_bytes_and_one_below_both_keeps_none() -> None:
    by_bytes = ZstdCodec(sample_bytes=20_000)
    for i in range(40):
        by_bytes.encode(launcher_pod(i))
    assert by_bytes._trained is not None, (
        "40 pods of ~640 B passed the byte bound (with 16 samples or more)"
    )
    small = ZstdCodec(sample_bytes=1 << 30)
    for i in range(TRAINING_SAMPLES - 1):
        small.encode(launcher_pod(i))
    assert small._trained is None


def test_a_byte_bound_reached_by_a_few_objects_waits_for_min_samples() -> None:
    codec = ZstdCodec(sample_bytes=1_000)  # two launcher pods of ~640 B reach it
    for i in range(MIN_SAMPLES - 1):
        codec.encode(launcher_pod(i))
    assert codec._trained is None, "fewer than MIN_SAMPLES: no training (zstd refuses under 7)"
    codec.encode(launcher_pod(MIN_SAMPLES))
    assert codec._trained is not None


def test_huge_first_objects_are_not_trained_on_and_do_not_stop_a_later_training() -> None:
    codec = ZstdCodec()
    huge = [{"metadata": {"name": f"big{i}"}, "data": f"{i:02d}" * 125_000} for i in range(20)]
    stored = [codec.encode(obj) for obj in huge]
    assert codec._trained is None, "objects over MAX_SAMPLE_BYTES are not samples, 5 MB of them"
    stored += [codec.encode(launcher_pod(i)) for i in range(TRAINING_SAMPLES)]
    assert codec._trained is not None
    assert [codec.decode(v) for v in stored] == [
        *huge,
        *(launcher_pod(i) for i in range(TRAINING_SAMPLES)),
    ]


def test_a_failed_training_is_tried_again_on_twice_the_samples(
    caplog: pytest.LogCaptureFixture,
) -> None:
    codec = ZstdCodec(samples=4)  # zstd cannot train on fewer than 7
    with caplog.at_level(logging.INFO):
        stored = [codec.encode(launcher_pod(i)) for i in range(4)]
        assert codec._trained is None and "trying again" in caplog.text
        stored += [codec.encode(launcher_pod(i)) for i in range(4, 12)]
    assert codec._trained is not None, "the retry on 8 samples trained"
    assert [codec.decode(v) for v in stored] == [launcher_pod(i) for i in range(12)]


def test_a_training_that_fails_twice_leaves_the_codec_compressing_without_a_dictionary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    codec = ZstdCodec(samples=2)
    tiny = [{"a": i} for i in range(6)]
    with caplog.at_level(logging.INFO):
        stored = [codec.encode(obj) for obj in tiny]
    assert codec._trained is None
    assert "compressing without" in caplog.text
    stored += [codec.encode(launcher_pod(i)) for i in range(20)]
    assert codec._trained is None, "no third training"
    assert [codec.decode(v) for v in stored] == [*tiny, *(launcher_pod(i) for i in range(20))]


def traced_per_call(call: Callable[[], object], count: int) -> float:
    """Bytes still allocated per call of `call`, its results kept (tracemalloc)."""
    kept: list[object] = []
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept.extend(call() for _ in range(count))
        after = tracemalloc.get_traced_memory()[0]
    finally:
        if started:
            tracemalloc.stop()
    return (after - before - sys.getsizeof(kept)) / count


def test_a_stored_value_holds_no_more_memory_than_its_bytes() -> None:
    codec = ZstdCodec()
    for i in range(TRAINING_SAMPLES):
        codec.encode(launcher_pod(i))
    assert codec._trained is not None
    pod = launcher_pod(7)
    size = len(codec.encode(pod))
    per_value = traced_per_call(lambda: codec.encode(pod), 500)
    assert per_value < size + 64, f"{per_value:.0f} B for a value of {size} B: a buffer kept"


def test_samples_hold_no_more_memory_than_their_json() -> None:
    pods = [launcher_pod(i) for i in range(100)]
    json_bytes = sum(len(orjson.dumps(pod)) for pod in pods) / len(pods)
    value_bytes = sum(len(ZstdCodec().encode(pod)) for pod in pods) / len(pods)
    codec = ZstdCodec(samples=1000)
    unsampled = iter(pods)
    per_object = traced_per_call(lambda: codec.encode(next(unsampled)), len(pods))
    assert per_object < json_bytes + value_bytes + 128, (
        f"{per_object:.0f} B an object for {json_bytes:.0f} B of JSON: orjson's buffer kept"
    )


def test_a_dictionary_trained_on_a_tenants_odd_objects_costs_size_never_correctness() -> None:
    codec = ZstdCodec()
    odd = [
        {"metadata": {"name": f"x{i}"}, "junk": "\u2603" * (i % 13) + "z" * i}
        for i in range(TRAINING_SAMPLES)
    ]
    stored = [codec.encode(obj) for obj in odd]
    assert codec._trained is not None
    pods = [launcher_pod(i) for i in range(50)]
    stored += [codec.encode(pod) for pod in pods]
    assert [codec.decode(v) for v in stored] == [*odd, *pods]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=5), min_size=1, max_size=40)
)
def test_every_object_decodes_to_what_was_encoded_whenever_the_dictionary_came(
    objects: list[dict[str, Any]],
) -> None:
    codec = ZstdCodec(samples=8)
    stored = [codec.encode(copy.deepcopy(obj)) for obj in objects]
    assert [codec.decode(v) for v in stored] == objects


def test_each_store_trains_its_own_dictionary() -> None:
    pods, vmis = Store(), Store()
    assert isinstance(pods._codec, ZstdCodec), "the one codec of the product"
    for i in range(TRAINING_SAMPLES):
        upsert(pods, launcher_pod(i))
    assert pods.get(f"tenant-0/virt-launcher-vm-{0:05d}-abcde") == launcher_pod(0)
    assert vmis._codec is not pods._codec
    assert pods._codec._trained is not None and vmis._codec._trained is None  # type: ignore[attr-defined]


def test_a_relist_across_the_training_finds_nothing_changed_by_resource_version() -> None:
    store = Store(codec=ZstdCodec(samples=8))
    pods = [launcher_pod(i) for i in range(5)]
    assert all(c.new is not None for c in store.replace(pods)), "five added, before the training"
    for i in range(5, 12):
        upsert(store, launcher_pod(i))
    assert store._codec._trained is not None  # type: ignore[attr-defined]
    changes = store.replace([launcher_pod(i) for i in range(12)])
    assert all(change.unchanged for change in changes), (
        "the same resourceVersions, stored as other bytes since the training, are unchanged"
    )
    assert [store.get(f"tenant-{i % 7}/virt-launcher-vm-{i:05d}-abcde") for i in range(12)] == [
        launcher_pod(i) for i in range(12)
    ]
