"""Fairness of the outbox sender against real receivers on loopback: a hanging receiver holds at most its cap
of requests and delays no other receiver, not even across passes; no endpoint ever serves more than its cap
at once (counted by the receiver); an endpoint that keeps failing trips a breaker that holds its other
messages back without counting attempts; closing a sender leaves the request in flight to finish."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from alerts.scheduled import start_sender
from alerts.sender import BREAKER_FAILURES, PER_ENDPOINT, Sender, send_due
from alerts.webhooks import new_secret
from core.database import Database, aware, utcnow
from core.runtime import Runtime
from tests.alerts.receiver import Receiver
from tests.alerts.webhookdata import deliveries, queue_messages, settings_for, subscribe

TIMEOUT_S = 4.0  # the hanging receiver's requests end after this; generous for a loaded 2-core machine


def _wait(what: str, condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_hanging_receiver_holds_its_cap_and_delays_no_other_receiver(db: Database) -> None:
    secret = new_secret()
    settings = settings_for(
        db,
        webhook_timeout_s=TIMEOUT_S,
        webhook_backoff_s=0.2,
        webhook_backoff_max_s=1.0,
        webhook_max_attempts=100,
        webhook_send_interval_s=0.05,
    )
    with Receiver(secret, mode="hang") as hang, Receiver(secret) as healthy:
        # the hanging receiver's messages are older: due first, and many more than the sender's threads
        hung = queue_messages(db, subscribe(db, hang.url, secret), 20, utcnow() - timedelta(minutes=1))
        fine = queue_messages(db, subscribe(db, healthy.url, secret), 5, utcnow())
        late: list[str] = []

        async def run() -> None:  # the production path: the periodic job, passes every 0.05 s
            task = start_sender(Runtime(settings=settings, db=db))
            assert task is not None
            try:
                await asyncio.to_thread(_wait, "the healthy messages", lambda: len(healthy.accepted) == 5, 30)
                assert hang.in_flight >= 1, "the hanging receiver holds requests meanwhile"
                # a new message while the hanging requests are in flight: the next passes take it at once
                late.extend(queue_messages(db, subscribe(db, healthy.url, secret), 1, utcnow()))
                await asyncio.to_thread(_wait, "the late message", lambda: len(healthy.accepted) == 6, 30)
                # the hanging requests time out, are recorded, and their threads take more of its messages
                await asyncio.to_thread(_wait, "more hanging requests", lambda: len(hang.requests) > 4, 60)
                hang.mode = "ok"
                hang.release.set()
                await asyncio.to_thread(
                    _wait,
                    "every message delivered",
                    lambda: all(d.state == "delivered" for d in deliveries(db).values()),
                    120,
                )
            finally:
                task.cancel()

        asyncio.run(run())

    first_hang = min(r.arrived for r in hang.requests)
    healthy_times = sorted(r.arrived - first_hang for r in healthy.requests)
    assert len(healthy_times) == 6
    assert healthy_times[-1] < TIMEOUT_S, (
        f"healthy messages arrived {healthy_times} s after the first hanging request, which times out "
        f"after {TIMEOUT_S} s"
    )
    early = [r for r in hang.requests if r.arrived - first_hang < TIMEOUT_S - 0.5]
    assert len(early) == PER_ENDPOINT, "before its first timeout the hanging receiver holds exactly its cap"
    # every message of both receivers accepted exactly once, and one attempt counted per request seen
    assert sorted(r.msg_id for r in hang.accepted) == sorted(hung)
    assert sorted(r.msg_id for r in healthy.accepted) == sorted(fine + late)
    seen = Counter(r.msg_id for r in [*hang.requests, *healthy.requests])
    rows = deliveries(db)
    assert {i: rows[i].attempts for i in hung + fine + late} == {i: seen[i] for i in hung + fine + late}
    assert any(seen[i] >= 2 for i in hung), "some hanging messages timed out and were retried"
    assert all(seen[i] == 1 for i in fine + late)


def test_no_endpoint_serves_more_than_its_cap_at_once(db: Database) -> None:
    secret = new_secret()
    settings = settings_for(db)
    with Receiver(secret, mode="slow") as shared, Receiver(secret, mode="slow") as other:
        # two subscriptions to one receiver: one endpoint, one cap
        ids = queue_messages(db, subscribe(db, shared.url, secret), 6, utcnow())
        ids += queue_messages(db, subscribe(db, shared.url, secret), 6, utcnow())
        others = queue_messages(db, subscribe(db, other.url, secret), 6, utcnow())
        assert send_due(db=db, settings=settings) == 18
    assert shared.max_in_flight == PER_ENDPOINT  # the cap, and used to the full
    assert other.max_in_flight == PER_ENDPOINT
    assert sorted(r.msg_id for r in shared.requests) == sorted(ids)  # each sent once
    assert sorted(r.msg_id for r in other.requests) == sorted(others)
    rows = deliveries(db)
    assert all((d.state, d.attempts) == ("delivered", 1) for d in rows.values())


def test_an_endpoint_that_keeps_failing_trips_a_breaker_others_go_on(db: Database) -> None:
    secret = new_secret()
    settings = settings_for(db, webhook_backoff_s=60.0, webhook_backoff_max_s=60.0)
    t = utcnow()
    now = [t]
    with Receiver(secret, mode="error") as broken, Receiver(secret) as healthy:
        failing = queue_messages(db, subscribe(db, broken.url, secret), 12, t)
        fine = queue_messages(db, subscribe(db, healthy.url, secret), 4, t)
        with Sender(db=db, settings=settings, clock=lambda: now[0]) as sender:

            def drain() -> int:
                total = 0
                for _ in range(50):
                    n = sender.send()
                    sender.wait(30)
                    if n == 0:
                        break
                    total += n
                return total

            drain()
            tried = [i for i in failing if any(r.msg_id == i for r in broken.requests)]
            # it opened at the BREAKER_FAILURES-th failure; what was in flight then still ended
            assert BREAKER_FAILURES <= len(broken.requests) <= BREAKER_FAILURES + PER_ENDPOINT - 1
            assert len(tried) == len(broken.requests)
            assert sorted(r.msg_id for r in healthy.accepted) == sorted(fine)  # the other endpoint goes on
            rows = deliveries(db)
            held = [i for i in failing if i not in tried]
            assert all((rows[i].state, rows[i].attempts) == ("pending", 0) for i in held)  # not counted
            assert all(rows[i].attempts == 1 and rows[i].last_status_code == 500 for i in tried)

            now[0] = t + timedelta(seconds=20)  # before the last failure's retry time (30-60 s)
            assert drain() == 0 and len(broken.requests) == len(tried)

            broken.mode = "ok"
            retry_times = [aware(rows[i].next_attempt_at) for i in tried]
            now[0] = max(r for r in retry_times if isinstance(r, datetime)) + timedelta(seconds=1)
            assert drain() == 12  # the probes succeed, the breaker closes, everything goes
    rows = deliveries(db)
    assert all(d.state == "delivered" for d in rows.values())
    assert sorted(r.msg_id for r in broken.accepted) == sorted(failing)  # each accepted once
    assert {i: rows[i].attempts for i in failing} == {i: 2 if i in tried else 1 for i in failing}


def test_closing_a_sender_leaves_the_request_in_flight_to_finish_and_record(db: Database) -> None:
    secret = new_secret()
    settings = settings_for(db, webhook_timeout_s=1.0)
    with Receiver(secret, mode="hang") as hang:
        (msg,) = queue_messages(db, subscribe(db, hang.url, secret), 1, utcnow())
        queue_messages(db, subscribe(db, hang.url, secret), 1, utcnow() + timedelta(hours=1))
        sender = Sender(db=db, settings=settings)
        assert sender.send() == 1
        _wait("the request", lambda: len(hang.requests) == 1, 10)
        started = time.monotonic()
        sender.close()
        assert time.monotonic() - started < 0.5  # closing does not wait for a hanging receiver
        assert sender.send(due_by=utcnow() + timedelta(hours=2)) == 0  # closed: nothing new starts
        assert sender.wait(30)
    d = deliveries(db)[msg]
    assert (d.state, d.attempts) == ("pending", 1) and "timed out after 1s" in (d.last_error or "")
    assert len(hang.requests) == 1
