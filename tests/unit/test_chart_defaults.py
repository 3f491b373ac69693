"""The chart rendered by helm with no cluster (`helm template`): KubeVirt's namespace and Pod
Security "restricted". What the chart finds in a cluster is tested on the local cluster
(tests/integration/test_chart.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from harvester_quota.testbench.localcluster import ClusterError
from harvester_quota.testbench.localcluster.chart import MANIFEST, render

KUBEVIRT_ACCOUNT = re.compile(r"system:serviceaccount:([a-z0-9-]+):kubevirt-")


def documents(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(values)) if d]


def test_helm_template_without_kubevirt_namespace_refuses_and_says_what_to_set() -> None:
    """The default value is empty and `helm template` looks in no cluster: nothing is rendered
    that would name KubeVirt's accounts in a namespace guessed."""
    with pytest.raises(ClusterError, match=r"set kubevirt\.namespace: kubevirt upstream"):
        render({"kubevirt": {"namespace": ""}})


@pytest.mark.parametrize("namespace", ["kubevirt", "harvester-system"])
def test_a_given_kubevirt_namespace_names_every_kubevirt_account_in_it(namespace: str) -> None:
    """Policies, webhook rules and the webhook's --target-creator all name KubeVirt's accounts
    in the one namespace given: none is left in another."""
    rendered = render({"kubevirt": {"namespace": namespace}})
    named = set(KUBEVIRT_ACCOUNT.findall(rendered))
    assert named == {namespace}
    assert len(KUBEVIRT_ACCOUNT.findall(rendered)) >= 6  # policies x4, two webhook rules, a flag


def test_the_manifest_names_harvester_system_and_says_how_to_change_it() -> None:
    text = MANIFEST.read_text()
    assert set(KUBEVIRT_ACCOUNT.findall(text)) == {"harvester-system"}
    assert "on plain KubeVirt" in text.split("\n---", 1)[0]


def pods(rendered: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in rendered
        if d["kind"] == "Deployment"
    }


@pytest.mark.parametrize("client_auth", [False, True])
def test_every_pod_meets_pod_security_restricted(client_auth: bool) -> None:
    """The checks of Pod Security's "restricted" level (v1.36) on each pod of the chart."""
    values: dict[str, Any] = {}
    if client_auth:
        values["webhook"] = {"clientAuth": {"required": True, "caConfigMap": "ca"}}
    found = pods(documents(values))
    assert set(found) == {"harvester-quota", "harvester-quota-webhook"}
    for name, pod in found.items():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, name
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for volume in pod.get("volumes") or []:
            assert set(volume) & {"secret", "configMap", "projected", "emptyDir"}, volume
        for container in pod["containers"]:
            own = container["securityContext"]
            assert own["allowPrivilegeEscalation"] is False, name
            assert own["capabilities"] == {"drop": ["ALL"]}, name
            assert own.get("runAsUser", 1) != 0 and not own.get("privileged"), name
            assert own["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert not [p for p in container.get("ports") or [] if "hostPort" in p], name
