"""Times at the edge of the range and values that once stopped monitor runs, on every entry point, on both
backends (issue 41, items 4, 5, 7 and 8).

One real server per backend with two models served elsewhere. Every time a client sends (an ingested
record's ``time``, ``ce-time`` in binary and structured mode, Alertmanager's ``startsAt``/``endsAt``, a
silence's ``starts_at``/``ends_at``, the drift history's ``since``/``until``, a file import's time column)
outside 1970-01-01T00:00:00Z ... 9999-12-30T23:59:59Z is a 400 (exit 2) naming the field, and nothing is
kept; the edges themselves are stored and read back, a monitor run and retention work after them. A category
longer than its ``max_length`` is refused on the ingest paths as predict refuses it, and one already in the
log no longer stops a monitor run. JSON nested deeper than 100 levels is a 400 on every JSON route, binary
CloudEvents included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from core.database import aware, open_database
from core.tabular import write_table
from predictions.service import apply_retention
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from service.serving.readers import log_layout
from tests import own_models
from tests.predictions.logdata import write_requests
from tests.support import Server, count_rows, elsewhere_settings, query_rows, run_cli, server_env

MODELS = {"edge_bin": "binary", "edge_long": "binary"}
MAX_LENGTH = 256  # the contract's max_length of "color" (registry.schema.MAX_CATEGORY_CHARS)
LONG = "x" * 2_000_000  # a 2 MB category (the probe's)
OUTSIDE = [
    "0001-01-01T00:00:00Z",  # year 1: once stored unreadably on SQLite (strftime does not pad the year)
    "0001-01-01T00:00:00+01:00",  # its UTC is before year 1: astimezone overflowed (a 500)
    "9999-12-31T23:59:59-01:00",  # its UTC is after 9999: the same
    "9999-12-31T00:00:00Z",  # past the range's last day
    "1969-12-31T23:59:59Z",  # before the range
]
EDGES = ["1970-01-01T00:00:00Z", "9999-12-30T23:59:59.999999Z"]


@pytest.fixture(scope="module")
def edge_server(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("edge")
    settings = elsewhere_settings(
        module_db_url,
        root,
        MODELS,
        log_durability="durable",
        monitor_min_rows=10,
        webhook_sender_enabled=False,
        worker_embedded=False,
    )
    with Server(settings) as srv:
        yield srv


def _url(srv: Server) -> str:
    return srv.settings.database_url.get_secret_value()


def _count(srv: Server, table: str, where: str = "1=1", params: dict[str, Any] | None = None) -> int:
    ((n,),) = query_rows(_url(srv), f"select count(*) from {table} where {where}", params)
    return int(n)


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    return own_models.feature_rows(own_models.reference(n, seed=seed))


def _records(n: int, *, seed: int, time: str | None = None) -> list[dict[str, Any]]:
    data = own_models.reference(n, seed=seed)
    p = own_models.answers("binary", data)
    rows = own_models.feature_rows(data)
    out = [{"inputs": rows[i], "prediction": float(p[i])} for i in range(n)]
    if time is not None:
        for r in out:
            r["time"] = time
    return out


def _binary(kind: str, event_id: str, body: Any, *, model: str, time: str | None) -> tuple[bytes, dict]:
    content, headers = own_models.kserve_message(kind, event_id, body, model=model)
    if time is not None:
        headers["ce-time"] = time
    return content, headers


def _structured(kind: str, event_id: str, body: Any, *, model: str, time: str) -> tuple[bytes, dict]:
    document = {**own_models.kserve_attributes(kind, event_id, model), "time": time, "data": body}
    return json.dumps(document).encode(), {"Content-Type": "application/cloudevents+json"}


def _am(starts: str = "2027-01-10T12:00:00Z", ends: str = "0001-01-01T00:00:00Z") -> dict[str, Any]:
    """An Alertmanager webhook notification (version 4) of one alert about ``edge_bin``."""
    labels = {"alertname": "EdgeTimes", "model": "edge_bin", "severity": "warning"}
    alert = {"status": "firing", "labels": labels, "startsAt": starts, "endsAt": ends, "fingerprint": "e1"}
    return {"version": "4", "status": "firing", "receiver": "driftwarden", "alerts": [alert]}


def _silence(**over: Any) -> dict[str, Any]:
    return {"matchers": [{"name": "model", "value": "edge_bin"}], "duration": "2h", **over}


# each entry point of a client's time: (how it sends ``value``, the field a refusal names, the table (and
# condition) that must stay as it was)
def _post_ingest(c: httpx.Client, value: str) -> httpx.Response:
    return c.post("/v1/models/edge_bin/predictions", json={"records": _records(2, seed=1, time=value)})


def _post_binary(c: httpx.Client, value: str) -> httpx.Response:
    body, headers = _binary(
        REQUEST_TYPE, f"t-{value}", {"instances": _rows(2, 2)}, model="edge_bin", time=value
    )
    return c.post("/v1/cloudevents", content=body, headers=headers)


def _post_structured(c: httpx.Client, value: str) -> httpx.Response:
    body, headers = _structured(
        REQUEST_TYPE, f"s-{value}", {"instances": _rows(2, 2)}, model="edge_bin", time=value
    )
    return c.post("/v1/cloudevents", content=body, headers=headers)


ENTRY_POINTS: dict[str, tuple[Any, str, str, str]] = {
    "ingest time": (_post_ingest, "records[0].time", "prediction_batches", "model_name = 'edge_bin'"),
    "ce-time binary": (_post_binary, "ce-time", "cloudevent_pairs", "1=1"),
    "time structured": (_post_structured, "attribute time", "cloudevent_pairs", "1=1"),
    "startsAt": (
        lambda c, v: c.post("/v1/alerts/alertmanager", json=_am(starts=v)),
        "alerts[0].startsAt",
        "alerts",
        "1=1",
    ),
    "endsAt": (
        lambda c, v: c.post("/v1/alerts/alertmanager", json=_am(ends=v)),
        "alerts[0].endsAt",
        "alerts",
        "1=1",
    ),
    "silence starts_at": (
        lambda c, v: c.post("/v1/silences", json=_silence(starts_at=v)),
        "starts_at",
        "silences",
        "1=1",
    ),
    "silence ends_at": (
        lambda c, v: c.post("/v1/silences", json=_silence(ends_at=v, duration=None)),
        "ends_at",
        "silences",
        "1=1",
    ),
    "history since": (
        lambda c, v: c.get("/v1/models/edge_bin/drift/history", params={"since": v}),
        "since",
        "monitor_runs",
        "1=1",
    ),
    "history until": (
        lambda c, v: c.get("/v1/models/edge_bin/drift/history", params={"until": v}),
        "until",
        "monitor_runs",
        "1=1",
    ),
}


GO_ZERO = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of a firing alert: "no end yet", not a time


@pytest.mark.parametrize(
    ("entry", "value"),
    [(e, v) for e in ENTRY_POINTS for v in OUTSIDE if (e, v) != ("endsAt", GO_ZERO)],
)
def test_a_time_outside_the_range_is_a_400_naming_the_field(
    edge_server: Server, entry: str, value: str
) -> None:
    send, field, table, where = ENTRY_POINTS[entry]
    before = _count(edge_server, table, where)
    with edge_server.client() as c:
        r = send(c, value)
    assert r.status_code == 400, (entry, value, r.status_code, r.text)
    error = r.json()["error"]
    assert field in error and "1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z" in error, (entry, error)
    assert _count(edge_server, table, where) == before, entry


def test_alertmanagers_no_end_yet_is_still_a_firing_alert(edge_server: Server) -> None:
    """``endsAt`` of 0001-01-01T00:00:00Z is Alertmanager's "no end yet" (Go's zero time), not a time."""
    with edge_server.client() as c:
        r = c.post("/v1/alerts/alertmanager", json=_am(ends=GO_ZERO))
    assert r.status_code == 200, r.text
    (entry,) = r.json()["alerts"]
    assert entry["status"] == "firing" and entry["outcome"] in ("recorded", "updated"), entry


def test_a_silence_whose_duration_ends_past_the_range_is_refused(edge_server: Server) -> None:
    before = _count(edge_server, "silences")
    with edge_server.client() as c:
        r = c.post("/v1/silences", json=_silence(starts_at="9999-12-30T00:00:00Z", duration="1d"))
    assert r.status_code == 400 and r.json()["error"].startswith("duration: "), r.text
    assert "9999-12-30T23:59:59Z" in r.json()["error"]
    assert _count(edge_server, "silences") == before


def test_the_edges_are_stored_and_read_back_and_monitor_runs_and_retention_work(edge_server: Server) -> None:
    """The range's first and last instants on the ingest route and as a KServe pair's ``ce-time``: stored,
    read back equal, a monitor run (the window holds them) is a 201, retention purges the old one only."""
    srv = edge_server
    first, last = (datetime.fromisoformat(e) for e in EDGES)
    records = _records(30, seed=3)  # arrival times: now
    records[0]["time"], records[1]["time"] = EDGES
    rows = _rows(1, 4)
    answer = float(own_models.answers("binary", own_models.reference(1, seed=4))[0])
    with srv.client() as c:
        r = c.post("/v1/models/edge_bin/predictions", json={"records": records})
        assert r.status_code == 200 and r.json()["stored"] == 30, r.text
        for kind, body, when in (
            (REQUEST_TYPE, {"instances": rows}, EDGES[0]),
            (RESPONSE_TYPE, {"predictions": [answer]}, EDGES[1]),
        ):
            content, headers = _binary(kind, "edge-pair", body, model="edge_bin", time=when)
            sent = c.post("/v1/cloudevents", content=content, headers=headers)
            assert sent.status_code == 200, sent.text
        run = c.post("/v1/models/edge_bin/monitors:run")
    assert run.status_code == 201, run.text
    assert run.json()["report"]["prediction"]["rows"] >= 31
    logged = query_rows(
        _url(srv),
        "select logged_at, request_id from prediction_batches where model_name = 'edge_bin' "
        "and (logged_at < :lo or logged_at > :hi)",
        {"lo": datetime(2000, 1, 1, tzinfo=UTC), "hi": datetime(3000, 1, 1, tzinfo=UTC)},
    )
    got = sorted((aware(t), rid == "edge-pair") for t, rid in logged)
    assert got == [(first, False), (last, False), (last, True)], got  # the pair at the response's time
    db = open_database(_url(srv))
    try:
        apply_retention(db=db, before=datetime.now(UTC) - timedelta(days=30), partition_days=1)
    finally:
        db.dispose()
    kept = query_rows(
        _url(srv),
        "select logged_at from prediction_batches where model_name = 'edge_bin' and logged_at < :lo",
        {"lo": datetime(2000, 1, 1, tzinfo=UTC)},
    )
    assert kept == []
    assert (
        count_rows(_url(srv), "model_name = 'edge_bin' and logged_at > :hi", {"hi": datetime(3000, 1, 1)})
        == 2
    )


def test_a_file_imports_time_outside_the_range_stops_it_naming_the_line(
    edge_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = own_models.reference(5, seed=5)
    times = ["2026-11-20T09:00:00Z"] * 5
    times[3] = "0001-01-01T00:00:00+01:00"
    table = {
        **{k: data[k] for k in own_models.FEATURES},
        "score": own_models.answers("binary", data),
        "at": np.array(times, dtype=object),
    }
    write_table(table, tmp_path / "scored.csv")
    before = count_rows(_url(edge_server), "model_name = 'edge_bin'")
    args = ["predictions", "import", str(tmp_path / "scored.csv"), "--model", "edge_bin"]
    result = run_cli(
        monkeypatch, server_env(edge_server), *args, "--prediction-column", "score", "--time-column", "at"
    )
    err = result.stderr.strip()
    assert result.exit_code == 2 and err.startswith("error: line 5: at "), (result.exit_code, err)
    assert "1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z" in err and "\n" not in err, err
    assert count_rows(_url(edge_server), "model_name = 'edge_bin'") == before


# --- item 5: long categories --------------------------------------------------------------------------------


def test_a_category_over_its_max_length_is_refused_on_the_ingest_route(edge_server: Server) -> None:
    records = _records(3, seed=6)
    records[2]["inputs"]["color"] = LONG
    before = count_rows(_url(edge_server), "model_name = 'edge_long'")
    with edge_server.client() as c:
        r = c.post("/v1/models/edge_long/predictions", json={"records": records})
        predict_like = c.post(
            "/v1/models/edge_long/predictions",
            json={"records": [{**records[0], "inputs": {**records[0]["inputs"], "color": "y" * MAX_LENGTH}}]},
        )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error.startswith("records[2].inputs.color: ") and "at most 256" in error and "max_length" in error
    assert predict_like.status_code == 200, predict_like.text  # at the bound: stored (flagged unseen)
    assert count_rows(_url(edge_server), "model_name = 'edge_long'") == before + 1


def test_a_category_over_its_max_length_is_refused_in_a_cloudevent(edge_server: Server) -> None:
    rows = _rows(2, 7)
    rows[1]["color"] = LONG
    for mode in ("binary", "structured"):
        event_id = f"long-{mode}"
        body = {"instances": rows}
        if mode == "binary":
            content, headers = _binary(REQUEST_TYPE, event_id, body, model="edge_long", time=None)
        else:
            content, headers = _structured(
                REQUEST_TYPE, event_id, body, model="edge_long", time="2026-12-01T10:00:00Z"
            )
        with edge_server.client() as c:
            r = c.post("/v1/cloudevents", content=content, headers=headers)
        assert r.status_code == 400, (mode, r.text)
        assert "row 1, input 'color'" in r.json()["error"] and "max_length" in r.json()["error"], r.text
        assert _count(edge_server, "cloudevent_pairs", "event_id = :e", {"e": event_id}) == 0


def test_a_category_over_its_max_length_stops_a_file_import_naming_the_line(
    edge_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = own_models.reference(4, seed=8)
    colors = data["color"].copy()
    colors[2] = LONG
    table = {**{k: data[k] for k in own_models.FEATURES}, "color": colors}
    write_table({**table, "score": own_models.answers("binary", data)}, tmp_path / "long.csv")
    before = count_rows(_url(edge_server), "model_name = 'edge_long'")
    args = ["predictions", "import", str(tmp_path / "long.csv"), "--model", "edge_long"]
    result = run_cli(monkeypatch, server_env(edge_server), *args, "--prediction-column", "score")
    err = result.stderr.strip()
    assert result.exit_code == 2 and err.startswith("error: line 4: color: "), (result.exit_code, err)
    assert "a category of 2000000 characters; at most 256 (rule: max_length)" in err and len(err) < 300, err
    assert count_rows(_url(edge_server), "model_name = 'edge_long'") == before


def test_a_long_category_already_in_the_log_does_not_stop_a_monitor_run(edge_server: Server) -> None:
    """Rows written through the log's own service (as a server of an older version would have stored them),
    one with a 2 MB colour: the window's category counts hold it, the run is a 201."""
    srv = edge_server
    _, schema = srv.state.manager.contract("edge_long")
    docs = _rows(40, 9)
    docs[17]["color"] = LONG
    db = open_database(_url(srv))
    try:
        write_requests(db.engine, docs, model="edge_long", layout=log_layout(schema), per_request=8)
    finally:
        db.dispose()
    with srv.client() as c:
        run = c.post("/v1/models/edge_long/monitors:run")
    assert run.status_code == 201, run.text[:2000]
    (color,) = [f for f in run.json()["report"]["features"] if f["name"] == "color"]
    assert color["rows"] >= 40, color


