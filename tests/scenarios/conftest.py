"""Scenario tests share the integration tier's local cluster and fixtures."""

from tests.integration.conftest import api, cluster, local_cluster, namespace, rest  # noqa: F401
