"""Decoding a list that holds one VMI nested deep and wide (security.md A2, review finding M4).

`python -m bench.deeplist`: times ListSplitter (64 KB chunks, as the pager feeds it) on a ~1 MB
VirtualMachineInstanceList whose one big item has 1,100 levels in its clock and, inside them,
many `},{"apiVersion":` sequences (each a candidate item end) with thousands of brackets between
them; and deepjson.loads on that item alone (a watch event). Best of `--rounds`.
"""

from __future__ import annotations

import argparse
import time

import orjson
from harvester_quota.generic import deepjson
from harvester_quota.testbench.decoding import split_list


def deep_and_wide_vmi(levels: int = 1100, groups: int = 170, brackets: int = 1500) -> bytes:
    """About 1 MB: `groups` objects starting with "apiVersion" inside `levels` arrays, each with
    `brackets` small arrays."""
    pad = b",".join(b"[0]" for _ in range(brackets))
    wide = b",".join(b'{"apiVersion":"v%d","pad":[%s]}' % (i, pad) for i in range(groups))
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "deep", "namespace": "ns"},
        "spec": {"domain": {"clock": {"deep": "@DEEP@"}}},
    }
    return orjson.dumps(vmi).replace(b'"@DEEP@"', b"[" * levels + wide + b"]" * levels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    item = deep_and_wide_vmi()
    small = orjson.dumps({"apiVersion": "kubevirt.io/v1", "metadata": {"name": "small"}})
    raw = b'{"apiVersion":"kubevirt.io/v1","items":[%s,%s,%s],"kind":"L","metadata":{}}' % (
        small,
        item,
        small,
    )
    for label, run in (
        ("list decode", lambda: split_list(raw)),
        ("watch-event decode", lambda: deepjson.loads(item)),
    ):
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        print(f"{label}: {len(raw) / 1e6:.2f} MB, best of {rounds}: {best:.3f} s")


if __name__ == "__main__":
    main()
