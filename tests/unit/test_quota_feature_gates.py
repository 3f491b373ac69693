"""--quota-feature-gates (issue 41 item 4): the API server's gates that change what quota charges
a pod, one QuotaFeatures value handed from the command line to every pod-usage computation: the
controller's pod index, the webhook's pod decisions and its pod index, `explain`, `preflight`.

The only gate is PodLevelResourcesEphemeralStorage (KEP-6386, alpha in Kubernetes v1.38),
modelled from the KEP (tests/unit/test_podusage.py): the tenant pod here asks 1Gi of scratch in
each of two containers and 8Gi in its own spec.resources, so quota charges it 2Gi without the
gate and 8Gi with it."""

from __future__ import annotations

import argparse
import copy
import datetime
from typing import Any, cast

import pytest
from harvester_quota import main as cli
from harvester_quota.config.management import Management, Options
from harvester_quota.controller.resourcequota.planner import PlanInputs
from harvester_quota.explain import explain
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.preflight import ClusterState, Plan, read
from harvester_quota.preflight.nodes import free_on_nodes
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import migrating_vm_annotation_key
from harvester_quota.util.podusage import (
    KUBERNETES_1_36,
    QuotaFeatures,
    quota_features_from_gates,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook import server as webhook_server
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.options import WebhookOptions
from harvester_quota.webhook.resources.common import Identities
from prometheus_client import CollectorRegistry

from tests.objects import managed_quota, migration, rancher_namespace, vmi
from tests.unit.fakes import upsert
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster
from tests.unit.test_webhook import FakeLookups, request, running_vm, validate_pod

GATE = "PodLevelResourcesEphemeralStorage"
ON = QuotaFeatures(pod_level_ephemeral_storage=True)
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SCRATCH = "requests.ephemeral-storage"


def scratch_pod(name: str = "scratch", **labels: str) -> dict[str, Any]:
    """A tenant pod: containers 2 x 1Gi of ephemeral storage, 8Gi asked at pod level."""
    containers = [
        {"name": c, "resources": {"requests": {"cpu": "10m", "ephemeral-storage": "1Gi"}}}
        for c in ("a", "b")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", "labels": labels},
        "spec": {"containers": containers, "resources": {"requests": {"ephemeral-storage": "8Gi"}}},
        "status": {"phase": "Running"},
    }


def charged(features: QuotaFeatures) -> Quantity:
    return Quantity.parse("8Gi" if features.pod_level_ephemeral_storage else "2Gi")


# --- the flag -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "features"),
    [
        (f"{GATE}=true", ON),
        (f"{GATE}=false", KUBERNETES_1_36),
        ("", KUBERNETES_1_36),
        (f" {GATE} = True ,", ON),
        (f"{GATE}=1", ON),
        (f"{GATE}=true,{GATE}=F", KUBERNETES_1_36),
    ],
)
def test_the_flag_reads_kubernetes_feature_gates_syntax(text: str, features: QuotaFeatures) -> None:
    """Comma-separated Gate=bool, Go's bool spellings, empty pairs skipped, the last one wins."""
    assert quota_features_from_gates(text) == features


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("PodLevelResources=true", f"unknown feature gate 'PodLevelResources' (known: {GATE})"),
        (f"{GATE.lower()}=true", "unknown feature gate"),
        (f"{GATE}=yes", f"invalid value of {GATE}='yes'"),
        (f"{GATE}=", "invalid value"),
        (GATE, "malformed pair"),
    ],
)
def test_an_unknown_gate_a_wrong_case_or_a_value_not_a_bool_is_refused(
    text: str, refusal: str
) -> None:
    """A gate we do not model is never taken as set, nor a misspelt one as unset."""
    with pytest.raises(ValueError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        quota_features_from_gates(text)


POD_CHARGING_COMMANDS = [
    ["run"],
    ["webhook", "--cert-file", "c", "--key-file", "k"],
    ["explain", "ns"],
    ["preflight", "drain", "node-1"],
    ["preflight", "upgrade"],
]


@pytest.mark.parametrize("command", POD_CHARGING_COMMANDS)
def test_every_command_that_charges_pods_takes_the_flag_and_refuses_an_unknown_gate_at_start(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    parser = cli.build_parser()
    assert parser.parse_args(command).quota_feature_gates == KUBERNETES_1_36
    given = parser.parse_args([*command, "--quota-feature-gates", f"{GATE}=true"])
    assert given.quota_feature_gates == ON
    with pytest.raises(SystemExit) as usage:
        parser.parse_args([*command, "--quota-feature-gates", "Nonesuch=true"])
    assert usage.value.code == 2
    assert f"unknown feature gate 'Nonesuch' (known: {GATE})" in capsys.readouterr().err


def with_gate(command: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args([*command, "--quota-feature-gates", f"{GATE}=true"])


def test_run_hands_the_gates_to_the_controllers_options() -> None:
    assert cli._options(with_gate(["run"])).quota_features == ON


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' kubeconfig: a client that is never used (each test stops before a call)."""
    fake = ClientConfig(host="https://127.0.0.1:1", ssl_context=False)
    monkeypatch.setattr(cli.config, "load", lambda *_: fake)


def test_webhook_hands_the_gates_to_its_options(
    no_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[WebhookOptions] = []

    async def serve(_client: ApiClient, options: WebhookOptions) -> int:
        served.append(options)
        return 0

    monkeypatch.setattr(webhook_server, "serve", serve)
    assert cli.cmd_webhook(with_gate(["webhook", "--cert-file", "c", "--key-file", "k"])) == 0
    assert served[0].quota_features == ON


def test_explain_and_preflight_hand_the_gates_to_their_computation(
    no_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harvester_quota.explain as explain_module
    import harvester_quota.preflight as preflight_module

    seen: list[QuotaFeatures] = []

    async def explained(*_: Any, quota_features: QuotaFeatures, **__: Any) -> Any:
        seen.append(quota_features)
        return explain_module.Explanation("ns", None, managed=False)

    async def cluster(*_: Any, **__: Any) -> tuple[ClusterState, list[str]]:
        return ClusterState(nodes=[], vmis=[]), []

    real_preflight = preflight_module.preflight

    def planned(state: ClusterState, plan: Plan) -> Any:
        seen.append(plan.quota_features)
        return real_preflight(state, plan)

    monkeypatch.setattr(explain_module, "explain", explained)
    monkeypatch.setattr(read, "read_cluster", cluster)
    monkeypatch.setattr(preflight_module, "preflight", planned)
    assert cli.cmd_explain(with_gate(["explain", "ns"])) == 0
    assert cli.cmd_preflight(with_gate(["preflight", "upgrade", "--strategy", "ours"])) == 0
    assert seen == [ON, ON]


# --- what each charges --------------------------------------------------------------------------


@pytest.mark.parametrize("features", [KUBERNETES_1_36, ON])
def test_the_controllers_pod_index_charges_pod_level_ephemeral_storage_only_behind_the_gate(
    features: QuotaFeatures,
) -> None:
    """The room mode's plan reads the pod index PlanInputs keeps from the pod informer: with
    Options.quota_features the pod-level value alone is charged, without it the containers'."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client,
        options=Options(quota_features=features),
        clock=FakeClock(),
        registry=CollectorRegistry(),
    )
    inputs = PlanInputs(management, lambda _: None)
    upsert(inputs.informers.pods.store, scratch_pod())
    used = inputs.pod_index.namespace("ns").used_without(frozenset(), NOW)
    assert used[SCRATCH] == charged(features)


@pytest.mark.parametrize("features", [KUBERNETES_1_36, ON])
def test_the_webhooks_pod_index_charges_pod_level_ephemeral_storage_only_behind_the_gate(
    features: QuotaFeatures,
) -> None:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    caches = WebhookCaches(client, quota_features=features)
    assert caches.quota_features() == features
    upsert(caches.pods.store, scratch_pod("launcher", **{"kubevirt.io": "virt-launcher"}))
    used = caches.launcher_pods("ns").used_without(frozenset(), NOW)
    assert used[SCRATCH] == charged(features)


def room_held_with_scratch(features: QuotaFeatures) -> FakeLookups:
    """vm1 migrating, its room on cpu and memory; 6Gi of the 10Gi of scratch free."""
    lookups = FakeLookups(features=features)
    hard = {"limits.cpu": "5015m", "limits.memory": "10040344313", SCRATCH: "10Gi"}
    quota = managed_quota(
        "ns",
        hard,
        {migrating_vm_annotation_key("vm1"): '{"limits.cpu":"2015m","limits.memory":"4797464313"}'},
    )
    used = {"limits.cpu": "2015m", "limits.memory": "4797464313", SCRATCH: "4Gi"}
    quota["status"] = {"used": used, "hard": dict(hard)}
    lookups.quotas["ns"] = quota
    lookups.migration_list.append(migration("m", running_vm(lookups)))
    return lookups


def test_while_room_is_held_the_webhook_charges_a_pod_its_pod_level_scratch_behind_the_gate() -> (
    None
):
    """The attack: a tenant pod whose own spec.resources asks more scratch than its containers
    do, created while a migration holds room. Without the gate the API server charges it 2Gi and
    so does the webhook (it fits the 6Gi free); with the gate, 8Gi: refused, with the numbers."""
    create = request("Pod", scratch_pod(), operation="CREATE")
    validate_pod(create, room_held_with_scratch(KUBERNETES_1_36), Identities())
    with pytest.raises(Denied) as denied:
        validate_pod(create, room_held_with_scratch(ON), Identities())
    assert f"{SCRATCH} insufficient resources" in denied.value.message


async def test_explain_counts_the_namespaces_pods_as_the_gates_charge_them() -> None:
    vm = vmi("vm1")
    objects: dict[str, list[dict[str, Any]]] = {
        "namespaces": [rancher_namespace("ns", {"limitsCpu": "3000m", "limitsMemory": "5000Mi"})],
        "resourcequotas": [
            managed_quota("ns", {"limits.cpu": "3", "limits.memory": "5000Mi", SCRATCH: "10Gi"})
        ],
        "virtualmachineinstances": [vm],
        "pods": [scratch_pod()],
    }
    client = cast(ApiClient, ReadOnlyCluster(copy.deepcopy(objects)))
    for features in (KUBERNETES_1_36, ON):
        found = await explain(client, "ns", quota_features=features, now=NOW)
        assert found.used_without_targets[SCRATCH] == str(charged(features))


@pytest.mark.parametrize("features", [KUBERNETES_1_36, ON])
def test_preflight_sums_a_nodes_pods_as_the_gates_charge_them(features: QuotaFeatures) -> None:
    """A node's room for a target pod: its allocatable minus its pods' requests, the pod-level
    scratch counted with the gate (the scheduler's sum is the same helper as quota's)."""
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"ephemeral-storage": "10Gi"}}}
    pod = scratch_pod()
    pod["spec"]["nodeName"] = "n1"
    room = free_on_nodes([node], [pod], features)["n1"]
    assert room.free["ephemeral-storage"] == Quantity.parse("10Gi") - charged(features)
