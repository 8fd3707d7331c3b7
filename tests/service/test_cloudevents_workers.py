"""``driftwarden serve --workers 2`` on PostgreSQL: KServe's halves reach whichever worker accepts them.

Eight clients send 80 inferences, every half on a connection of its own (so the kernel hands the halves of
one inference to either worker, in either order, at the same moment as other pairs): each inference is one
log row, answered ``logged`` exactly once and ``waiting`` exactly once, whichever process kept its first half.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from core.network import free_port
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.support import ADMIN_TOKEN, auth, postgres_schema, wait_http_ready

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "driftwarden")
PAIRS = 80


def _message(kind: str, event_id: str, body: Any) -> tuple[bytes, dict[str, str]]:
    return own_models.kserve_message(kind, event_id, body, model="ce_workers")


def test_pairs_split_across_two_workers_are_logged_once(postgres_url: str, tmp_path: Path) -> None:
    with postgres_schema(postgres_url) as url:
        registry = own_models.register_served_elsewhere(url, tmp_path, {"ce_workers": "binary"})
        port = free_port()
        env = {
            **os.environ,
            "DRIFTWARDEN_DATABASE_URL": url,
            "DRIFTWARDEN_REGISTRY_PATH": str(registry),
            "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
            "DRIFTWARDEN_MONITOR_ENABLED": "false",
            "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
            "DRIFTWARDEN_LOG_LEVEL": "WARNING",
            "DRIFTWARDEN_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [CLI, "serve", "--workers", "2", "--port", str(port)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http_ready(f"{base}/readyz", log=log, deadline=time.monotonic() + 120, proc=proc)
            data = own_models.reference(3, seed=7)
            rows = own_models.feature_rows(data)
            probs = [float(p) for p in own_models.answers("binary", data)]
            halves = []
            for k in range(PAIRS):
                event_id = str(uuid.uuid4())
                request = _message(REQUEST_TYPE, event_id, {"instances": rows})
                response = _message(RESPONSE_TYPE, event_id, {"predictions": probs})
                halves += (
                    [(event_id, request), (event_id, response)]
                    if k % 2
                    else [(event_id, response), (event_id, request)]
                )

            def send(half: tuple[str, tuple[bytes, dict[str, str]]]) -> tuple[str, str]:
                event_id, (body, headers) = half
                with httpx.Client(base_url=base, timeout=60, headers=auth()) as c:  # a connection of its own
                    r = c.post("/v1/cloudevents", content=body, headers=headers)
                assert r.status_code == 200, r.text
                return event_id, str(r.json()["outcome"])

            with ThreadPoolExecutor(8) as pool:
                answered = list(pool.map(send, halves))
        finally:
            proc.terminate()
            proc.wait(60)
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                logged = conn.execute(
                    text("select request_id, size from prediction_batches where model_name = 'ce_workers'")
                ).all()
        finally:
            engine.dispose()
    by_event: dict[str, list[str]] = {}
    for event_id, outcome in answered:
        by_event.setdefault(event_id, []).append(outcome)
    assert len(by_event) == PAIRS
    assert all(sorted(outcomes) == ["logged", "waiting"] for outcomes in by_event.values()), by_event
    assert sorted(r[0] for r in logged) == sorted(by_event) and {r[1] for r in logged} == {3}
