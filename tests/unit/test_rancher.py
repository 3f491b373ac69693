"""Rancher's namespace quota annotation, field.cattle.io/resourceQuota.

Decoding details (key case, duplicates, null, unknown keys, `extended`) were checked against Go's
encoding/json on a copy of Rancher's NamespaceResourceQuota struct; the canonical texts below are
what Go's json.Marshal printed for it.
"""

from __future__ import annotations

import pytest
from harvester_quota.testbench.sim.rancher.derive import format_namespace_resource_quota
from harvester_quota.util.quantity import Format, Quantity
from harvester_quota.util.rancher.annotation import (
    LIMIT_FIELDS,
    RancherLimit,
    parse_namespace_resource_quota,
    parse_namespace_resource_quota_details,
)
from harvester_quota.util.resources import ResourceList
from hypothesis import given
from hypothesis import strategies as st


def rl(**values: str) -> ResourceList:
    return {key.replace("_", "."): Quantity.parse(value) for key, value in values.items()}


# Seed annotations (harvester-v170 seed, issue #9753; issue #7178; Harvester's own tests).
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}',
            rl(limits_cpu="3", limits_memory="5000Mi"),
        ),
        ('{"limit":{"limitsCpu":"2000m"}}', rl(limits_cpu="2")),
        (
            '{"limit":{"limitsCpu":"4", "limitsMemory":"10240Mi"}}',
            rl(limits_cpu="4", limits_memory="10Gi"),
        ),
        (
            '{"limit":{"limitsCpu":"10000m","limitsMemory":"10240Mi"}}',
            rl(limits_cpu="10", limits_memory="10Gi"),
        ),
    ],
)
def test_seed_annotations(text: str, expected: ResourceList) -> None:
    assert parse_namespace_resource_quota(text) == expected


def test_seed_values_keep_their_format_for_arithmetic() -> None:
    parsed = parse_namespace_resource_quota(
        '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
    )
    assert str(parsed["limits.cpu"]) == "3"
    assert str(parsed["limits.memory"]) == "5000Mi"
    assert parsed["limits.memory"].format is Format.BINARY_SI
    # Seed #9753: base 5000Mi + a 4797464313-byte VM share = 10040344313 bytes.
    raised = parsed["limits.memory"] + Quantity.from_int(4797464313)
    assert raised.value() == 10040344313


def test_every_field_maps_to_its_resource_quota_key() -> None:
    fields = {json_field: f"{index + 1}" for index, (json_field, _) in enumerate(LIMIT_FIELDS)}
    text = '{"limit":{' + ",".join(f'"{k}":"{v}"' for k, v in fields.items()) + "}}"
    assert parse_namespace_resource_quota(text) == {
        "pods": Quantity.parse("1"),
        "services": Quantity.parse("2"),
        "replicationcontrollers": Quantity.parse("3"),
        "secrets": Quantity.parse("4"),
        "configmaps": Quantity.parse("5"),
        "persistentvolumeclaims": Quantity.parse("6"),
        "services.nodeports": Quantity.parse("7"),
        "services.loadbalancers": Quantity.parse("8"),
        "requests.cpu": Quantity.parse("9"),
        "requests.memory": Quantity.parse("10"),
        "requests.storage": Quantity.parse("11"),
        "limits.cpu": Quantity.parse("12"),
        "limits.memory": Quantity.parse("13"),
    }
    # and back, in Go field order
    assert format_namespace_resource_quota(parse_namespace_resource_quota(text)) == text


@pytest.mark.parametrize("text", ["", "null", "{}", '{"limit":{}}', '{"limit":null}'])
def test_empty_annotations_are_an_empty_base(text: str) -> None:
    assert parse_namespace_resource_quota(text) == {}
    assert parse_namespace_resource_quota_details(text) == RancherLimit()


