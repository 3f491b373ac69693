"""Scenario files: the YAML schema, and refusing a bad file before anything runs.

A scenario replays an incident on the local cluster: namespaces with their quotas, VMs, and a list
of steps (migrations, drains, overhead-ratio changes, Rancher agent restarts, controller restarts,
user edits, VMI deletions, waits), then expectations. A typo, an unknown step or an impossible
expectation is reported with the file, the line and the reason, and nothing runs.

Schema (every key optional unless marked *):

    name: str*                      # a short identifier
    description: str
    kubevirt:
      version: "0.54" | "1.6" | ...  # KubeVirt whose launcher pods are simulated (default "1.6")
      also_on: ["1.7"]              # other releases whose real virt-controller may play it (the
                                    # runner refuses one whose launcher pods render otherwise)
      overcommit: v1.2.1 | current | {cpu: int, memory: int}   # Harvester's overcommit-config
      ratio: "1.5"                  # initial additional-guest-memory-overhead-ratio (null: unset)
      timings: fast | seed          # migration pace (seed: the v1.2.1 report's, ~20 s each)
      source_pod_grace: 8           # seconds a source pod keeps counting after its migration
      parallel: {cluster: 5, per_node: 2}
    rancher: {version: "2.12"}      # simulate Rancher's quota sync (absent: standalone quotas)
                                    # protection: true adds the write protection of Rancher
                                    # 2.14.6+/2.15.2+ (only Rancher may write its default quota)
                                    # project_limit: {limitsCpu: "12", ...} the project's limit
                                    # (default: three times its namespaces' quotas added up)
    harvester: {compensation: true} # --strategy harvester-port (our port of v1.9): false leaves out
                                    # v1.9's compensation of a refused migration (Harvester v1.4.2
                                    # to v1.8.2, the v1.7.0 seed)
    namespaces*:
      - name: str*
        quota: {limitsCpu: "30", ...}    # Rancher's field.cattle.io/resourceQuota limit, or
        hard: {limits.cpu: "30", ...}    # the quota's spec.hard without Rancher
    vms*:
      - {name*, namespace*, cores: 2, memory: 4Gi, node: kwok-node-0, migration_seconds: 2}
    steps:                          # run in order; each is a one-key mapping
      - migrate: vm1 | [vm1, vm2]   # start migrations (several at once)
      - drain: kwok-node-0          # evacuate every VM on a node
      - set-ratio: "4.5"
      - rancher-agent-restart: {}   # Rancher resets every quota to its annotation
      - controller-restart: {}      # stop the strategy and start a fresh one
      - controller-stop: {}         # the controllers are down (killed) until controller-start
      - controller-start: {}
      - edit-quota: {namespace*, hard*: {...}}       # a user edits spec.hard
      - edit-namespace-quota: {namespace*, quota*: {...}}  # a user edits Rancher's annotation
      - delete-vmi: vm1
      - restart-vm: vm1
      - start-vm: vm1
      - stop-vm: vm1
      - abort: vm1                  # abort the VM's running migration
      - wait: 5 | migrations | {seconds: 5} | {for: migrations, timeout: 120}
    expect:                         # checked at the end (for our strategy)
      outcome: Succeeded            # every migration's outcome (or {vm1: Failed, ...});
                                    # Unfinished: still running or Pending at the end
      quota_at_base: true
      no_stale_annotations: true
      max_blocked_seconds: 0
      max_writes_per_migration: 2
      vm_start_refused: [vm5]
    expect_harvester: {...}         # the same keys, for --strategy harvester (Harvester's own
                                    # code) and harvester-port (our port): its known failures
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...util.quantity import Quantity
from ...util.rancher.annotation import LIMIT_FIELDS

HARVESTER_STRATEGY_NAMES = frozenset({"harvester", "harvester-port"})
"""The strategies that are Harvester (its own code, or our port): expect_harvester is theirs."""

STEP_KINDS = (
    "migrate",
    "drain",
    "set-ratio",
    "rancher-agent-restart",
    "controller-restart",
    "controller-stop",
    "controller-start",
    "edit-quota",
    "edit-namespace-quota",
    "delete-vmi",
    "restart-vm",
    "start-vm",
    "stop-vm",
    "abort",
    "wait",
)
UNFINISHED = "Unfinished"
OUTCOMES = ("Succeeded", "Failed", "Aborted", UNFINISHED)
EXPECT_KEYS = (
    "outcome",
    "quota_at_base",
    "no_stale_annotations",
    "max_blocked_seconds",
    "max_writes_per_migration",
    "vm_start_refused",
    "min_blocked_migrations",
)
OVERCOMMITS = {"v1.2.1": {"cpu": 1600, "memory": 150}, "current": {"cpu": 1000, "memory": 150}}
RANCHER_FIELDS = {json_field for json_field, _ in LIMIT_FIELDS}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class ScenarioError(ValueError):
    """One or more problems in a scenario file, each "file:line: reason"."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class VM:
    name: str
    namespace: str
    cores: int = 2
    memory: str = "4Gi"
    node: str | None = None
    migration_seconds: float | None = None


