"""The webhook's self-managed certificates (`harvester-quota webhook --self-signed-secret`): every
replica keeps the CA Secret, the webhook configuration's caBundle and its own serving files in
step, with the API server as the only arbiter (CertificateKeeper).

Any replica may create or renew: the Secret is created only if absent (AlreadyExists: another
replica won, its CA is used) and updated only at the resourceVersion it was read at (Conflict:
read again), so concurrent replicas converge on one CA. What to hold is decided by
selfsigned.plan. The caBundle of every webhook in the configuration, which is patched by name
and only there (RBAC resourceNames), is set to the Secret's bundle, read fresh in the same pass,
keeping any newer CA another replica put there (selfsigned.to_publish);
a replica serves the Secret's certificate only once that bundle is in the configuration (or when
it has nothing to serve yet), then reloads its TLS context for new connections, leaving
connections already open untouched (ReloadingTLS).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ..generic import errors
from ..generic.client import ApiClient
from ..generic.clock import Clock
from ..generic.resource import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Object
from .selfsigned import Authority, Pair, Policy, plan, split_bundle, to_publish

log = logging.getLogger(__name__)

CA_CERT, CA_KEY, BUNDLE, TLS_CERT, TLS_KEY = (
    "ca.crt",
    "ca.key",
    "ca-bundle.crt",
    "tls.crt",
    "tls.key",
)
"""The Secret's keys."""

WRITE_ATTEMPTS = 3
"""Reads and writes of the Secret in one pass before it waits for the next (another replica
winning each time is unlikely past the second)."""

RETRY_FIRST = 1.0
"""Seconds before the first retry of a failed pass (at most the policy's interval)."""

MAX_BACKOFF = 30.0
"""Longest wait between passes after failures (each failure doubles the wait)."""


class CertificateKeeper:
    """Keeps the Secret `secret_name` in `namespace`, the caBundle of the webhook configuration
    `configuration` and the serving files `cert_file`/`key_file` current under `policy`, on
    `clock`. `changed` is called after the files were rewritten (reload the TLS context).

    Not concurrent with itself: one `run` (or `ensure`) at a time per instance."""

    def __init__(
        self,
        client: ApiClient,
        *,
        namespace: str,
        secret_name: str,
        configuration: str,
        cert_file: Path,
        key_file: Path,
        policy: Policy,
        clock: Clock,
        changed: Callable[[], object] | None = None,
    ) -> None:
        self.client, self.namespace, self.secret_name = client, namespace, secret_name
        self.configuration, self.policy, self.clock = configuration, policy, clock
        self.cert_file, self.key_file, self.changed = cert_file, key_file, changed
        self.served: Pair | None = None
        self.published = False
        """Whether the last pass found the configuration holding the Secret's bundle."""

    async def first(self) -> None:
        """Passes until one succeeds (the serving files exist then), logging each failure and
        waiting as `run` does between failures: the server cannot listen before."""
        failures = 0
        while not await self._pass("cannot make the webhook's serving certificate yet"):
            failures += 1
            await self.clock.sleep(self.wait_after(failures))

    def wait_after(self, failures: int) -> float:
        """The policy's interval; after failures (or a configuration without the bundle, as
        when it is applied after the pods), RETRY_FIRST doubling up to MAX_BACKOFF."""
        interval = self.policy.check_interval
        if not failures:
            return interval
        return min(MAX_BACKOFF, min(interval, RETRY_FIRST) * 2.0 ** min(failures - 1, 8))

    async def run(self) -> None:
        """Passes forever, every policy.check_interval; a failed pass, or one that found the
        configuration without the bundle, is retried after a doubling wait (at most
        MAX_BACKOFF)."""
        failures = 0
        while True:
            done = await self._pass("cannot keep the webhook's certificates current")
            failures = 0 if done and self.published else failures + 1
            await self.clock.sleep(self.wait_after(failures))

    async def _pass(self, failing: str) -> bool:
        """One `ensure`; False if it failed, logged under `failing`. Any error is logged and
        retried by the caller, never raised: the rotation must not end quietly, nor the first
        pass become a crash loop. Cancellation propagates."""
        try:
            await self.ensure()
        except asyncio.CancelledError:
            raise
        except (errors.ApiError, OSError, ValueError) as error:
            log.error("%s: %s", failing, error)
            return False
        except Exception:
            log.exception("%s", failing)
            return False
        return True

    async def ensure(self) -> bool:
        """One pass: the Secret as plan says, its bundle in the configuration, then its serving
        pair in the files. True if the files were rewritten."""
        authority = await self._settle_secret()
        published = self.published = await self.publish(authority)
        if authority.serving == self.served:
            return False
        if not published and self.served is not None:
            log.warning("serving certificate not switched: its CA is not yet in the configuration")
            return False
        self._write(authority.serving)
        return True

    async def _settle_secret(self) -> Authority:
        for _ in range(WRITE_ATTEMPTS):
            secret = await self._read()
            current = authority_of(secret) if secret is not None else None
            wanted = plan(current, self.clock.now(), self.policy)
            if wanted is current:
                assert wanted is not None
                return wanted
            try:
                await self._write_secret(secret, wanted)
            except (errors.AlreadyExists, errors.Conflict):
                continue  # another replica wrote first: read what it wrote
            log.info("webhook certificates: %s", "; ".join(wanted.notes))
            return wanted
        raise errors.ApiError(f"Secret {self.secret_name} kept changing under this replica")

    async def _read(self) -> Object | None:
        try:
            return await self.client.get(SECRETS, self.secret_name, self.namespace)
        except errors.NotFound:
            return None

    async def _write_secret(self, secret: Object | None, authority: Authority) -> None:
        data = _encoded(authority)
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret_name, "namespace": self.namespace},
                "type": "Opaque",
                "data": data,
            }
            await self.client.create(SECRETS, body)
            return
        await self.client.update(SECRETS, {**secret, "data": data})

    async def publish(self, authority: Authority) -> bool:
        """Sets every webhook's caBundle in the configuration to `authority`'s bundle (with any
        newer CA already there: selfsigned.to_publish), at the resourceVersion read (a
        concurrent change fails the patch, retried next pass). True if it holds it now."""
        try:
            configuration = await self.client.get(
                VALIDATING_WEBHOOK_CONFIGURATIONS, self.configuration
            )
        except errors.NotFound:
            log.warning("webhook configuration %s not found: caBundle not set", self.configuration)
            return False
        webhooks = configuration.get("webhooks") or []
        found = [pem for webhook in webhooks for pem in _bundle_of(webhook)]
        bundle = b"".join(to_publish(authority, found, self.clock.now()))
        encoded = base64.b64encode(bundle).decode()
        metadata = configuration["metadata"]
        operations: list[dict[str, Any]] = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": metadata["resourceVersion"],
            }
        ]
        for index, webhook in enumerate(webhooks):
            if (webhook.get("clientConfig") or {}).get("caBundle") != encoded:
                path = f"/webhooks/{index}/clientConfig/caBundle"
                operations.append({"op": "add", "path": path, "value": encoded})
        if len(operations) == 1:
            return True
        await self.client.patch(
            VALIDATING_WEBHOOK_CONFIGURATIONS, self.configuration, operations, patch_type="json"
        )
        log.info("caBundle of %s set (%d webhooks)", self.configuration, len(operations) - 1)
        return True

    def _write(self, serving: Pair) -> None:
        _replace(self.key_file, serving.key_pem)
        _replace(self.cert_file, serving.cert_pem)
        self.served = serving
        if self.changed is not None:
            self.changed()


