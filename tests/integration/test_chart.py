"""The Helm chart: lint, no drift from the manifest, and a server-side dry run with values."""

from __future__ import annotations

import asyncio
import copy
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester_quota.apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import (
    CRDS,
    NAMESPACES,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from harvester_quota.testbench.localcluster import ClusterError
from harvester_quota.testbench.localcluster import deploy as deploy_module
from harvester_quota.testbench.localcluster.binaries import resolve_bin_dir
from harvester_quota.testbench.localcluster.chart import (
    CHART,
    MANIFEST,
    NAMESPACE,
    RELEASE,
    helm,
    manifest_text,
    render,
)
from harvester_quota.testbench.localcluster.cluster import (
    VIRT_CONTROLLER_USER,
    ClusterInfo,
    client_config_from_files,
)
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.annotations import LABEL_PAUSED
from harvester_quota.util.podusage import (
    QUOTA_FEATURE_GATES,
    QuotaFeatures,
    quota_features_from_gates,
)

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.tenant import grant, tenant

pytestmark = pytest.mark.integration

WEBHOOK_LABELS = {
    "app.kubernetes.io/name": "harvester-quota",
    "app.kubernetes.io/component": "webhook",
}
MONITORING = {"kubernetes.io/metadata.name": "cattle-monitoring-system"}

CUSTOM = {
    "image": {"repository": "registry.example.com/harvester-quota", "tag": "9.9.9"},
    "controller": {"replicas": 3, "mode": "standalone", "kubevirtVersion": "1.8"},
    "webhook": {
        "replicas": 1,
        "failurePolicy": {"pods": "Fail"},
        "timeoutSeconds": 3,
        "clientAuth": {"required": True, "caSecret": "apiserver-webhook-client-ca"},
        "networkPolicy": {"apiServerCIDRs": ["192.168.10.0/24"]},
    },
    "kubevirt": {"namespace": "kubevirt"},
    "certificates": {"certManager": {"enabled": True}},
    "priorityClassName": "",
}


def test_the_chart_lints_clean() -> None:
    assert "0 chart(s) failed" in helm("lint", str(CHART), "--kube-version", "1.36.5")


def test_the_manifest_is_the_chart_rendered_with_its_defaults() -> None:
    assert MANIFEST.read_text() == manifest_text(), "run `make manifest` after editing the chart"


def test_the_webhook_only_reads_outside_its_reservation_leases() -> None:
    """The webhook writes no namespace and no quota: its ClusterRole only reads but for the
    caBundle of its own webhook configuration, its writable kinds are the Leases of its own
    namespace and its own CA Secret (by name), no rule asks it about migrations, and only the
    controller's quota writes skip the quota rule."""
    documents = [d for d in yaml.safe_load_all(render({}, namespace="quota-system")) if d]
    bound = {
        (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for binding in documents
        if binding["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(subject["name"] == "harvester-quota-webhook" for subject in binding["subjects"])
    }
    assert ("ClusterRole", "harvester-quota-webhook") in bound
    writes = sorted(
        (role["kind"], resource, verb, tuple(rule.get("resourceNames") or ()))
        for role in documents
        if (role["kind"], role["metadata"]["name"]) in bound
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if verb not in ("get", "list", "watch")
    )
    assert writes == [
        ("ClusterRole", "validatingwebhookconfigurations", "patch", ("harvester-quota",)),
        ("Role", "leases", "create", ()),
        ("Role", "leases", "delete", ()),
        ("Role", "leases", "update", ()),
        ("Role", "secrets", "update", ("harvester-quota-webhook-ca",)),
    ]
    (configuration,) = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    hooks = {w["name"]: w for w in configuration["webhooks"]}
    assert not [
        name
        for name, hook in hooks.items()
        for rule in hook["rules"]
        if "virtualmachineinstancemigrations" in rule["resources"]
    ]
    conditions = [
        c["expression"] for c in hooks["resourcequotas.harvester-quota.io"]["matchConditions"]
    ]
    controller = "'system:serviceaccount:quota-system:harvester-quota'"
    rancher = "'system:serviceaccount:cattle-system:rancher-webhook-sudo'"
    assert conditions[0].split() == [
        *("request.userInfo.username", "!=", controller, "&&"),
        *("request.userInfo.username", "!=", rancher),
    ], "only our controller's and Rancher's own writes skip the quota rule"
    assert not any("harvester-quota-webhook" in expression for expression in conditions)


def test_the_controller_never_writes_migrations_nor_reads_events() -> None:
    """The controller's RBAC: migrations are only read (a stolen token cannot set an owner
    reference, a finalizer or anything else on one, nor delete it), and Events are only its
    own, created and patched, never listed or watched."""
    documents = [d for d in yaml.safe_load_all(render({}, namespace="quota-system")) if d]
    (role,) = [
        d
        for d in documents
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "harvester-quota"
    ]
    verbs: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            verbs.setdefault(resource, set()).update(rule["verbs"])
    assert verbs["virtualmachineinstancemigrations"] == {"get", "list", "watch"}
    assert "virtualmachineinstancemigrations/status" not in verbs
    assert verbs["events"] == {"create", "patch"}


def test_only_kubevirts_migration_targets_skip_the_pod_rules_and_resizes_meet_them() -> None:
    """KubeVirt's launcher pods of new VMIs skipped every pod rule while room was held (the
    room-held rule left out KubeVirt's whole service account): now both pod rules leave out
    exactly what migration-targets takes, KubeVirt's creates of pods labelled as a migration's
    target, and both see in-place resizes, KubeVirt's of such pods included."""
    documents = [d for d in yaml.safe_load_all(render({}, namespace="quota-system")) if d]
    (configuration,) = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    hooks = {w["name"]: w for w in configuration["webhooks"]}
    target = (
        "!(request.operation == 'CREATE' &&"
        " request.userInfo.username == 'system:serviceaccount:harvester-system:kubevirt-controller'"
        " && has(object.metadata.labels) && 'kubevirt.io/migrationJobUID' in object.metadata.labels)"
    )
    for name in ("pods.harvester-quota.io", "room-held-pods.harvester-quota.io"):
        (condition,) = hooks[name]["matchConditions"]
        assert condition["expression"].split() == target.split(), name
        resized = [r for r in hooks[name]["rules"] if r["resources"] == ["pods/resize"]]
        assert resized and resized[0]["operations"] == ["UPDATE"], name
    # The MTQ lock sees resizes too (review finding 5: it saw creates only).
    locked = [
        r for r in hooks["mtq-lock.harvester-quota.io"]["rules"] if "pods/resize" in r["resources"]
    ]
    assert locked and locked[0]["operations"] == ["UPDATE"]
    policies = {
        d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"
    }
    labels = policies["harvester-quota-kubevirt-labels"]
    assert labels["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username != 'system:serviceaccount:harvester-system:kubevirt-controller'"
    )
    bindings = {
        d["spec"]["policyName"]: d["spec"]["validationActions"]
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert bindings == {
        "harvester-quota-kubevirt-labels": ["Deny", "Audit"],
        "harvester-quota-kubevirt-status": ["Deny"],
        "harvester-quota-kubevirt-migration-priority": ["Deny"],
        "harvester-quota-webhook-leases": ["Deny"],
        "harvester-quota-paused-label": ["Deny"],
    }
    status_writers = policies["harvester-quota-kubevirt-status"]["spec"]["matchConditions"][0]
    for account in ("kubevirt-controller", "kubevirt-handler", "kubevirt-apiserver"):
        assert (
            f"'system:serviceaccount:harvester-system:{account}'" in (status_writers["expression"])
        ), "KubeVirt's own components write a VMI's status"


async def test_the_chart_with_other_values_passes_a_server_side_dry_run(api: ApiClient) -> None:
    documents = [d for d in yaml.safe_load_all(render(CUSTOM)) if d]
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    controller = by_kind[("Deployment", "harvester-quota")]
    assert controller["spec"]["replicas"] == 3
    container = controller["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/harvester-quota:9.9.9"
    assert (
        "--mode=standalone" in container["args"] and "--kubevirt-version=1.8" in container["args"]
    )
    assert "priorityClassName" not in controller["spec"]["template"]["spec"]
    webhook_args = by_kind[("Deployment", "harvester-quota-webhook")]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--target-creator=system:serviceaccount:kubevirt:kubevirt-controller" in webhook_args
    assert "--namespace=harvester-system" in webhook_args  # where its reservation Leases live
    configuration = by_kind[("ValidatingWebhookConfiguration", "harvester-quota")]
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "harvester-system/harvester-quota-webhook"
    )
    hooks = {w["name"]: w for w in configuration["webhooks"]}
    assert hooks["pods.harvester-quota.io"]["failurePolicy"] == "Fail"
    targets = hooks["migration-targets.harvester-quota.io"]
    assert targets["failurePolicy"] == "Ignore" and targets["timeoutSeconds"] == 10
    assert (
        "system:serviceaccount:kubevirt:kubevirt-controller"
        in (targets["matchConditions"][0]["expression"])
    )
    assert all("caBundle" not in w["clientConfig"] for w in hooks.values())
    assert ("Certificate", "harvester-quota-webhook") in by_kind
    await deployment.ensure_namespace(api)
    checked = 0
    for document in documents:
        if document["apiVersion"].startswith("cert-manager.io/"):
            continue  # cert-manager's CRDs are not on the test cluster
        answer = await deployment.apply(api, document, dry_run=True)
        assert answer["metadata"]["name"] == document["metadata"]["name"]
        checked += 1
    # 12, the reservation Role and RoleBinding, MTQ's CRD, two NetworkPolicies, four admission
    # policies with their bindings, the paused-label policy and its binding, the pre-delete
    # hook's Role, RoleBinding and Job
    assert checked == 30


def test_the_webhook_replicas_prefer_different_nodes_and_no_budget_can_block_a_drain() -> None:
    """The pods rules fail closed (where room is held; for good in Rancher namespaces raised
    directly): the replicas prefer different nodes, so one node's loss is not an outage; and no
    PodDisruptionBudget, which on a single-node cluster would block an upgrade's drain."""
    rendered = by_kind_and_name({})
    spec = rendered[("Deployment", "harvester-quota-webhook")]["spec"]
    preferred = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    (term,) = [p["podAffinityTerm"] for p in preferred]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert not [key for key in rendered if key[0] == "PodDisruptionBudget"]


def by_kind_and_name(values: dict[str, object]) -> dict[tuple[str, str], dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(render(values)) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


def webhook_pod(rendered: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = rendered[("Deployment", "harvester-quota-webhook")]["spec"]
    return dict(spec["template"]["spec"])


def test_by_default_metrics_are_for_monitoring_only_and_client_auth_is_off() -> None:
    """The defaults: /metrics on the webhook's own plain port, which the NetworkPolicy opens to
    the monitoring namespace only (as the controller's health port); the admission port open to
    any source; no client CA asked for until the API server presents a certificate."""
    rendered = by_kind_and_name({})
    pod = webhook_pod(rendered)
    (container,) = pod["containers"]
    assert "--metrics-port=8081" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--client-")]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "https": 8443,
        "metrics": 8081,
    }
    assert [v["name"] for v in pod["volumes"]] == ["tls"]
    service_ports = rendered[("Service", "harvester-quota-webhook")]["spec"]["ports"]
    assert {p["name"]: p["targetPort"] for p in service_ports} == {
        "https": "https",
        "metrics": "metrics",
    }
    monitoring = [{"namespaceSelector": {"matchLabels": MONITORING}}]
    webhook_policy = rendered[("NetworkPolicy", "harvester-quota-webhook")]["spec"]
    assert webhook_policy["podSelector"]["matchLabels"] == WEBHOOK_LABELS
    assert webhook_policy["policyTypes"] == ["Ingress"]
    assert webhook_policy["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": "https"}]},  # any source: client auth decides
        {"ports": [{"protocol": "TCP", "port": "metrics"}], "from": monitoring},
    ]
    controller_policy = rendered[("NetworkPolicy", "harvester-quota")]["spec"]
    assert controller_policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "controller"
    )
    assert controller_policy["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": "health"}], "from": monitoring}
    ]


