"""Version changes under load (no failed request) and output-contract violations, on SQLite."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.database import open_database
from registry.service import promote, register_version, set_label
from tests.support import Server, TrainedModels, count_rows, seed_registry, serve_settings


@pytest.fixture(scope="module")
def swap_server(trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("swap")
    url = f"sqlite:///{root / 'swap.db'}"
    seed_registry(url, trained, serving=1)
    with Server(serve_settings(url, root / "spool")) as srv:
        yield srv


def test_promotion_swaps_versions_under_load_without_failures(
    swap_server: Server, trained: TrainedModels
) -> None:
    url = swap_server.settings.database_url.get_secret_value()
    stop = threading.Event()
    outcomes: Counter[str] = Counter()
    versions: list[str] = []
    lock = threading.Lock()

    def load(k: int) -> None:
        with httpx.Client(base_url=swap_server.url, timeout=30) as c:
            i = k
            while not stop.is_set():
                row = trained.rows[i % len(trained.rows)]
                i += 4
                try:
                    r = c.post(
                        "/v1/models/credit:predict",
                        json={"instances": [row]},
                        headers={"X-Request-Id": "swap-load"},
                    )
                    with lock:
                        outcomes[str(r.status_code)] += 1
                        if r.status_code == 200:
                            versions.append(r.json()["model_version"])
                except httpx.HTTPError as exc:
                    with lock:
                        outcomes[type(exc).__name__] += 1

    threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    db = open_database(url)
    with db.session() as s:
        promote(session=s, model_name="credit", version=2)
    db.dispose()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with lock:
            if versions and versions[-1] == "2":
                break
        time.sleep(0.05)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    assert set(outcomes) == {"200"}, outcomes
    assert "1" in versions and "2" in versions
    first_v2 = versions.index("2")
    assert versions[-1] == "2" and versions[first_v2:].count("1") <= 4  # only requests already in flight
    assert swap_server.state.writer.flush(timeout_s=20)  # default durability "fast": answered first
    assert count_rows(url, "request_id = 'swap-load'") == outcomes["200"]
    with httpx.Client(base_url=swap_server.url) as c:
        assert c.get("/v2/models/credit").json()["inputs"]


def test_output_contract_violation_is_an_error_and_logged(
    swap_server: Server, trained: TrainedModels, tmp_path: Path
) -> None:
    import shutil

    import tensorflow as tf

    from registry.schema import FeatureKind
    from registry.service import read_schema

    src = trained.paths[1]
    schema = read_schema(path=src)
    spec = {
        f.name: tf.TensorSpec([None], tf.float32 if f.kind is FeatureKind.NUMERIC else tf.string, name=f.name)
        for f in schema.features
    }

    class Broken(tf.Module):
        @tf.function(input_signature=[spec])
        def serve(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            n = tf.shape(features["age"])[0]
            return {"probability": tf.fill([n], 1.5)}

    path = tmp_path / "broken" / "9"
    module = Broken()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    shutil.copytree(src / "driftwarden", path / "driftwarden")
    url = swap_server.settings.database_url.get_secret_value()
    db = open_database(url)
    with db.session() as s:
        register_version(session=s, model_name="credit", version=9, path=path, metrics={}, lineage={})
        set_label(session=s, model_name="credit", label="broken", version=9)
    db.dispose()
    deadline = time.monotonic() + 20
    with httpx.Client(base_url=swap_server.url, timeout=30) as c:
        while c.get("/v1/models/credit/labels/broken").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        r = c.post(
            "/v1/models/credit/labels/broken:predict",
            json={"instances": trained.rows[:2]},
            headers={"X-Request-Id": "broken-1"},
        )
        metrics = c.get("/metrics").text
    assert r.status_code == 500
    assert "rule: output_range" in r.json()["error"] and "1.5" not in json.dumps(r.json().get("predictions"))
    assert 'driftwarden_output_violations_total{model="credit",rule="output_range"} 1.0' in metrics
    assert swap_server.state.writer.flush(timeout_s=20)
    assert count_rows(url, "request_id = 'broken-1' and status = 'output_violation'") == 2


def test_demo_serving_step_sends_both_protocols(trained: TrainedModels, tmp_path: Path) -> None:
    from service.serving.demo import run_serving_demo

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    seed_registry(url, trained, serving=2)
    lines: list[str] = []
    result = run_serving_demo(
        settings=serve_settings(url, tmp_path / "spool"),
        model="credit",
        rows=trained.rows[:20],
        say=lines.append,
    )
    assert (result.version, result.v1_rows, result.v2_rows) == ("2", 10, 10)
    assert "rule: allowed_range" in result.rejected_error and "'income'" in result.rejected_error
    assert result.labels_stored == 5 and result.logged_rows == 20 and result.rows_dropped == 0
    assert any("OIP v2" in line for line in lines)