def authority_of(secret: Object) -> Authority | None:
    """The Secret's content, or None (logged) if anything in it is missing or unreadable: a new
    CA is then made, as for a Secret not there."""
    data = secret.get("data") or {}
    try:
        decoded = {key: base64.b64decode(data[key]) for key in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)}
        bundle = split_bundle(base64.b64decode(data.get(BUNDLE) or ""))
        authority = Authority(
            Pair(decoded[CA_CERT], decoded[CA_KEY]),
            bundle,
            Pair(decoded[TLS_CERT], decoded[TLS_KEY]),
        )
        authority.ca.cert, authority.serving.cert  # noqa: B018 - parsed to check them
        _check_ec_key(authority.ca.key_pem)
    except (KeyError, ValueError, TypeError) as error:
        if data:
            name = secret["metadata"].get("name")
            log.error("Secret %s unreadable, a new CA replaces it: %s", name, error)
        return None
    return authority


def _check_ec_key(key_pem: bytes) -> None:
    """ValueError unless `key_pem` is an EC private key, the only kind of CA this keeper signs
    with (a Secret left by another tool, with an RSA CA, is made anew rather than crash)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"its CA key is {type(key).__name__}, not EC")


def _bundle_of(webhook: Object) -> tuple[bytes, ...]:
    """The CAs (PEM) of one webhook's caBundle (none if it has none or it is not base64)."""
    encoded = (webhook.get("clientConfig") or {}).get("caBundle") or ""
    try:
        return split_bundle(base64.b64decode(encoded))
    except ValueError:
        return ()


def _encoded(authority: Authority) -> dict[str, str]:
    raw = {
        CA_CERT: authority.ca.cert_pem,
        CA_KEY: authority.ca.key_pem,
        BUNDLE: authority.bundle_pem,
        TLS_CERT: authority.serving.cert_pem,
        TLS_KEY: authority.serving.key_pem,
    }
    return {key: base64.b64encode(value).decode() for key, value in raw.items()}


def _replace(path: Path, content: bytes) -> None:
    """Writes `content` to `path` through a rename, so a reader sees the old or the new file,
    never a part (owner-readable only)."""
    temporary = path.with_name(f".{path.name}.new")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(content)
    os.replace(temporary, path)


@dataclass(frozen=True)
class SelfSigned:
    """The webhook's self-managed certificates: the Secret they live in (in the webhook's
    namespace), the webhook configuration whose caBundle follows them, and their policy."""

    secret_name: str
    configuration: str
    policy: Policy


def parse_duration(text: str) -> datetime.timedelta:
    """ "90s", "15m", "24h", "7d" or plain seconds, as a timedelta; ValueError naming `text`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 15m, 24h, 7d)") from None
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return datetime.timedelta(seconds=seconds)
