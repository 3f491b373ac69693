"""``python -m bench.recount_race``: how often kube-controller-manager's quota recount, racing a
burst of pod creates, leaves `status.used` under the namespace's real usage, and how many pods
then get in above `spec.hard`; Kubernetes alone, no product of ours running.

Quota admission charges a pod to the quota's `status.used` before the pod is stored, and
kube-controller-manager recounts a quota from its own pod cache when the quota's `spec.hard`
changes, when a pod is deleted or ends, and every five minutes. A recount that reads the quota
after an admission's charge but its pod cache before that pod arrived writes a count without the
pod, and quota admission then lets pods in on the low count (kubernetes/kubernetes#123434, open).

Per round, in a namespace whose quota holds `pods` at `--hard`, filled to `--hard` less
`--burst` pods: a burst of `--burst` pod creates from as many threads (all of them fit), with a
recount triggered in its midst, one of two ways (``--trigger``, both by default, rounds
alternated):

- ``delete``: one of the namespace's pods deleted, what any tenant may do;
- ``spec``: the quota's spec.hard changed on a key no pod charges (`count/configmaps`), what
  every raise and release of ours does to the managed quota.

Two seconds after the burst's last answer (the trigger's recount has been written by then),
the round reads the pods that count (not ended, not being deleted) and the quota's
`status.used.pods`, then tries `--probe` more creates one at a time, as a tenant would: each
one quota admission lets in above `spec.hard` is a pod past the quota. Printed per trigger:
rounds, rounds with `status.used` short of the pods that count, the largest shortfall, rounds
that ended with more pods than `spec.hard`, and the pods above it in all. Each round then
deletes pods back to where it began, waits for the recount those deletes queue to show the
namespace as it is, and two seconds more for any other they queued. A shortfall left alone
lasts until the next recount (up to five minutes). Not told apart: kube-controller-manager's
five-minute resync landing in a round counts for that round's trigger. Each run works in a
namespace of its own, deleted at the end.

    python -m bench.recount_race [--rounds 20] [--burst 30] [--hard 40] [--probe 5]
                                 [--trigger delete,spec]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harvester_quota.testbench import localcluster
from harvester_quota.testbench.localcluster import LocalCluster
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient

NAMESPACE = f"recount-race-{uuid.uuid4().hex[:8]}"
"""A namespace of the run's own: a kept cluster holds no quota or pods of an earlier run here."""
QUOTA = "pods"
SETTLE = 2.0
"""Seconds after a burst's last answer before the round reads what it left."""
TRIGGERS = ("delete", "spec")
ENV_STATE_DIR = "HARVESTER_QUOTA_BENCH_RECOUNT_STATE_DIR"


@dataclass
class Tally:
    """One trigger's rounds."""

    rounds: int = 0
    short_rounds: int = 0
    largest_short: int = 0
    over_rounds: int = 0
    pods_over: int = 0

    def add(self, *, short: int, over: int) -> None:
        self.rounds += 1
        if short > 0:
            self.short_rounds += 1
            self.largest_short = max(self.largest_short, short)
        if over > 0:
            self.over_rounds += 1
            self.pods_over += over


def pod(name: str) -> dict[str, Any]:
    """A pod held back from scheduling by a gate of its own: it counts against `pods` as it
    waits, and nothing (scheduler, kwok, pod garbage collection) touches it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "recount-race"}},
        "spec": {
            "schedulingGates": [{"name": "bench.harvester-quota.io/hold"}],
            "containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
        },
    }


def pods_path(name: str = "") -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods" + (f"/{name}" if name else "")


def quota_path() -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/{QUOTA}"


def counting_pods(rest: RestClient) -> list[str]:
    """The namespace's pods quota counts: not ended, not being deleted."""
    items = rest.get(pods_path()).get("items") or []
    return [
        p["metadata"]["name"]
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def counted(rest: RestClient) -> int | None:
    """The quota's status.used.pods; None before kube-controller-manager's first count."""
    used = ((rest.get(quota_path()).get("status") or {}).get("used") or {}).get("pods")
    return None if used is None else int(used)


def used_pods(rest: RestClient) -> int:
    """The quota's status.used.pods, once counted; a RuntimeError naming the quota if it is
    not there (a round must not read a missing count as zero)."""
    used = counted(rest)
    if used is None:
        raise RuntimeError(f"{NAMESPACE}/{QUOTA} has no status.used.pods")
    return used


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


def set_up(rest: RestClient, hard: int, start: int) -> None:
    """The namespace, its quota at `hard` pods, and `start` pods in it."""
    rest.post_unless_exists(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        "namespace",
    )
    rest.post_unless_exists(
        f"/api/v1/namespaces/{NAMESPACE}/resourcequotas",
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": QUOTA},
            "spec": {"hard": {"pods": str(hard), "count/configmaps": "100"}},
        },
        "quota",
    )
    wait_for(lambda: counted(rest) is not None, "the quota's first count")
    fill(rest, start)


