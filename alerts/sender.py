"""The outbox sender: deliver due webhook messages, retry with backoff, dead-letter after the last attempt.

:func:`send_due` claims due rows (one transaction, committed before any request, so no lock is held
while a receiver answers), sends each with its stored body and a fresh signature, then records each
result in its own short transaction. A 2xx answer delivers; anything else (an error status, a redirect,
a refused connection, a timeout) schedules the next attempt after
``min(backoff * 2**(attempts-1), backoff_max) * U(0.5, 1.0)`` seconds, and the ``webhook_max_attempts``-th
failure marks the row ``dead``. Every request has ``webhook_timeout_s`` and follows no redirect, and its
URL is checked first (:mod:`alerts.urls`: no private address unless allowed); the messages of one call
are sent in parallel, so one hanging receiver delays no other.
"""

from __future__ import annotations

import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx

from alerts import service
from alerts.models import utcnow
from alerts.urls import RefusedURL, check_url
from alerts.webhooks import headers
from core.config import Settings
from core.database import Database

log = logging.getLogger("driftwarden.alerts.sender")

LEASE_MARGIN_S = 30.0  # a claimed row reappears this long after the request's timeout
MAX_ERROR_CHARS = 500
MAX_PARALLEL = 8


@dataclass(frozen=True)
class Attempt:
    """The result of one request."""

    delivered: bool
    status_code: int | None
    error: str | None


def backoff_s(*, settings: Settings, attempts: int, rng: random.Random | None = None) -> float:
    """The wait before the next attempt after ``attempts`` failed ones (jittered in [0.5, 1.0])."""
    base = min(settings.webhook_backoff_s * 2 ** max(attempts - 1, 0), settings.webhook_backoff_max_s)
    return base * (rng or random).uniform(0.5, 1.0)


def _post(client: httpx.Client, claim: service.Claim, *, timeout_s: float, allow_private: bool) -> Attempt:
    try:  # again at every delivery: the host's addresses may have changed since it was subscribed
        check_url(claim.url, allow_private=allow_private, resolve=True)
    except RefusedURL as exc:
        return Attempt(False, None, str(exc)[:MAX_ERROR_CHARS])
    sent_at = utcnow()
    deadline = time.monotonic() + timeout_s
    try:
        with client.stream(
            "POST",
            claim.url,
            content=claim.payload.encode(),
            headers=headers(secret=claim.secret, msg_id=claim.id, at=sent_at, body=claim.payload),
        ) as response:
            seen = b""
            for chunk in response.iter_bytes():  # a receiver trickling its answer still ends at the deadline
                if len(seen) < MAX_ERROR_CHARS:
                    seen += chunk[: MAX_ERROR_CHARS - len(seen)]
                if time.monotonic() > deadline:
                    break
            if 200 <= response.status_code < 300:
                return Attempt(True, response.status_code, None)
            text = seen.decode(errors="replace").strip()
            where = (
                f" (redirect to {response.headers.get('location')}: not followed)"
                if response.is_redirect
                else ""
            )
            return Attempt(
                False, response.status_code, f"HTTP {response.status_code}{where}: {text}"[:MAX_ERROR_CHARS]
            )
    except httpx.TimeoutException as exc:
        return Attempt(False, None, f"timed out after {timeout_s:g}s ({type(exc).__name__})")
    except httpx.HTTPError as exc:
        return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])


def send_due(
    *,
    db: Database,
    settings: Settings,
    limit: int = 100,
    now: datetime | None = None,
    client: httpx.Client | None = None,
) -> int:
    """Attempt every due delivery (at most ``limit``); returns how many were attempted.

    ``now`` (tests) stands for the current time when choosing what is due and when to retry.
    """
    at = now or utcnow()
    lease_s = settings.webhook_timeout_s + LEASE_MARGIN_S
    with db.session() as session:
        claims = service.claim_due(session=session, now=at, limit=limit, lease_s=lease_s)
    if not claims:
        return 0
    own = client is None
    http = client or httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False)
    try:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(claims))) as pool:
            results = list(
                pool.map(
                    lambda c: _post(
                        http,
                        c,
                        timeout_s=settings.webhook_timeout_s,
                        allow_private=settings.webhook_allow_private_urls,
                    ),
                    claims,
                )
            )
    finally:
        if own:
            http.close()
    done_at = now or utcnow()
    for claim, result in zip(claims, results, strict=True):
        retry_at: datetime | None = None
        if not result.delivered and claim.attempt < settings.webhook_max_attempts:
            retry_at = done_at + timedelta(seconds=backoff_s(settings=settings, attempts=claim.attempt))
        with db.session() as session:
            kept = service.finish_attempt(
                session=session,
                claim=claim,
                now=done_at,
                delivered=result.delivered,
                status_code=result.status_code,
                error=result.error,
                retry_at=retry_at,
            )
        if not kept:
            log.info("webhook delivery %s was taken over by another sender meanwhile", claim.id)
        elif not result.delivered:
            log.log(
                logging.WARNING if retry_at is None else logging.INFO,
                "webhook delivery %s attempt %d failed: %s; %s",
                claim.id,
                claim.attempt,
                result.error,
                "dead-lettered" if retry_at is None else f"next attempt at {retry_at.isoformat()}",
            )
    return len(claims)
