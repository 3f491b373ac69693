"""Which change queued each namespace reconcile of a scale run, and whether its plan wrote.

    python -m bench.reconcile_causes --out /tmp/causes -- --size small --no-baseline --waves 2

runs ``harvester-quota-bench scale`` with the arguments after ``--`` and a ``sitecustomize``
on the controller's ``PYTHONPATH`` that patches, in every Python process of the run that imports
the product (only the controller reconciles):

- each store view listener (migrations, VMIs, pods, the KubeVirt CR and Harvester's setting)
  and each informer handler of the namespaces controller (its own namespace watch, the quota,
  LimitRange and settings watches) to name the change it is handling: the kind, and the view's
  (or object's) fields that differ from the last one seen for that key;
- the namespaces work queue's `add`, to note that cause for the namespace (a cause arriving
  while the key is queued is noted too: the queue coalesces it into the same run);
- `QuotaReconciler.reconcile`, to take the causes noted since the namespace's last run and to
  count the API writes (POST, PUT, PATCH, DELETE) made inside it.

Each reconcile is one JSON line in ``OUT/causes.<pid>.jsonl``; at the end the causes are
tallied (`summarize`, also ``python -m bench.reconcile_causes --summarize OUT``). A bench tool,
not the product: the patches follow the framework's internals and may need mending when those
move. Not thread-safe; the controller runs on one event loop.
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ENV = "HARVESTER_QUOTA_BENCH_CAUSES"
"""The directory each process writes its reconciles into; the patches install only with it."""
QUEUE = "namespaces"


class _Now:
    """The change being handled now (set around each patched listener and handler)."""

    cause: str | None = None


_pending: dict[str, list[str]] = defaultdict(list)
_last: dict[tuple[str, str], Any] = {}
_writes: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("writes", default=None)


def _fields(value: Any) -> dict[str, Any]:
    """A view or object flattened to dotted paths (dicts and dataclasses; lists kept whole)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.compare}
    if not isinstance(value, Mapping):
        return {"": value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        for sub, leaf in _fields(item).items():
            flat[f"{key}.{sub}" if sub else str(key)] = leaf
    return flat


_SHOWN = ("status.phase", "running", "terminal", "not_migratable", "deletionTimestamp")


def diff(old: Any, new: Any) -> str:
    """The paths that differ between `old` and `new` ("added" / "removed" for None), with the
    values of the few whose value tells the step (phases, running, terminal)."""
    if old is None:
        return "added"
    if new is None:
        return "removed"
    before, after = _fields(old), _fields(new)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    shown = []
    for key in changed:
        if any(key.endswith(s) for s in _SHOWN):
            shown.append(f"{key}={before.get(key)!s}->{after.get(key)!s}")
        else:
            shown.append(key)
    return ",".join(shown) or "equal"


_SKIPPED_OBJECT_PATHS = ("metadata.resourceVersion", "metadata.managedFields")


def _object_diff(old: Any, new: Any) -> str:
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return diff(old, new)
    before, after = _fields(old), _fields(new)
    changed = sorted(
        k.split(".")[0] + "." + k.split(".")[1] if k.count(".") else k
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k) and not k.startswith(_SKIPPED_OBJECT_PATHS)
    )
    return ",".join(sorted(set(changed))) or "rv only"


