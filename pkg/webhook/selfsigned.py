"""The webhook's own certificate authority, as pure decisions: what the certificate Secret must
hold at a given time (`plan`), with no I/O (certkeeper.py reads and writes the Secret and the
webhook configuration).

The Secret holds the current CA and its key, the bundle of CAs the webhook configuration must
trust (the current CA and every earlier one not yet expired) and the serving certificate and key
all replicas serve. Lifetimes and renewal follow KubeVirt's virt-operator (a CA for 7 days, a
serving certificate for 1 day, each renewed once RENEW_FRACTION of its lifetime has passed). A
renewed CA joins the bundle at once, beside the old one, while the serving certificate stays the
old CA's until the new CA has been published for `Policy.publish_grace`: the API server trusts
the new CA before any replica serves a certificate it signed, and keeps trusting the old one
(until it expires, RENEW_FRACTION's remainder of its lifetime later) while replicas still serve
what it signed. So no request fails in the switch.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

RENEW_FRACTION = 0.8
"""A certificate is renewed once this fraction of its lifetime has passed (KubeVirt's
virt-operator renews 20% before expiry): the remaining fifth is the overlap in which the old CA
stays trusted and a failed renewal is retried."""

CA_LIFETIME = datetime.timedelta(days=7)
"""KubeVirt's self-signed CA lifetime: short enough that a leaked key soon stops mattering."""

CERT_LIFETIME = datetime.timedelta(days=1)
"""KubeVirt's serving certificate lifetime."""

MAX_PUBLISH_GRACE = datetime.timedelta(seconds=60)
"""How long a new CA is in the webhook configuration before a certificate it signed is served:
the API server reads the configuration through an informer (milliseconds, more on a loaded or
multi-server control plane)."""

BACKDATE = datetime.timedelta(minutes=5)
"""Certificates are valid from this long before they are made: an API server whose clock is a
little behind still accepts them. Their age is counted from the moment they were made."""

CA_NAME = "harvester-quota-webhook-ca"


@dataclass(frozen=True)
class Policy:
    """Lifetimes of the CA and the serving certificate, and the names the certificate covers
    (DNS names and IP addresses). Raises ValueError for lifetimes whose overlap cannot cover a
    CA switch."""

    hosts: tuple[str, ...]
    ca_lifetime: datetime.timedelta = CA_LIFETIME
    cert_lifetime: datetime.timedelta = CERT_LIFETIME

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError("the serving certificate needs at least one host name")
        if self.cert_lifetime <= datetime.timedelta(seconds=1):
            raise ValueError(f"certificate lifetime {self.cert_lifetime} is too short")
        if self.cert_lifetime > self.ca_lifetime:
            raise ValueError(
                f"certificate lifetime {self.cert_lifetime} exceeds the CA's {self.ca_lifetime}"
            )

    @property
    def publish_grace(self) -> datetime.timedelta:
        """A quarter of the shorter renewal overlap (the CA's, the serving certificate's), at
        most MAX_PUBLISH_GRACE: a renewal that falls due within it waits for its end."""
        overlap = min(self.ca_lifetime, self.cert_lifetime) * (1 - RENEW_FRACTION)
        return min(MAX_PUBLISH_GRACE, overlap / 4)

    @property
    def check_interval(self) -> float:
        """Seconds between two looks at the Secret: well inside every grace and overlap, at
        least 0.2 s and at most 30 s."""
        shortest = min(self.cert_lifetime * (1 - RENEW_FRACTION) / 4, self.publish_grace / 2)
        return max(0.2, min(30.0, shortest.total_seconds()))


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, in PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class Authority:
    """What the Secret holds: the CA that signs, the CAs to trust (PEM, current first) and the
    serving pair."""

    ca: Pair
    bundle: tuple[bytes, ...]
    serving: Pair
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What `plan` changed, for the log and the Event (empty: nothing)."""

    @property
    def bundle_pem(self) -> bytes:
        return b"".join(self.bundle)


def made_at(cert: x509.Certificate) -> datetime.datetime:
    """When `cert` was made (its notBefore is BACKDATE earlier)."""
    return cert.not_valid_before_utc + BACKDATE


def renew_at(
    cert: x509.Certificate, lifetime: datetime.timedelta | None = None
) -> datetime.datetime:
    """When RENEW_FRACTION of `cert`'s lifetime has passed, or of `lifetime` if shorter (a
    lifetime shortened by the operator takes effect on the certificates already made)."""
    made = made_at(cert)
    actual = cert.not_valid_after_utc - made
    return made + min(actual, lifetime or actual) * RENEW_FRACTION


def plan(current: Authority | None, now: datetime.datetime, policy: Policy) -> Authority:
    """What the Secret must hold at `now`, given what it holds (None: nothing usable). Returns
    `current` itself when nothing is due. Order of a CA switch: the new CA joins the bundle
    (serving certificate unchanged); publish_grace after it was made, a serving certificate
    it signs (a renewal falling due meanwhile waits, unless the certificate expired or no
    trusted CA signed it); the old CA leaves the bundle when it expires."""
    now = now.replace(microsecond=0)
    if current is None:
        ca = new_ca(now, policy)
        serving = issue(ca, now, policy)
        return Authority(ca, (ca.cert_pem,), serving, ("made a new CA and serving certificate",))
    notes: list[str] = []
    ca = current.ca
    if now >= renew_at(ca.cert, policy.ca_lifetime):
        ca = new_ca(now, policy)
        notes.append("renewed the CA; the old one stays trusted until it expires")
    bundle = _trusted(ca, current.bundle, now)
    if bundle != current.bundle and ca is current.ca:
        notes.append("dropped expired CAs from the bundle")
    serving = current.serving
    reason = _serving_due(current.serving, ca, bundle, now, policy)
    if reason:
        serving = issue(ca, now, policy)
        notes.append(f"issued a serving certificate: {reason}")
    if not notes:
        return current
    return replace(current, ca=ca, bundle=bundle, serving=serving, notes=tuple(notes))


def _trusted(ca: Pair, bundle: Sequence[bytes], now: datetime.datetime) -> tuple[bytes, ...]:
    kept = [ca.cert_pem]
    for pem in bundle:
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError:
            continue
        if pem != ca.cert_pem and cert.not_valid_after_utc > now:
            kept.append(pem)
    return tuple(kept)


def _serving_due(
    serving: Pair, ca: Pair, bundle: Sequence[bytes], now: datetime.datetime, policy: Policy
) -> str:
    """Why the serving certificate must be replaced now ("" if it need not be)."""
    cert = serving.cert
    issuer = signer(cert, bundle)
    if issuer is None:
        return "the current one is signed by no trusted CA"
    if now >= cert.not_valid_after_utc:
        return "the current one expired"
    if now < made_at(ca.cert) + policy.publish_grace:
        return ""  # the CA may not be trusted everywhere yet; RENEW_FRACTION leaves the time
    return _serving_stale(cert, issuer != ca.cert_pem, now, policy)


def _serving_stale(
    cert: x509.Certificate, old_ca: bool, now: datetime.datetime, policy: Policy
) -> str:
    if now >= renew_at(cert, policy.cert_lifetime):
        return "the current one is due for renewal"
    if sorted(hosts_of(cert)) != sorted(policy.hosts):
        return "the host names changed"
    return "the CA was renewed" if old_ca else ""


def signer(cert: x509.Certificate, bundle: Sequence[bytes]) -> bytes | None:
    """The CA in `bundle` (PEM) whose key signed `cert`, if any."""
    for pem in bundle:
        try:
            ca = x509.load_pem_x509_certificate(pem)
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return pem
    return None


def hosts_of(cert: x509.Certificate) -> list[str]:
    """The DNS names and IP addresses `cert` covers, as text."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    dns = names.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    return [*dns, *ips]


