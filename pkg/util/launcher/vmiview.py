"""A VMI as the room model and the part renderers read it: one typed shape, one adapter.

`VmiView` declares every field of a VMI that the room model (util/resourcequota/rooms.py) and the
renderers of a target's parts (parts.py) read; mypy refuses a reader of a field it does not
declare. It comes from one adapter, `vmi_view`, whichever the source:

- the controller's caches keep one per VMI, built inside the store's write
  (resourcequota/planviews.py `vmi_facts`, with a digest of what the launcher rendering reads and
  without the object: narrow at 10,000 VMs);
- `explain`, the webhook and MTQ mode adapt the full object they hold (`as_view`, per lookup),
  and keep it as `source`, which the launcher rendering reads.

The launcher rendering reads the VMI's whole spec (render.py, compute.py): that one reader
takes `source`, the full object; where the view has none (the controller's), the caller's cache of
renders (planviews.RenderedUsages) decodes it once per VM shape and settings.
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
    """A digest of what the launcher rendering reads (planviews.py; b"" where `source` is kept)."""
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The full VMI it was adapted from (None in the controller's narrow caches)."""

    @property
    def key(self) -> str:
        """The store key, namespace/name."""
        return f"{self.namespace}/{self.name}"


VmiSource = VmiView | Mapping[str, Any]
"""A VMI as callers hold it: a view, or the full object (adapted by `as_view`)."""


def vmi_view(vmi: Mapping[str, Any], *, keep: bool = True, render_key: bytes = b"") -> VmiView:
    """The view of a full VMI object, keeping the object as `source` unless not `keep`; never
    raises (what cannot be read is read as absent)."""
    meta = metadata(vmi)
    spec = vmi.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    priority_class = spec.get("priorityClassName")
    return VmiView(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=_text(meta.get("uid")),
        created=_text(meta.get("creationTimestamp")),
        not_migratable=condition_status(vmi, LIVE_MIGRATABLE) == "False",
        priority_class=priority_class if isinstance(priority_class, str) else "",
        affinity=reduced_affinity(spec.get("affinity")),
        hotplug=_readable_hotplug(vmi),
        render_key=render_key,
        source=vmi if keep else None,
    )


def as_view(vmi: VmiSource) -> VmiView:
    """`vmi` as a view: itself if it is one, else adapted (`vmi_view`), keeping the object."""
    return vmi if isinstance(vmi, VmiView) else vmi_view(vmi)


def source_of(vmi: VmiView) -> Mapping[str, Any]:
    """The full object a renderer of the whole spec reads; ValueError for a narrow view."""
    if vmi.source is None:
        raise ValueError(f"VMI {vmi.key}: only its narrow view is at hand, not the object")
    return vmi.source


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
