"""The webhook's own CA (selfsigned.plan) stepped through time: renewals before expiry, and a CA
switch in which the trusted bundle always covers the certificate served; what a replica with a
stale read publishes; the keeper's retry waits; the webhook's self-signed flags."""

from __future__ import annotations

import asyncio
import base64
import datetime
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from harvester_quota.generic.client import ApiClient
from harvester_quota.main import build_parser, self_signed_options
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.webhook.certkeeper import CertificateKeeper, authority_of, parse_duration
from harvester_quota.webhook.selfsigned import (
    BACKDATE,
    RENEW_FRACTION,
    Authority,
    Pair,
    Policy,
    hosts_of,
    issue,
    plan,
    renew_at,
    signer,
    to_publish,
)

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
POLICY = Policy(
    ("harvester-quota-webhook.harvester-system.svc", "127.0.0.1"),
    ca_lifetime=datetime.timedelta(hours=10),
    cert_lifetime=datetime.timedelta(hours=2),
)
HOUR = datetime.timedelta(hours=1)


def made(now: datetime.datetime = START) -> Authority:
    return plan(None, now, POLICY)


def ca_of(authority: Authority) -> x509.Certificate:
    return authority.ca.cert


def test_a_first_plan_makes_a_ca_and_a_serving_certificate_it_signed_for_the_hosts() -> None:
    authority = made()
    assert authority.bundle == (authority.ca.cert_pem,)
    assert signer(authority.serving.cert, authority.bundle) == authority.ca.cert_pem
    assert sorted(hosts_of(authority.serving.cert)) == sorted(POLICY.hosts)
    assert authority.serving.cert.not_valid_before_utc == START - BACKDATE
    assert ca_of(authority).not_valid_after_utc == START + POLICY.ca_lifetime


def test_nothing_changes_before_a_renewal_is_due() -> None:
    authority = made()
    assert plan(authority, START + POLICY.cert_lifetime * RENEW_FRACTION * 0.99, POLICY) is (
        authority
    )


def test_the_serving_certificate_is_renewed_before_it_expires_by_the_same_ca() -> None:
    authority = made()
    due = START + POLICY.cert_lifetime * RENEW_FRACTION
    renewed = plan(authority, due, POLICY)
    assert renewed.serving != authority.serving and renewed.ca == authority.ca
    assert authority.serving.cert.not_valid_after_utc > due  # renewed while still valid
    assert renewed.serving.cert.not_valid_after_utc == due + POLICY.cert_lifetime


def fresh_before_ca_renewal() -> tuple[Authority, datetime.datetime]:
    """An authority whose serving certificate was renewed a minute before the CA falls due,
    and that moment."""
    due = START + POLICY.ca_lifetime * RENEW_FRACTION
    return plan(made(), due - datetime.timedelta(minutes=1), POLICY), due


def test_a_renewed_ca_joins_the_bundle_beside_the_old_and_serving_waits_for_the_grace() -> None:
    authority, due = fresh_before_ca_renewal()
    switched = plan(authority, due, POLICY)
    assert switched.ca != authority.ca
    assert switched.bundle == (switched.ca.cert_pem, authority.ca.cert_pem)
    # Served certificates stay the old CA's until the new one has been published a while.
    assert signer(switched.serving.cert, switched.bundle) == authority.ca.cert_pem
    before_grace = plan(switched, due + POLICY.publish_grace / 2, POLICY)
    assert signer(before_grace.serving.cert, before_grace.bundle) == authority.ca.cert_pem
    after = plan(before_grace, due + POLICY.publish_grace, POLICY)
    assert signer(after.serving.cert, after.bundle) == switched.ca.cert_pem
    assert authority.ca.cert_pem in after.bundle  # still trusted: replicas may serve its cert


def with_serving_made_at(authority: Authority, when: datetime.datetime) -> Authority:
    return Authority(authority.ca, authority.bundle, issue(authority.ca, when, POLICY))


def test_a_renewal_falling_due_in_the_grace_waits_for_its_end_unless_expired() -> None:
    authority, due = fresh_before_ca_renewal()
    overdue = with_serving_made_at(authority, due - POLICY.cert_lifetime * 0.9)
    switched = plan(overdue, due, POLICY)
    assert renew_at(switched.serving.cert) < due  # due, but the new CA is not yet everywhere
    in_grace = plan(switched, due + POLICY.publish_grace / 2, POLICY)
    assert in_grace.serving == overdue.serving
    after = plan(in_grace, due + POLICY.publish_grace, POLICY)
    assert signer(after.serving.cert, after.bundle) == switched.ca.cert_pem
    expired = with_serving_made_at(switched, due - POLICY.cert_lifetime - HOUR)
    replaced = plan(expired, due + POLICY.publish_grace / 2, POLICY)
    assert replaced.serving.cert.not_valid_after_utc > due


