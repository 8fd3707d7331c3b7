"""Hostile values mixed into the ingest paths while PostgreSQL is stopped and started again (issue 41).

A stream of KServe CloudEvents (pairs) and ingest-route records, clean ones with hostile ones among them (a
NUL character in a feature name or a text value, a 2 MB category, times at the edge of the range, a body
nested 200,000 levels deep; alone or inside an otherwise clean body), before, during and
after an outage of the database (``pg_ctl stop -m fast``): every hostile body is refused with a 400 and keeps
nothing, and a row with a NUL that an older version had spooled goes to the dead letter on its replay; every
clean prediction is in the log exactly once once the database is back; the spools (the log's
and the halves') drain; the pairing's sweep keeps pairing (halves that came in the outage are paired, no pair
is left open) and a monitor run succeeds afterwards. A second test fills the spool of halves to its cap with
the database down: a 503 and the rows counted lost, never a file past the cap.

Authorization during the outage: the servers use the bootstrap admin token (``serve_settings``), checked
without the database, as ``test_cloudevents_outage.py`` does; an ingest token read from the tokens table
during an outage (its grace period) is ``test_database_down.py``'s.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from service.serving.cloudevents import half_spool
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.faults.conftest import log_row, logged_ids, wait_until
from tests.support import OwnPostgres, Server, elsewhere_settings, query_rows, serve_settings

MODEL = "hostile"
NUL = "\u0000"


NUL_RULE_WORDS = "U+0000"
LONG_RULE_WORDS = "(rule: max_length)"
TIME_RULE_WORDS = "is outside the times driftwarden stores"
DEPTH_RULE_WORDS = "(rule: max_json_depth)"
EDGE_TIMES = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z")


def _hostile_records(row: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Ingest records a broken or hostile client sends, each with the words of its 400 (storing nothing)."""
    return [
        (
            {"inputs": {**row, "zzz": f"a{NUL}b"}, "prediction": 0.5},
            NUL_RULE_WORDS,
        ),  # in an unknown key's value
        ({"inputs": {**row, f"x{NUL}y": 1}, "prediction": 0.5}, NUL_RULE_WORDS),  # in a feature name
        ({"inputs": {**row, "color": f"re{NUL}d"}, "prediction": 0.5}, NUL_RULE_WORDS),  # in a text
        (
            {"inputs": {**row, "color": "x" * 2_000_000}, "prediction": 0.5},
            LONG_RULE_WORDS,
        ),  # a 2 MB category
        *(({"inputs": row, "prediction": 0.5, "time": t}, TIME_RULE_WORDS) for t in EDGE_TIMES),
    ]


def _hostile_requests(row: dict[str, Any]) -> list[tuple[bytes | Any, dict[str, str], str]]:
    """Request halves of KServe events a hostile client sends: a body (raw bytes, or JSON to encode), headers
    to set over the event's own, and the words of its 400 (which keeps nothing)."""
    deep = b"[" * 200_000 + b"]" * 200_000
    return [
        ({"instances": [{**row, f"x{NUL}y": 1}]}, {}, NUL_RULE_WORDS),
        ({"instances": [row, {**row, "zzz": f"a{NUL}b"}]}, {}, NUL_RULE_WORDS),
        (
            {"inputs": {name: [value] for name, value in {**row, "color": f"re{NUL}d"}.items()}},
            {},
            NUL_RULE_WORDS,
        ),
        ({"instances": [{**row, "color": "x" * 2_000_000}]}, {}, LONG_RULE_WORDS),
        ({"instances": [row]}, {"ce-time": EDGE_TIMES[0]}, TIME_RULE_WORDS),
        ({"instances": [row]}, {"ce-time": EDGE_TIMES[1]}, TIME_RULE_WORDS),
        (deep, {}, DEPTH_RULE_WORDS),
    ]


