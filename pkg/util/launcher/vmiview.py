"""A VMI as the room model and the part renderers read it: one typed shape, one adapter.

`VmiView` declares every field of a VMI that the room model (util/resourcequota/rooms.py) and the
renderers of a target's parts (parts.py) read; mypy refuses a reader of a field it does not
declare. It comes from one adapter, `vmi_view`, whichever the source:

- the controller's caches keep one per VMI, built inside the store's write
  (resourcequota/planviews.py `vmi_facts`, with a digest of what the launcher rendering reads and
  without the object: narrow at 10,000 VMs);
- `explain`, the webhook and MTQ mode adapt the full object they hold (`as_view`, per lookup),
  with its `spec`.

What the launcher rendering reads (render.py, compute.py, the overhead formula) is `spec`, the
typed `SpecView` (util/vmispecview.py) the same adapter fills; a renderer reading a field it
does not declare fails to type-check. The controller's narrow views carry no `spec` (None): the
caller's cache of renders (planviews.RenderedUsages) adapts the full VMI once per VM shape and
settings. No raw object is kept: nothing reads one through the view.
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
    spec: SpecView | None = field(default=None, compare=False, repr=False)
    """What the launcher rendering reads (None in the controller's narrow caches, and for a VMI
    whose spec does not read: then `spec_error` says why)."""
    spec_error: str | None = field(default=None, compare=False, repr=False)
    """Why the spec could not be read (`spec_view`'s ValueError), None when it could."""

    @property
    def key(self) -> str:
        """The store key, namespace/name."""
        return f"{self.namespace}/{self.name}"


VmiSource = VmiView | Mapping[str, Any]
"""A VMI as callers hold it: a view, or the full object (adapted by `as_view`)."""


def vmi_view(vmi: Mapping[str, Any], *, keep: bool = True, render_key: bytes = b"") -> VmiView:
    """The view of a full VMI object, with its `spec` view unless not `keep` (the controller's
    narrow caches); never raises (what cannot be read is read as absent, a spec that cannot be
    read leaves its error in `spec_error`)."""
    spec_read, spec_error = _spec(vmi) if keep else (None, None)
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
        spec=spec_read,
        spec_error=spec_error,
    )


def _spec(vmi: Mapping[str, Any]) -> tuple[SpecView | None, str | None]:
    try:
        return spec_view(vmi), None
    except ValueError as err:
        return None, str(err)


def as_view(vmi: VmiSource) -> VmiView:
    """`vmi` as a view: itself if it is one, else adapted (`vmi_view`) with its spec."""
    return vmi if isinstance(vmi, VmiView) else vmi_view(vmi)


def spec_of(vmi: VmiView) -> SpecView:
    """What the launcher rendering reads of `vmi`; ValueError with the spec's own error, or
    for a narrow view (one without its spec)."""
    if vmi.spec is not None:
        return vmi.spec
    if vmi.spec_error is not None:
        raise ValueError(vmi.spec_error)
    raise ValueError(f"VMI {vmi.key}: only its narrow view is at hand, not its spec")


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