def test_the_old_ca_leaves_the_bundle_only_when_it_expires() -> None:
    authority, due = fresh_before_ca_renewal()
    switched = plan(authority, due, POLICY)
    old_expiry = ca_of(authority).not_valid_after_utc
    kept = plan(switched, old_expiry - datetime.timedelta(seconds=1), POLICY)
    assert authority.ca.cert_pem in kept.bundle
    dropped = plan(kept, old_expiry, POLICY)
    assert dropped.bundle == (switched.ca.cert_pem,)


SHORT = Policy(
    POLICY.hosts,
    ca_lifetime=datetime.timedelta(minutes=10),
    cert_lifetime=datetime.timedelta(minutes=4),
)
"""publish_grace 12 s: the walk below steps well inside it."""


def test_through_three_ca_lifetimes_the_bundle_always_covers_what_is_served() -> None:
    """Stepped 5 s at a time: every served certificate is valid and signed by a CA in the
    bundle, and a serving certificate from a new CA appears only after that CA was in the
    bundle for publish_grace."""
    authority = plan(None, START, SHORT)
    trusted_since = {authority.ca.cert_pem: START}
    now, switches = START, 0
    while now < START + SHORT.ca_lifetime * 3:
        now += datetime.timedelta(seconds=5)
        previous, authority = authority, plan(authority, now, SHORT)
        for pem in authority.bundle:
            trusted_since.setdefault(pem, now)
        issuer = signer(authority.serving.cert, authority.bundle)
        assert issuer is not None, now
        assert authority.serving.cert.not_valid_after_utc > now
        assert x509.load_pem_x509_certificate(issuer).not_valid_after_utc > now
        if issuer != signer(previous.serving.cert, previous.bundle):
            switches += 1
            assert now - trusted_since[issuer] >= SHORT.publish_grace
    assert switches >= 3


def test_a_shortened_lifetime_takes_effect_on_the_certificates_already_made() -> None:
    authority = made()
    shorter = Policy(POLICY.hosts, ca_lifetime=HOUR, cert_lifetime=HOUR / 2)
    assert plan(authority, START + HOUR * 0.39, shorter) is authority
    renewed = plan(authority, START + HOUR * 0.4, shorter)
    assert renewed.ca == authority.ca and renewed.serving != authority.serving
    assert renewed.serving.cert.not_valid_after_utc == START + HOUR * 0.4 + HOUR / 2
    switched = plan(renewed, START + HOUR * 0.8, shorter)
    assert switched.ca != authority.ca and authority.ca.cert_pem in switched.bundle


def test_a_replica_with_an_overtaken_read_keeps_the_newer_ca_in_the_configuration() -> None:
    """Replica A read the Secret just before replica B renewed the CA and published the new one:
    A's bundle keeps B's CA; a CA older than A's that the Secret no longer trusts (an abandoned
    one) and an expired newer one are dropped."""
    stale, due = fresh_before_ca_renewal()
    fresh = plan(stale, due, POLICY)
    abandoned = made(START - HOUR)
    found = [*fresh.bundle, abandoned.ca.cert_pem]
    assert to_publish(stale, found, due) == (fresh.ca.cert_pem, *stale.bundle)
    assert to_publish(fresh, found, due) == fresh.bundle
    after_expiry = due + POLICY.ca_lifetime
    assert fresh.ca.cert_pem not in to_publish(stale, found, after_expiry)


def test_a_serving_certificate_for_other_hosts_is_replaced() -> None:
    authority = made()
    other = Policy(("elsewhere.example",), POLICY.ca_lifetime, POLICY.cert_lifetime)
    replaced = plan(authority, START + HOUR / 60, other)
    assert hosts_of(replaced.serving.cert) == ["elsewhere.example"]
    assert replaced.ca == authority.ca


def test_a_serving_certificate_no_trusted_ca_signed_is_replaced_at_once() -> None:
    authority, stranger = made(), made()
    planted = Authority(authority.ca, authority.bundle, stranger.serving)
    replaced = plan(planted, START + HOUR / 60, POLICY)
    assert signer(replaced.serving.cert, replaced.bundle) == authority.ca.cert_pem


