"""Which real virt-controller may play a scenario: one of the scenario's own KubeVirt release, or
of a release the file lists under ``kubevirt.also_on``, once the claim behind that list holds.

A scenario's quotas are written against the launcher pods of its release (a quota "with room for
one target pod, not two"). Another release plays it unchanged only if it renders the same pods:
``launcher_differences`` renders every VM's launcher and migration target pod, as Harvester's VM
mutator and KubeVirt's renderer (util/launcher) make them, for both releases, at every overhead
ratio the scenario sets, with and without limits in the namespace's quota, and names every
figure that differs. Pure functions; nothing here reads the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...util.kubevirtversion import parse_kubevirt_version
from ...util.launcher.render import launcher_quota_usage, target_quota_usage
from ...util.launcher.settings import LauncherSettings
from ..sim.kubevirt.objects import VMSpec, render_vm, render_vmi, vm_resources
from .schema import Scenario

_PROBE_NAMESPACE = "versions-probe"


def same_release(a: str, b: str) -> bool:
    """Whether two versions ("1.6", "v1.6.0") are of one KubeVirt release (major.minor)."""
    first, second = parse_kubevirt_version(a), parse_kubevirt_version(b)
    return (first.major, first.minor) == (second.major, second.minor)


def listed_release(scenario: Scenario, running: str) -> bool:
    """Whether ``running`` is the scenario's release or one of its ``kubevirt.also_on``."""
    releases = (scenario.kubevirt_version, *scenario.kubevirt_also_on)
    return any(same_release(release, running) for release in releases)


def _ratios(scenario: Scenario) -> list[str | None]:
    """The scenario's initial overhead ratio and every ratio a set-ratio step sets."""
    ratios: list[str | None] = [scenario.ratio]
    ratios.extend(str(step.value) for step in scenario.steps if step.kind == "set-ratio")
    return ratios


def _usages(scenario: Scenario, version: str, ratio: str | None) -> Iterator[tuple[str, str]]:
    """(what, figures) for each VM's launcher and target pod at ``version`` and ``ratio``."""
    parsed = parse_kubevirt_version(version)
    for vm in scenario.vms:
        spec = VMSpec(
            name=vm.name, cores=vm.cores, memory=vm.memory, overcommit=scenario.overcommit
        )
        resources = vm_resources(spec, parsed, ratio)
        vmi = render_vmi(render_vm(spec, _PROBE_NAMESPACE, resources, running=True))
        for limits in (False, True):
            settings = LauncherSettings(
                ratio=ratio,
                kubevirt_version=version,
                quota_has_limits_cpu=limits,
                quota_has_limits_memory=limits,
            )
            for kind, usage in (
                ("launcher", launcher_quota_usage(vmi, settings)),
                ("target", target_quota_usage(vmi, settings)),
            ):
                where = f"{vm.name} {kind} pod (ratio {ratio}, quota limits: {limits})"
                yield where, str(sorted((key, str(value)) for key, value in usage.items()))


def launcher_differences(scenario: Scenario, other: str) -> list[str]:
    """Every pod of the scenario whose quota usage differs between its release and ``other``,
    with both figures; empty when ``other`` plays the scenario unchanged."""
    found = []
    for ratio in _ratios(scenario):
        own = dict(_usages(scenario, scenario.kubevirt_version, ratio))
        for where, figures in _usages(scenario, other, ratio):
            if own[where] != figures:
                found.append(
                    f"{where}: {own[where]} on {scenario.kubevirt_version}, {figures} on {other}"
                )
    return found


def check_plays_on(scenario: Scenario, running: str) -> None:
    """Raises ValueError unless virt-controller ``running`` may play ``scenario``: of its release,
    or of one listed in ``kubevirt.also_on`` whose launcher pods render as the scenario's do."""
    if same_release(scenario.kubevirt_version, running):
        return
    if not listed_release(scenario, running):
        raise ValueError(
            f"scenario {scenario.name} needs KubeVirt {scenario.kubevirt_version}; the cluster "
            f"runs virt-controller {running}"
        )
    differences = launcher_differences(scenario, running)
    if differences:
        raise ValueError(
            f"scenario {scenario.name} lists KubeVirt {running} in kubevirt.also_on, but its "
            f"launcher pods differ there: {'; '.join(differences)}"
        )