def fill(rest: RestClient, wanted: int) -> None:
    """Deletes pods above `wanted`, creates pods up to it, waits for the count to agree, then
    SETTLE more seconds: the deletes may have queued more recounts than the one that agreed,
    and one left to run during the next burst would be taken for the next trigger's."""
    names = sorted(counting_pods(rest))
    for name in names[wanted:]:
        rest.delete(pods_path(name))
    for index in range(len(names), wanted):
        rest.post(pods_path(), pod(f"base-{index}-{time.monotonic_ns()}"))
    wait_for(
        lambda: len(counting_pods(rest)) == wanted and counted(rest) == wanted,
        f"{wanted} pods counted",
    )
    time.sleep(SETTLE)  # kube-controller-manager's queue cannot be watched from here


def trigger(rest: RestClient, how: str) -> None:
    """Makes kube-controller-manager recount the quota, `how` (module docstring): for
    ``spec``, `count/configmaps` flipped between 101 and 102, a change every time."""
    if how == "delete":
        rest.delete(pods_path(sorted(counting_pods(rest))[0]))
        return
    hard = (rest.get(quota_path()).get("spec") or {}).get("hard") or {}
    flipped = "102" if hard.get("count/configmaps") == "101" else "101"
    rest.patch(quota_path(), {"spec": {"hard": {"count/configmaps": flipped}}})


def burst(rest: RestClient, how: str, round_: int, size: int) -> int:
    """`size` creates at once, the trigger sent after the first quarter; the pods admitted."""

    def create(index: int) -> bool:
        if index == size // 4:
            trigger(rest, how)
        try:
            rest.post(pods_path(), pod(f"burst-{round_}-{index}"))
        except ApiError as error:
            if error.status != 403:  # exceeded quota: the refusal the round expects
                print(f"  create {index}: {error.status} {error.message}", file=sys.stderr)
            return False
        return True

    with ThreadPoolExecutor(max_workers=size) as pool:
        return sum(pool.map(create, range(size)))


def probe(rest: RestClient, round_: int, tries: int) -> int:
    """`tries` creates one at a time after the burst; the pods admitted."""
    admitted = 0
    for index in range(tries):
        try:
            rest.post(pods_path(), pod(f"probe-{round_}-{index}"))
        except ApiError as error:
            if error.status != 403:
                print(f"  probe {index}: {error.status} {error.message}", file=sys.stderr)
            continue
        admitted += 1
    return admitted


@dataclass(frozen=True)
class Shape:
    """What every round does: the quota's `pods`, the burst's size, the probes after it."""

    hard: int
    burst: int
    probes: int

    @property
    def start(self) -> int:
        return self.hard - self.burst


def play(rest: RestClient, how: str, round_: int, tally: Tally, shape: Shape) -> None:
    admitted = burst(rest, how, round_, shape.burst)
    time.sleep(SETTLE)  # what the burst left, once the copies in flight have landed
    counting, used = len(counting_pods(rest)), used_pods(rest)
    probed = probe(rest, round_, shape.probes)
    after = len(counting_pods(rest))
    tally.add(short=counting - used, over=after - shape.hard)
    print(
        f"round {round_:3} {how:6}: burst admitted {admitted:3}, pods counting {counting:3}, "
        f"status.used {used:3}, probes admitted {probed}, pods after {after:3}, "
        f"spec.hard {shape.hard}",
        flush=True,
    )
    fill(rest, shape.start)


def report(tallies: dict[str, Tally], shape: Shape) -> list[str]:
    lines = [
        f"bursts of {shape.burst} creates into a quota of {shape.hard} pods holding "
        f"{shape.start}, then {shape.probes} creates one at a time",
        "",
        "| trigger | rounds | status.used short | largest shortfall | ended above spec.hard "
        "| pods above it |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for how, t in tallies.items():
        lines.append(
            f"| {how} | {t.rounds} | {t.short_rounds} | {t.largest_short} | {t.over_rounds} "
            f"| {t.pods_over} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per trigger")
    parser.add_argument("--burst", type=int, default=30, help="creates at once per round")
    parser.add_argument("--hard", type=int, default=40, help="the quota's pods")
    parser.add_argument("--probe", type=int, default=5, help="creates after each burst")
    parser.add_argument("--trigger", default=",".join(TRIGGERS), help="delete, spec or both")
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args(argv)
    hows = [h for h in args.trigger.split(",") if h]
    if not hows or set(hows) - set(TRIGGERS):
        parser.error(f"--trigger: one or both of {', '.join(TRIGGERS)}")
    if args.rounds < 1 or args.burst < 1 or args.probe < 0:
        parser.error("--rounds and --burst must be at least 1, --probe at least 0")
    shape = Shape(args.hard, args.burst, args.probe)
    if shape.start < 1:
        parser.error("--hard must be above --burst (the namespace starts with pods in it)")
    local = LocalCluster(
        args.state_dir or localcluster.default_state_dir("bench-recount", ENV_STATE_DIR)
    )
    info = local.up(nodes=1)
    try:
        rest = info.rest(timeout=30.0)
        set_up(rest, shape.hard, shape.start)
        tallies = {how: Tally() for how in hows}
        for round_ in range(args.rounds * len(hows)):
            how = hows[round_ % len(hows)]
            play(rest, how, round_, tallies[how], shape)
        print("\n".join(["", *report(tallies, shape)]))
    finally:
        with contextlib.suppress(ApiError, OSError):
            info.rest().delete(f"/api/v1/namespaces/{NAMESPACE}")
        if not args.keep:
            local.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
