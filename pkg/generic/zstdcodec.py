"""The store's default codec: JSON compressed with zstd, with a dictionary once the cache has
objects enough to train one.

The objects of one cache are alike: a Harvester cluster's pods are mostly virt-launcher pods
rendered from one template, its VMIs one schema with the same keys and most of the same values.
zlib and plain zstd see each object alone and find little to share within 5-10 KB; a dictionary
trained on the cache's first objects holds what they have in common, and every later object is
written as its differences from it. On the benchmark's launcher pods (bench/RESULTS.md): 6.4 KB
of JSON each becomes 2.2 KB with zlib level 1 in 38 µs, 2.1 KB with zstd level 1 in 14 µs, and
about 0.2-0.7 KB with zstd level 1 and an 8 KB dictionary in 4-6 µs. Decoding is a few µs
either way. Those pods are more alike than a real cluster's, and the dictionary fits the
objects a cache meets first (a relist's first page, in namespace order, may be system pods):
how much it saves on a real cluster's pods was not measured. Measured on the benchmark's pods
with dictionaries trained elsewhere: one trained on pods of another container spec left 1.3 KB
a pod, one trained on unrelated junk 2.25 KB, 7 % more than plain zstd's 2.1 KB.

Contract:
- One codec per store (`Store` makes its own from the name): the dictionary is trained from,
  and fits, one cache's objects.
- The first objects encoded are compressed without a dictionary and kept (their JSON, up to
  `MAX_SAMPLE_BYTES` each) as training samples; the encode that brings them to
  `TRAINING_SAMPLES` objects, or to `TRAINING_BYTES` bytes with at least `MIN_SAMPLES` objects,
  trains an 8 KB dictionary (13 ms measured for 128 launcher pods, 64-91 ms for 1 MiB of larger
  objects, on the event loop) and drops them. A cache that never gets that far keeps its
  samples (with the defaults at most `TRAINING_BYTES`) and no dictionary. A training that fails
  (zstd needs 7 samples or more, fewer than the defaults ask for) is tried once more on twice
  the samples (up to 2 MiB: 155 ms measured), then the codec compresses without a dictionary
  for good, logged.
- Memory beside the values: per store, zstd's contexts (about 0.1 MB to decode, 0.2 MB once
  there is a dictionary; a compression context sized by the largest object it compressed, the
  one without the dictionary dropped once the dictionary is there) and the 8 KB dictionary.
- Every stored value stays decodable for as long as it lives: the frame says whether it was
  written with the dictionary (zstd's dictionary ID in its header), and the codec never
  replaces its dictionary, so values stored before the training decode without it and those
  after with it. The same object may therefore be stored as different bytes before and after
  the training. The store tells a relisted object unchanged by its resourceVersion; only an
  object without one is compared by its bytes, and may then be reported changed once, across
  the training (`store.Change.unchanged`).
- A dictionary poisoned by the first objects (a tenant's odd pods) costs compression, never
  correctness: every value decodes to exactly the JSON that was encoded.
- Not thread-safe (zstd's contexts are not): the store's event loop only.
"""

from __future__ import annotations

import logging
from typing import Any, Final, TypeAlias

import orjson
import zstandard

from .resource import Object

log = logging.getLogger(__name__)

LEVEL: Final = 1
"""zstd's fastest standard level: what an informer's sync pays per object."""
DICTIONARY_BYTES: Final = 8192
"""Measured on launcher pods: 4 KB of dictionary left 655 B a pod, 8 KB 236 B, 16-32 KB no less."""
TRAINING_SAMPLES: Final = 128
"""Objects the dictionary is trained on (13 ms for 128 launcher pods; 500 took 62 ms and
compressed no better)."""
TRAINING_BYTES: Final = 1 << 20
"""The samples' JSON bytes that train a dictionary before `TRAINING_SAMPLES` objects (with at
least `MIN_SAMPLES` of them): what a cache that never trains keeps for nothing is bounded by
this, and so is the first training's time (64-91 ms measured at this bound)."""
MAX_SAMPLE_BYTES: Final = 64 << 10
"""Objects larger than this are stored but not sampled: a few of them (a VMI with a large
cloud-init, a tenant's 250 KB annotations) would reach `TRAINING_BYTES` alone, and zstd cannot
train on fewer than about 7 samples."""
MIN_SAMPLES: Final = 16
"""The fewest samples a byte-triggered training takes (zstd refuses fewer than 7)."""
RETRIES: Final = 1
"""Trainings tried again after a failure, each on twice the samples."""

