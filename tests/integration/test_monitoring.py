"""The chart's monitoring: opt-in PodMonitors, PrometheusRule and dashboard ConfigMap, checked
against prometheus-operator's own CRDs on the local cluster; the scrapers' namespace as a value
both NetworkPolicies follow; a runbook section for every alert."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
import yaml
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import CONFIG_MAPS, CRDS, NAMESPACES, Resource
from harvester_quota.testbench.localcluster.binaries import prometheus_operator_crds
from harvester_quota.testbench.localcluster.chart import CHART, REPO, render

from tests.helpers import eventually
from tests.integration import deployment

pytestmark = pytest.mark.integration

MONITORING_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
POD_MONITORS = Resource("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor")
PROMETHEUS_RULES = Resource("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule")
ENABLED = {
    "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "rancher-monitoring"}},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}
RUNBOOKS = REPO / "docs" / "runbooks.md"
DASHBOARD = CHART / "dashboards" / "harvester-quota.json"
SCRAPER_LABEL = "kubernetes.io/metadata.name"


def rendered(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(values)) if d]


def named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def alerts(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rule = named(documents, "PrometheusRule", "harvester-quota")
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_the_default_install_renders_no_monitoring_kind_and_no_dashboard() -> None:
    """A cluster without prometheus-operator's CRDs installs the chart as before."""
    documents = rendered({})
    assert not [d["kind"] for d in documents if d["kind"] in MONITORING_KINDS]
    assert not [d for d in documents if d["metadata"]["name"] == "harvester-quota-dashboard"]


def test_an_upgrade_reusing_an_older_charts_values_renders_as_before() -> None:
    """`helm upgrade --reuse-values` from a chart without `monitoring` (its values have none,
    and no metricsNamespaceSelector left empty): no monitoring kind, no failed render, and the
    metrics ports still open to cattle-monitoring-system only."""
    no_selector = {"networkPolicy": {"metricsNamespaceSelector": None}}
    documents = rendered({"monitoring": None, "controller": no_selector, "webhook": no_selector})
    assert not [d["kind"] for d in documents if d["kind"] in MONITORING_KINDS]
    default = [{"namespaceSelector": {"matchLabels": {SCRAPER_LABEL: "cattle-monitoring-system"}}}]
    assert scrapers(documents, "harvester-quota", "health") == default
    assert scrapers(documents, "harvester-quota-webhook", "metrics") == default


def scrapers(documents: list[dict[str, Any]], policy: str, port: str) -> list[dict[str, Any]]:
    spec = named(documents, "NetworkPolicy", policy)["spec"]
    (rule,) = [r for r in spec["ingress"] if r["ports"] == [{"protocol": "TCP", "port": port}]]
    return list(rule["from"])


def test_both_metrics_ports_open_to_the_scrapers_namespace_value_only() -> None:
    """Another Prometheus than Rancher's is one value away, for the controller's and the
    webhook's metrics ports alike; a component's own selector still wins."""
    documents = rendered({"monitoring": {"namespace": "monitoring"}})
    only = [{"namespaceSelector": {"matchLabels": {SCRAPER_LABEL: "monitoring"}}}]
    assert scrapers(documents, "harvester-quota", "health") == only
    assert scrapers(documents, "harvester-quota-webhook", "metrics") == only
    own = {"matchLabels": {"team": "observability"}}
    documents = rendered({"webhook": {"networkPolicy": {"metricsNamespaceSelector": own}}})
    assert scrapers(documents, "harvester-quota-webhook", "metrics") == [{"namespaceSelector": own}]
    default = [{"namespaceSelector": {"matchLabels": {SCRAPER_LABEL: "cattle-monitoring-system"}}}]
    assert scrapers(documents, "harvester-quota", "health") == default


async def test_no_namespace_can_wear_the_scrapers_namespace_name_label(api: ApiClient) -> None:
    """The NetworkPolicies trust kubernetes.io/metadata.name: the API server sets it to the
    namespace's own name on every write, so even an administrator who labels another namespace
    cattle-monitoring-system (to read every namespace's usage from /metrics) gets it back."""
    name = f"hq-fake-monitoring-{uuid.uuid4().hex[:6]}"
    forged = {SCRAPER_LABEL: "cattle-monitoring-system"}
    created = await api.create(NAMESPACES, {"metadata": {"name": name, "labels": forged}})
    try:
        assert created["metadata"]["labels"][SCRAPER_LABEL] == name
        patched = await api.patch(NAMESPACES, name, {"metadata": {"labels": forged}})
        assert patched["metadata"]["labels"][SCRAPER_LABEL] == name
    finally:
        await api.delete(NAMESPACES, name)


