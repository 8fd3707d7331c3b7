"""Webhook receivers that hang, answer 500 or are down, while the serving process is under load.

tests/alerts/test_webhooks.py proves the outbox semantics on ``send_due`` called directly (retries until
accepted exactly once, a hang costs one timeout). Here the sender runs inside a live server, as in
production, with messages queued for three broken receivers at once: the median latency of predictions
stays what it was without them (generously: a sender on the event loop would add its timeouts to requests),
every request is answered, and once the receivers recover every message is delivered, each accepted once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts import flows, service
from alerts.specs import WebhookSpec
from alerts.webhooks import new_secret
from core.database import Database, utcnow
from tests.alerts.receiver import Receiver
from tests.faults.conftest import Load, wait_until
from tests.support import Server, TrainedModels, postgres_schema, seed_registry, serve_settings

pytestmark = pytest.mark.postgres  # the shared PostgreSQL at 127.0.0.1:5432

MESSAGES = 15  # per receiver


def _queue(db: Database, url: str, secret: str) -> set[str]:
    with db.session() as s:
        hook = flows.add_webhook(session=s, spec=WebhookSpec(url=url, secret=secret)).id
        at = utcnow()
        return {
            service.add_delivery(
                session=s,
                webhook_id=hook,
                event_type="alert.firing",
                payload=f'{{"type":"alert.firing","timestamp":"{at.isoformat()}","data":{{"n":{i}}}}}',
                now=at,
            ).id
            for i in range(MESSAGES)
        }


def _states(db: Database) -> dict[str, str]:
    with db.session() as s:
        return {d.id: d.state for d in service.list_deliveries(session=s, limit=1000)}


def _attempts(db: Database) -> dict[str, int]:
    with db.session() as s:
        return {d.id: d.attempts for d in service.list_deliveries(session=s, limit=1000)}


def _p50_under_load(
    srv: Server, trained: TrainedModels, seconds: float, tag: str, until: Callable[[], bool] = lambda: True
) -> tuple[float, Load]:
    """The median latency of predictions over at least ``seconds`` of load, and until ``until()`` holds."""
    with Load(srv.url, trained.rows, threads=2, tag=tag) as load:
        time.sleep(seconds)
        wait_until(f"{tag}: the condition of the window", until, 60, 0.2)
    assert load.failures == [], load.failures[:3]
    return load.p50_s(), load


def test_broken_receivers_cost_serving_nothing_and_get_everything_once_back(
    postgres_url: str, trained: TrainedModels, tmp_path: Path
) -> None:
    secret = new_secret()
    with postgres_schema(postgres_url) as url:
        seed_registry(url, trained, serving=1)
        settings = serve_settings(
            url,
            tmp_path / "spool",
            monitor_enabled=False,
            webhook_send_interval_s=0.2,
            webhook_timeout_s=1.0,
            webhook_backoff_s=0.2,
            webhook_backoff_max_s=1.0,
            webhook_max_attempts=100,
        )
        with (
            Server(settings) as srv,
            Receiver(secret, mode="hang") as hang,
            Receiver(secret, mode="error") as error,
            Receiver(secret) as down,
        ):
            db = srv.state.db
            _p50_under_load(srv, trained, 1.0, "warm-up")
            base, base_load = _p50_under_load(srv, trained, 3.0, "no-webhooks")
            down.stop()  # connection refused
            queued = {
                "hang": _queue(db, hang.url, secret),
                "error": _queue(db, error.url, secret),
                "down": _queue(db, down.url, secret),
            }
            # the window lasts until the sender has tried every message at least once and the broken
            # receivers have seen them (a hanging receiver holds up to PER_ENDPOINT = 2 attempts for
            # webhook_timeout_s each, and a receiver that keeps failing trips the sender's breaker until its
            # next retry time, so this takes a few passes; an attempt is counted when it is claimed,
            # before its request goes out, so the receivers' own counts close the window)
            faulty, faulty_load = _p50_under_load(
                srv,
                trained,
                3.0,
                "broken-receivers",
                lambda: (
                    min(_attempts(db).values()) >= 1
                    and len(hang.requests) >= 1
                    and len(error.requests) >= MESSAGES
                ),
            )
            assert len(hang.requests) >= 1 and len(error.requests) >= MESSAGES
            assert set(_states(db).values()) == {"pending"}

            hang.release.set()  # every receiver recovers
            hang.mode = error.mode = "ok"
            down.start()
            took = wait_until(
                "every message delivered", lambda: set(_states(db).values()) == {"delivered"}, 60, 0.2
            )
    print(
        f"\nprediction p50: {base * 1000:.2f} ms without webhooks ({len(base_load.latencies)} requests), "
        f"{faulty * 1000:.2f} ms with three broken receivers ({len(faulty_load.latencies)} requests); "
        f"all {3 * MESSAGES} delivered {took:.1f}s after recovery"
    )
    assert faulty <= max(3 * base, base + 0.05)  # generous: a blocked event loop costs a 1 s timeout
    for name, receiver in (("hang", hang), ("error", error), ("down", down)):
        accepted = [r.msg_id for r in receiver.accepted]
        assert sorted(accepted) == sorted(queued[name]), name  # each message accepted exactly once
