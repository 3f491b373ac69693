"""Every way in, as kubectl knows them, against the real authenticator and authorizer.

A service account with one Role (list pods in its namespace) gets a token by TokenRequest; each
configuration source must make the API server see exactly that account (SelfSubjectReview), let
it list pods and refuse what the Role does not grant.
"""

from __future__ import annotations

import json
import stat
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from harvester_quota.generic import config, errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import PODS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import client_config_from_files

pytestmark = pytest.mark.integration

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
SECRETS = Resource("", "v1", "secrets", "Secret")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


@dataclass
class Account:
    namespace: str
    name: str
    token: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


async def request_token(api: ApiClient, namespace: str, name: str) -> str:
    answer = await api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


@pytest.fixture
async def account(api: ApiClient, namespace: str) -> Account:
    name = f"reader-{uuid.uuid4().hex[:6]}"
    await api.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    await api.create(
        ROLES,
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
        namespace,
    )
    await api.create(
        ROLE_BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        namespace,
    )
    return Account(namespace, name, await request_token(api, namespace, name))


def kubeconfig(cluster: ClusterInfo, user: Object, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": cluster.server,
                            "certificate-authority": str(cluster.ca_file),
                        },
                    }
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "local", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


async def whoami(client_config: ClientConfig) -> str:
    async with ApiClient(client_config) as client:
        review = await client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    return str(review["status"]["userInfo"]["username"])


async def assert_acts_as(client_config: ClientConfig, account: Account) -> None:
    assert await whoami(client_config) == account.username
    async with ApiClient(client_config) as client:
        await client.list(PODS, account.namespace)  # granted
        with pytest.raises(errors.Forbidden):
            await client.list(SECRETS, account.namespace)  # not granted


async def test_token_in_a_kubeconfig(
    cluster: ClusterInfo, account: Account, tmp_path: Path
) -> None:
    path = kubeconfig(cluster, {"token": account.token}, tmp_path / "kubeconfig")
    await assert_acts_as(config.load(path), account)


async def test_token_file_in_a_kubeconfig(
    cluster: ClusterInfo, account: Account, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(account.token)
    path = kubeconfig(cluster, {"tokenFile": "token"}, tmp_path / "kubeconfig")  # relative
    await assert_acts_as(config.load(path), account)


async def test_in_cluster_service_account(
    cluster: ClusterInfo, account: Account, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, _, port = cluster.server.removeprefix("https://").rpartition(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    (tmp_path / "token").write_text(account.token)
    loaded = config.load_in_cluster(token_file=tmp_path / "token", ca_file=cluster.ca_file)
    await assert_acts_as(loaded, account)


async def test_exec_plugin(cluster: ClusterInfo, account: Account, tmp_path: Path) -> None:
    plugin = tmp_path / "credential-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": account.token},
    }
    plugin.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(credential))})\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    path = kubeconfig(cluster, user, tmp_path / "kubeconfig")
    await assert_acts_as(config.load(path), account)


async def test_client_certificate_in_a_kubeconfig(cluster: ClusterInfo, tmp_path: Path) -> None:
    user = {
        "client-certificate": str(cluster.client_cert),
        "client-key": str(cluster.client_key),
    }
    path = kubeconfig(cluster, user, tmp_path / "kubeconfig")
    name = await whoami(config.load(path))
    assert name and not name.startswith("system:anonymous")


async def test_a_rotated_token_file_is_read_again(
    cluster: ClusterInfo, account: Account, api: ApiClient, tmp_path: Path
) -> None:
    """A second account's token written over the file is used after the re-read period."""
    other = f"other-{uuid.uuid4().hex[:6]}"
    await api.create(SERVICE_ACCOUNTS, {"metadata": {"name": other}}, account.namespace)
    token_path = tmp_path / "token"
    token_path.write_text(account.token)
    source = config.TokenFile(token_path, period=0.0)
    client_config = client_config_from_files(cluster.server, ca_file=cluster.ca_file)
    client_config.authorization = source.header
    assert await whoami(client_config) == account.username
    token_path.write_text(await request_token(api, account.namespace, other))
    assert await whoami(client_config) == f"system:serviceaccount:{account.namespace}:{other}"