async def install_prometheus_operator_crds(api: ApiClient) -> None:
    """PodMonitor's and PrometheusRule's CRDs as prometheus-operator releases them; returns
    once both are served."""
    for path in prometheus_operator_crds():
        await deployment.apply(api, yaml.safe_load(path.read_text()))

    async def established() -> bool:
        for resource in (POD_MONITORS, PROMETHEUS_RULES):
            crd = await api.get(CRDS, f"{resource.plural}.{resource.group}")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, what="prometheus-operator's CRDs established")


async def test_the_enabled_monitoring_objects_pass_prometheus_operators_crd_schemas(
    api: ApiClient,
) -> None:
    """Server-side dry runs of the rendered PodMonitors, PrometheusRule and dashboard ConfigMap
    against prometheus-operator's own schemas (which do refuse a malformed one)."""
    await install_prometheus_operator_crds(api)
    await deployment.ensure_namespace(api)
    documents = rendered(ENABLED)
    monitors = [d for d in documents if d["kind"] == "PodMonitor"]
    assert sorted(m["metadata"]["name"] for m in monitors) == [
        "harvester-quota-controller",
        "harvester-quota-webhook",
    ]
    assert {m["metadata"]["labels"]["release"] for m in monitors} == {"rancher-monitoring"}
    checked = [
        await dry_run(api, POD_MONITORS, monitors[0]),
        await dry_run(api, POD_MONITORS, monitors[1]),
        await dry_run(api, PROMETHEUS_RULES, named(documents, "PrometheusRule", "harvester-quota")),
        await dry_run(api, CONFIG_MAPS, named(documents, "ConfigMap", "harvester-quota-dashboard")),
    ]
    assert len(checked) == 4
    malformed = json.loads(json.dumps(monitors[0]))
    malformed["spec"]["podMetricsEndpoints"][0]["interval"] = "every thirty seconds"
    with pytest.raises(errors.ApiError, match="interval"):
        await dry_run(api, POD_MONITORS, malformed)


async def dry_run(api: ApiClient, resource: Resource, document: dict[str, Any]) -> str:
    metadata = document["metadata"]
    answer = await api.create(resource, document, metadata["namespace"], dry_run=True)
    return str(answer["metadata"]["name"])


def test_the_dashboard_configmap_is_the_one_dashboard_file() -> None:
    """No second copy to drift: the ConfigMap carries the chart's dashboards/ file, which is
    also what deploy/grafana links to, labelled for Grafana's sidecar where asked."""
    values = {"monitoring": {"dashboard": {"enabled": True, "namespace": "cattle-dashboards"}}}
    configmap = named(rendered(values), "ConfigMap", "harvester-quota-dashboard")
    assert configmap["metadata"]["namespace"] == "cattle-dashboards"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["harvester-quota.json"]) == json.loads(
        DASHBOARD.read_text()
    )
    assert (REPO / "deploy" / "grafana" / "harvester-quota-dashboard.json").resolve() == (
        DASHBOARD.resolve()
    )


def runbook_anchors() -> set[str]:
    """GitHub's anchors of docs/runbooks.md's headings."""
    headings = re.findall(r"^#+ (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_names_its_runbook_section_and_a_severity() -> None:
    values = {"monitoring": {"prometheusRule": {"enabled": True, "runbookBaseURL": "https://x/r"}}}
    rules = alerts(rendered(values))
    assert len(rules) >= 6
    anchors = runbook_anchors()
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"https://x/r#{rule['alert'].lower()}", rule["alert"]
        assert rule["alert"].lower() in anchors, f"docs/runbooks.md has no {rule['alert']}"
        assert rule["labels"]["severity"] in {"critical", "warning"}


def test_the_alerts_select_the_pod_monitors_jobs_or_the_jobs_given() -> None:
    """Prometheus-operator names a PodMonitor's targets' job <namespace>/<name>: the rules
    select exactly those, or the jobs an operator's own scrape configuration uses."""
    documents = rendered(ENABLED)
    jobs = {
        f"{m['metadata']['namespace']}/{m['metadata']['name']}"
        for m in documents
        if m["kind"] == "PodMonitor"
    }
    selected = {j for r in alerts(documents) for j in re.findall(r'job="([^"]+)"', r["expr"])}
    assert selected == jobs
    given = {"controllerJob": "hq-controller", "webhookJob": "hq-webhook", "enabled": True}
    selected = {
        j
        for r in alerts(rendered({"monitoring": {"prometheusRule": given}}))
        for j in re.findall(r'job="([^"]+)"', r["expr"])
    }
    assert selected == {"hq-controller", "hq-webhook"}
