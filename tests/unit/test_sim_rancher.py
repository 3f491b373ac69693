"""Rancher's quota derivation and merge, the create/update/delete decision, the project fit, the
namespace conditions, and the version flavours."""

from __future__ import annotations

import datetime
import json

import pytest
from harvester_quota.testbench.sim.rancher import (
    Operation,
    Project,
    RancherFlavour,
    complete_quota,
    derive,
    is_quota_fit,
    operation,
)
from harvester_quota.testbench.sim.rancher.derive import (
    annotation_text,
    condition_is_set,
    requested_limit,
    set_condition,
    spec_hard,
    zero_out,
)
from harvester_quota.util.resources import parse_resource_list

OLD = RancherFlavour.parse("2.12")
NEW = RancherFlavour.parse("v2.14.3")
SEED = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'


def hard(**values: str) -> dict[str, object]:
    return dict(parse_resource_list({k.replace("_", "."): v for k, v in values.items()}))


def test_flavours() -> None:
    assert OLD.creator_label and not OLD.extended and not OLD.skip_unchanged_writes
    assert not NEW.creator_label and NEW.extended and NEW.skip_unchanged_writes
    assert not RancherFlavour.parse("2.13").creator_label
    assert not RancherFlavour.parse("2.13").skip_unchanged_writes
    with pytest.raises(ValueError, match="unknown Rancher version"):
        RancherFlavour.parse("latest")


def test_requested_limit_reads_the_annotation() -> None:
    assert requested_limit(None, OLD) is None
    assert requested_limit("", OLD) is None
    assert requested_limit("null", OLD) is None
    assert requested_limit(SEED, OLD) == {"limits.cpu": "3000m", "limits.memory": "5000Mi"}
    text = '{"limit":{"limitsCpu":"2","extended":{"limits.cpu":"9","requests.nvidia.com/gpu":"1"}}}'
    assert requested_limit(text, OLD) == {"limits.cpu": "2"}
    # v2.14+: extended enters, the fixed field wins over it.
    assert requested_limit(text, NEW) == {"limits.cpu": "2", "requests.nvidia.com/gpu": "1"}
    with pytest.raises(ValueError, match="resourceQuota"):
        requested_limit("{not json", OLD)


def test_the_four_cases_of_deriving_a_quota() -> None:
    covering = Project("p1")  # namespace default: the annotation's own keys
    assert derive(SEED, covering, OLD) is not None
    derived = derive(SEED, covering, OLD)
    assert derived is not None
    assert derived.limit == {"limits.cpu": "3000m", "limits.memory": "5000Mi"}
    assert derived.hard == hard(limits_cpu="3", limits_memory="5000Mi")
    # requested without a default (no project, or a project without resourceQuota): nothing.
    assert derive(SEED, None, OLD) is None
    assert derive(SEED, Project("p1", limit=None), OLD) is None
    # a default without requested: the default.
    defaulted = Project("p1", namespace_default={"pods": "10"})
    only_default = derive(None, defaulted, OLD)
    assert only_default is not None and only_default.limit == {"pods": "10"}
    # neither.
    assert derive(None, covering, OLD) is None


def test_merge_keeps_only_the_keys_of_the_project_default() -> None:
    default = {"limits.cpu": "1", "requests.memory": "1Gi"}
    requested = {"limits.cpu": "3000m", "limits.memory": "5000Mi"}
    assert complete_quota(requested, default) == {"limits.cpu": "3000m", "requests.memory": "1Gi"}
    derived = derive(SEED, Project("p1", namespace_default=default), OLD)
    assert derived is not None
    assert spec_hard(derived.hard) == {"limits.cpu": "3", "requests.memory": "1Gi"}
    assert (
        annotation_text(derived.limit) == '{"limit":{"requestsMemory":"1Gi","limitsCpu":"3000m"}}'
    )


def test_bad_quantities_are_errors_naming_them() -> None:
    with pytest.raises(ValueError, match="ten"):
        derive('{"limit":{"limitsCpu":"ten"}}', Project("p1"), OLD)


def test_operation_uses_semantic_equality_of_the_whole_hard() -> None:
    desired = derive(SEED, Project("p1"), OLD)
    assert operation(None, desired) is Operation.CREATE
    assert operation(None, None) is Operation.NONE
    same = hard(limits_cpu="3000m", limits_memory="5000Mi")
    assert operation(same, desired) is Operation.NONE
    assert operation(hard(limits_cpu="5", limits_memory="5000Mi"), desired) is Operation.UPDATE
    extra = hard(limits_cpu="3", limits_memory="5000Mi", pods="10")
    assert operation(extra, desired) is Operation.UPDATE
    assert operation(hard(limits_cpu="3"), desired) is Operation.UPDATE
    assert operation(same, None) is Operation.DELETE


def test_project_fit_sums_validated_siblings_on_the_project_keys() -> None:
    project_limit = hard(limits_cpu="10")
    fits, bad = is_quota_fit(
        hard(limits_cpu="4", pods="100"), [hard(limits_cpu="6")], project_limit
    )
    assert fits and not bad
    fits, bad = is_quota_fit(hard(limits_cpu="5"), [hard(limits_cpu="6")], project_limit)
    assert not fits and bad == hard(limits_cpu="11")
    fits, bad = is_quota_fit(hard(limits_cpu="-1"), [], project_limit)
    assert not fits and bad == hard(limits_cpu="-1")
    assert zero_out({"limits.cpu": "5", "pods": "3"}, ["limits.cpu"]) == {
        "limits.cpu": "0",
        "pods": "3",
    }


def test_namespace_conditions_as_rancher_writes_them() -> None:
    now = datetime.datetime(2024, 12, 16, 12, 37, 17, tzinfo=datetime.UTC)
    status = set_condition(None, "ResourceQuotaValidated", False, "too big", now)
    decoded = json.loads(status)
    assert decoded == {
        "Conditions": [
            {
                "Type": "ResourceQuotaValidated",
                "Status": "False",
                "Message": "too big",
                "LastUpdateTime": "2024-12-16T12:37:18Z",
            }
        ]
    }
    status = set_condition(status, "ResourceQuotaInit", True, "ignored", now)
    status = set_condition(status, "ResourceQuotaValidated", True, "gone", now)
    conditions = json.loads(status)["Conditions"]
    assert [c["Type"] for c in conditions] == ["ResourceQuotaValidated", "ResourceQuotaInit"]
    assert conditions[0]["Message"] == "" and conditions[1]["Message"] == ""
    assert condition_is_set(status, "ResourceQuotaValidated", True)
    assert not condition_is_set(status, "ResourceQuotaValidated", False)
    assert not condition_is_set(None, "ResourceQuotaInit", True)


def test_project_namespace_annotations() -> None:
    project = Project("p-snkkp", cluster_id="c-m-nwmsdwdc")
    annotations = project.namespace_annotations({"limits.cpu": "2000m"})
    assert annotations == {
        "field.cattle.io/projectId": "c-m-nwmsdwdc:p-snkkp",
        "field.cattle.io/resourceQuota": '{"limit":{"limitsCpu":"2000m"}}',
    }