Sample: TypeAlias = "bytes | bytearray | memoryview[int]"
"""A training sample, as zstandard's trainer types it."""


class ZstdCodec:
    """JSON compressed with zstd, with a dictionary trained on the cache's first objects (see
    the module docstring)."""

    def __init__(self, samples: int = TRAINING_SAMPLES, sample_bytes: int = TRAINING_BYTES) -> None:
        self._samples_wanted = samples
        self._sample_bytes_wanted = sample_bytes
        self._samples: list[Sample] | None = []
        self._sampled_bytes = 0
        self._retries = RETRIES
        self._plain: zstandard.ZstdCompressor | None = zstandard.ZstdCompressor(
            level=LEVEL, write_checksum=False
        )
        self._plain_decoder = zstandard.ZstdDecompressor()
        self._trained: zstandard.ZstdCompressor | None = None
        self._trained_decoder: zstandard.ZstdDecompressor | None = None

    def encode(self, obj: Object) -> Any:
        raw = orjson.dumps(obj)
        if self._trained is None and self._samples is not None:
            self._sample(raw)
        compressor = self._trained or self._plain
        assert compressor is not None  # _plain goes only once _trained is there
        return exact_bytes(compressor.compress(raw))

    def decode(self, stored: Any) -> Object:
        decoder = self._plain_decoder
        if self._trained_decoder is not None and zstandard.get_frame_parameters(stored).dict_id:
            decoder = self._trained_decoder
        result: Object = orjson.loads(decoder.decompress(stored))
        return result

    def _sample(self, raw: bytes) -> None:
        """Keeps `raw` as a training sample if it is small enough; trains once there are enough.
        The object itself is compressed by the caller, with whichever compressor is there after."""
        assert self._samples is not None
        if len(raw) > MAX_SAMPLE_BYTES:
            return
        self._samples.append(exact_bytes(raw))  # orjson's buffer is larger than its answer
        self._sampled_bytes += len(raw)
        count = len(self._samples)
        if count >= self._samples_wanted or (
            count >= MIN_SAMPLES and self._sampled_bytes >= self._sample_bytes_wanted
        ):
            self._train()

    def _train(self) -> None:
        samples, self._samples = self._samples or [], None
        try:
            dictionary = zstandard.train_dictionary(DICTIONARY_BYTES, samples)
        except zstandard.ZstdError as error:
            self._failed(len(samples), str(error))
            return
        if not dictionary.dict_id():
            # A frame says it used the dictionary by its ID; an ID of 0 would say it did not.
            # (zstd's trainer picks IDs of 32768 and more: not seen, kept for safety.)
            self._failed(len(samples), "a dictionary without an ID")
            return
        compressor = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=dictionary, write_checksum=False, write_dict_id=True
        )
        decoder = zstandard.ZstdDecompressor(dict_data=dictionary)
        self._trained, self._trained_decoder = compressor, decoder  # both, or neither
        self._plain = None  # its contexts, sized by the largest object seen, are not needed again

    def _failed(self, samples: int, why: str) -> None:
        """After a failed training: sample again, twice as many, if a retry is left."""
        if self._retries <= 0:
            log.info("no zstd dictionary from %d objects (%s); compressing without", samples, why)
            return
        self._retries -= 1
        self._samples, self._sampled_bytes = [], 0
        self._samples_wanted *= 2
        self._sample_bytes_wanted *= 2
        log.info("no zstd dictionary from %d objects (%s); trying again on more", samples, why)


def exact_bytes(answer: bytes) -> bytes:
    """`answer` copied into a buffer of its own size. zstd's and orjson's answers are allocated
    for the worst case and shrunk in place (orjson's not even that), which leaves every kept
    value beside a hole only a smaller allocation can reuse: measured, 3.8 KB of RSS a launcher
    pod for 211 bytes stored, against 0.27 KB with the copy, which frees the whole worst-case
    buffer for the next object. The store's JSON codec and this one's values and samples keep
    only such copies."""
    return bytes(memoryview(answer))
