"""The local cluster's certificates satisfy Go's and Python's strictest verifiers."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from harvester_quota.testbench.localcluster.pki import CertificateAuthority


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create()


def test_leaf_carries_key_identifiers_and_usages(ca: CertificateAuthority) -> None:
    pair = ca.issue("svc", dns_names=("svc.local",), ip_addresses=("127.0.0.1",), server=True)
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    assert cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_admin_client_certificate_is_in_system_masters(ca: CertificateAuthority) -> None:
    pair = ca.issue("admin", organizations=("system:masters",), client=True)
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_server_certificate_needs_a_name(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="DNS name or IP"):
        ca.issue("nameless", server=True)
    with pytest.raises(ValueError, match="server, a client"):
        ca.issue("nothing")


def test_strict_tls_handshake_with_client_certificate(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    """A real TLS 1.2+ handshake with VERIFY_X509_STRICT, the check Python 3.13 turns on."""
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    ca.issue("server", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path / "s.crt", tmp_path / "s.key"
    )
    ca.issue("admin", organizations=("system:masters",), client=True).write(
        tmp_path / "c.crt", tmp_path / "c.key"
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "s.crt", tmp_path / "s.key")
    server_ctx.load_verify_locations(tmp_path / "ca.crt")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    client_ctx.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    peer_subject: list[object] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with server_ctx.wrap_socket(connection, server_side=True) as tls:
            peer_subject.append(tls.getpeercert()["subject"])
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.recv(2) == b"ok"
    thread.join(5)
    listener.close()
    assert (("commonName", "admin"),) in peer_subject[0]  # type: ignore[operator]


def test_a_token_kubeconfig_written_at_a_relative_path_loads_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl reads a relative tokenFile relative to the kubeconfig's folder: written from the
    working directory, `make scale`'s relative --report doubled the path."""
    from harvester_quota.generic import config
    from harvester_quota.testbench.localcluster.cluster import ClusterInfo, Ports
    from harvester_quota.testbench.localcluster.deploy import token_kubeconfig

    (tmp_path / "ca.crt").write_bytes(CertificateAuthority.create("test").cert_pem)
    cluster = ClusterInfo(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "admin.kubeconfig",
        server="https://127.0.0.1:6443",
        ca_file=tmp_path / "ca.crt",
        client_cert=tmp_path / "admin.crt",
        client_key=tmp_path / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "work").mkdir(parents=True)
    token_kubeconfig(cluster, "someone", "the-token", Path("reports/work/someone.kubeconfig"))
    loaded = config.load("reports/work/someone.kubeconfig")
    assert loaded.authorization() == "Bearer the-token"


def test_the_api_server_presents_a_client_certificate_of_its_own_ca_to_every_webhook(
    tmp_path: Path,
) -> None:
    """The AdmissionConfiguration names, for both webhook plugins, a kubeconfig whose user "*"
    (every webhook host) holds a client certificate that the webhook client CA signed, and that
    the cluster CA (which signed every other certificate here) did not."""
    import base64

    import yaml
    from harvester_quota.testbench.localcluster.cluster import LocalCluster, Ports
    from harvester_quota.testbench.localcluster.pki import WEBHOOK_CLIENT_NAME

    local = LocalCluster(tmp_path)
    local._write_pki()
    assert f"--admission-control-config-file={local.admission_config_path}" in (
        local._apiserver_args(Ports(1, 2, 3, 4, 5))
    )
    admission = yaml.safe_load(local.admission_config_path.read_text())
    assert (admission["apiVersion"], admission["kind"]) == (
        "apiserver.config.k8s.io/v1",
        "AdmissionConfiguration",
    )
    plugins = {plugin["name"]: plugin["configuration"] for plugin in admission["plugins"]}
    assert set(plugins) == {"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
    for configuration in plugins.values():
        assert configuration["apiVersion"] == "apiserver.config.k8s.io/v1"
        assert configuration["kind"] == "WebhookAdmissionConfiguration"
        assert Path(configuration["kubeConfigFile"]).is_absolute()
    kubeconfig = yaml.safe_load(
        Path(plugins["ValidatingAdmissionWebhook"]["kubeConfigFile"]).read_text()
    )
    (user,) = kubeconfig["users"]
    assert user["name"] == "*"
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["user"]["client-certificate-data"]))
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [a.value for a in names] == [WEBHOOK_CLIENT_NAME]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    webhook_ca = x509.load_pem_x509_certificate(
        (tmp_path / "pki" / "webhook-client-ca.crt").read_bytes()
    )
    cluster_ca = x509.load_pem_x509_certificate((tmp_path / "pki" / "ca.crt").read_bytes())
    assert cert.issuer == webhook_ca.subject != cluster_ca.subject
    cert.verify_directly_issued_by(webhook_ca)
    with pytest.raises((ValueError, TypeError)):
        cert.verify_directly_issued_by(cluster_ca)