class Stream:
    """Posts clean and hostile traffic to one server and keeps what each answer promised."""

    def __init__(self, client: httpx.Client, rows: list[dict[str, Any]], probs: list[float]) -> None:
        self.c = client
        self.rows = rows
        self.probs = probs
        self.pairs: list[str] = []  # clean event ids answered 200 on both halves
        self.ingested: list[str] = []  # prediction ids of clean records answered 200
        self.refused: list[tuple[str, int, str, str]] = []  # what each hostile body was answered
        self.outcomes: Counter[str] = Counter()

    def event(
        self, kind: str, event_id: str, body: Any, over: dict[str, str] | None = None
    ) -> httpx.Response:
        raw = body if isinstance(body, bytes) else None
        content, headers = own_models.kserve_message(kind, event_id, {} if raw else body, model=MODEL)
        return self.c.post("/v1/cloudevents", content=raw or content, headers={**headers, **(over or {})})

    def phase(self, name: str) -> None:
        for k in range(4):  # clean pairs, hostile halves between their halves
            event_id = f"{name}-{k}-{uuid.uuid4()}"
            r = self.event(REQUEST_TYPE, event_id, {"instances": self.rows})
            assert r.status_code == 200, r.text
            self.outcomes[r.json()["outcome"]] += 1
            for j, (body, over, words) in enumerate(_hostile_requests(self.rows[0])):
                bad = self.event(REQUEST_TYPE, f"{name}-hostile-{k}-{j}-{uuid.uuid4()}", body, over)
                self.refused.append((f"event {j}", bad.status_code, bad.text, words))
            r = self.event(RESPONSE_TYPE, event_id, {"predictions": self.probs})
            assert r.status_code == 200, r.text
            self.outcomes[r.json()["outcome"]] += 1
            self.pairs.append(event_id)
        clean = [{"inputs": row, "prediction": p} for row, p in zip(self.rows, self.probs, strict=True)]
        for k in range(3):
            r = self.c.post(f"/v1/models/{MODEL}/predictions", json={"records": clean})
            assert r.status_code == 200 and r.json()["stored"] == len(clean), r.text
            self.ingested += r.json()["prediction_ids"]
            for j, (record, words) in enumerate(_hostile_records(self.rows[k])):
                alone = self.c.post(f"/v1/models/{MODEL}/predictions", json={"records": [record]})
                mixed = self.c.post(f"/v1/models/{MODEL}/predictions", json={"records": [*clean, record]})
                self.refused += [(f"record {j}", alone.status_code, alone.text, words)]
                self.refused += [(f"record {j} among clean ones", mixed.status_code, mixed.text, words)]


def _pairs_logged(url: str) -> Counter[str]:
    rows = query_rows(url, "select request_id from prediction_batches where source = 'cloudevents'")
    return Counter(r[0] for r in rows)


def _is_half(name: str) -> bool:
    return name.endswith(".half") or ".claimed-" in name


def _halves(spool: Path) -> list[str]:
    return [p.name for p in spool.iterdir() if _is_half(p.name)]


def _listing(spool: Path) -> dict[str, int]:
    """The spool's files and their sizes in one look: a replay claims a half by renaming it (the sweep runs
    while the database is down), so a file listed may be gone when its size is read: look again."""
    while True:
        try:
            return {p.name: p.stat().st_size for p in spool.iterdir()}
        except FileNotFoundError:
            continue