def test_client_auth_and_the_api_servers_addresses_from_values() -> None:
    rendered = by_kind_and_name(
        {
            "webhook": {
                "clientAuth": {
                    "required": True,
                    "caConfigMap": "apiserver-webhook-client-ca",
                    "caKey": "client-ca.pem",
                    "names": ["kube-apiserver-webhook-client", "other-apiserver"],
                },
                "networkPolicy": {"apiServerCIDRs": ["192.168.10.11/32", "10.52.3.0/32"]},
            },
            "controller": {"networkPolicy": {"enabled": False}},
        }
    )
    pod = webhook_pod(rendered)
    (container,) = pod["containers"]
    assert [a for a in container["args"] if a.startswith("--client-")] == [
        "--client-ca-file=/client-ca/client-ca.pem",
        "--client-name=kube-apiserver-webhook-client",
        "--client-name=other-apiserver",
    ]
    assert {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "client-ca", "configMap": {"name": "apiserver-webhook-client-ca"}} in pod[
        "volumes"
    ]
    admission_rule = rendered[("NetworkPolicy", "harvester-quota-webhook")]["spec"]["ingress"][0]
    assert admission_rule == {
        "ports": [{"protocol": "TCP", "port": "https"}],
        "from": [{"ipBlock": {"cidr": "192.168.10.11/32"}}, {"ipBlock": {"cidr": "10.52.3.0/32"}}],
    }
    assert ("NetworkPolicy", "harvester-quota") not in rendered


