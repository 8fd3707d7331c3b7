"""``/metrics`` of a busy real server: promtool finds no problem, counters and histograms equal the traffic
sent (per status code, both protocols), and under ``driftwarden serve --workers 2`` one scrape sums both
worker processes."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from core.network import free_port
from predictions.batch import LogBatch, pack_floats
from predictions.service import new_prediction_ids
from predictions.spool import Spool
from service.serving.metrics import LATENCY_BUCKETS_S, OTHER_FEATURE, Metrics
from tests.support import Server, TrainedModels, count_rows, seed_registry, serve_settings

ROOT = Path(__file__).resolve().parents[2]
SPEC_LATENCY = ["0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25"]
SPEC_LATENCY += ["0.5", "1.0", "2.5", "5.0", "10.0", "+Inf"]
SPEC_ROWS = [f"{float(2**i)}" for i in range(11)] + ["+Inf"]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def _by(samples: Samples, name: str, *keys: str) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for labels, value in samples.get(name, []):
        out[tuple(labels[k] for k in keys)] += int(value)
    return out


def _promtool(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run scripts/system-deps.sh"
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)


def _tensors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": k,
            "shape": [len(rows)],
            "datatype": "BYTES" if isinstance(rows[0][k], str) else "FP32",
            "data": [r[k] for r in rows],
        }
        for k in rows[0]
    ]


@pytest.fixture(scope="module")
def busy(trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict]]:
    """A server after a known mix of traffic; yields it with what was sent."""
    root = tmp_path_factory.mktemp("busy")
    url = f"sqlite:///{root / 'busy.db'}"
    seed_registry(url, trained, serving=1, labels={"canary": 2})
    settings = serve_settings(url, root / "spool", log_durability="durable")
    codes: Counter[tuple[str, str, str, str]] = Counter()  # model, version, protocol, code
    rows = trained.rows
    sent: dict[str, Any] = {"codes": codes, "rows": Counter()}
    with Server(settings) as srv, srv.client() as c:

        def send(path: str, body: Any, key: tuple[str, str, str, str], n_rows: int = 0, **kw: Any) -> Any:
            r = c.post(path, json=body, **kw) if not isinstance(body, bytes) else c.post(path, content=body)
            assert str(r.status_code) == key[3], (path, r.status_code, r.text)
            codes[key] += 1
            sent["rows"][key[1]] += n_rows
            return r

        ids: list[str] = []
        for i in range(12):  # v1, 1-3 rows each
            batch = rows[i : i + 1 + i % 3]
            r = send(
                "/v1/models/credit:predict", {"instances": batch}, ("credit", "1", "v1", "200"), len(batch)
            )
            ids += r.json()["prediction_ids"]
        for i in range(9):  # v2 tensors
            batch = rows[20 + i : 22 + i]
            send("/v2/models/credit/infer", {"inputs": _tensors(batch)}, ("credit", "1", "v2", "200"), 2)
        for _ in range(4):  # the canary label and an explicit version: version "2" answers
            send(
                "/v1/models/credit/labels/canary:predict",
                {"instances": rows[:1]},
                ("credit", "2", "v1", "200"),
                1,
            )
            send(
                "/v2/models/credit/versions/2/infer",
                {"inputs": _tensors(rows[:1])},
                ("credit", "2", "v2", "200"),
                1,
            )
        flagged = {**rows[0], "loan_purpose": "crypto"}
        send("/v1/models/credit:predict", {"instances": [flagged]}, ("credit", "1", "v1", "200"), 1)
        # 400s: a contract violation, bad JSON, a version that is not a number
        send(
            "/v1/models/credit:predict",
            {"instances": [{**rows[0], "age": "old"}]},
            ("credit", "", "v1", "400"),
        )
        send("/v2/models/credit/infer", b"{not json", ("credit", "", "v2", "400"))
        send("/v1/models/credit/versions/x1:predict", {"instances": rows[:1]}, ("credit", "", "v1", "400"))
        # 404s: a model nobody serves (label value "": names come from the registry), a version not loaded
        for _ in range(3):
            send("/v1/models/nope:predict", {"instances": rows[:1]}, ("", "", "v1", "404"))
        send(
            "/v2/models/credit/versions/7/infer", {"inputs": _tensors(rows[:1])}, ("credit", "", "v2", "404")
        )
        fb = c.post(
            "/v1/models/credit/feedback",
            json={
                "labels": [
                    {"prediction_id": ids[0], "label": 1},
                    {"prediction_id": "00000000-0000-7000-8000-000000000000", "label": 0},
                ]
            },
        )
        assert fb.status_code == 200 and fb.json()["stored"] == 1, fb.text
        sent["scrape"] = c.get("/metrics").text
        yield srv, sent


def test_promtool_finds_no_problem_in_a_busy_scrape(busy: tuple[Server, dict]) -> None:
    _promtool(busy[1]["scrape"])


def test_request_counters_equal_the_requests_sent_per_code(busy: tuple[Server, dict]) -> None:
    _, sent = busy
    s = _samples(sent["scrape"])
    assert _by(s, "driftwarden_requests_total", "model", "version", "protocol", "code") == sent["codes"]
    assert all(
        set(lab) == {"model", "version", "protocol", "code"} for lab, _ in s["driftwarden_requests_total"]
    )
    assert _value(s, "driftwarden_requests_in_flight", protocol="v1") == 0
    assert _value(s, "driftwarden_requests_in_flight", protocol="v2") == 0
    predicted = _by(s, "driftwarden_predictions_total", "model", "version")
    assert predicted == {("credit", v): n for v, n in sent["rows"].items() if n}


def test_histograms_count_every_request_with_the_agreed_buckets(busy: tuple[Server, dict]) -> None:
    _, sent = busy
    s = _samples(sent["scrape"])
    per_route: Counter[tuple[str, ...]] = Counter()
    for (model, _, protocol, _), n in sent["codes"].items():
        per_route[(model, protocol)] += n
    assert _by(s, "driftwarden_request_duration_seconds_count", "model", "protocol") == per_route
    for model, protocol in per_route:
        les = [lab["le"] for lab, _ in s["driftwarden_request_duration_seconds_bucket"]
               if lab["model"] == model and lab["protocol"] == protocol]  # fmt: skip
        assert les == SPEC_LATENCY
        inf = _value(
            s, "driftwarden_request_duration_seconds_bucket", model=model, protocol=protocol, le="+Inf"
        )
        assert inf == per_route[(model, protocol)]
    answered = sum(n for (_, _, _, code), n in sent["codes"].items() if code == "200")
    assert _value(s, "driftwarden_batch_queue_seconds_count", model="credit") == answered
    calls = _value(s, "driftwarden_model_call_seconds_count", model="credit")
    assert 1 <= calls <= answered and _value(s, "driftwarden_batch_rows_count", model="credit") == calls
    assert _value(s, "driftwarden_batch_rows_sum", model="credit") == sum(sent["rows"].values())
    assert [lab["le"] for lab, _ in s["driftwarden_batch_rows_bucket"]] == SPEC_ROWS
    assert [lab["le"] for lab, _ in s["driftwarden_model_call_seconds_bucket"]] == SPEC_LATENCY
    assert 0 < _value(s, "driftwarden_request_duration_seconds_sum", model="credit", protocol="v1") < 60


def test_contract_model_and_log_series(busy: tuple[Server, dict]) -> None:
    srv, sent = busy
    s = _samples(sent["scrape"])
    flags = "driftwarden_contract_flags_total"
    assert _value(s, flags, model="credit", feature="loan_purpose", rule="unseen_category") == 1
    violations = _by(s, "driftwarden_contract_violations_total", "model", "feature", "rule")
    assert violations == {("credit", "age", "type"): 1, ("credit", "", "json"): 1}
    assert _by(s, "driftwarden_feedback_labels_total", "model", "outcome") == {
        ("credit", "stored"): 1,
        ("credit", "unknown"): 1,
    }
    assert _value(s, "driftwarden_model_loads_total", model="credit") == 2  # serving 1 and canary 2
    assert "driftwarden_model_load_failures_total" not in s  # no failure, no series
    assert _value(s, "driftwarden_model_serving_version", model="credit") == 1
    assert _by(s, "driftwarden_model_loaded", "model", "version") == {("credit", "1"): 1, ("credit", "2"): 1}
    written = _value(s, "driftwarden_prediction_log_rows_written_total")
    assert written == sum(sent["rows"].values())  # durable mode: committed before each answer
    assert _value(s, "driftwarden_prediction_log_rows_dropped_total") == 0
    assert 1 <= _value(s, "driftwarden_prediction_log_flush_duration_seconds_count") <= written
    assert _value(s, "driftwarden_prediction_log_spool_oldest_age_seconds") == 0
    assert _value(s, "driftwarden_prediction_log_database_up") == 1
    assert srv.state.writer.stats.rows_dropped == 0


def _log_batch(i: int, logged_at: datetime, size: int = 1) -> LogBatch:
    """A request's batch of ``size`` predictions logged at ``logged_at``."""
    first = new_prediction_ids(size)[0]
    return LogBatch(
        first[:-3], int(first[-3:], 16), size, f"r{i}", "credit", 1, logged_at, 1.0, "ok", "v1", "serve",
        None, None, None, pack_floats([0.5] * size), None, None, [{"age": 1}] * size,
    )  # fmt: skip