def test_hostile_values_in_a_stream_across_an_outage(
    own_pg: OwnPostgres, pg_url: str, tmp_path: Path
) -> None:
    settings = elsewhere_settings(
        pg_url,
        tmp_path,
        {MODEL: "binary"},
        monitor_min_rows=50,
        health_interval_s=1.0,
        cloudevents_sweep_interval_s=0.5,
        cloudevents_wait_s=600.0,  # no pair may be settled unanswered while the test runs
    )
    data = own_models.reference(6, seed=5)
    rows = own_models.feature_rows(data)
    probs = [float(p) for p in own_models.answers("binary", data)]
    with Server(settings) as srv, srv.client() as c:
        stream = Stream(c, rows, probs)
        stream.phase("before")
        own_pg.stop("fast")
        stream.phase("down")
        # a row the edge would refuse, as an older version spooled it: the replay must dead-letter it
        poison = log_row(0)._replace(model_name=MODEL, model_version=1, inputs=[{"zzz": f"a{NUL}b"}])
        srv.state.writer.spool.append([poison], sync=True)
        assert stream.outcomes["spooled"] == 8, stream.outcomes  # both halves of each pair of the outage
        own_pg.start()
        stream.phase("after")

        wrong = [r[:3] for r in stream.refused if r[1] != 400 or r[3] not in r[2]]
        assert stream.refused and not wrong, wrong
        wait_until("every clean pair logged", lambda: set(_pairs_logged(pg_url)) >= set(stream.pairs), 60)
        wait_until("every clean record logged", lambda: set(logged_ids(pg_url)) >= set(stream.ingested), 60)
        halves = half_spool(srv.state).directory
        wait_until("the spool of halves drained", lambda: not _halves(halves), 30)
        wait_until("the log's spool drained", lambda: srv.state.writer.spool.pending_rows == 0, 30)
        wait_until("no pair left open", lambda: _open(pg_url) == 0, 30)

        logged = _pairs_logged(pg_url)
        assert sorted(logged.elements()) == sorted(stream.pairs)  # each clean pair once, nothing hostile
        ingested = Counter(logged_ids(pg_url))
        assert all(ingested[pid] == 1 for pid in stream.ingested)  # each clean record exactly once
        assert sum(ingested.values()) == len(stream.ingested) + 6 * len(stream.pairs)  # nothing else
        assert not set(poison.ids()) & set(ingested)
        assert srv.state.writer.stats.rows_dropped == 0
        wait_until(
            "the spooled poison row dead-lettered", lambda: srv.state.writer.stats.rows_rejected == 1, 30
        )
        (rejected,) = srv.state.writer.dead_letter.read()
        assert rejected.row.ids() == poison.ids() and rejected.source == "spool"
        assert "Unicode" in rejected.error or "UntranslatableCharacter" in rejected.error, rejected.error
        assert not list(halves.glob("*.bad"))

        run = c.post(f"/v1/models/{MODEL}/monitors:run")
        assert run.status_code == 201, run.text
        assert run.json()["report"]["prediction"]["rows"] > 0


def _open(url: str) -> int:
    return len(query_rows(url, "select event_id from cloudevent_pairs where settled_at is null"))


def test_a_full_spool_of_halves_answers_503_and_counts_the_rows_lost(
    own_pg: OwnPostgres, pg_url: str, tmp_path: Path
) -> None:
    registry = own_models.register_served_elsewhere(pg_url, tmp_path, {MODEL: "binary"})
    cap = 20_000
    settings = serve_settings(
        pg_url,
        tmp_path / "spool",
        registry_path=registry,
        monitor_enabled=False,
        spool_max_bytes=cap,
        cloudevents_sweep_interval_s=0.5,
        cloudevents_wait_s=600.0,
    )
    rows = own_models.feature_rows(own_models.reference(6, seed=6))
    with Server(settings) as srv, srv.client() as c:
        stream = Stream(c, rows, [])
        halves = half_spool(srv.state).directory
        own_pg.stop("fast")
        answers: list[httpx.Response] = []
        for k in range(40):  # about 1.5 KB a half: the cap holds about a dozen
            answers.append(stream.event(REQUEST_TYPE, f"full-{k}", {"instances": rows}))
            if answers[-1].status_code != 200:
                break
        kept = [r for r in answers if r.status_code == 200]
        assert all(r.json()["outcome"] == "spooled" for r in kept)
        last = answers[-1]
        assert last.status_code == 503 and "cannot be spooled" in last.json()["error"], last.text
        assert "holds its cap of 20000 bytes" in last.json()["error"]
        assert srv.state.writer.stats.rows_dropped == len(rows)  # the refused half's rows, counted lost
        files = _listing(halves)  # one look: two could straddle a claim's rename
        assert sum(files.values()) <= cap
        assert sorted(n for n in files if _is_half(n)) == sorted(files)  # nothing half-written
        assert len(files) == len(kept)
        own_pg.start()
        wait_until("the spool of halves drained", lambda: not _halves(halves), 30)
        assert _open(pg_url) == len(kept)  # each kept request waits in the table for its response
