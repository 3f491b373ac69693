"""Scenario tests share the integration tier's local cluster and fixtures."""

from tests.integration.conftest import (  # noqa: F401
    api,
    cluster,
    kubevirt_api,
    kubevirt_cluster,
    local_cluster,
    namespace,
    rest,
)