# (annotation, the text Go's json.Marshal prints after json.Unmarshal into Rancher's struct)
GO_DECODING_TABLE = [
    (
        '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}',
        '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}',
    ),
    (
        '{"LIMIT":{"LimitsCPU":"1","LIMITSMEMORY":"2Gi"}}',
        '{"limit":{"limitsCpu":"1","limitsMemory":"2Gi"}}',
    ),
    (
        '{"limit":{"limitsCpu":"1"},"limit":{"limitsMemory":"2"}}',
        '{"limit":{"limitsCpu":"1","limitsMemory":"2"}}',
    ),
    ('{"limit":{"limitsCpu":"1","limitsCpu":null}}', '{"limit":{"limitsCpu":"1"}}'),
    ('{"limit":{"limitsCpu":"1","LimitsCpu":"2"}}', '{"limit":{"limitsCpu":"2"}}'),
    ('{"limit":null}', '{"limit":{}}'),
    ("null", '{"limit":{}}'),
    ('{"other":5,"limit":{"unknown":[1,2],"limitsCpu":"1"}}', '{"limit":{"limitsCpu":"1"}}'),
    (
        '{"limit":{"extended":{"a":"1"},"extended":{"b":"2"}}}',
        '{"limit":{"extended":{"a":"1","b":"2"}}}',
    ),
    ('{"limit":{"extended":{"a":"1"},"extended":null}}', '{"limit":{}}'),
    ('{"limit":{"limitsCpu":""}}', '{"limit":{}}'),
    ('{"limit":{"\u017fecrets":"1", "pods":"2"}}', '{"limit":{"pods":"2","secrets":"1"}}'),
    (
        '{"limit":{"limitsMemory":"2Gi","requestsCpu":"1","pods":"10"}}',
        '{"limit":{"pods":"10","requestsCpu":"1","limitsMemory":"2Gi"}}',
    ),
]


@pytest.mark.parametrize(("text", "go_text"), GO_DECODING_TABLE)
def test_decoding_matches_go(text: str, go_text: str) -> None:
    assert parse_namespace_resource_quota_details(text).canonical_text() == go_text


def test_case_insensitive_keys_and_duplicates() -> None:
    assert parse_namespace_resource_quota('{"Limit":{"LimitsCpu":"1","limitsMEMORY":"1Gi"}}') == (
        rl(limits_cpu="1", limits_memory="1Gi")
    )
    merged = '{"limit":{"limitsCpu":"1"},"limit":{"limitsMemory":"2Gi"}}'
    assert parse_namespace_resource_quota(merged) == rl(limits_cpu="1", limits_memory="2Gi")


def test_extended_is_kept_apart_from_the_base() -> None:
    text = (
        '{"limit":{"limitsCpu":"2","extended":{"requests.nvidia.com/gpu":"2",'
        '"count/deployments.apps":"5","limits.cpu":"100"}}}'
    )
    details = parse_namespace_resource_quota_details(text)
    assert details.limit() == rl(limits_cpu="2")
    assert parse_namespace_resource_quota(text) == rl(limits_cpu="2")
    assert details.extended == {
        "requests.nvidia.com/gpu": "2",
        "count/deployments.apps": "5",
        "limits.cpu": "100",
    }
    assert details.canonical_text() == (
        '{"limit":{"limitsCpu":"2","extended":{"count/deployments.apps":"5",'
        '"limits.cpu":"100","requests.nvidia.com/gpu":"2"}}}'
    )


@pytest.mark.parametrize(
    "extended",
    ['{"a":1}', '"x"', "[1]", '{"a":{"b":"1"}}'],
)
def test_malformed_extended_does_not_break_the_base(extended: str) -> None:
    # Harvester's vendored Rancher API has no `extended` and ignores it whatever it holds.
    text = f'{{"limit":{{"limitsCpu":"2","extended":{extended}}}}}'
    details = parse_namespace_resource_quota_details(text)
    assert details.limit() == rl(limits_cpu="2")


