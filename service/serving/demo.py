"""The serving step of ``driftwarden demo``: start the real server, send traffic over both protocols.

``run_serving_demo`` starts uvicorn on a free loopback port in a background thread, sends predictions
over TF Serving REST (row and columnar) and Open Inference Protocol v2, shows a contract violation,
posts ground truth for some predictions, stops the server gracefully (the log is flushed) and returns
what happened, so the tour can print it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from core.config import Settings
from core.network import free_port


@dataclass(frozen=True)
class ServingDemoResult:
    """What the serving step did."""

    url: str
    version: str
    v1_rows: int
    v2_rows: int
    rejected_error: str
    labels_stored: int
    logged_rows: int
    rows_dropped: int


@contextmanager
def running_server(*, settings: Settings, port: int | None = None) -> Iterator[str]:
    """The real app under uvicorn on a loopback port, in a thread; yields its URL, stops gracefully."""
    import uvicorn

    from service.serving.app import create_app

    app = create_app(settings)
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="demo-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


def with_demo_token(settings: Settings) -> tuple[Settings, dict[str, str]]:
    """The demo's server with an admin token (a one-off one unless set) and the header its client sends."""
    token = settings.admin_token.get_secret_value() if settings.admin_token else secrets.token_urlsafe(32)
    return settings.model_copy(update={"admin_token": SecretStr(token)}), {"Authorization": f"Bearer {token}"}


def run_serving_demo(
    *,
    settings: Settings,
    model: str,
    rows: list[dict[str, Any]],
    say: Callable[[str], None] = print,
    port: int | None = None,
) -> ServingDemoResult:
    """Serve ``model`` (its serving version must be promoted), send ``rows`` through both protocols."""
    settings, headers = with_demo_token(settings)
    with running_server(settings=settings, port=port) as url:
        say(f"  serving at {url} (docs at {url}/docs)")
        with httpx.Client(base_url=url, timeout=30, headers=headers) as c:
            half = max(1, len(rows) // 2)
            v1 = c.post(f"/v1/models/{model}:predict", json={"instances": rows[:half]})
            v1.raise_for_status()
            body = v1.json()
            say(
                f"  TF Serving REST  POST /v1/models/{model}:predict  {half} rows -> "
                f"version {body['model_version']}, first probability {body['predictions'][0]:.4f}, "
                f"id {body['prediction_ids'][0]}"
            )
            tensors = [
                {
                    "name": k,
                    "shape": [len(rows) - half],
                    "datatype": "BYTES" if isinstance(rows[0][k], str) else "FP32",
                    "data": [r[k] for r in rows[half:]],
                }
                for k in rows[0]
            ]
            v2 = c.post(f"/v2/models/{model}/infer", json={"id": "demo", "inputs": tensors})
            v2.raise_for_status()
            out = v2.json()["outputs"][0]
            say(
                f"  OIP v2           POST /v2/models/{model}/infer  {len(rows) - half} rows -> "
                f"{out['name']} {out['datatype']} of shape {' x '.join(map(str, out['shape']))}"
            )
            bad = dict(rows[0], income=-1.0)
            rejected = c.post(f"/v1/models/{model}:predict", json={"instances": [rows[0], bad]})
            say(f"  a bad row        -> HTTP {rejected.status_code}: {rejected.json().get('error')}")
            labels = [{"prediction_id": pid, "label": 1} for pid in body["prediction_ids"][:5]]
            labels.append({"prediction_id": "00000000-0000-7000-8000-000000000000", "label": 0})
            fb = c.post(f"/v1/models/{model}/feedback", json={"labels": labels}).json()
            unknown = len(fb["unknown_ids"])
            say(f"  feedback         -> stored {fb['stored']}, {unknown} unknown id(s) reported back")
            status = c.get("/status").json()["prediction_log"]
    from core.database import open_database
    from predictions.service import count_predictions

    db = open_database(settings.database_url.get_secret_value())
    try:
        with db.session() as s:
            logged = count_predictions(session=s, model_name=model)
    finally:
        db.dispose()
    say(
        f"  server stopped gracefully; prediction log holds {logged} rows of {model}, rows dropped "
        f"{status.get('rows_dropped', 0)}"
    )
    return ServingDemoResult(
        url=url,
        version=str(body["model_version"]),
        v1_rows=half,
        v2_rows=len(rows) - half,
        rejected_error=str(rejected.json().get("error")),
        labels_stored=int(fb["stored"]),
        logged_rows=logged,
        rows_dropped=int(status.get("rows_dropped", 0)),
    )