# --- item 8: JSON nested too deeply -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 200_000])
def test_json_nested_deeper_than_100_levels_is_a_400_on_every_json_route(
    edge_server: Server, depth: int
) -> None:
    nested = b"[" * depth + b"]" * depth
    document = b'{"records": ' + nested + b"}"
    headers = dict(own_models.kserve_message(REQUEST_TYPE, f"deep-{depth}", {}, model="edge_bin")[1])
    with edge_server.client() as c:
        answers = {
            "binary cloudevent": c.post("/v1/cloudevents", content=nested, headers=headers),
            "structured cloudevent": c.post(
                "/v1/cloudevents",
                content=b'{"specversion": "1.0", "id": "d", "type": "x", "data": ' + nested + b"}",
                headers={"Content-Type": "application/cloudevents+json"},
            ),
            "ingest": c.post(
                "/v1/models/edge_bin/predictions",
                content=document,
                headers={"Content-Type": "application/json"},
            ),
            "alertmanager": c.post(
                "/v1/alerts/alertmanager", content=document, headers={"Content-Type": "application/json"}
            ),
        }
        still = c.get("/v1/models/edge_bin")  # the server serves on
    for route, r in answers.items():
        assert r.status_code == 400, (route, r.status_code, r.text[:300])
        assert "more than 100 levels deep (rule: max_json_depth)" in r.json()["error"], (route, r.text[:300])
    assert still.status_code == 200
