"""The store's default codec: zstd, with a dictionary trained on the cache's first objects."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from harvester_quota.generic.store import DEFAULT_CODEC, Store
from harvester_quota.generic.zstdcodec import TRAINING_SAMPLES, ZstdCodec
from hypothesis import given, settings
from hypothesis import strategies as st


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
    assert codec.trained, "the encode that reached the samples trained a dictionary"
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


def test_few_large_objects_train_on_their_bytes_and_a_cache_below_both_keeps_no_dictionary() -> (
    None
):
    big = ZstdCodec(sample_bytes=20_000)
    for i in range(40):
        big.encode(launcher_pod(i))
    assert big.trained, "40 pods of ~1 KB passed the byte bound before the count"
    small = ZstdCodec(sample_bytes=1 << 30)
    for i in range(TRAINING_SAMPLES - 1):
        small.encode(launcher_pod(i))
    assert not small.trained


def test_a_training_that_fails_leaves_the_codec_compressing_without_a_dictionary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    codec = ZstdCodec(samples=2)
    tiny = [{"a": 1}, {"a": 1}]
    with caplog.at_level(logging.INFO):
        stored = [codec.encode(obj) for obj in tiny]
    assert not codec.trained
    assert "no zstd dictionary" in caplog.text
    later = codec.encode(launcher_pod(1))
    assert [codec.decode(v) for v in [*stored, later]] == [*tiny, launcher_pod(1)]


def test_a_dictionary_trained_on_a_tenants_odd_objects_costs_size_never_correctness() -> None:
    codec = ZstdCodec()
    odd = [
        {"metadata": {"name": f"x{i}"}, "junk": "\u2603" * (i % 13) + "z" * i}
        for i in range(TRAINING_SAMPLES)
    ]
    stored = [codec.encode(obj) for obj in odd]
    assert codec.trained
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
    assert DEFAULT_CODEC == "zstd"
    pods, vmis = Store(), Store()
    for i in range(TRAINING_SAMPLES):
        pods.upsert(launcher_pod(i))
    assert pods.get(f"tenant-0/virt-launcher-vm-{0:05d}-abcde") == launcher_pod(0)
    assert vmis._codec is not pods._codec
    assert pods._codec.trained and not vmis._codec.trained  # type: ignore[attr-defined]
