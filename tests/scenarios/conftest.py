"""Scenario tests share the integration tier's local cluster and fixtures."""

from tests.integration.conftest import (  # noqa: F401
    api,
    cluster,
    harvester_cluster,
    harvester_kubevirt_cluster,
    kubevirt_api,
    kubevirt_cluster,
    local_cluster,
    namespace,
    rest,
    session_kubevirt_cluster,
)
