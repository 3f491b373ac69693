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
    RancherLimit,
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
    assert requested_limit(SEED, OLD) == RancherLimit(
        {"limits.cpu": "3000m", "limits.memory": "5000Mi"}
    )
    text = '{"limit":{"limitsCpu":"2","extended":{"limits.cpu":"9","requests.nvidia.com/gpu":"1"}}}'
    assert requested_limit(text, OLD) == RancherLimit({"limits.cpu": "2"})
    # v2.14+: extended enters, the fixed field wins over it in the quota.
    newer = requested_limit(text, NEW)
    assert newer is not None
    assert newer.extended == {"limits.cpu": "9", "requests.nvidia.com/gpu": "1"}
    assert newer.keys() == {"limits.cpu": "2", "requests.nvidia.com/gpu": "1"}
    with pytest.raises(ValueError, match="resourceQuota"):
        requested_limit("{not json", OLD)


PROJECT = Project(
    "p1",
    limit={"limits.cpu": "30", "limits.memory": "50Gi"},
    namespace_default={"limits.cpu": "1", "limits.memory": "1Gi"},
)


def test_the_four_cases_of_deriving_a_quota() -> None:
    derived = derive(SEED, PROJECT, OLD)
    assert derived is not None
    assert derived.limit == RancherLimit({"limits.cpu": "3000m", "limits.memory": "5000Mi"})
    assert derived.hard == hard(limits_cpu="3", limits_memory="5000Mi")
    # requested without a default (no project, or a project without resourceQuota): nothing.
    assert derive(SEED, None, OLD) is None
    assert derive(SEED, Project("p1"), OLD) is None
    # a default without requested: the default.
    only_default = derive(None, PROJECT, OLD)
    assert only_default is not None
    assert only_default.limit == RancherLimit({"limits.cpu": "1", "limits.memory": "1Gi"})
    # neither.
    assert derive(None, Project("p1"), OLD) is None


def test_a_project_is_one_rancher_s_project_webhook_accepts() -> None:
    """A quota and a namespace default come together, on the same fields, the default within the
    limit (rancher/webhook pkg/resources/management.cattle.io/v3/project): a project without a
    default, which the old simulator treated as "whatever the annotation asks", does not exist."""
    with pytest.raises(ValueError, match="namespaceDefaultResourceQuota is required"):
        Project("p1", limit={"limits.cpu": "10"})
    with pytest.raises(ValueError, match="resourceQuota is required"):
        Project("p1", namespace_default={"limits.cpu": "1"})
    with pytest.raises(ValueError, match="same resources"):
        Project("p1", limit={"limits.cpu": "10"}, namespace_default={"pods": "1"})
    with pytest.raises(ValueError, match="same resources"):  # extended is a field of its own
        Project(
            "p1",
            limit={"limits.cpu": "10", "requests.nvidia.com/gpu": "4"},
            namespace_default={"limits.cpu": "1"},
        )
    with pytest.raises(ValueError, match=r"exceeds project limit on fields: limits.cpu=11"):
        Project("p1", limit={"limits.cpu": "10"}, namespace_default={"limits.cpu": "11"})
    assert Project("p1").limit is None  # no quota at all is a project too


def test_merge_keeps_only_the_fields_of_the_project_default() -> None:
    default = RancherLimit({"limits.cpu": "1", "requests.memory": "1Gi"})
    requested = RancherLimit({"limits.cpu": "3000m", "limits.memory": "5000Mi"})
    assert complete_quota(requested, default) == RancherLimit(
        {"limits.cpu": "3000m", "requests.memory": "1Gi"}
    )
    project = Project(
        "p1",
        limit={"limits.cpu": "10", "requests.memory": "10Gi"},
        namespace_default={"limits.cpu": "1", "requests.memory": "1Gi"},
    )
    derived = derive(SEED, project, OLD)
    assert derived is not None
    assert spec_hard(derived.hard) == {"limits.cpu": "3", "requests.memory": "1Gi"}
    assert (
        annotation_text(derived.limit) == '{"limit":{"requestsMemory":"1Gi","limitsCpu":"3000m"}}'
    )