@pytest.mark.parametrize("client_auth", [False, True])
def test_the_kubelet_probes_the_webhook_on_its_metrics_port_never_the_admission_port(
    client_auth: bool,
) -> None:
    """With client authentication the admission port completes no handshake without the API
    server's certificate, and a flood of it must not fail the liveness probe into a restart."""
    values = {"clientAuth": {"required": True, "caConfigMap": "ca"}} if client_auth else {}
    (container,) = webhook_pod(by_kind_and_name({"webhook": values}))["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_client_auth_required_without_a_ca_is_refused_by_the_chart() -> None:
    with pytest.raises(ClusterError, match=r"needs webhook\.clientAuth\.caConfigMap or caSecret"):
        render({"webhook": {"clientAuth": {"required": True}}})


SELF_SIGNED_ARGS = [
    "--self-signed-secret=harvester-quota-webhook-ca",
    "--ca-lifetime=7d",
    "--cert-lifetime=24h",
    "--webhook-configuration=harvester-quota",
]


def webhook_certificate_setup(
    rendered: dict[tuple[str, str], dict[str, Any]],
) -> tuple[list[str], dict[str, Any], set[str]]:
    """(the webhook's self-signed flags, its tls volume, the caBundles of the configuration)."""
    pod = webhook_pod(rendered)
    args = pod["containers"][0]["args"]
    flags = [a for a in args if a.split("=")[0] in {f.split("=")[0] for f in SELF_SIGNED_ARGS}]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    hooks = rendered[("ValidatingWebhookConfiguration", "harvester-quota")]["webhooks"]
    return flags, volume, {h["clientConfig"].get("caBundle", "") for h in hooks}


@pytest.mark.parametrize("old_default", [None, "Cg=="])
def test_by_default_the_webhook_makes_its_own_certificates_with_one_secret_it_alone_may_touch(
    old_default: str | None,
) -> None:
    """No cert-manager, no Secret to make: the chart creates the CA Secret empty, the webhook
    fills it (flags) and the caBundle, with RBAC for that Secret and that configuration only.
    An upgrade with --reuse-values from an earlier chart renders the same: its caBundle default
    "Cg==" counts as unset, and its values have no selfSigned block (every value defaulted)."""
    values = (
        {}
        if old_default is None
        # --reuse-values from an older chart: its caBundle default and no selfSigned key at all
        else {"certificates": {"caBundle": old_default, "selfSigned": None}}
    )
    rendered = by_kind_and_name(values)
    flags, volume, bundles = webhook_certificate_setup(rendered)
    assert flags == SELF_SIGNED_ARGS
    assert volume == {"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    assert bundles == {""}, "the webhook fills the caBundle"
    secret = rendered[("Secret", "harvester-quota-webhook-ca")]
    assert "data" not in secret and "stringData" not in secret  # an upgrade never resets it
    role = rendered[("Role", "harvester-quota-webhook-certificates")]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["harvester-quota-webhook-ca"],
            "verbs": ["get", "update"],
        }
    ]
    cluster_role = rendered[("ClusterRole", "harvester-quota-webhook-certificates")]
    assert cluster_role["rules"][0]["resourceNames"] == ["harvester-quota"]
    assert cluster_role["rules"][0]["verbs"] == ["get", "patch"]
    assert ("Certificate", "harvester-quota-webhook") not in rendered


