"""VirtualMachine rules (Harvester's VM validator.go, quota part): a VM that is to run but has no
instance yet must fit under the base, its launcher pod's overhead and sidecars included, and the
hotplug attachment pod virt-controller creates beside it for hotplugged volumes, on every key
the pods use; and a running VM that an edit grows in place (CPU or memory hot-plug, which
KubeVirt carries out through a migration of its own) must fit what it grows by under the base.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ....generic.meta import spec
from ....util.hotplug import hot_plug_inputs, hot_plugged
from ....util.launcher import target_quota_usage
from ....util.launcher.parts import target_parts
from ....util.quotascope import launcher_scope_facts, quota_scope
from ....util.resourcequota.podindex import namespace_pods
from ....util.resources import ResourceList, total
from ...admission import Denied, Request
from ..common import Lookups, base_of, check_fits_base, launcher_settings
from ..pod.quiet import quiet_view

RUNNING_STRATEGIES: Final = frozenset({"Always", "RerunOnFailure", "Once", "WaitAsReceiver"})
"""Run strategies that give the VM a launcher pod without anyone starting it by hand.
WaitAsReceiver (KubeVirt v1.6+) waits for a decentralized migration into this namespace, whose
target pod is then the VM's pod for good: the VM arriving, checked like one that starts (no
room is made for it, util/resourcequota/rooms.py)."""


def _will_run(vm: Mapping[str, Any]) -> bool:
    strategy = spec(vm).get("runStrategy")
    if strategy is not None:
        return str(strategy) in RUNNING_STRATEGIES
    return bool(spec(vm).get("running"))


def validate_vm_start(request: Request, lookups: Lookups) -> None:
    """A VM that is to run but has no instance yet must fit under the base, overhead,
    sidecars and attachment pod included (Harvester checks this on VM create and update, limits
    only), unless the managed quota's scopes do not charge its launcher pod.

    Harvester's `CheckIfVMCanStartByResourceQuota`, which its `Create` and `Update` run from
    `checkVMSpec`; a VM whose instance exists is skipped, as `VMPodsExist` (over `getVMPods`)
    skips one whose pods exist."""
    vm = request.obj or {}
    if not _will_run(vm) or request.name in lookups.vmis(request.namespace):
        return  # halted, or already running (its pod is counted already)
    quota = lookups.managed_quota(request.namespace)
    if quota is None:
        return
    vmi = {
        "metadata": {"name": request.name, "namespace": request.namespace},
        "spec": dict(spec(spec(vm).get("template"))),
    }
    view = quiet_view(lookups, request.namespace, quota)
    try:
        settings = launcher_settings(lookups, request.namespace, quota)
        parts = target_parts(vmi, settings, first=True)
    except (ValueError, OverflowError) as error:  # OverflowError: a quantity beyond a float
        raise Denied(
            f"VM {request.name}: cannot size its launcher and attachment pods: {error}", code=422
        ) from error
    if not quota_scope(quota).matches(parts[0].facts):
        return
    needed = total(part.usage for part in parts)
    check_fits_base(f"VM {request.name}", needed, base_of(lookups, request.namespace, view), view)


def validate_vm(request: Request, lookups: Lookups) -> None:
    """Every VM rule: the start check, then the instancetype and growth checks."""
    validate_vm_start(request, lookups)
    validate_vm_instancetype_change(request, lookups)
    validate_vm_growth(request, lookups)


def _halted(vm: Mapping[str, Any]) -> bool:
    """KubeVirt stops the VM's VMI (runStrategy Halted, or the legacy running: false), and
    hot-plugs nothing into a VMI it is stopping. Manual is not halted: a VMI started by hand
    keeps running and is hot-plugged like any other."""
    strategy = spec(vm).get("runStrategy")
    if strategy is not None:
        return str(strategy) == "Halted"
    return not spec(vm).get("running")


def _running_vmi(request: Request, lookups: Lookups) -> Mapping[str, Any] | None:
    """The VMI of the VM an UPDATE edits, when KubeVirt may hot-plug into it: it exists, the
    edit does not halt the VM, and the namespace has a managed quota. None otherwise."""
    if request.operation != "UPDATE" or _halted(request.obj or {}):
        return None
    vmi = lookups.vmis(request.namespace).get(request.name)
    if vmi is None or lookups.managed_quota(request.namespace) is None:
        return None
    return vmi


def validate_vm_instancetype_change(request: Request, lookups: Lookups) -> None:
    """A running VM that uses an instancetype may not change its instancetype or preference
    (name, kind, revisionName or any other field): KubeVirt expands them into the template
    (ApplyToVM) before it hot-plugs, so a bigger instancetype hot-plugs CPU sockets and guest
    memory, and the webhook does not have the instancetype objects to size that. Any change
    counts, even to a smaller one, since a reference's size is not known here."""
    old_spec, new_spec = spec(request.old or {}), spec(request.obj or {})
    if old_spec.get("instancetype") is None and new_spec.get("instancetype") is None:
        return
    if (old_spec.get("instancetype"), old_spec.get("preference")) == (
        new_spec.get("instancetype"),
        new_spec.get("preference"),
    ):
        return
    if _running_vmi(request, lookups) is None:
        return
    raise Denied(
        f"VM {request.name}: changing the instancetype or preference of a running VM can "
        "hot-plug CPU or memory past the namespace's quota, which this webhook cannot size: "
        "stop the VM first, change it, and start it again (its new launcher pod then meets the quota)",
        code=403,
    )


