"""Every pod a VMI's migration target side charges, registered in one place.

A migration's target side is more than its launcher pod: virt-controller makes a hotplug
attachment pod beside a target whose VMI has hotplugged volumes (attachment.py), and KubeVirt
may add more. Each such pod is a `PartKind` in `TARGET_PARTS`: how KubeVirt renders it for a
VMI, what quota scopes read of it, and the `kubevirt.io` label its real pods carry. The room
model (util/resourcequota/rooms.py), MTQ's blocked budget (controller/mtq/blocked.py), the VM
validator, `explain` and `preflight` (its charge, its quota-constraint check and its node fit) read
the parts through `target_parts`, `beside_parts` and `target_part_kinds`, so a new kind is one
entry here plus its differential test against the real virt-controller.

Contracts every kind keeps: the launcher comes first (`primary`): it is the pod the others are
made beside; a secondary kind's real pods are those KubeVirt labels with the migration's uid and
with the kind's `label`, controlled by the target launcher pod (rooms.pods_beside decides which
pods qualify, for every kind alike); a kind renders {} for a VMI that gets none of its pods; a
secondary kind's pod has one container (or containers that all set the same resources), so the
keys of its usage are the ones it sets (preflight's constraint check reads them), and it runs on
the launcher's node (preflight's node fit counts its requests there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from ...apis.kubevirt import HOTPLUG_DISK, LAUNCHER
from ..quotascope import PLAIN_FACTS, PodScopeFacts, rendered_pod_facts
from ..resources import ResourceList
from .attachment import attachment_usage
from .render import launcher_quota_usage, target_quota_usage
from .settings import LauncherSettings
from .vmiview import VmiSource, VmiView, as_view, spec_of

PartRender = Callable[[VmiView, LauncherSettings], ResourceList]
"""How KubeVirt renders one kind of pod for a VMI, as quota charges it ({}: the VMI gets none).
Raises ValueError for a VMI KubeVirt would not render. It reads the view's declared fields (the
launcher's: its typed `spec`, through `spec_of`)."""

PartFacts = Callable[[VmiView, ResourceList], PodScopeFacts]
"""What quota scopes read of the pod of one kind rendered for a VMI with that usage."""


@dataclass(frozen=True, slots=True)
class PartKind:
    """One kind of pod a migration's target side charges."""

    name: str
    """What explain and the logs call it ("launcher", "attachment")."""
    label: str
    """The value of the kubevirt.io label on its real pods."""
    render: PartRender
    """Its pod on a migration's target side."""
    render_first: PartRender
    """Its pod beside a VMI's first launcher pod (a VM that starts: the VM validator)."""
    facts: PartFacts
    """What quota scopes read of its rendered pod (a real pod's own facts replace them)."""
    primary: bool = False
    """The launcher: the pod every other part is made beside (exactly one kind, the first)."""


def _attachment_facts(_vmi: VmiView, _usage: ResourceList) -> PodScopeFacts:
    """KubeVirt renders the attachment pod without the VMI's priority class or pod affinity,
    with requests and no deadline, whatever the launcher has (RenderHotplugAttachmentPodTemplate)."""
    return PLAIN_FACTS


def _target_launcher(vmi: VmiView, settings: LauncherSettings) -> ResourceList:
    return target_quota_usage(spec_of(vmi), settings)


def _first_launcher(vmi: VmiView, settings: LauncherSettings) -> ResourceList:
    return launcher_quota_usage(spec_of(vmi), settings)


def launcher_facts(vmi: VmiView, usage: ResourceList) -> PodScopeFacts:
    """quotascope.launcher_scope_facts for a view: the VMI's priority class and affinity are
    copied to its launcher pod."""
    return rendered_pod_facts(vmi.priority_class, vmi.affinity, usage)


LAUNCHER_PART: Final = PartKind(
    name="launcher",
    label=LAUNCHER,
    render=_target_launcher,
    render_first=_first_launcher,
    facts=launcher_facts,
    primary=True,
)
ATTACHMENT_PART: Final = PartKind(
    name="attachment",
    label=HOTPLUG_DISK,
    render=attachment_usage,
    render_first=attachment_usage,
    facts=_attachment_facts,
)

TARGET_PARTS: tuple[PartKind, ...] = (LAUNCHER_PART, ATTACHMENT_PART)
"""The registry: every kind of pod a target side charges, the launcher first. Read it through
`target_part_kinds` (tests register a kind of their own by replacing this tuple)."""


def target_part_kinds() -> tuple[PartKind, ...]:
    """The registered kinds, the launcher first (read at each call, never cached)."""
    return TARGET_PARTS


def secondary_labels() -> frozenset[str]:
    """The kubevirt.io labels of the kinds made beside the launcher (read for every pod the
    informers see: one set per registry, kept)."""
    return _labels_of(target_part_kinds())


@lru_cache(maxsize=4)
def _labels_of(kinds: tuple[PartKind, ...]) -> frozenset[str]:
    return frozenset(kind.label for kind in kinds if not kind.primary)


@dataclass(frozen=True, slots=True)
class RenderedPart:
    """One pod of a VMI's target side as KubeVirt would render it now."""

    kind: PartKind
    usage: ResourceList
    facts: PodScopeFacts


def target_parts(
    vmi: VmiSource, settings: LauncherSettings, *, first: bool = False
) -> tuple[RenderedPart, ...]:
    """Every pod KubeVirt would render for `vmi` on a migration's target side (`first`: beside
    its first launcher pod, a VM that starts), the launcher first; kinds the VMI gets none of
    are left out. Raises ValueError as the renderers do."""
    return _rendered(as_view(vmi), settings, target_part_kinds(), first)


def beside_parts(vmi: VmiSource, settings: LauncherSettings) -> tuple[RenderedPart, ...]:
    """`target_parts` without the launcher: the pods made beside a migration's target launcher,
    for a caller that renders the launcher pod itself (preflight reads its containers)."""
    kinds = tuple(kind for kind in target_part_kinds() if not kind.primary)
    return _rendered(as_view(vmi), settings, kinds, False)


def _rendered(
    view: VmiView, settings: LauncherSettings, kinds: tuple[PartKind, ...], first: bool
) -> tuple[RenderedPart, ...]:
    parts: list[RenderedPart] = []
    for kind in kinds:
        usage = (kind.render_first if first else kind.render)(view, settings)
        if usage or kind.primary:
            parts.append(RenderedPart(kind, usage, kind.facts(view, usage)))
    return tuple(parts)