def test_a_given_secret_and_its_ca_bundle_replace_the_webhooks_own_certificates() -> None:
    rendered = by_kind_and_name({"certificates": {"caBundle": "UEVN"}})
    flags, volume, bundles = webhook_certificate_setup(rendered)
    assert flags == []
    assert volume == {"name": "tls", "secret": {"secretName": "harvester-quota-webhook-tls"}}
    assert bundles == {"UEVN"}
    assert not [key for key in rendered if key[1] == "harvester-quota-webhook-certificates"]
    assert ("Secret", "harvester-quota-webhook-ca") not in rendered


def test_cert_manager_and_a_given_ca_bundle_together_are_refused_by_the_chart() -> None:
    with pytest.raises(ClusterError, match=r"certManager\.enabled and certificates\.caBundle"):
        render({"certificates": {"certManager": {"enabled": True}, "caBundle": "UEVN"}})


def test_no_network_policy_when_disabled() -> None:
    rendered = by_kind_and_name(
        {
            "webhook": {"networkPolicy": {"enabled": False}},
            "controller": {"networkPolicy": {"enabled": False}},
        }
    )
    assert not [key for key in rendered if key[0] == "NetworkPolicy"]


def controller_args(values: dict[str, object]) -> list[str]:
    deployment_ = by_kind_and_name(values)[("Deployment", "harvester-quota")]
    return list(deployment_["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("kubevirt_namespace", "adopt", "adopts"),
    [
        ("harvester-system", "auto", True),
        ("kubevirt", "auto", False),
        ("kubevirt", True, True),
        ("harvester-system", False, False),
        ("harvester-system", None, True),  # unset: helm upgrade --reuse-values from an older chart
    ],
)
def test_the_controller_adopts_harvesters_quotas_by_default_only_on_harvesters_layout(
    kubevirt_namespace: str, adopt: object, adopts: bool
) -> None:
    values = {
        "kubevirt": {"namespace": kubevirt_namespace},
        "controller": {"adoptHarvesterQuotas": adopt},
    }
    assert ("--adopt-harvester-quotas" in controller_args(values)) is adopts


@pytest.mark.parametrize(
    ("value", "flag"),
    [("cpuAccounting", "--cpu-accounting"), ("harvesterAnnotations", "--harvester-annotations")],
)
def test_an_opt_in_controller_flag_is_off_by_default_and_its_value_turns_it_on(
    value: str, flag: str
) -> None:
    assert flag not in controller_args({})
    assert flag in controller_args({"controller": {value: True}})


def test_the_controller_may_patch_vmis_and_vms_only_with_harvesters_annotations_on() -> None:
    """A stolen controller token gets no cluster-wide VMI or VM patch by default."""

    def patchable(values: dict[str, object]) -> set[str]:
        role = by_kind_and_name(values)[("ClusterRole", "harvester-quota")]
        return {
            resource
            for rule in role["rules"]
            if "patch" in rule.get("verbs", [])
            for resource in rule.get("resources", [])
        }

    assert not {"virtualmachineinstances", "virtualmachines"} & patchable({})
    on = patchable({"controller": {"harvesterAnnotations": True}})
    assert {"virtualmachineinstances", "virtualmachines"} <= on


def process_args(values: dict[str, object]) -> tuple[list[str], list[str]]:
    """The controller's and the webhook's args, as the chart renders them with `values`."""
    rendered = by_kind_and_name(values)
    controller = rendered[("Deployment", "harvester-quota")]["spec"]["template"]["spec"]
    webhook = webhook_pod(rendered)["containers"][0]["args"]
    return list(controller["containers"][0]["args"]), list(webhook)


def test_quota_feature_gates_reach_both_processes_and_none_by_default() -> None:
    """quota.featureGates is one value for the two processes that charge pods: rendered to the
    flag on both, in Kubernetes' --feature-gates syntax that `run` and `webhook` parse back
    to the same QuotaFeatures; empty by default, so no flag at all."""
    controller, webhook = process_args({})
    assert not any(a.startswith("--quota-feature-gates") for a in [*controller, *webhook])
    gates = dict.fromkeys(QUOTA_FEATURE_GATES, True)
    for args in process_args({"quota": {"featureGates": gates}}):
        flags = [a for a in args if a.startswith("--quota-feature-gates=")]
        assert len(flags) == 1
        text = flags[0].split("=", 1)[1]
        assert quota_features_from_gates(text) == QuotaFeatures(pod_level_ephemeral_storage=True)
    off = {"quota": {"featureGates": {"PodLevelResourcesEphemeralStorage": False}}}
    assert "--quota-feature-gates=PodLevelResourcesEphemeralStorage=false" in controller_args(off)


@pytest.mark.parametrize(
    ("gates", "refusal"),
    [
        ({"PodLevelResources": True}, r"quota\.featureGates\.PodLevelResources: unknown gate"),
        ({"PodLevelResourcesEphemeralStorage": "yes"}, r"=yes: true or false"),
    ],
)
def test_an_unknown_quota_feature_gate_or_a_value_not_a_bool_is_refused_by_the_chart(
    gates: dict[str, object], refusal: str
) -> None:
    """Refused at `helm install`, not by every pod at its start (a crash loop)."""
    with pytest.raises(ClusterError, match=refusal):
        render({"quota": {"featureGates": gates}})


def test_an_adoption_value_other_than_auto_true_or_false_is_refused_by_the_chart() -> None:
    with pytest.raises(ClusterError, match=r"adoptHarvesterQuotas=sometimes: auto, true or false"):
        render({"controller": {"adoptHarvesterQuotas": "sometimes"}})


KUBEVIRT_ACCOUNT = re.compile(r"system:serviceaccount:([a-z0-9-]+):kubevirt-")


async def test_on_a_harvester_layout_the_default_install_finds_harvester_system(
    api: ApiClient, cluster: ClusterInfo
) -> None:
    """Harvester's layout: no KubeVirt CR elsewhere, KubeVirt's controller account in
    harvester-system. Helm, with the chart's defaults and the cluster to look in, names
    KubeVirt's accounts there in every policy and rule."""
    assert not (await api.list(KUBEVIRTS)).get("items"), "this cluster has no KubeVirt CR"
    await deployment.apply_rbac(api)  # deploy/'s RBAC and harvester-system/kubevirt-controller
    rendered = render(kubeconfig=cluster.kubeconfig)
    assert set(KUBEVIRT_ACCOUNT.findall(rendered)) == {"harvester-system"}
    notes = install_notes(cluster)
    assert "KubeVirt's namespace: harvester-system (found in the cluster)" in notes
    assert "system:serviceaccount:harvester-system:kubevirt-controller," in notes
    assert "Harvester's quotas adopted: true (Harvester's own" in notes


def test_on_an_upstream_layout_the_default_install_names_the_running_virt_controller(
    kubevirt_cluster: ClusterInfo,
) -> None:
    """Upstream KubeVirt's layout (the KubeVirt CR and virt-controller in kubevirt): with its
    defaults the chart names the account the real virt-controller runs as, and no other."""
    rendered = render(kubeconfig=kubevirt_cluster.kubeconfig)
    assert set(KUBEVIRT_ACCOUNT.findall(rendered)) == {"kubevirt"}
    assert f"--target-creator={VIRT_CONTROLLER_USER}" in rendered
    notes = install_notes(kubevirt_cluster)
    assert "KubeVirt's namespace: kubevirt (found in the cluster)" in notes
    assert "system:serviceaccount:kubevirt:kubevirt-handler and" in notes
    assert "Harvester's quotas adopted: false." in notes
    assert "Webhook certificate: self (the webhook makes its own CA" in notes


def install_notes(cluster: ClusterInfo) -> str:
    """What `helm install` with the chart's defaults prints after its release (NOTES.txt),
    rendered against `cluster` (a server dry run: nothing is written, so the ownership Helm
    would take of the session's own copies of the chart's objects is never taken)."""
    out = helm(
        "install", RELEASE, str(CHART), "--namespace", "harvester-quota-notes", "--dry-run=server",
        "--take-ownership",
        "--kubeconfig", str(cluster.kubeconfig),
    )  # fmt: skip
    assert "NOTES:" in out, out[-2000:]
    return out.split("NOTES:", 1)[1]


async def test_an_install_with_a_wrong_kubevirt_namespace_fails_before_it_changes_anything(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo
) -> None:
    """`helm install` with kubevirt.namespace=harvester-system on upstream KubeVirt: refused
    with what to set; no release recorded, no webhook configuration or policy created."""
    await deployment.ensure_namespace(kubevirt_api, NAMESPACE)
    with pytest.raises(ClusterError, match=r"KubeVirt runs in kubevirt in this cluster"):
        helm(
            "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--kubeconfig", str(kubevirt_cluster.kubeconfig),
            "--set", "kubevirt.namespace=harvester-system",
        )  # fmt: skip
    listed = helm("list", "-A", "-q", "--kubeconfig", str(kubevirt_cluster.kubeconfig))
    assert RELEASE not in listed.split()
    with pytest.raises(errors.NotFound):
        await kubevirt_api.get(VALIDATING_WEBHOOK_CONFIGURATIONS, RELEASE)
    policies = deployment.KINDS["ValidatingAdmissionPolicy"]
    names = [p["metadata"]["name"] for p in (await kubevirt_api.list(policies))["items"]]
    assert not [n for n in names if n.startswith(f"{RELEASE}-kubevirt")]


async def test_a_namespace_enforcing_pod_security_restricted_admits_the_charts_pods(
    api: ApiClient,
) -> None:
    """The API server's Pod Security admission, level restricted, admits each Deployment's pod
    as the chart renders it (a dry-run create), and refuses it without its seccomp profile (so
    the namespace does enforce)."""
    name = f"restricted-{uuid.uuid4().hex[:6]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    await api.create(NAMESPACES, {"metadata": {"name": name, "labels": labels}})
    try:
        for deployment_name in ("harvester-quota", "harvester-quota-webhook"):
            template = by_kind_and_name({})[("Deployment", deployment_name)]["spec"]["template"]
            pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(template)}
            pod["metadata"]["name"] = deployment_name
            pod["spec"].pop("priorityClassName", None)
            pod["spec"].pop("serviceAccountName")  # its account lives in the release namespace
            admitted = await api.create(PODS, pod, name, dry_run=True)
            assert admitted["metadata"]["name"] == deployment_name
            del pod["spec"]["securityContext"]["seccompProfile"]
            for container in pod["spec"]["containers"]:
                del container["securityContext"]["seccompProfile"]
            with pytest.raises(errors.Forbidden, match="seccompProfile"):
                await api.create(PODS, pod, name, dry_run=True)
    finally:
        await api.delete(NAMESPACES, name)