def test_spool_oldest_age_follows_the_oldest_unreplayed_row(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    now = datetime.now(UTC)
    assert spool.oldest_age_s(now.timestamp()) == 0
    spool.append(
        [_log_batch(0, now - timedelta(seconds=90), 3), _log_batch(1, now - timedelta(seconds=30), 2)],
        sync=True,
    )
    spool.append([_log_batch(2, now - timedelta(seconds=10))], sync=False)
    assert spool.pending_rows == 6  # predictions
    assert spool.oldest_age_s(now.timestamp()) == pytest.approx(90, abs=0.01)
    batch = spool.peek(1)
    assert batch is not None and [b.size for b in batch.rows] == [3]  # a whole request
    spool.commit(batch)  # the oldest request's predictions are in the database now
    assert spool.pending_rows == 3
    assert spool.oldest_age_s(now.timestamp()) == pytest.approx(30, abs=0.01)
    assert Spool(tmp_path / "spool").oldest_age_s(now.timestamp() + 5) == pytest.approx(35, abs=0.01)
    rest = spool.peek(10)
    assert rest is not None
    spool.commit(rest)
    assert spool.pending_rows == 0 and spool.oldest_age_s(now.timestamp()) == 0
    spool.close()


def test_spool_slots_give_each_process_its_own_folder(tmp_path: Path) -> None:
    first, second = Spool.claim(tmp_path / "db"), Spool.claim(tmp_path / "db")
    assert first.directory == tmp_path / "db" and second.directory == tmp_path / "db" / "worker-1"
    first.close()
    third = Spool.claim(tmp_path / "db")  # a freed slot is taken again (its leftover rows get replayed)
    assert third.directory == tmp_path / "db"
    second.close()
    third.close()


def test_features_per_model_are_capped_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics(max_features=2)
    with caplog.at_level(logging.WARNING, logger="driftwarden.serving.metrics"):
        m.model_load("wide", ok=True, features=["a", "b", "c", "d"])
        m.model_load("wide", ok=True, features=["a", "b", "c", "d"])  # a second version: no new line
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "'wide'" in lines[0] and "metrics_max_features" in lines[0], lines
    m.predicted("wide", 1, 3, [["a:unseen_category"], ["c:observed_range"], ["d:observed_range"]])
    m.violation("wide", [("b", "type"), ("invented-by-a-client", "unknown_feature"), ("b", "type")])
    s = _samples(generate_latest(m.registry).decode())
    assert _by(s, "driftwarden_contract_flags_total", "feature", "rule") == {
        ("a", "unseen_category"): 1,
        (OTHER_FEATURE, "observed_range"): 2,
    }
    assert _by(s, "driftwarden_contract_violations_total", "feature", "rule") == {
        ("b", "type"): 1,
        (OTHER_FEATURE, "unknown_feature"): 1,
    }
    assert LATENCY_BUCKETS_S[0] == 0.00025 and LATENCY_BUCKETS_S[-1] == 10


# -- serve --workers 2 as a real subprocess ------------------------------------------------------------
def _snapshots(folder: Path) -> list[dict[str, Any]]:
    out = []
    for p in folder.glob("driftwarden-metrics-*/*.json"):
        try:
            out.append(orjson.loads(p.read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            continue
    return out


def _served(snap: dict[str, Any]) -> float:
    return sum(row[-1] for row in snap["counters"].get("requests", []))


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_two_workers_one_scrape_sums_both(trained: TrainedModels, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'workers.db'}"
    seed_registry(url, trained, serving=1)
    port = free_port()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {
        **os.environ,
        "DRIFTWARDEN_DATABASE_URL": url,
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
        "DRIFTWARDEN_MONITOR_ENABLED": "false",
        "DRIFTWARDEN_RETENTION_INTERVAL_S": "0",
        "DRIFTWARDEN_LOG_LEVEL": "WARNING",
        "TMPDIR": str(tmpdir),  # where serve creates (and afterwards removes) its snapshot folder
    }
    errors = tmp_path / "serve.stderr"
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "driftwarden"), "serve", "--workers", "2", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stderr=errors.open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while len([s for s in _snapshots(tmpdir) if s.get("live")]) < 2:  # both workers started
            assert proc.poll() is None, f"serve exited with {proc.returncode}"
            assert time.monotonic() < deadline, "two workers did not start"
            time.sleep(0.5)
        # a worker writes its snapshot early in its start-up; the shared socket listens only once the first
        # worker has finished starting (uvicorn binds in the parent, listens in the workers)
        while not _answers(f"{base}/v2/health/live"):
            assert proc.poll() is None, f"serve exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the workers did not start listening"
            time.sleep(0.2)

        def one(i: int) -> int:
            headers = {"Connection": "close"}  # a new connection each: the kernel spreads them
            body = {"instances": [trained.rows[i % 300]]}
            r = httpx.post(f"{base}/v1/models/credit:predict", json=body, headers=headers, timeout=60)
            return r.status_code

        sent = 0
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for _ in range(20):  # until both workers have answered some (normally the first round)
                codes = list(pool.map(one, range(sent, sent + 40)))
                assert set(codes) == {200}, Counter(codes)
                sent += len(codes)
                time.sleep(1.2)  # every worker writes its snapshot at least once a second
                if all(_served(s) > 0 for s in _snapshots(tmpdir)):
                    break
        per_worker = sorted(_served(s) for s in _snapshots(tmpdir))
        assert len(per_worker) == 2 and per_worker[0] > 0, per_worker
        text = httpx.get(f"{base}/metrics", timeout=30).text
        _promtool(text)
        s = _samples(text)
        assert sum(v for _, v in s["driftwarden_requests_total"]) == sent, (sent, per_worker)
        assert (
            _value(s, "driftwarden_requests_total", model="credit", version="1", protocol="v1", code="200")
            == sent
        )
        assert _value(s, "driftwarden_request_duration_seconds_count", model="credit", protocol="v1") == sent
        assert _value(s, "driftwarden_batch_queue_seconds_count", model="credit") == sent
        assert _value(s, "driftwarden_predictions_total", model="credit", version="1") == sent
        assert _value(s, "driftwarden_model_loads_total", model="credit") == 2  # one load in each worker
        assert _value(s, "driftwarden_model_loaded", model="credit", version="1") == 1  # max, not summed
        assert _value(s, "driftwarden_model_serving_version", model="credit") == 1
        assert _value(s, "driftwarden_requests_in_flight", protocol="v1") == 0
        assert _value(s, "driftwarden_prediction_log_database_up") == 1
        spools = sorted(p.parent.name for p in (tmp_path / "spool").rglob("lock"))
        assert len(spools) == 2 and spools[1] == "worker-1", spools  # one spool slot per worker
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = errors.read_text(errors="replace")[-3000:]
    assert proc.returncode == 0, log
    assert count_rows(url) == sent, log  # both workers' writers flushed at shutdown
    assert not list(tmpdir.glob("driftwarden-metrics-*")), "serve left its snapshot folder behind"


def test_a_scrape_survives_an_unusable_snapshot_folder(tmp_path: Path) -> None:
    from service.serving.metrics_files import SnapshotFiles

    folder = tmp_path / "snapshots"
    mine = SnapshotFiles(folder, lambda: {"counters": {}, "histograms": {}, "gauges": {}}, wait_s=0.2)
    other = SnapshotFiles(folder, lambda: {"counters": {"x": [[1]]}, "histograms": {}, "gauges": {}})
    mine.start()
    other.write(generation=0, live=True)
    assert [s["counters"] for s in mine.others()] == [{"x": [[1]]}]  # read (not fresh: wait_s ran out)
    # Cleaned away the way a reaper does it, atomically: renamed out of the way, then deleted. (An rmtree
    # of the live folder itself races the snapshot thread, which may write a file between rmtree's listing
    # and its rmdir: "Directory not empty".) The thread writes by path, so nothing lands in the renamed one.
    reaped = tmp_path / "reaped"
    folder.rename(reaped)
    shutil.rmtree(reaped)
    assert not folder.exists()
    assert mine.others() == []  # no exception: the scrape still answers with this process's own values
    assert mine._thread is not None and mine._thread.is_alive(), "the snapshot thread must survive"
    mine.close()