def test_extended_is_one_field_replaced_whole() -> None:
    """completeQuota copies a requested field the default has; `extended` is one field, so the
    request's map replaces the default's whole (keys the default lacks included, keys the
    request lacks dropped), and is dropped whole when the default has none."""
    default = RancherLimit({"limits.cpu": "1"}, {"requests.nvidia.com/gpu": "1", "pods": "5"})
    requested = RancherLimit({"limits.cpu": "2"}, {"requests.nvidia.com/gpu": "2", "foo/bar": "3"})
    merged = complete_quota(requested, default)
    assert merged == RancherLimit(
        {"limits.cpu": "2"}, {"requests.nvidia.com/gpu": "2", "foo/bar": "3"}
    )
    assert complete_quota(requested, RancherLimit({"limits.cpu": "1"})).extended == {}
    assert complete_quota(RancherLimit({"limits.cpu": "2"}), default).extended == default.extended
    project = Project(
        "p1",
        limit={"limits.cpu": "10", "requests.nvidia.com/gpu": "8"},
        namespace_default={"limits.cpu": "1", "requests.nvidia.com/gpu": "1"},
    )
    text = '{"limit":{"limitsCpu":"2","extended":{"requests.nvidia.com/gpu":"2","foo/bar":"3"}}}'
    newer = derive(text, project, NEW)
    assert newer is not None
    assert spec_hard(newer.hard) == {
        "limits.cpu": "2",
        "requests.nvidia.com/gpu": "2",
        "foo/bar": "3",
    }
    assert annotation_text(newer.limit) == (
        '{"limit":{"limitsCpu":"2","extended":{"foo/bar":"3","requests.nvidia.com/gpu":"2"}}}'
    )
    older = derive(text, project, OLD)  # before v2.14 there is no extended at all
    assert older is not None and spec_hard(older.hard) == {"limits.cpu": "2"}


def test_bad_quantities_are_errors_naming_them() -> None:
    with pytest.raises(ValueError, match="ten"):
        derive('{"limit":{"limitsCpu":"ten"}}', PROJECT, OLD)


def test_operation_uses_semantic_equality_of_the_whole_hard() -> None:
    desired = derive(SEED, PROJECT, OLD)
    assert operation(None, desired) is Operation.CREATE
    assert operation(None, None) is Operation.NONE
    same = hard(limits_cpu="3000m", limits_memory="5000Mi")
    assert operation(same, desired) is Operation.NONE
    assert operation(hard(limits_cpu="5", limits_memory="5000Mi"), desired) is Operation.UPDATE
    extra = hard(limits_cpu="3", limits_memory="5000Mi", pods="10")
    assert operation(extra, desired) is Operation.UPDATE
    assert operation(hard(limits_cpu="3"), desired) is Operation.UPDATE
    assert operation(same, None) is Operation.DELETE


def test_project_fit_sums_every_sibling_on_the_project_keys() -> None:
    """IsQuotaFit as released: the namespace and all its siblings (validated or not) on the keys
    the project limits; the totals of the keys over it, and its own negative values."""
    project_limit = hard(limits_cpu="10")
    fit = is_quota_fit(hard(limits_cpu="4", pods="100"), [hard(limits_cpu="6")], project_limit)
    assert fit.fits and not fit.exceeded and fit.message() == ""
    fit = is_quota_fit(hard(limits_cpu="5"), [hard(limits_cpu="6")], project_limit)
    assert not fit.fits and fit.exceeded == hard(limits_cpu="11")
    assert fit.shortfall == hard(limits_cpu="1")
    assert fit.message() == "Resource quota [limits.cpu=11] exceeds project limit"
    fit = is_quota_fit(hard(limits_cpu="-1"), [], project_limit)
    assert not fit.fits and fit.exceeded == hard(limits_cpu="-1") and not fit.shortfall
    zeroed = zero_out(RancherLimit({"limits.cpu": "5", "pods": "3"}), ["limits.cpu"])
    assert zeroed == RancherLimit({"limits.cpu": "0", "pods": "3"})


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