@pytest.mark.parametrize(
    ("ca", "cert", "message"),
    [(HOUR, 2 * HOUR, "exceeds the CA"), (HOUR, datetime.timedelta(seconds=1), "too short")],
)
def test_the_policy_refuses_lifetimes_that_cannot_work(
    ca: datetime.timedelta, cert: datetime.timedelta, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(("h",), ca_lifetime=ca, cert_lifetime=cert)


def test_a_secret_with_a_key_missing_or_garbage_reads_as_none_and_a_whole_one_round_trips() -> None:
    authority = made()
    pems = {
        "ca.crt": authority.ca.cert_pem,
        "ca.key": authority.ca.key_pem,
        "ca-bundle.crt": authority.bundle_pem,
        "tls.crt": authority.serving.cert_pem,
        "tls.key": authority.serving.key_pem,
    }
    data = {key: base64.b64encode(value).decode() for key, value in pems.items()}
    secret = {"metadata": {"name": "s"}, "data": data}
    assert authority_of(secret) == authority
    assert authority_of(
        {"metadata": {"name": "s"}, "data": {**data, "tls.crt": "Z2FyYmFnZQ=="}}
    ) is (None)
    del data["ca.key"]
    assert authority_of(secret) is None


def test_a_secret_holding_an_rsa_ca_reads_as_none_so_a_new_ca_replaces_it() -> None:
    """A CA another tool left (RSA) crashed the first pass on every start (a crash loop): it is
    unreadable to this keeper, which makes an EC CA of its own."""
    authority = made()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_pem = rsa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pems = {
        "ca.crt": authority.ca.cert_pem,
        "ca.key": rsa_pem,
        "ca-bundle.crt": authority.bundle_pem,
        "tls.crt": authority.serving.cert_pem,
        "tls.key": authority.serving.key_pem,
    }
    data = {key: base64.b64encode(value).decode() for key, value in pems.items()}
    assert authority_of({"metadata": {"name": "s"}, "data": data}) is None
    with pytest.raises(ValueError, match="not an EC key"):
        issue(Pair(authority.ca.cert_pem, rsa_pem), START, Policy(("h",)))


def offline_keeper(tmp_path: Path, clock: FakeClock) -> CertificateKeeper:
    """A keeper with no cluster, for what it decides without one (its waits, its failures)."""
    return CertificateKeeper(
        cast(ApiClient, None),
        namespace="n",
        secret_name="s",
        configuration="c",
        cert_file=tmp_path / "tls.crt",
        key_file=tmp_path / "tls.key",
        policy=Policy(("h",)),
        clock=clock,
    )


async def test_a_keeper_pass_failing_unexpectedly_is_logged_and_retried_never_ending_the_rotation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    keeper = offline_keeper(tmp_path, clock)
    passes = 0

    async def broken() -> bool:
        nonlocal passes
        passes += 1
        raise RuntimeError("a bug")

    keeper.ensure = broken  # type: ignore[method-assign]
    running = asyncio.ensure_future(keeper.run())
    await settle(50)
    await clock.advance(1.0)
    await settle(50)
    await clock.advance(2.0)
    await settle(50)
    assert passes == 3, "retried after 1 s, then 2 s"
    assert not running.done()
    assert "cannot keep the webhook's certificates current" in caplog.text
    running.cancel()


def test_a_keeper_retries_a_failed_pass_after_a_second_doubling_to_30_s_else_waits_its_interval(
    tmp_path: Path,
) -> None:
    keeper = offline_keeper(tmp_path, FakeClock())
    assert [keeper.wait_after(failures) for failures in (0, 1, 2, 3, 6, 40)] == [
        30,
        1,
        2,
        4,
        30,
        30,
    ]


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("15m", 900), ("24h", 86400)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "h", "-5s", "0", "soon"])
def test_a_bad_duration_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def webhook_args(*extra: str) -> list[str]:
    return ["webhook", "--cert-file=/tls/tls.crt", "--key-file=/tls/tls.key", *extra]


def test_the_webhook_flags_give_the_services_names_by_default_and_no_ca_without_a_secret() -> None:
    args = build_parser().parse_args(
        webhook_args("--self-signed-secret=ca", "--namespace=kubevirt", "--ca-lifetime=2d")
    )
    options = self_signed_options(args)
    assert options is not None
    assert options.policy.hosts == (
        "harvester-quota-webhook.kubevirt.svc",
        "harvester-quota-webhook.kubevirt.svc.cluster.local",
    )
    assert (options.secret_name, options.configuration) == ("ca", "harvester-quota")
    assert options.policy.ca_lifetime == datetime.timedelta(days=2)
    assert self_signed_options(build_parser().parse_args(webhook_args())) is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--cert-lifetime=8d",), "exceeds the CA"),
        (("--ca-lifetime=soon",), "not a duration: 'soon'"),
    ],
)
def test_lifetimes_the_policy_refuses_stop_the_webhook_with_a_usage_error(
    flags: tuple[str, ...], message: str
) -> None:
    args = build_parser().parse_args(webhook_args("--self-signed-secret=ca", *flags))
    with pytest.raises(SystemExit, match=message):
        self_signed_options(args)
