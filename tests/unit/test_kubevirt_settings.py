"""What KubeVirt will render with, read from its CR: unknown or broken values fall back with one
warning instead of failing every reconcile and every VM-start check."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from harvester_quota.config import kubevirt
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.util.overhead import NEWEST_KUBEVIRT_VERSION, parse_kubevirt_version


def _cr(version: Any = None, developer: Any = None, configuration: Any = None) -> dict[str, Any]:
    spec_configuration = configuration if configuration is not None else {}
    if developer is not None:
        spec_configuration = {"developerConfiguration": developer}
    return {
        "spec": {"configuration": spec_configuration},
        "status": {"observedKubeVirtVersion": version} if version is not None else {},
    }


@pytest.fixture(autouse=True)
def _fresh_reports() -> None:
    kubevirt._reported.clear()


def test_a_known_version_is_used_as_observed() -> None:
    assert settings_from(_cr("v1.5.3"), None).kubevirt_version == "v1.5.3"
    assert settings_from(_cr(), None).kubevirt_version == kubevirt.DEFAULT_KUBEVIRT_VERSION


@pytest.mark.parametrize("observed", ["v1.10.0", "v2.0.0", "devel", "v0.40.0"])
def test_an_unknown_version_falls_back_to_the_newest_formula_with_one_warning(
    observed: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError):
        parse_kubevirt_version(observed)
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        for _ in range(3):
            assert settings_from(_cr(observed), None).kubevirt_version == NEWEST_KUBEVIRT_VERSION
    warnings = [r for r in caplog.records if observed in r.getMessage()]
    assert len(warnings) == 1, "reported once, not once per reconcile"
    assert "--kubevirt-version" in warnings[0].getMessage()


def test_a_configured_version_wins_over_the_cr() -> None:
    assert settings_from(_cr("devel"), None, configured_version="1.4").kubevirt_version == "1.4"


@pytest.mark.parametrize("bad", ["lots", -5, 0, [1], {"a": 1}])
def test_unusable_developer_numbers_fall_back_to_kubevirt_defaults(bad: Any) -> None:
    settings = settings_from(_cr("1.6", {"memoryOvercommit": bad, "cpuAllocationRatio": bad}), None)
    assert settings.memory_overcommit == 100
    assert settings.cpu_allocation_ratio == 10


def test_usable_developer_numbers_are_read() -> None:
    settings = settings_from(
        _cr("1.6", {"memoryOvercommit": "150", "cpuAllocationRatio": 16}), None
    )
    assert (settings.memory_overcommit, settings.cpu_allocation_ratio) == (150, 16)


@pytest.mark.parametrize("configuration", [["not", "an", "object"], "text"])
def test_a_configuration_that_is_not_an_object_is_ignored(configuration: Any) -> None:
    settings = settings_from(_cr("1.6", configuration=configuration), None)
    assert settings.memory_overcommit == 100
    assert settings.ratio is None