@dataclass(frozen=True)
class NamespaceSpec:
    name: str
    quota: dict[str, str] | None = None
    hard: dict[str, str] | None = None


@dataclass(frozen=True)
class Step:
    kind: str
    value: Any
    line: int


@dataclass
class Scenario:
    name: str
    path: Path
    description: str = ""
    kubevirt_version: str = "1.6"
    kubevirt_also_on: tuple[str, ...] = ()
    """Other KubeVirt releases (minor versions) whose real virt-controller may play the scenario
    (scenario/versions.py checks the claim before a run)."""
    overcommit: dict[str, int] = field(default_factory=lambda: dict(OVERCOMMITS["current"]))
    ratio: str | None = "1.5"
    timings: str = "fast"
    source_pod_grace: int | None = None
    parallel_cluster: int = 5
    parallel_per_node: int = 2
    rancher: dict[str, Any] | None = None
    harvester_compensation: bool = True
    namespaces: list[NamespaceSpec] = field(default_factory=list)
    vms: list[VM] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    expect: dict[str, Any] = field(default_factory=dict)
    expect_harvester: dict[str, Any] = field(default_factory=dict)

    def vm(self, name: str) -> VM:
        return next(vm for vm in self.vms if vm.name == name)

    def expectations(self, strategy: str) -> dict[str, Any]:
        return self.expect_harvester if strategy in HARVESTER_STRATEGY_NAMES else self.expect

    def expects_unfinished(self, strategy: str) -> bool:
        """True when the file says a migration is still running at the end with ``strategy``:
        waiting for it to finish would only burn the final wait."""
        outcome = self.expectations(strategy).get("outcome")
        wanted = outcome.values() if isinstance(outcome, dict) else [outcome]
        return UNFINISHED in wanted