def validate_vm_growth(request: Request, lookups: Lookups) -> None:
    """A running VM whose edit KubeVirt hot-plugs (more CPU sockets, or other guest memory,
    within the maximum its VMI started with: util/hotplug.py) grows through a migration
    KubeVirt makes itself, whose target pod is a migration target like any other and comes out
    larger than the pod it replaces. So the edit is checked like an in-place resize: what the
    VM's launcher pod will use after the hot-plug, less what its launcher pod uses now, must fit
    under the base next to the namespace's other pods (while room is held too: the room is for
    targets, not for growth). Not checked: an edit KubeVirt applies only at a restart (the larger
    pod meets quota admission and the pod rules when it is made), any edit under the Stage
    rollout strategy (KubeVirt never hot-plugs then), and an edit that leaves every field a
    hot-plug reads unchanged (a stop, a relabel or KubeVirt's own updates of the VM pass
    whatever growth an earlier edit left pending)."""
    vmi = _running_vmi(request, lookups)
    quota = lookups.managed_quota(request.namespace)
    if vmi is None or quota is None:
        return
    try:
        if hot_plug_inputs(request.obj) == hot_plug_inputs(request.old):
            return
        settings = launcher_settings(lookups, request.namespace, quota)
        if not settings.vm_rollout_live_update:
            return
        grown = hot_plugged(
            spec(spec(request.obj or {}).get("template")), vmi, settings.cpu_allocation_ratio
        )
        if grown is None:
            return
        needed = target_quota_usage(grown, settings)
    except (ValueError, OverflowError) as error:
        raise Denied(f"VM {request.name}: cannot size its hot-plug: {error}", code=422) from error
    if not quota_scope(quota).matches(launcher_scope_facts(grown, needed)):
        return
    view = quiet_view(lookups, request.namespace, quota)
    growth = _beyond(needed, _launcher_usage_now(lookups, request.namespace, vmi))
    check_fits_base(
        f"VM {request.name}: hot-plugging its CPU or memory grows its launcher pod",
        growth,
        base_of(lookups, request.namespace, view),
        view,
    )


def _launcher_usage_now(lookups: Lookups, namespace: str, vmi: Mapping[str, Any]) -> ResourceList:
    """What the VMI's launcher pod uses now (the newest that counts; nothing without one)."""
    uid = str((vmi.get("metadata") or {}).get("uid") or "")
    pods = namespace_pods(lookups.launcher_pods(namespace)).launchers_of(uid)
    counting = [view for view in pods if view.counts(lookups.now())]
    if not counting:
        return {}
    return dict(max(counting, key=lambda view: (view.created, view.name)).usage)


def _beyond(needed: ResourceList, now: ResourceList) -> ResourceList:
    """The keys on which `needed` exceeds `now`, by how much."""
    return {
        key: value - now[key] if key in now else value
        for key, value in needed.items()
        if key not in now or value > now[key]
    }
