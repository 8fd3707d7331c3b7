"""Issue 40, items 7 and 9: a file import names the feature columns it lacks and its rows 1-based; the counts
of labels and windows agree with what was stored.

Two models registered from a reference alone (served elsewhere; no TensorFlow), on both backends: a file
without a feature column of the contract is refused in the first pass (``--dry-run`` too) naming it, unless
``--allow-missing-features``; a bad row is named by its CSV line (the header is line 1) or its Parquet row
from 1; an import run again reports its labels as already stored; a repeated ingest batch stores its labels
once; a regression window's ``labelled`` count is its labelled rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from tests import own_models
from tests.support import Server, count_rows, elsewhere_settings, run_cli, server_env

MODELS = {"gi_bin": "binary", "gi_reg": "regression"}
TARGETS = {"binary": "y_bin", "regression": "y_reg"}
FEATURES = ("a", "b", "c", "color")
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def server(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("import-counts")
    settings = elsewhere_settings(module_db_url, root, MODELS, monitor_enabled=True, log_durability="durable")
    with Server(settings) as srv:
        yield srv


def _count(srv: Server, name: str) -> int:
    return count_rows(srv.settings.database_url.get_secret_value(), "model_name = :m", {"m": name})


def _cli(srv: Server, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    return run_cli(monkeypatch, server_env(srv), *args)


def _scored(n: int, *, seed: int, prefix: str) -> dict[str, np.ndarray]:
    data = own_models.reference(n, seed=seed)
    return {
        **{k: data[k] for k in FEATURES},
        "score": own_models.answers("binary", data),
        "row_id": np.array([f"{prefix}-{i}" for i in range(n)], dtype=object),
        "scored_at": np.array(
            [(T0 + timedelta(minutes=i // 10)).isoformat() for i in range(n)], dtype=object
        ),
        "truth": data["y_bin"],
    }


def _one_line_error(done: Any) -> str:
    err = str(done.stderr).strip()
    assert done.exit_code == 2 and err.startswith("error: ") and "\n" not in err, (
        done.exit_code,
        done.output,
    )
    return err


def test_a_file_without_a_feature_column_is_refused_naming_it(
    server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    table = _scored(20, seed=31, prefix="renamed")
    table["colour"] = table.pop("color")  # the contract's column renamed
    del table["b"]
    write_table(table, tmp_path / "renamed.csv")
    args = ["predictions", "import", str(tmp_path / "renamed.csv"), "--model", "gi_bin"]
    args += ["--prediction-column", "score", "--label-column", "truth"]
    for extra in ([], ["--dry-run"]):
        err = _one_line_error(_cli(server, monkeypatch, *args, *extra))
        assert "lacks 2 feature column(s) of gi_bin:1's contract: b, color" in err, err
        assert "--allow-missing-features" in err, err
    assert _count(server, "gi_bin") == 0
    dry = _cli(server, monkeypatch, *args, "--allow-missing-features", "--dry-run")
    assert dry.exit_code == 0 and "20 rows checked" in dry.output, dry.output
    assert _count(server, "gi_bin") == 0
    done = _cli(server, monkeypatch, *args, "--allow-missing-features")
    assert done.exit_code == 0, done.output
    assert "20 of 20 rows logged for gi_bin:1" in done.output and "20 flagged by the contract" in done.output
    assert _count(server, "gi_bin") == 20


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_bad_row_is_named_1_based(
    server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, suffix: str
) -> None:
    table = _scored(30, seed=32, prefix="bad")
    score = table["score"].copy()
    score[0] = 1.5  # the first row: line 2 of a CSV, row 1 of a Parquet file
    table["score"] = score
    write_table(table, tmp_path / f"bad{suffix}")
    before = _count(server, "gi_bin")
    done = _cli(
        server,
        monkeypatch,
        "predictions",
        "import",
        str(tmp_path / f"bad{suffix}"),
        "--model",
        "gi_bin",
        "--prediction-column",
        "score",
    )
    err = _one_line_error(done)
    named = "line 2: " if suffix == ".csv" else "row 1 (1-based): "
    assert f"error: {named}prediction must be the positive class's probability" in err, err
    assert _count(server, "gi_bin") == before


def test_an_import_run_again_reports_its_labels_as_already_stored(
    server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    write_table(_scored(400, seed=33, prefix="again"), tmp_path / "scored.csv")
    args = ["predictions", "import", str(tmp_path / "scored.csv"), "--model", "gi_bin"]
    args += ["--prediction-column", "score", "--id-column", "row_id", "--time-column", "scored_at"]
    args += ["--label-column", "truth"]
    first = _cli(server, monkeypatch, *args)
    assert first.exit_code == 0, first.output
    assert "400 of 400 rows logged" in first.output, first.output
    assert "400 labels stored, 0 already stored" in first.output, first.output
    again = _cli(server, monkeypatch, *args)
    assert again.exit_code == 0, again.output
    assert "0 of 400 rows logged" in again.output and "400 already logged" in again.output, again.output
    assert "0 labels stored, 400 already stored" in again.output, again.output


def _records(n: int, *, seed: int, prefix: str, task: str = "binary") -> list[dict[str, Any]]:
    data = own_models.reference(n, seed=seed)
    answers = own_models.answers(task, data)
    return [
        {
            "id": f"{prefix}-{i}",
            "time": (T0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "inputs": {
                "a": float(data["a"][i]),
                "b": float(data["b"][i]),
                "c": int(data["c"][i]),
                "color": str(data["color"][i]),
            },
            "prediction": float(answers[i]),
            "label": float(data[TARGETS[task]][i]),
        }
        for i in range(n)
    ]


def test_a_repeated_ingest_batch_stores_its_labels_once(server: Server) -> None:
    records = _records(3, seed=34, prefix="twice")
    with server.client() as c:
        first = c.post("/v1/models/gi_bin/predictions", json={"records": records})
        again = c.post("/v1/models/gi_bin/predictions", json={"records": records})
        records[1]["label"] = 1.0 - records[1]["label"]  # a corrected label replaces the one stored
        fixed = c.post("/v1/models/gi_bin/predictions", json={"records": records})
    assert first.status_code == 200, first.text
    assert first.json()["labels_stored"] == 3 and first.json()["labels_already_stored"] == 0, first.text
    assert again.status_code == 200 and again.json()["stored"] == 0, again.text
    assert again.json()["labels_stored"] == 0 and again.json()["labels_already_stored"] == 3, again.text
    assert fixed.json()["labels_stored"] == 1 and fixed.json()["labels_already_stored"] == 2, fixed.text


def test_a_regression_windows_labelled_count_is_its_labelled_rows(server: Server) -> None:
    from monitors.flows import run_monitor

    records = _records(300, seed=35, prefix="reg", task="regression")
    for record in records[1::3]:
        del record["label"]  # two in three labelled
    with server.client() as c:
        r = c.post("/v1/models/gi_reg/predictions", json={"records": records})
    assert r.status_code == 200 and r.json()["labels_stored"] == 200, r.text
    db = open_database(server.settings.database_url.get_secret_value())
    try:
        settings = server.settings.model_copy(update={"monitor_min_rows": 100, "monitor_window_rows": 300})
        outcome = run_monitor(db=db, settings=settings, model_name="gi_reg")
    finally:
        db.dispose()
    report, window = outcome.report.as_dict(), outcome.window.as_dict()  # the stored run's report holds both
    assert window["rows"] == 300 and report["performance"]["rows"] == 200
    assert window["labelled"] == 200, window
    assert report["performance"]["label_coverage"] == pytest.approx(200 / 300)