class _Checker:
    """Walks the composed YAML (which keeps line numbers) and collects every problem."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, node: yaml.Node | None, reason: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.problems.append(f"{self.path}:{line}: {reason}")

    def mapping(
        self, node: yaml.Node, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{where} must be a mapping")
            return {}
        found: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in found:
                self.problem(key_node, f"{key!r} appears twice in {where}")
                continue
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = (
                    f" (did you mean {close[0]!r}?)"
                    if close
                    else f" (allowed: {', '.join(allowed)})"
                )
                self.problem(key_node, f"unknown key {key!r} in {where}{hint}")
                continue
            found[key] = value_node
        for key in required:
            if key not in found:
                self.problem(node, f"{where} needs {key!r}")
        return found

    def scalar(self, node: yaml.Node, where: str) -> str:
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, f"{where} must be a single value")
            return ""
        return str(node.value)

    def sequence(self, node: yaml.Node, where: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, f"{where} must be a list")
            return []
        return list(node.value)

    def quantity_map(
        self, node: yaml.Node, where: str, keys: Callable[[str], str | None]
    ) -> dict[str, str]:
        """A mapping of names to quantities; ``keys`` returns a reason for a bad name."""
        result: dict[str, str] = {}
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{where} must be a mapping of resource names to quantities")
            return result
        for key_node, value_node in node.value:
            key = str(key_node.value)
            reason = f"{key!r} appears twice" if key in result else keys(key)
            if reason:
                self.problem(key_node, f"{where}: {reason}")
                continue
            text = self.quantity(value_node, f"{where}.{key}")
            if text is not None:
                result[key] = text
        return result

    def quantity(self, node: yaml.Node, where: str, *, positive: bool = False) -> str | None:
        """A non-negative (or, with ``positive``, greater than zero) quantity; None if it is bad."""
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, f"{where} must be a single value")
            return None
        text = str(node.value)
        try:
            value = Quantity.parse(text)
        except ValueError as error:
            self.problem(node, f"{where}: {error}")
            return None
        if value.nanos < 0 or (positive and value.nanos == 0):
            self.problem(node, f"{where} must be {'more than' if positive else 'at least'} 0")
            return None
        return text

    def name(self, node: yaml.Node, where: str, pattern: re.Pattern[str] = _DNS_LABEL) -> str:
        """A Kubernetes object name (a DNS-1123 label, or ``pattern``)."""
        text = self.scalar(node, where)
        if isinstance(node, yaml.ScalarNode) and (len(text) > 253 or not pattern.fullmatch(text)):
            self.problem(
                node,
                f"{where} {text!r} is not a valid name (lower-case letters, digits and '-')",
            )
        return text

    def integer(self, node: yaml.Node, where: str, minimum: int = 0) -> int:
        text = self.scalar(node, where)
        try:
            value = int(text)
        except ValueError:
            self.problem(node, f"{where} must be a whole number, not {text!r}")
            return minimum
        if value < minimum:
            self.problem(node, f"{where} must be at least {minimum}")
        return value

    def boolean(self, node: yaml.Node, where: str) -> bool:
        text = self.scalar(node, where)
        if text not in ("true", "false"):
            self.problem(node, f"{where} must be true or false, not {text!r}")
        return text == "true"

    def number(self, node: yaml.Node, where: str) -> float:
        text = self.scalar(node, where)
        try:
            value = float(text)
        except ValueError:
            self.problem(node, f"{where} must be a number, not {text!r}")
            return 0.0
        if not math.isfinite(value):
            self.problem(node, f"{where} must be a finite number, not {text!r}")
            return 0.0
        if value < 0:
            self.problem(node, f"{where} must not be negative")
        return value


def _rancher_key(key: str) -> str | None:
    if key in RANCHER_FIELDS:
        return None
    close = difflib.get_close_matches(key, sorted(RANCHER_FIELDS), n=1)
    return f"unknown Rancher quota field {key!r}" + (
        f" (did you mean {close[0]!r}?)" if close else ""
    )


def _hard_key(key: str) -> str | None:
    return None if key and " " not in key else f"bad resource name {key!r}"


def load(path: str | Path) -> Scenario:
    """Reads and validates a scenario file; raises ScenarioError listing every problem found."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError([f"{path}: cannot read the file: {error}"]) from error
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise ScenarioError(
            [f"{path}:{line}: not valid YAML: {getattr(error, 'problem', error)}"]
        ) from error
    checker = _Checker(path)
    if root is None:
        raise ScenarioError([f"{path}:1: the file is empty"])
    scenario = _scenario(checker, root, path)
    if checker.problems:
        raise ScenarioError(checker.problems)
    return scenario


def _scenario(c: _Checker, root: yaml.Node, path: Path) -> Scenario:
    top = c.mapping(
        root,
        "the scenario",
        (
            "name",
            "description",
            "kubevirt",
            "rancher",
            "harvester",
            "namespaces",
            "vms",
            "steps",
            "expect",
            "expect_harvester",
        ),
        ("name", "namespaces", "vms"),
    )
    scenario = Scenario(
        name=c.scalar(top["name"], "name") if "name" in top else path.stem, path=path
    )
    if "description" in top:
        scenario.description = c.scalar(top["description"], "description")
    if "kubevirt" in top:
        _kubevirt(c, top["kubevirt"], scenario)
    if "rancher" in top:
        rancher = c.mapping(top["rancher"], "rancher", ("version", "protection", "project_limit"))
        scenario.rancher = {
            "version": c.scalar(rancher["version"], "rancher.version")
            if "version" in rancher
            else "2.12",
            "protection": c.boolean(rancher["protection"], "rancher.protection")
            if "protection" in rancher
            else False,
            "project_limit": c.quantity_map(
                rancher["project_limit"], "rancher.project_limit", _rancher_key
            )
            if "project_limit" in rancher
            else None,
        }
    if "harvester" in top:
        harvester = c.mapping(top["harvester"], "harvester", ("compensation",))
        if "compensation" in harvester:
            scenario.harvester_compensation = c.boolean(
                harvester["compensation"], "harvester.compensation"
            )
    for index, node in enumerate(
        c.sequence(top["namespaces"], "namespaces") if "namespaces" in top else []
    ):
        _namespace(c, node, index, scenario)
    names = [ns.name for ns in scenario.namespaces]
    for index, node in enumerate(c.sequence(top["vms"], "vms") if "vms" in top else []):
        _vm(c, node, index, scenario, names)
    for node in c.sequence(top["steps"], "steps") if "steps" in top else []:
        _step(c, node, scenario)
    for key in ("expect", "expect_harvester"):
        if key in top:
            setattr(scenario, key, _expect(c, top[key], key, scenario))
    return scenario