async def test_only_an_administrator_may_set_change_or_remove_the_paused_label(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> None:
    """The chart's paused-label policy, live: a tenant allowed to patch its own namespace (as a
    Rancher project owner may) changes other labels but cannot opt the namespace out, change an
    administrator's opt-out or lift it (docs/security.md, row 5k)."""
    await deployment.apply_rbac(api)  # the shipped policies, paused-label included
    rules = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["patch"]}]
    async with tenant(api, cluster, namespace, cluster_roles=()) as found:
        await grant(api, found, "namespace-labels", rules)

        async def label(client: ApiClient, value: str | None, *, dry_run: bool = False) -> None:
            body = {"metadata": {"labels": {LABEL_PAUSED: value}}}
            await client.patch(NAMESPACES, namespace, body, dry_run=dry_run)

        async def refused() -> bool:
            try:
                await label(found.api, "true", dry_run=True)
            except errors.Forbidden as error:
                return "only an administrator may set" in error.message
            return False

        await eventually(refused, what="the paused-label policy in force")
        with pytest.raises(errors.Forbidden, match=r"harvester-quota\.io/paused"):
            await label(found.api, "true")
        patch = {"metadata": {"labels": {"team": "a"}}}
        await found.api.patch(NAMESPACES, namespace, patch)  # other labels are the tenant's
        await label(api, "true")  # the administrator opts the namespace out
        for value in ("false", None):
            with pytest.raises(errors.Forbidden, match=r"harvester-quota\.io/paused"):
                await label(found.api, value)
        labels = (await api.get(NAMESPACES, namespace))["metadata"]["labels"]
        assert labels[LABEL_PAUSED] == "true" and labels["team"] == "a"


