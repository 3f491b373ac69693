"""MTQ mode under Rancher's protection: a quota only Rancher may write is left out of its plans.

Rancher 2.14.6+/2.15.2+ refuses every write of its labelled default quota but its own. Before the
first lock of a namespace whose plan would raise such a quota, the raise is sent as a dry run; if
Rancher refuses it (or a real raise is refused later), the namespace's Rancher quotas are left
out of every plan from then on (util/mtq.py: protected): no lock is taken for a
raise that cannot happen, and none again. Per namespace, in this process, while the namespace
exists (learned again after a restart, or for a namespace created again under the name, by one
dry run). Not thread-safe: event loop only.
"""

from __future__ import annotations

import logging

from ...generic import errors
from ...util.mtq import MtqPlan, raise_action
from .writes import MtqStats, MtqWrites

log = logging.getLogger(__name__)


class RancherGuard:
    """Which namespaces' Rancher quotas MTQ mode leaves alone, learned from Rancher's refusals."""

    def __init__(self, writes: MtqWrites, stats: MtqStats) -> None:
        self.writes = writes
        self.stats = stats
        self.protected: dict[str, str] = {}
        """Namespace -> Rancher's refusal of a raise of its default quota."""
        self._writable: set[str] = set()
        """Namespaces whose Rancher quota took a dry-run raise: not asked again."""

    async def refuses(self, namespace: str, plan: MtqPlan) -> bool:
        """Whether Rancher refuses a dry run of the plan's raise of its default quota (asked
        before the namespace's first lock in this process, so a quota only Rancher may write
        costs no lock window). Another answer leaves it to the real raise."""
        if namespace in self.protected or namespace in self._writable:
            return False
        quotas = self.writes.live_quotas(namespace)
        for original in plan.originals:
            live = quotas.get(original.name)
            if live is None or not live.rancher_default:
                continue
            hard = raise_action(live, original, plan.budget) or live.hard
            try:
                await self.writes.dry_run_hard(namespace, live, hard)
            except errors.ApiError as error:
                if errors.denied_by_rancher(error):
                    self.learn(namespace, live.name, error)
                    return True
                log.debug("%s/%s: dry-run raise answered %s", namespace, live.name, error)
                return False
            self._writable.add(namespace)
        return False

    def learn(self, namespace: str, quota: str, error: errors.ApiError) -> None:
        """Rancher refused a raise of `quota`: its quotas are out of the namespace's plans."""
        self.stats.rancher_refusals += 1
        if namespace not in self.protected:
            log.warning(
                "%s/%s: Rancher refuses our writes (%s); MTQ mode leaves its quota alone",
                namespace,
                quota,
                error,
            )
        self.protected[namespace] = error.message
        self._writable.discard(namespace)

    def forget(self, namespace: str) -> None:
        """The namespace is gone: what was learned of it goes too (a namespace created again
        under the name, in another Rancher project or none, is asked again)."""
        self.protected.pop(namespace, None)
        self._writable.discard(namespace)