def _named(kind: str, describe: Callable[..., str], call: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        outer = _Now.cause
        _Now.cause = f"{kind}: {describe(*args)}"
        try:
            return call(*args)
        finally:
            _Now.cause = outer

    return wrapped


def install(out: str) -> None:
    """Patches the product in this process (see the module docstring)."""
    _patch_causes()
    _patch_reconcile(Path(out) / f"causes.{os.getpid()}.jsonl")


def _patch_causes() -> None:
    from harvester_quota.generic import informer, store
    from harvester_quota.generic.workqueue import queue

    add_view = store.Store.add_view

    def add_view_named(self: Any, name: str, derive: Any, listener: Any) -> None:
        derived = getattr(derive, "func", derive)
        kind = f"view {getattr(derived, '__name__', name)}"
        raw: dict[str, str] = {}
        """Per key, what changed in the object's annotations and spec at its last write."""

        def derive_noting(obj: Any) -> Any:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            now = {"annotations": meta.get("annotations"), "spec": obj.get("spec")}
            before = _last.get(("raw " + kind, key))
            _last[("raw " + kind, key)] = now
            raw[key] = "" if before is None else diff(before, now)
            return derive(obj)

        def describe(key: str, view: Any) -> str:
            old = _last.get((kind, key))
            _last[(kind, key)] = view
            told = diff(old, view)
            if told == "render_key":
                told += f" ({raw.get(key, '')})"
            return told

        noting = derive_noting if kind == "view vmi_facts" else derive
        add_view(self, name, noting, _named(kind, describe, listener))

    store.Store.add_view = add_view_named  # type: ignore[method-assign]

    add_handler = informer.SharedInformer.add_event_handler

    def add_handler_named(self: Any, handler: Any, **kwargs: Any) -> Any:
        label = kwargs.get("name", "")
        if label.startswith(QUEUE) or label == f"controller {QUEUE}":
            kind = f"{label} ({self.name})"
            changes: dict[str, Any] = {}
            if handler.on_add is not None:
                changes["on_add"] = _named(kind, lambda *_a: "added", handler.on_add)
            if handler.on_update is not None:
                changes["on_update"] = _named(kind, _object_diff, handler.on_update)
            if handler.on_update_new is not None:
                changes["on_update_new"] = _named(
                    kind, lambda *_a: "updated", handler.on_update_new
                )
            if handler.on_delete is not None:
                changes["on_delete"] = _named(kind, lambda *_a: "deleted", handler.on_delete)
            handler = dataclasses.replace(handler, **changes)
        return add_handler(self, handler, **kwargs)

    informer.SharedInformer.add_event_handler = add_handler_named  # type: ignore[method-assign]

    add = queue.Queue.add

    def add_noted(self: Any, item: Any) -> None:
        if self.name == QUEUE and _Now.cause != _SOON_TIMER:
            _pending[item].append(_Now.cause or _caller())
        add(self, item)

    queue.Queue.add = add_noted  # type: ignore[method-assign]
    _patch_soon()


_SOON_TIMER = "the soon timer"
"""The cause in force while a soon run's timer adds its key: already noted when it was asked."""


def _patch_soon() -> None:
    """A change queued soon (Controller.enqueue_soon) is noted when it is asked for, and the
    timer's add later notes nothing more."""
    from harvester_quota.generic import controller, soonruns

    enqueue_soon = controller.Controller.enqueue_soon

    def soon_noted(self: Any, key: str) -> None:
        if self.name == QUEUE and self._soon.window(key) > 0:
            _pending[key].append("soon " + (_Now.cause or _caller()))
        enqueue_soon(self, key)

    controller.Controller.enqueue_soon = soon_noted  # type: ignore[method-assign]

    async def add_at_quiet(self: Any, key: str, deadline: float) -> None:
        await self.clock.sleep(deadline - self.clock.monotonic())
        outer, _Now.cause = _Now.cause, _SOON_TIMER
        try:
            del self._timers[key]
            self._add(key)
        finally:
            _Now.cause = outer

    soonruns.SoonRuns._add_at = add_at_quiet  # type: ignore[method-assign]


def _patch_reconcile(path: Path) -> None:
    from harvester_quota.controller.resourcequota import resourcequota_controller
    from harvester_quota.generic.rest import RestClient

    request = RestClient.request

    async def request_counted(self: Any, method: str, where: str, **kwargs: Any) -> Any:
        writes = _writes.get()
        if writes is not None and method != "GET":
            writes.append(f"{method} {_resource_of(where)}")
        return await request(self, method, where, **kwargs)

    RestClient.request = request_counted  # type: ignore[method-assign]

    reconcile = resourcequota_controller.QuotaReconciler.reconcile

    async def reconcile_counted(self: Any, key: str, namespace: Any) -> Any:
        causes = _pending.pop(key, [])
        writes: list[str] = []
        token = _writes.set(writes)
        started = time.monotonic()
        cpu = time.thread_time()
        try:
            return await reconcile(self, key, namespace)
        finally:
            _writes.reset(token)
            line = {
                "t": time.time(),
                "ns": key,
                "causes": causes,
                "writes": writes,
                "cpu_ms": round((time.thread_time() - cpu) * 1000, 3),
                "wall_ms": round((time.monotonic() - started) * 1000, 3),
            }
            with path.open("a") as file:
                file.write(json.dumps(line) + "\n")

    resourcequota_controller.QuotaReconciler.reconcile = reconcile_counted  # type: ignore[method-assign]


def _resource_of(path: str) -> str:
    """The kind a request wrote (and "/status" for that subresource)."""
    parts = [p for p in path.split("?", maxsplit=1)[0].split("/") if p]
    suffix = "/status" if parts[-1:] == ["status"] else ""
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        return parts[parts.index("namespaces") + 2] + suffix
    return (parts[-2] if len(parts) >= 2 else path) + suffix


def _caller() -> str:
    """Where an add without a named cause came from (a retry, a sweep, the reconcile itself)."""
    frames = [
        f.name
        for f in traceback.extract_stack(limit=8)[:-2]
        if "workqueue" not in f.filename and "reconcile_causes" not in f.filename
    ]
    return "other: " + " < ".join(reversed(frames[-3:]))


def _label(cause: str) -> str:
    """A cause without the per-object detail that makes every line unique (names, uids)."""
    return cause


def summarize(
    lines: Iterable[Mapping[str, Any]], migrations: Mapping[str, int] | None = None
) -> str:
    """The tally: reconciles, those that wrote, and per cause how many reconciles it queued
    (alone or with others) and how many of those wrote nothing."""
    reconciles = list(lines)
    total = len(reconciles)
    wrote = sum(1 for r in reconciles if r["writes"])
    out = [f"reconciles {total}, wrote {wrote}, wrote nothing {total - wrote}"]
    by_ns = Counter(r["ns"] for r in reconciles)
    out.append("per namespace: " + ", ".join(f"{k} {v}" for k, v in sorted(by_ns.items())))
    alone: Counter[str] = Counter()
    alone_idle: Counter[str] = Counter()
    among: Counter[str] = Counter()
    among_idle: Counter[str] = Counter()
    for r in reconciles:
        labels = {_label(c) for c in r["causes"]} or {"(none noted)"}
        for label in labels:
            among[label] += 1
            among_idle[label] += not r["writes"]
            if len(labels) == 1:
                alone[label] += 1
                alone_idle[label] += not r["writes"]
    out.append("cause | reconciles it was among | of them wrote nothing | alone | alone, nothing")
    for label, count in among.most_common(60):
        out.append(
            f"{label} | {count} | {among_idle[label]} | {alone[label]} | {alone_idle[label]}"
        )
    writes = Counter(w for r in reconciles for w in r["writes"])
    out.append("writes: " + ", ".join(f"{k} {v}" for k, v in writes.most_common()))
    return "\n".join(out)


def read(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for file in sorted(out.glob("causes.*.jsonl"))
        for line in file.read_text().splitlines()
        if line
    ]


SITECUSTOMIZE = """\
import os
if os.environ.get({env!r}):
    try:
        import bench.reconcile_causes as _causes
        _causes.install(os.environ[{env!r}])
    except Exception as error:  # a bench aid: never stop a process of the run
        print("reconcile_causes not installed:", error)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarize", action="store_true", help="only tally OUT")
    parser.add_argument("scale", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    out: Path = args.out
    if not args.summarize:
        out.mkdir(parents=True, exist_ok=True)
        site = Path(tempfile.mkdtemp(prefix="causes-site-"))
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=ENV))
        root = Path(__file__).resolve().parent.parent
        env = dict(os.environ)
        paths = [str(site), str(root), *filter(None, env.get("PYTHONPATH", "").split(":"))]
        env["PYTHONPATH"] = ":".join(paths)
        env[ENV] = str(out.resolve())
        scale = [a for a in args.scale if a != "--"]
        bench = Path(sys.executable).parent / "harvester-quota-bench"
        subprocess.run([str(bench), "scale", *scale], env=env, check=False)
    print(summarize(read(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