def test_an_invalid_extended_quantity_does_not_break_the_base() -> None:
    details = parse_namespace_resource_quota_details(
        '{"limit":{"limitsCpu":"2","extended":{"requests.nvidia.com/gpu":"two"}}}'
    )
    assert details.limit() == rl(limits_cpu="2")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"limit":{"limitsCpu":"10000m invalid"}}', "limit.limitsCpu"),
        ('{"limit":{"limitsMemory":"2Gi invalid"}}', "limit.limitsMemory"),
        ('{"limit":{"limitsMemory":" 1Gi"}}', "limit.limitsMemory"),  # Go's ParseQuantity: no trim
        ('{"limit":{"pods":"ten"}}', "limit.pods"),
        ('{"limit":{"limitsCpu":4}}', "limit.limitsCpu must be a string"),
        ('{"limit":{"limitsCpu":true}}', "limit.limitsCpu must be a string"),
        ('{"limit":"x"}', "field limit must be a JSON object"),
        ('{"limit":[]}', "field limit must be a JSON object"),
        ("[]", "not a JSON object"),
        ('"x"', "not a JSON object"),
        ("{", "not valid JSON"),
        ("   ", "not valid JSON"),
        ('{"limit":{"limitsCpu":"1"}} x', "not valid JSON"),
        ('{"limit":{"limitsCpu":NaN}}', "not valid JSON"),
    ],
)
def test_invalid_annotations_name_the_field_and_quote_the_text(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=r"field\.cattle\.io/resourceQuota") as caught:
        parse_namespace_resource_quota(text)
    assert fragment in str(caught.value)
    assert repr(text) in str(caught.value)


def test_details_keep_the_original_text() -> None:
    details = parse_namespace_resource_quota_details(
        '{"limit":{"limitsMemory":"10240Mi", "limitsCpu":"10000m"}}'
    )
    assert details.fixed == {"limits.cpu": "10000m", "limits.memory": "10240Mi"}
    assert list(details.limit()) == ["limits.cpu", "limits.memory"]  # Go field order
    assert details.canonical_text() == '{"limit":{"limitsCpu":"10000m","limitsMemory":"10240Mi"}}'


def test_format_in_rancher_canonical_form() -> None:
    # Text values are written verbatim, as Rancher rewrites the annotation.
    assert (
        format_namespace_resource_quota({"limits.memory": "10240Mi", "limits.cpu": "10000m"})
        == '{"limit":{"limitsCpu":"10000m","limitsMemory":"10240Mi"}}'
    )
    # Quantities are written as Go's String(), as Rancher converts a ResourceList back.
    assert (
        format_namespace_resource_quota(
            {
                "limits.memory": Quantity.from_int(10737418240, Format.BINARY_SI),
                "limits.cpu": Quantity.from_int(10),
            }
        )
        == '{"limit":{"limitsCpu":"10","limitsMemory":"10Gi"}}'
    )
    assert format_namespace_resource_quota({}) == '{"limit":{}}'
    assert format_namespace_resource_quota({"pods": Quantity()}) == '{"limit":{"pods":"0"}}'
    # Keys without a Rancher field go to `extended`, sorted.
    assert format_namespace_resource_quota(
        {"requests.nvidia.com/gpu": "1", "limits.cpu": "2", "ephemeral-storage": "1Gi"}
    ) == (
        '{"limit":{"limitsCpu":"2","extended":'
        '{"ephemeral-storage":"1Gi","requests.nvidia.com/gpu":"1"}}}'
    )
    with pytest.raises(ValueError, match="10000m invalid"):
        format_namespace_resource_quota({"limits.cpu": "10000m invalid"})


RESOURCE_NAMES = st.sampled_from([resource for _, resource in LIMIT_FIELDS])
QUANTITIES = st.builds(
    Quantity,
    nanos=st.integers(min_value=0, max_value=10**24).map(lambda n: n - n % 10**6),
    fmt=st.sampled_from(list(Format)),
)


@given(st.dictionaries(RESOURCE_NAMES, QUANTITIES))
def test_format_then_parse_round_trips(values: ResourceList) -> None:
    text = format_namespace_resource_quota(values)
    assert parse_namespace_resource_quota(text) == values
    assert parse_namespace_resource_quota_details(text).canonical_text() == text