def test_a_healthy_cluster_whose_api_server_has_no_webhook_client_certificate_starts_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state dir reused from before: its cluster runs and is healthy, but its API server was
    started without the AdmissionConfiguration, so webhooks requiring client certificates would
    refuse it. `up` stops it and starts a new one; a current one is reused as it is."""
    import json

    from harvester_quota.testbench.localcluster import audit
    from harvester_quota.testbench.localcluster import cluster as cluster_module
    from harvester_quota.testbench.localcluster.cluster import ClusterInfo, LocalCluster, Ports

    local = LocalCluster(tmp_path)
    old = ClusterInfo(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        server="https://127.0.0.1:1",
        ca_file=tmp_path / "pki" / "ca.crt",
        client_cert=tmp_path / "pki" / "admin.crt",
        client_key=tmp_path / "pki" / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
    )
    written = old.to_json()
    del written["webhook_client_ca"]  # as a state.json of before this field
    local.state_file.write_text(json.dumps(written))
    started: list[ClusterInfo] = []
    stopped: list[object] = []

    kcm = {
        "name": "kube-controller-manager",
        "pid": 1,
        "binary": "kube-controller-manager",
        "log": "kcm.log",
        "argv": ["--controllers=*", cluster_module.KCM_IDENTITY_FLAG],
    }
    apiserver = {
        "name": "kube-apiserver",
        "pid": 2,
        "binary": "kube-apiserver",
        "log": "kube-apiserver.log",
        "argv": [f"{audit.POLICY_FLAG}={local.audit_policy_path}"],
    }

    def current(processes: list[dict[str, object]]) -> ClusterInfo:
        return ClusterInfo.from_json(
            {
                **written,
                "webhook_client_ca": str(local.pki_dir / "webhook-client-ca.crt"),
                "processes": processes,
            }
        )

    def start(*_args: object, **_kwargs: object) -> ClusterInfo:
        info = current([kcm, apiserver])
        started.append(info)
        return info

    monkeypatch.setattr(LocalCluster, "_healthy", lambda self, info: True)
    monkeypatch.setattr(
        LocalCluster, "_stop_processes", lambda self, records: stopped.append(records)
    )
    monkeypatch.setattr(LocalCluster, "_start", start)
    monkeypatch.setattr(cluster_module, "resolve_bin_dir", lambda: tmp_path)

    fresh = local.up()
    assert len(stopped) == 1 and started == [fresh]
    assert fresh.webhook_client_ca is not None and fresh.webhook_client_ca.exists()
    assert local.audit_policy_path.exists(), "the API server's audit policy is written first"
    assert local.up() == fresh, "a current healthy cluster is reused"
    assert len(started) == 1 and len(stopped) == 1

    # One whose kube-controller-manager calls as the admin, not as each controller's service
    # account (a cluster of before KCM_IDENTITY_FLAG), is started afresh too; so is one whose API
    # server writes no audit log (a cluster of before audit.POLICY_FLAG).
    older = (
        [{**kcm, "argv": ["--controllers=*"]}, apiserver],
        [kcm, {**apiserver, "argv": []}],
    )
    for count, processes in enumerate(older, start=2):
        local.state_file.write_text(json.dumps(current(processes).to_json()))
        local.up()
        assert len(started) == count and len(stopped) == count