def _also_on(c: _Checker, node: yaml.Node, scenario: Scenario) -> None:
    from ...util.kubevirtversion import parse_kubevirt_version  # noqa: PLC0415

    releases = []
    for item in c.sequence(node, "kubevirt.also_on"):
        text = c.scalar(item, "kubevirt.also_on")
        try:
            parse_kubevirt_version(text)
        except ValueError as error:
            c.problem(item, f"kubevirt.also_on: {error}")
            continue
        releases.append(text)
    scenario.kubevirt_also_on = tuple(releases)


def _kubevirt(c: _Checker, node: yaml.Node, scenario: Scenario) -> None:
    kv = c.mapping(
        node,
        "kubevirt",
        ("version", "also_on", "overcommit", "ratio", "timings", "source_pod_grace", "parallel"),
    )
    if "also_on" in kv:
        _also_on(c, kv["also_on"], scenario)
    if "source_pod_grace" in kv:
        scenario.source_pod_grace = c.integer(
            kv["source_pod_grace"], "kubevirt.source_pod_grace", 0
        )
    if "version" in kv:
        scenario.kubevirt_version = c.scalar(kv["version"], "kubevirt.version")
        from ...util.kubevirtversion import parse_kubevirt_version  # noqa: PLC0415

        try:
            parse_kubevirt_version(scenario.kubevirt_version)
        except ValueError as error:
            c.problem(kv["version"], f"kubevirt.version: {error}")
    if "overcommit" in kv:
        _overcommit(c, kv["overcommit"], scenario)
    if "ratio" in kv:
        text = c.scalar(kv["ratio"], "kubevirt.ratio")
        scenario.ratio = None if text in ("", "null", "~") else _ratio(c, kv["ratio"], text)
    if "timings" in kv:
        scenario.timings = c.scalar(kv["timings"], "kubevirt.timings")
        if scenario.timings not in ("fast", "seed"):
            c.problem(kv["timings"], "kubevirt.timings must be fast or seed")
    if "parallel" in kv:
        _parallel(c, kv["parallel"], scenario)


def _overcommit(c: _Checker, node: yaml.Node, scenario: Scenario) -> None:
    if isinstance(node, yaml.ScalarNode):
        if node.value not in OVERCOMMITS:
            c.problem(
                node, f"kubevirt.overcommit must be one of {', '.join(OVERCOMMITS)} or a mapping"
            )
        else:
            scenario.overcommit = dict(OVERCOMMITS[node.value])
        return
    values = c.mapping(node, "kubevirt.overcommit", ("cpu", "memory", "storage"), ("cpu", "memory"))
    scenario.overcommit = {
        k: c.integer(v, f"kubevirt.overcommit.{k}", 1) for k, v in values.items()
    }


def _parallel(c: _Checker, node: yaml.Node, scenario: Scenario) -> None:
    parallel = c.mapping(node, "kubevirt.parallel", ("cluster", "per_node"))
    if "cluster" in parallel:
        scenario.parallel_cluster = c.integer(parallel["cluster"], "kubevirt.parallel.cluster", 1)
    if "per_node" in parallel:
        scenario.parallel_per_node = c.integer(
            parallel["per_node"], "kubevirt.parallel.per_node", 1
        )


