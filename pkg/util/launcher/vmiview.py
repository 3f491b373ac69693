"""A VMI as the room model and the part renderers read it: one typed shape, one adapter.

`VmiView` declares every field of a VMI that the room model (util/resourcequota/rooms.py) and the
renderers of a target's parts (parts.py) read; mypy refuses a reader of a field it does not
declare. It comes from one adapter, `vmi_view`, whichever the source:

- the controller's caches keep one per VMI, built inside the store's write
  (resourcequota/planviews.py `vmi_facts`, with a digest of what the launcher rendering reads and
  without the object: narrow at 10,000 VMs);
- `explain`, the webhook and MTQ mode adapt the full object they hold (`as_view`, per lookup),
  with a `SpecReader` of its spec, read at the first render.

What the launcher rendering reads (render.py, compute.py, the overhead formula) is its spec, the
typed `SpecView` (util/vmispecview.py, through `spec_of`); a renderer reading a field it does
not declare fails to type-check. The controller's narrow views carry no spec: the caller's
cache of renders (planviews.RenderedUsages) adapts the full VMI once per VM shape and settings.
No reader gets the raw object: the `SpecReader` holds it privately until its first read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...apis.kubevirt import LIVE_MIGRATABLE
from ...generic.meta import condition_status, metadata
from ...generic.resource import Object
from ..quotascope import reduced_affinity
from ..vmispec import mapping_at, sequence_at, vmi_spec
from ..vmispecview import SpecView, spec_view


class SpecReader:
    """A VMI's `SpecView`, read from the object at the first ask and kept, with its error; the
    object is let go once read. Lazy because most asks never come: the webhook's render cache
    (webhook/renders.py) answers an unchanged VMI from its uid and resourceVersion. Not
    thread-safe (event loop only); a second reader of the same view reads the same result."""

    __slots__ = ("_error", "_view", "_vmi")

    def __init__(self, vmi: Mapping[str, Any]) -> None:
        self._vmi: Mapping[str, Any] | None = vmi
        self._view: SpecView | None = None
        self._error = ""

    def read(self) -> SpecView:
        """The spec view; ValueError (the same each time) for a VMI whose spec does not read."""
        if self._vmi is not None:
            try:
                self._view = spec_view(self._vmi)
            except ValueError as err:
                self._error = str(err)
            self._vmi = None
        if self._view is None:
            raise ValueError(self._error)
        return self._view


@dataclass(frozen=True, slots=True)
class VmiView:
    """What the room model and the part renderers read of one VMI."""

    name: str
    namespace: str
    uid: str | None
    created: str | None
    """metadata.creationTimestamp (which instance of a VM a migration belongs to)."""
    not_migratable: bool
    """KubeVirt's LiveMigratable condition is False: no migration of it holds room."""
    priority_class: str
    """spec.priorityClassName (KubeVirt copies it to the launcher pod: quota scopes read it)."""
    affinity: Object | None
    """spec.affinity reduced to whether it is cross-namespace (quotascope.reduced_affinity)."""
    hotplug: bool
    """The VMI has hotplugged volumes (`has_hotplug_volumes`): a migration's target gets an
    attachment pod too. False where its volumes or volumeStatus cannot be read: the room then
    has no attachment pod (only KubeVirt writes a VMI's status, under the chart's
    kubevirt-status policy; a malformed spec.volumes is refused by virt-api)."""
    render_key: bytes = b""
    """A digest of what the launcher rendering reads (planviews.py; b"" where `spec` is kept)."""
    resource_version: str | None = field(default=None, compare=False)
    """metadata.resourceVersion: a render of the view's spec is good while it stays the same
    (webhook/renders.py). Not compared: a VMI's every write changes it, and the controller's
    caches tell a changed view from an unchanged one by what the plan reads."""
    spec_reader: SpecReader | None = field(default=None, compare=False, repr=False)
    """Its spec view, what the launcher rendering reads (`spec_of`); None in the controller's
    narrow caches."""

    @property
    def key(self) -> str:
        """The store key, namespace/name."""
        return f"{self.namespace}/{self.name}"


VmiSource = VmiView | Mapping[str, Any]
"""A VMI as callers hold it: a view, or the full object (adapted by `as_view`)."""


def vmi_view(vmi: Mapping[str, Any], *, keep: bool = True, render_key: bytes = b"") -> VmiView:
    """The view of a full VMI object, with a reader of its spec view unless not `keep` (the
    controller's narrow caches); never raises (what cannot be read is read as absent; a spec
    that cannot be read raises when it is read, `spec_of`)."""
    meta = metadata(vmi)
    spec = vmi.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    priority_class = spec.get("priorityClassName")
    return VmiView(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=_text(meta.get("uid")),
        resource_version=_text(meta.get("resourceVersion")),
        created=_text(meta.get("creationTimestamp")),
        not_migratable=condition_status(vmi, LIVE_MIGRATABLE) == "False",
        priority_class=priority_class if isinstance(priority_class, str) else "",
        affinity=reduced_affinity(spec.get("affinity")),
        hotplug=_readable_hotplug(vmi),
        render_key=render_key,
        spec_reader=SpecReader(vmi) if keep else None,
    )


def as_view(vmi: VmiSource) -> VmiView:
    """`vmi` as a view: itself if it is one, else adapted (`vmi_view`) with its spec."""
    return vmi if isinstance(vmi, VmiView) else vmi_view(vmi)


def spec_of(vmi: VmiView) -> SpecView:
    """What the launcher rendering reads of `vmi`; ValueError with the spec's own error, or
    for a narrow view (one without its spec)."""
    if vmi.spec_reader is None:
        raise ValueError(f"VMI {vmi.key}: only its narrow view is at hand, not its spec")
    return vmi.spec_reader.read()


def has_hotplug_volumes(vmi: Mapping[str, Any]) -> bool:
    """virt-controller's VMIHasHotplugVolumes: whether the VMI's pods include an attachment pod.
    Raises ValueError for a volume list or volume status that is not a list of objects' kind."""
    state = mapping_at(vmi, "status", "VMI")
    for entry in sequence_at(state, "volumeStatus", "status"):
        if isinstance(entry, Mapping) and entry.get("hotplugVolume") is not None:
            return True
    for volume in sequence_at(vmi_spec(vmi), "volumes", "spec"):
        if not isinstance(volume, Mapping):
            continue
        for source in ("persistentVolumeClaim", "dataVolume"):
            claim = volume.get(source)
            if isinstance(claim, Mapping) and claim.get("hotpluggable") is True:
                return True
    return False


def _readable_hotplug(vmi: Mapping[str, Any]) -> bool:
    try:
        return has_hotplug_volumes(vmi)
    except ValueError:
        return False


def _text(value: object) -> str | None:
    return None if value is None else str(value)
