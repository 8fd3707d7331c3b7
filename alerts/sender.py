"""The outbox sender: deliver due webhook messages, retry with backoff, dead-letter after the last attempt.

A :class:`Sender` owns a pool of ``MAX_PARALLEL`` request threads. :meth:`Sender.send` claims due rows (one
transaction, committed before any request, so no lock is held while a receiver answers), as many as there are
free threads and never more than ``PER_ENDPOINT`` in flight per endpoint (a receiver's scheme, host and port,
however many subscriptions point at it; counted per sender, so per process), hands each to a thread and
returns at once: one hanging receiver holds at most ``PER_ENDPOINT`` threads, the other receivers keep the
rest, and the next pass does not wait for it (a claimed row is protected by its lease, ``webhook_timeout_s`` +
30 s). Each thread sends its message with the stored body and a fresh signature and records the result in its
own short transaction as soon as the request ends. A 2xx answer delivers; anything else (an error status, a
redirect, a refused connection, a timeout) schedules the next attempt after ``min(backoff * 2**(attempts-1),
backoff_max) * U(0.5, 1.0)`` seconds, and the ``webhook_max_attempts``-th failure marks the row ``dead``.
Every request has ``webhook_timeout_s`` and follows no redirect (a 3xx is a failed attempt whose error names
the location, never a request to it), and its URL is checked where it connects (:mod:`alerts.urls`: the host
resolved once, refused if any address is non-public unless allowed, the connection made to the checked
addresses).

The periodic sender (:mod:`alerts.scheduled`) keeps one :class:`Sender` for the life of the process and adds a
circuit breaker: after ``BREAKER_FAILURES`` consecutive failures of one endpoint, its other due messages wait
(no attempt counted) until the retry time of the last failure, then up to ``PER_ENDPOINT`` messages probe it
again; a success closes the breaker. :func:`send_due` (``driftwarden webhooks send``, tests) attempts every
due message once, under the same caps and without a breaker, and waits for the last. Closing a sender sends
nothing more; requests in flight finish within their timeout and record their result, or, if the process is
gone first, their rows come due again when the lease ends.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx

from alerts import service
from alerts.urls import AddressRule, RefusedURL, Resolver, check_url, system_resolver, webhook_client
from alerts.webhooks import headers
from core.config import Settings, mask_url
from core.database import Database, utcnow

log = logging.getLogger("driftwarden.alerts.sender")

LEASE_MARGIN_S = 30.0  # a claimed row reappears this long after the request's timeout
MAX_ERROR_CHARS = 500
MAX_PARALLEL = 8  # requests in flight per sender
PER_ENDPOINT = 2  # requests in flight per endpoint (scheme, host, port) and sender
CANDIDATES_PER_SLOT = 4  # due rows looked at per free thread (some may be at an endpoint at its cap)
BREAKER_FAILURES = 5  # consecutive failures of one endpoint that make its other messages wait


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


def _post(client: httpx.Client, claim: service.Claim, *, timeout_s: float, rule: AddressRule) -> Attempt:
    sent_at = utcnow()
    deadline = time.monotonic() + timeout_s
    try:  # the client checks where it connects: the host's addresses may have changed since it was subscribed
        check_url(claim.url, rule=rule, resolver=None)
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
                f" (redirect to {mask_url(response.headers.get('location', ''))}: not followed)"
                if response.is_redirect
                else ""
            )
            return Attempt(
                False, response.status_code, f"HTTP {response.status_code}{where}: {text}"[:MAX_ERROR_CHARS]
            )
    except RefusedURL as exc:
        return Attempt(False, None, str(exc)[:MAX_ERROR_CHARS])
    except httpx.TimeoutException as exc:
        return Attempt(False, None, f"timed out after {timeout_s:g}s ({type(exc).__name__})")
    except httpx.HTTPError as exc:
        return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])


def endpoint(url: str) -> str:
    """The receiver a URL reaches, the unit of the per-endpoint cap: ``scheme://host:port``."""
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:  # refused by the URL check before any request; a cap of its own meanwhile
        return url
    port = u.port or (443 if u.scheme == "https" else 80)
    return f"{u.scheme}://{u.host.lower()}:{port}"


