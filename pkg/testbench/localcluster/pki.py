"""Certificates for the local cluster and for webhook servers, made with `cryptography`.

One CA signs everything: the API server's serving certificate, the admin client certificate (group
system:masters) that every component and test uses, and serving certificates for webhooks on
127.0.0.1; except the certificate the API server presents when it calls admission webhooks, which
a CA of its own signs (`webhook_client_pki`), so that a webhook trusting that CA accepts the API
server and no other holder of a cluster certificate. Every leaf carries Subject and Authority Key Identifiers: Python 3.13's default TLS
context (VERIFY_X509_STRICT) rejects a leaf without them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ...webhook.selfsigned import certificate_builder

# RSA keys under 1024 bits are refused by Go >= 1.24; 2048 is the usual size and quick to make.
KEY_BITS = 2048
VALIDITY = datetime.timedelta(days=365)
# Back-dating tolerates a clock that is a little behind the one that signed.
BACKDATE = datetime.timedelta(hours=1)

APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
# 10.96.0.1 is the first address of the service range the API server is given.
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")


WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"
"""The common name of the API server's client certificate for admission webhook calls."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, in PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


_KEY_USAGE_FLAGS = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
    "encipher_only",
    "decipher_only",
)


def key_usage(*allowed: str) -> x509.KeyUsage:
    """A KeyUsage that allows exactly ``allowed`` (KeyUsage's flag names), as Go ORs its flags."""
    unknown = set(allowed) - set(_KEY_USAGE_FLAGS)
    if unknown:
        raise ValueError(f"unknown key usage flags: {sorted(unknown)}")
    return x509.KeyUsage(**{flag: flag in allowed for flag in _KEY_USAGE_FLAGS})


CA_KEY_USAGE = key_usage("digital_signature", "key_cert_sign", "crl_sign")
LEAF_KEY_USAGE = key_usage("digital_signature", "key_encipherment")


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: rsa.RSAPublicKey,
    issuer_key: rsa.RSAPrivateKey,
    validity: datetime.timedelta,
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What every certificate here carries: the webhook's `certificate_builder` (a random
    serial, a Subject Key Identifier) with a validity back-dated by BACKDATE, basic constraints,
    key usage (CA_KEY_USAGE or LEAF_KEY_USAGE) and the Authority Key Identifier."""
    now = _now()
    return (
        certificate_builder(subject, issuer, public_key, now - BACKDATE, now + validity)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(CA_KEY_USAGE if ca else LEAF_KEY_USAGE, critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )


@dataclass(frozen=True)
class CertificateAuthority:
    """The CA of one local cluster; it signs leaves with `issue`."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    @classmethod
    def create(cls, common_name: str = "harvester-quota-local-ca") -> CertificateAuthority:
        key = _new_key()
        name = _name(common_name)
        builder = _certificate(name, name, key.public_key(), key, 10 * VALIDITY, ca=True)
        cert = builder.sign(key, hashes.SHA256())
        return cls(cert=cert, key=key)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{key_path} is not an RSA key")
        return cls(cert=cert, key=key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def write(self, cert_path: Path, key_path: Path) -> None:
        KeyPair(self.cert_pem, self.key_pem).write(cert_path, key_path)

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
        validity: datetime.timedelta = VALIDITY,
    ) -> KeyPair:
        """Signs a new leaf for a server (SANs required) and/or a client (CN is the user name)."""
        if not server and not client:
            raise ValueError("a certificate must be for a server, a client, or both")
        if server and not (dns_names or ip_addresses):
            raise ValueError("a server certificate needs at least one DNS name or IP address")
        key = _new_key()
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = _certificate(
            _name(common_name, organizations),
            self.cert.subject,
            key.public_key(),
            self.key,
            validity,
            ca=False,
        ).add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if dns_names or ip_addresses:
            sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_account_key() -> tuple[bytes, bytes]:
    """A key pair for signing service-account tokens: (private PEM, public PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def webhook_client_pki() -> tuple[CertificateAuthority, KeyPair]:
    """A dedicated "webhook client" CA and the client certificate it signs for the API server's
    calls to admission webhooks (CN WEBHOOK_CLIENT_NAME)."""
    ca = CertificateAuthority.create("harvester-quota-local-webhook-client-ca")
    return ca, ca.issue(WEBHOOK_CLIENT_NAME, client=True)
