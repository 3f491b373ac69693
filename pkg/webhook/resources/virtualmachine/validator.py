"""VirtualMachine rules (Harvester's VM validator, quota part): a VM that is to run but has no
instance yet must fit under the base, its launcher pod's overhead and sidecars included, and the
hotplug attachment pod virt-controller creates beside it for hotplugged volumes, on every key
the pods use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ....generic.meta import spec
from ....util.launcher import attachment_quota_usage, launcher_quota_usage
from ....util.quotascope import launcher_scope_facts, quota_scope
from ....util.resources import add
from ...admission import Denied, Request
from ..common import Lookups, base_of, check_fits_base, launcher_settings, view_of

RUNNING_STRATEGIES: Final = frozenset({"Always", "RerunOnFailure", "Once"})


def _will_run(vm: Mapping[str, Any]) -> bool:
    strategy = spec(vm).get("runStrategy")
    if strategy is not None:
        return str(strategy) in RUNNING_STRATEGIES
    return bool(spec(vm).get("running"))


def validate_vm_start(request: Request, lookups: Lookups) -> None:
    """A VM that is to run but has no instance yet must fit under the base, overhead,
    sidecars and attachment pod included (Harvester checks this on VM create and update, limits
    only), unless the managed quota's scopes do not charge its launcher pod."""
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
    view = view_of(lookups, request.namespace, quota)
    try:
        settings = launcher_settings(lookups, request.namespace, quota)
        needed = add(launcher_quota_usage(vmi, settings), attachment_quota_usage(vmi, settings))
    except (ValueError, OverflowError) as error:  # OverflowError: a quantity beyond a float
        raise Denied(
            f"VM {request.name}: cannot size its launcher and attachment pods: {error}", code=422
        ) from error
    if not quota_scope(quota).matches(launcher_scope_facts(vmi, needed)):
        return
    check_fits_base(f"VM {request.name}", needed, base_of(lookups, request.namespace, view), view)