def new_ca(now: datetime.datetime, policy: Policy) -> Pair:
    """A self-signed CA valid for policy.ca_lifetime from `now`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    cert = (
        certificate_builder(name, name, key.public_key(), now - BACKDATE, now + policy.ca_lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(ca: Pair, now: datetime.datetime, policy: Policy) -> Pair:
    """A serving certificate for policy.hosts signed by `ca`, valid for policy.cert_lifetime
    from `now` but never past the CA's own expiry."""
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"the CA's key is {type(ca_key).__name__}, not an EC key this makes")
    key = ec.generate_private_key(ec.SECP256R1())
    expires = min(now + policy.cert_lifetime, ca_cert.not_valid_after_utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, policy.hosts[0])])
    cert = (
        certificate_builder(subject, ca_cert.subject, key.public_key(), now - BACKDATE, expires)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_alt_names(policy.hosts)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def certificate_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: CertificatePublicKeyTypes,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    """What every certificate made with it carries: its names, key, a random serial, its
    validity (`not_before` already back-dated by the caller) and a Subject Key Identifier; the caller adds its constraints, usages and the Authority
    Key Identifier, and signs."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def to_publish(
    authority: Authority, found: Iterable[bytes], now: datetime.datetime
) -> tuple[bytes, ...]:
    """The caBundle to put in the configuration, which holds the CAs `found`: `authority`'s
    bundle, plus every CA found that is still valid and was made after `authority`'s CA. A
    replica whose read of the Secret another replica's CA renewal overtook thus never takes the
    newer CA out of the configuration (the other may serve what it signed by then). A fresh read
    drops the CAs the Secret no longer trusts that are older than its own; a valid CA found that
    is newer than it stays until it expires."""
    newer: list[bytes] = []
    made = made_at(authority.ca.cert)
    for pem in found:
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError:
            continue
        known = pem in authority.bundle or pem in newer
        if not known and made_at(cert) > made and cert.not_valid_after_utc > now:
            newer.append(pem)
    return (*newer, *authority.bundle)


def split_bundle(pem: bytes) -> tuple[bytes, ...]:
    """The certificates of a PEM bundle, each as PEM (anything else is dropped)."""
    end = b"-----END CERTIFICATE-----"
    parts = []
    for chunk in pem.split(end):
        start = chunk.find(b"-----BEGIN CERTIFICATE-----")
        if start >= 0:
            parts.append(chunk[start:] + end + b"\n")
    return tuple(parts)