@dataclass
class _Breaker:
    failures: int = 0  # consecutive, in the order the requests ended
    open_until: datetime | None = None


class Sender:
    """Sends claimed deliveries on a pool of threads that outlives one pass (see the module docstring).

    ``clock`` (tests) stands for the current time; ``breaker_failures`` 0 turns the breaker off; ``resolver``
    looks host names up (:func:`alerts.urls.system_resolver`; tests give a table).
    """

    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        resolver: Resolver = system_resolver,
        max_parallel: int = MAX_PARALLEL,
        per_endpoint: int = PER_ENDPOINT,
        breaker_failures: int = BREAKER_FAILURES,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.db, self.settings = db, settings
        self.max_parallel, self.per_endpoint = max_parallel, per_endpoint
        self.breaker_failures = breaker_failures
        self._clock = clock
        self._resolver = resolver
        self._client: httpx.Client | None = None  # made at the first claim (its TLS setup takes a while)
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="webhook-sender")
        self._cond = threading.Condition()
        self._busy: Counter[str] = Counter()  # requests in flight by endpoint
        self._breakers: dict[str, _Breaker] = {}
        self._ended = 0  # requests ended so far (wakes :meth:`wait_for_one`)
        self._passing = False
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Requests in flight now."""
        with self._cond:
            return sum(self._busy.values())

    def send(self, *, limit: int = 100, due_by: datetime | None = None) -> int:
        """Claim due deliveries for the free threads (at most ``limit``) and start them; returns how many
        started. Does not wait for them; ``due_by`` (default now) is the due time of the rows to take."""
        with self._cond:
            if self._closed or self._passing:
                return 0
            free = min(limit, self.max_parallel - sum(self._busy.values()))
            if free <= 0:
                return 0
            self._passing = True
            busy = Counter(self._busy)
        try:
            claims = self._claim(free=free, busy=busy, due_by=due_by)
            if not claims:
                return 0
            if self._client is None:
                self._client = webhook_client(settings=self.settings, resolver=self._resolver)
            client = self._client
            with self._cond:
                for c in claims:
                    self._busy[endpoint(c.url)] += 1
                for c in claims:  # the pool is shut down only after this pass (see close)
                    self._pool.submit(self._deliver, c, client)
            return len(claims)
        finally:
            with self._cond:
                self._passing = False
                if self._closed:
                    self._shutdown()

    @property
    def ended(self) -> int:
        """How many requests have ended so far (for :meth:`wait_for_one`'s ``since``)."""
        with self._cond:
            return self._ended

    def wait_for_one(self, timeout: float | None = None, *, since: int | None = None) -> bool:
        """Wait until a request in flight ends; True at once when one ended after the count ``since`` (a
        request may end while a pass that started nothing ran); False when none is in flight (or at
        ``timeout``)."""
        with self._cond:
            ended = self._ended if since is None else since
            if self._ended > ended:
                return True
            if not self._busy.total():
                return False
            return self._cond.wait_for(lambda: self._ended > ended, timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False at ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy.total(), timeout)

    def close(self, timeout: float | None = 0.0) -> None:
        """Start nothing more; wait up to ``timeout`` for the requests in flight (they finish and record
        their result on their own after that, each within ``webhook_timeout_s``)."""
        with self._cond:
            self._closed = True
            if not self._passing:
                self._shutdown()
        if timeout != 0.0:
            self.wait(timeout)

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *_: object) -> None:
        self.close(timeout=None)

    def _shutdown(self) -> None:  # under self._cond
        self._pool.shutdown(wait=False)
        if self._client is not None and not self._busy.total():
            self._client.close()

    def _claim(self, *, free: int, busy: Counter[str], due_by: datetime | None) -> list[service.Claim]:
        now = self._clock()
        lease_s = self.settings.webhook_timeout_s + LEASE_MARGIN_S
        blocked = {key for key, n in busy.items() if n >= self.per_endpoint}
        with self._cond:  # request threads update the breakers
            blocked |= {
                k for k, b in self._breakers.items() if b.open_until is not None and b.open_until > now
            }
        with self.db.session() as session:
            skip: set[str] = set()
            if blocked:
                subscriptions = service.list_subscriptions(session=session, enabled_only=True)
                skip = {s.id for s in subscriptions if endpoint(s.url) in blocked}
            candidates = service.due_candidates(
                session=session,
                due_by=due_by or now,
                limit=free * CANDIDATES_PER_SLOT,
                per_webhook=self.per_endpoint,
                skip_webhooks=skip,
            )
            chosen: list[service.Candidate] = []
            for c in candidates:  # the endpoint's cap across its subscriptions; the rest stay untouched
                key = endpoint(c.url)
                if len(chosen) < free and key not in blocked and busy[key] < self.per_endpoint:
                    busy[key] += 1
                    chosen.append(c)
            return service.claim(
                session=session, candidates=chosen, now=now, lease_s=lease_s, due_by=due_by or now
            )

    def _deliver(self, claim: service.Claim, client: httpx.Client) -> None:
        key = endpoint(claim.url)
        try:
            result = _post(
                client,
                claim,
                timeout_s=self.settings.webhook_timeout_s,
                rule=AddressRule.of(self.settings),
            )
            self._record(claim, key, result)
        except Exception as exc:  # e.g. the database is down: the row comes due again after its lease
            log.warning("webhook delivery %s attempt %d: %s", claim.id, claim.attempt, exc)
        finally:
            with self._cond:
                self._busy[key] -= 1
                if not self._busy[key]:
                    del self._busy[key]
                self._ended += 1
                self._cond.notify_all()
                if self._closed and not self._passing:
                    self._shutdown()

    def _record(self, claim: service.Claim, key: str, result: Attempt) -> None:
        done_at = self._clock()
        wait = timedelta(seconds=backoff_s(settings=self.settings, attempts=claim.attempt))
        retry_at: datetime | None = None
        if not result.delivered and claim.attempt < self.settings.webhook_max_attempts:
            retry_at = done_at + wait
        with self.db.session() as session:
            kept = service.finish_attempt(
                session=session,
                claim=claim,
                now=done_at,
                delivered=result.delivered,
                status_code=result.status_code,
                error=result.error,
                retry_at=retry_at,
            )
        if self.breaker_failures > 0:
            with self._cond:
                breaker = self._breakers.setdefault(key, _Breaker())
                if result.delivered:
                    del self._breakers[key]
                else:
                    breaker.failures += 1
                    if breaker.failures >= self.breaker_failures:
                        breaker.open_until = retry_at or done_at + wait
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


def send_due(
    *,
    db: Database,
    settings: Settings,
    limit: int = 100,
    now: datetime | None = None,
    resolver: Resolver = system_resolver,
) -> int:
    """Attempt every due delivery once (at most ``limit``) and wait for the last; returns how many were
    attempted.

    Under the caps of :class:`Sender` (no breaker): a freed thread takes the next due message at once.
    ``now`` (tests) stands for the current time when choosing what is due and when to retry; ``resolver``
    looks host names up.
    """
    due_by = now or utcnow()  # fixed for the call: a message that failed in it is not due again in it
    clock = (lambda: now) if now is not None else utcnow
    total = 0
    with Sender(db=db, settings=settings, resolver=resolver, breaker_failures=0, clock=clock) as sender:
        while total < limit:
            before = sender.ended
            started = sender.send(limit=limit - total, due_by=due_by)
            total += started
            # the requests in flight may all end during a pass that found their endpoints at the cap and
            # started nothing: their ends count, or the call would stop with due messages left
            if not sender.wait_for_one(since=before) and not started:
                break
    return total
