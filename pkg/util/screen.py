"""One poisoned object never fails a whole one-shot command: `explain` and
`preflight` run their per-object computation on each listed object on its own, and an object
it raises on is skipped and named in the command's warnings, as the informers skip it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

Obj = TypeVar("Obj", bound=Mapping[str, Any])
Result = TypeVar("Result")


def screened(
    objects: Iterable[Obj], compute: Callable[[Obj], Result], kind: str
) -> tuple[list[tuple[Obj, Result]], list[str]]:
    """(each object with what `compute` made of it, for those it did not raise on; one warning
    per object skipped, naming it (kind, namespace/name) and what was raised). Never raises
    what `compute` raises (any Exception)."""
    kept: list[tuple[Obj, Result]] = []
    skipped: list[str] = []
    for obj in objects:
        try:
            kept.append((obj, compute(obj)))
        except Exception as error:
            skipped.append(f"skipped {named(kind, obj)}: {type(error).__name__}: {error}")
    return kept, skipped


def named(kind: str, obj: Mapping[str, Any]) -> str:
    """``kind namespace/name`` as far as the object's metadata can be read."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