def _ratio(c: _Checker, node: yaml.Node, text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        c.problem(node, f"ratio {text!r} is not a number")
        return text
    if not 1.0 <= value <= 10.0:
        c.problem(node, f"ratio {text} is outside Harvester's range 1.0 to 10.0")
    return text


def _namespace(c: _Checker, node: yaml.Node, index: int, scenario: Scenario) -> None:
    where = f"namespaces[{index}]"
    ns = c.mapping(node, where, ("name", "quota", "hard"), ("name",))
    name = c.name(ns["name"], f"{where}.name") if "name" in ns else ""
    quota = c.quantity_map(ns["quota"], f"{where}.quota", _rancher_key) if "quota" in ns else None
    hard = c.quantity_map(ns["hard"], f"{where}.hard", _hard_key) if "hard" in ns else None
    if quota is None and hard is None:
        c.problem(node, f"{where} needs a quota (Rancher's annotation) or a hard (spec.hard)")
    if quota is not None and scenario.rancher is None:
        c.problem(
            ns["quota"],
            f"{where}.quota is Rancher's annotation: add a rancher section, or use hard",
        )
    if any(existing.name == name for existing in scenario.namespaces):
        c.problem(node, f"namespace {name!r} is declared twice")
    scenario.namespaces.append(NamespaceSpec(name=name, quota=quota, hard=hard))


def _vm(
    c: _Checker, node: yaml.Node, index: int, scenario: Scenario, namespaces: list[str]
) -> None:
    where = f"vms[{index}]"
    vm = c.mapping(
        node,
        where,
        ("name", "namespace", "cores", "memory", "node", "migration_seconds"),
        ("name", "namespace"),
    )
    name = c.name(vm["name"], f"{where}.name", _DNS_SUBDOMAIN) if "name" in vm else ""
    namespace = c.scalar(vm["namespace"], f"{where}.namespace") if "namespace" in vm else ""
    if namespace and namespace not in namespaces:
        c.problem(vm["namespace"], f"{where}: namespace {namespace!r} is not declared")
    if any(existing.name == name for existing in scenario.vms):
        c.problem(node, f"VM {name!r} is declared twice (names are unique across namespaces here)")
    memory = "4Gi"
    if "memory" in vm:
        memory = c.quantity(vm["memory"], f"{where}.memory", positive=True) or memory
    scenario.vms.append(
        VM(
            name=name,
            namespace=namespace,
            cores=c.integer(vm["cores"], f"{where}.cores", 1) if "cores" in vm else 2,
            memory=memory,
            node=c.name(vm["node"], f"{where}.node", _DNS_SUBDOMAIN) if "node" in vm else None,
            migration_seconds=c.number(vm["migration_seconds"], f"{where}.migration_seconds")
            if "migration_seconds" in vm
            else None,
        )
    )


def _known_vm(c: _Checker, node: yaml.Node, scenario: Scenario, where: str) -> str:
    name = c.scalar(node, where)
    if name and all(vm.name != name for vm in scenario.vms):
        close = difflib.get_close_matches(name, [vm.name for vm in scenario.vms], n=1)
        c.problem(
            node,
            f"{where}: no VM named {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
        )
    return name


def _step(c: _Checker, node: yaml.Node, scenario: Scenario) -> None:
    if not isinstance(node, yaml.MappingNode) or len(node.value) != 1:
        c.problem(node, "each step is a mapping with exactly one key, e.g. '- migrate: vm1'")
        return
    key_node, value = node.value[0]
    kind = str(key_node.value)
    line = key_node.start_mark.line + 1
    if kind not in STEP_KINDS:
        close = difflib.get_close_matches(kind, STEP_KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (steps: {', '.join(STEP_KINDS)})"
        c.problem(key_node, f"unknown step {kind!r}{hint}")
        return
    parsed = _STEP_PARSERS[kind](c, value, scenario, kind)
    scenario.steps.append(Step(kind=kind, value=parsed, line=line))


def _vm_list(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> list[str]:
    nodes = node.value if isinstance(node, yaml.SequenceNode) else [node]
    return [_known_vm(c, item, scenario, kind) for item in nodes]


def _one_vm(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> str:
    return _known_vm(c, node, scenario, kind)


def _empty(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> None:
    if isinstance(node, yaml.MappingNode) and node.value:
        c.problem(node, f"{kind} takes no arguments")


def _node_name(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> str:
    return c.name(node, kind, _DNS_SUBDOMAIN)


def _set_ratio(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> str:
    return _ratio(c, node, c.scalar(node, kind))


def _edit_quota(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> dict[str, Any]:
    field_name = "hard" if kind == "edit-quota" else "quota"
    edit = c.mapping(node, kind, ("namespace", field_name), ("namespace", field_name))
    namespace = c.scalar(edit["namespace"], f"{kind}.namespace") if "namespace" in edit else ""
    if namespace and all(ns.name != namespace for ns in scenario.namespaces):
        c.problem(edit["namespace"], f"{kind}: namespace {namespace!r} is not declared")
    keys = _hard_key if field_name == "hard" else _rancher_key
    values = (
        c.quantity_map(edit[field_name], f"{kind}.{field_name}", keys) if field_name in edit else {}
    )
    if kind == "edit-namespace-quota" and scenario.rancher is None:
        c.problem(
            node,
            "edit-namespace-quota edits Rancher's annotation: the scenario has no rancher section",
        )
    return {"namespace": namespace, field_name: values}


def _wait(c: _Checker, node: yaml.Node, scenario: Scenario, kind: str) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        if node.value == "migrations":
            return {"for": "migrations", "timeout": 300.0}
        return {"seconds": c.number(node, "wait")}
    wait = c.mapping(node, "wait", ("seconds", "for", "timeout"))
    if "for" in wait:
        target = c.scalar(wait["for"], "wait.for")
        if target not in ("migrations", "quota-at-base"):
            c.problem(wait["for"], "wait.for must be migrations or quota-at-base")
        return {
            "for": target,
            "timeout": c.number(wait["timeout"], "wait.timeout") if "timeout" in wait else 300.0,
        }
    if "seconds" not in wait:
        c.problem(node, "wait needs seconds or for")
        return {"seconds": 0.0}
    return {"seconds": c.number(wait["seconds"], "wait.seconds")}


_STEP_PARSERS: dict[str, Callable[[_Checker, yaml.Node, Scenario, str], Any]] = {
    "migrate": _vm_list,
    "drain": _node_name,
    "set-ratio": _set_ratio,
    "rancher-agent-restart": _empty,
    "controller-restart": _empty,
    "controller-stop": _empty,
    "controller-start": _empty,
    "edit-quota": _edit_quota,
    "edit-namespace-quota": _edit_quota,
    "delete-vmi": _one_vm,
    "restart-vm": _one_vm,
    "start-vm": _one_vm,
    "stop-vm": _one_vm,
    "abort": _one_vm,
    "wait": _wait,
}


def _expect(c: _Checker, node: yaml.Node, where: str, scenario: Scenario) -> dict[str, Any]:
    expect = c.mapping(node, where, EXPECT_KEYS)
    result: dict[str, Any] = {}
    for key, value in expect.items():
        if key == "outcome":
            result[key] = _expected_outcomes(c, value, where, scenario)
        elif key in ("quota_at_base", "no_stale_annotations"):
            result[key] = c.boolean(value, f"{where}.{key}")
        elif key in ("max_blocked_seconds",):
            result[key] = c.number(value, f"{where}.{key}")
        elif key in ("max_writes_per_migration", "min_blocked_migrations"):
            result[key] = c.integer(value, f"{where}.{key}", 0)
        elif key == "vm_start_refused":
            result[key] = [
                _known_vm(c, item, scenario, f"{where}.{key}")
                for item in c.sequence(value, f"{where}.{key}")
            ]
    if result.get("max_writes_per_migration") == 0 and any(
        s.kind in ("migrate", "drain") for s in scenario.steps
    ):
        c.problem(
            expect.get("max_writes_per_migration"),
            f"{where}.max_writes_per_migration 0 is impossible: a migration that needs room must raise the quota",
        )
    if "outcome" in result and not any(s.kind in ("migrate", "drain") for s in scenario.steps):
        c.problem(expect.get("outcome"), f"{where}.outcome: the scenario never migrates anything")
    return result


def _expected_outcomes(
    c: _Checker, node: yaml.Node, where: str, scenario: Scenario
) -> str | dict[str, str]:
    if isinstance(node, yaml.ScalarNode):
        if node.value not in OUTCOMES:
            c.problem(node, f"{where}.outcome must be one of {', '.join(OUTCOMES)}")
        return str(node.value)
    mapping = c.mapping(node, f"{where}.outcome", tuple(vm.name for vm in scenario.vms))
    outcomes: dict[str, str] = {}
    for vm_name, value in mapping.items():
        text = c.scalar(value, f"{where}.outcome.{vm_name}")
        if text not in OUTCOMES:
            c.problem(value, f"{where}.outcome.{vm_name} must be one of {', '.join(OUTCOMES)}")
        outcomes[vm_name] = text
    return outcomes


def describe(scenario: Scenario) -> Mapping[str, Any]:
    """A short summary (for the report header)."""
    return {
        "name": scenario.name,
        "file": str(scenario.path),
        "description": scenario.description.strip(),
        "kubevirt": scenario.kubevirt_version,
        "kubevirt_also_on": list(scenario.kubevirt_also_on),
        "rancher": scenario.rancher is not None,
        "namespaces": [ns.name for ns in scenario.namespaces],
        "vms": len(scenario.vms),
        "steps": [f"{step.kind}: {step.value}" for step in scenario.steps],
    }