def rendered_for(monkeypatch: pytest.MonkeyPatch, cluster: ClusterInfo) -> list[dict[str, Any]]:
    """The chart rendered by helm with its defaults against `cluster` (its lookups), made the
    documents the test bench deploys from in place of deploy/harvester-quota.yaml: what the
    bench then registers names KubeVirt's accounts as the chart found them (the bench's
    substitution of deploy.KUBEVIRT_USER finds nothing to replace where they differ)."""
    rendered = [d for d in yaml.safe_load_all(render(kubeconfig=cluster.kubeconfig)) if d]
    monkeypatch.setattr(deploy_module, "documents", lambda *_: iter(copy.deepcopy(rendered)))
    return rendered


async def account_client(
    api: ApiClient, cluster: ClusterInfo, namespace: str, name: str
) -> ApiClient:
    """A client as the service account `namespace`/`name` (created), bound to cluster-admin
    as KubeVirt's components are to their wide roles: only the admission policies stop it."""
    await deployment.ensure_namespace(api, namespace)
    await deployment.apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        },
    )
    await deployment.apply(
        api,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"test-chart-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    token = await deploy_module.service_account_token(api, name, namespace)
    return ApiClient(client_config_from_files(cluster.server, ca_file=cluster.ca_file, token=token))


async def write_vmi_status(client: ApiClient, namespace: str, vmi: str, value: str) -> None:
    """What virt-handler does to a VMI it runs (a status field no controller acts on)."""
    body = {"status": {"guestOSInfo": {"name": value}}}
    await client.patch(VIRTUAL_MACHINE_INSTANCES, vmi, body, namespace)


async def status_refused(client: ApiClient, namespace: str, vmi: str) -> bool:
    try:
        await write_vmi_status(client, namespace, vmi, "forged")
    except errors.Forbidden as error:
        return "only KubeVirt may change" in error.message
    return False


async def test_upstream_layout_default_install_a_vm_starts_migrates_and_handler_writes_status(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Upstream KubeVirt's layout, the chart with its defaults: its webhook rules and its
    kubevirt-labels and kubevirt-status policies live for the namespace; the real virt-controller
    (kubevirt:kubevirt-controller) starts and migrates a VM, virt-handler's account of kubevirt
    writes the VMI's status, Harvester's would-be account is refused (with the old default,
    harvester-system, the launcher pod itself was refused)."""
    rendered_for(monkeypatch, kubevirt_cluster)
    namespace = kubevirt_namespace
    handler = await account_client(kubevirt_api, kubevirt_cluster, "kubevirt", "kubevirt-handler")
    stranger = await account_client(
        kubevirt_api, kubevirt_cluster, "harvester-system", "kubevirt-handler"
    )
    try:
        async with deployment.webhook_for_virt_controller(
            kubevirt_api, kubevirt_cluster, namespace, tmp_path
        ):
            await eventually(
                lambda: pod_refused(stranger, namespace, LAUNCHER),
                what="the kubevirt-labels policy in force",
            )
            await start_and_migrate(kubevirt_api, kubevirt_cluster, namespace)
            await eventually(
                lambda: status_refused(stranger, namespace, "vm1"),
                what="the kubevirt-status policy in force",
            )
            await write_vmi_status(handler, namespace, "vm1", "from-virt-handler")
    finally:
        await handler.close()
        await stranger.close()
    vmi = await kubevirt_api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
    assert vmi["status"]["guestOSInfo"]["name"] == "from-virt-handler"


LAUNCHER: dict[str, Any] = {
    "metadata": {"name": "virt-launcher-vm1", "labels": {"kubevirt.io": "virt-launcher"}},
    "spec": {"containers": [{"name": "compute", "image": "x"}]},
}
"""A pod as KubeVirt's controller makes a VMI's launcher (its label), for the policy probes."""


async def start_and_migrate(api: ApiClient, cluster: ClusterInfo, namespace: str) -> None:
    """The real virt-controller starts vm1 (its launcher pod admitted) and migrates it."""
    driver = VirtControllerDriver(
        api,
        kubevirt_version=str(cluster.kubevirt_version),
        namespaces=frozenset({namespace}),
        timings=HandlerTimings(migration=0.3, source_shutdown=0.5, target_exit=0.5),
        limits=ParallelLimits(5, 2),
    )
    async with driver:
        started = await driver.create_vm(VMSpec("vm1", cores=1, memory="1Gi"))
        assert started.started, started.refusal
        record = await driver.wait_migration(await driver.migrate("vm1"), timeout=60)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()


async def test_harvester_layout_default_install_kubevirts_controller_passes_the_labels_policy(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Harvester's layout (KubeVirt's accounts in harvester-system), the chart with its
    defaults, its webhook and policies live for the namespace: KubeVirt's controller account
    creates a launcher pod (KubeVirt's labels) that kubevirt's account may not, and the status
    policy names harvester-system's virt-handler. (This cluster runs no virt-controller, so the
    account acts by hand; its hand-written VMI CRD has a status subresource, which the status
    policy does not meet: the live status write is the upstream test's, on KubeVirt's CRDs.)"""
    controller = await account_client(api, cluster, "harvester-system", "kubevirt-controller")
    stranger = await account_client(api, cluster, "kubevirt", "kubevirt-handler")
    rendered = rendered_for(monkeypatch, cluster)
    await deployment.apply_rbac(api)  # the chart's RBAC as rendered
    launcher = copy.deepcopy(LAUNCHER)
    try:
        async with deployment.running_webhook(
            api, cluster, namespace, tmp_path, kubevirt_user=deployment.KUBEVIRT_USER
        ):
            await eventually(
                lambda: pod_refused(stranger, namespace, launcher), what="the labels policy"
            )
            created = await controller.create(PODS, launcher, namespace)
            assert created["metadata"]["labels"]["kubevirt.io"] == "virt-launcher"
    finally:
        for client in (controller, stranger):
            await client.close()
    (status,) = [
        d
        for d in rendered
        if d["metadata"]["name"] == "harvester-quota-kubevirt-status"
        and d["kind"] == "ValidatingAdmissionPolicy"
    ]
    writers = status["spec"]["matchConditions"][0]["expression"]
    assert "'system:serviceaccount:harvester-system:kubevirt-handler'" in writers


def prioritized_migration(name: str, priority: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"vmiName": "vm1"}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": spec,
    }


async def priority_refused(client: ApiClient, namespace: str, migration: dict[str, Any]) -> bool:
    try:
        await client.create(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace, dry_run=True)
    except errors.Forbidden as error:
        return "only KubeVirt's controller may set a migration's spec.priority" in error.message
    return False


async def test_a_tenant_cannot_put_its_migration_ahead_of_an_evacuation_kubevirt_can(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubevirt-migration-priority policy, live (this cluster's migration CRD keeps every
    field, as KubeVirt v1.7+'s keeps spec.priority): a tenant with KubeVirt's edit role may not
    create a migration with spec.priority, nor add or change it on one it created; a migration
    without it is the tenant's to create; KubeVirt's controller account may set it."""
    controller = await account_client(api, cluster, "harvester-system", "kubevirt-controller")
    rendered_for(monkeypatch, cluster)
    await deployment.apply_rbac(api)
    try:
        async with (
            deployment.running_webhook(
                api, cluster, namespace, tmp_path, kubevirt_user=deployment.KUBEVIRT_USER
            ),
            tenant(api, cluster, namespace) as forger,
        ):
            critical = prioritized_migration("jump-the-queue", "system-critical")
            await eventually(
                lambda: priority_refused(forger.api, namespace, critical),
                what="the migration-priority policy in force",
            )
            plain = await forger.api.create(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                prioritized_migration("mine", None),
                namespace,
            )
            assert "priority" not in plain["spec"]
            added = {"spec": {"priority": "system-critical"}}
            with pytest.raises(errors.Forbidden, match=r"spec\.priority"):
                await forger.api.patch(
                    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "mine", added, namespace
                )
            for lower in ("user-triggered", "system-maintenance"):
                forged = prioritized_migration(f"forged-{lower}", lower)
                assert await priority_refused(forger.api, namespace, forged), lower
            evacuation = await controller.create(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                prioritized_migration("kubevirt-evacuation-abcde", "system-critical"),
                namespace,
                dry_run=True,
            )
            assert evacuation["spec"]["priority"] == "system-critical"
    finally:
        await controller.close()


async def pod_refused(client: ApiClient, namespace: str, pod: dict[str, Any]) -> bool:
    try:
        await client.create(PODS, pod, namespace, dry_run=True)
    except errors.Forbidden as error:
        return "only KubeVirt's controller may set" in error.message
    return False


MTQ_CRD = CHART / "crds" / "virtualmachinemigrationresourcequotas.yaml"
NEW_STATUS_FIELD = "migrationsToBlockingResourceQuotas"
"""A status field the controller writes, left out of the "older" CRD below."""


def older_mtq_crd(live: dict[str, Any]) -> dict[str, Any]:
    """The installed CRD as an older chart would have shipped it: without NEW_STATUS_FIELD."""
    older = copy.deepcopy(live)
    (version,) = older["spec"]["versions"]
    del version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][NEW_STATUS_FIELD]
    return older


async def status_field_kept(api: ApiClient, namespace: str, name: str) -> bool:
    """Writes NEW_STATUS_FIELD to the VMMRQ's status; whether the API server kept it (a schema
    without the field prunes it, silently)."""
    body = {"status": {NEW_STATUS_FIELD: {"mig-1": ["default-quota"]}}}
    written = await api.patch(VMMRQS, name, body, namespace, subresource="status")
    return NEW_STATUS_FIELD in (written.get("status") or {})


async def test_the_documented_crd_upgrade_serves_the_new_schema_over_an_older_install(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> None:
    """Helm never upgrades crds/: docs/operations.md's upgrade applies them first with
    `kubectl apply --server-side --force-conflicts`. With an older CRD installed (as Helm
    created it: its own update), a status field the new controller writes is pruned; after the documented
    command the new schema is served and the field is kept. (The CRD is the cluster's
    shared one: it is left as the chart ships it.)"""
    crd_name = "virtualmachinemigrationresourcequotas.mtq.kubevirt.io"
    live = await api.get(CRDS, crd_name)
    older = older_mtq_crd(live)
    try:
        await api.update(CRDS, older)
        vmmrq = {"apiVersion": "mtq.kubevirt.io/v1alpha1", "kind": VMMRQS.kind}
        vmmrq["metadata"] = {"name": "budget"}
        vmmrq["spec"] = {"additionalMigrationResources": {"limits.cpu": "1"}}
        await api.create(VMMRQS, vmmrq, namespace)
        await eventually(
            lambda: _pruned(api, namespace), what="the older schema in force (field pruned)"
        )
        kubectl = resolve_bin_dir() / "kubectl"
        command = [str(kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply"]
        command += ["--server-side", "--force-conflicts", "-f", str(MTQ_CRD.parent)]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        await eventually(
            lambda: status_field_kept(api, namespace, "budget"), what="the new schema served"
        )
    finally:
        shipped = yaml.safe_load(MTQ_CRD.read_text())
        await deployment.apply(api, shipped)


async def _pruned(api: ApiClient, namespace: str) -> bool:
    return not await status_field_kept(api, namespace, "budget")
