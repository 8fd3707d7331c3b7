"""Issue 45 on real TensorFlow processes: a 200,000-level id embedded (--embed merchant_id:16) and sharded
over two parameter servers; a parameter server killed mid-run comes back and the run resumes; the version
serves the SavedModel's answers. One parameter server is refused when its shard would pass the limit."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.tabular import read_table
from tests.support import Server, serve_settings
from tests.training.helpers import kill, pid_alive, wait_for
from tests.training.sharddata import ID_LEVELS, ShardWorkspace, write_with_id

pytestmark = pytest.mark.cluster

BUCKETS = 1 << 19  # the power of two above twice the ~160,000 levels in the training rows
HALF = BUCKETS // 2


@pytest.fixture(scope="module")
def id_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_with_id(tmp_path_factory.mktemp("ids") / "shops.csv", ID_LEVELS)


@pytest.fixture
def ws(tmp_path: Path, id_csv: Path) -> Iterator[ShardWorkspace]:
    space = ShardWorkspace(root=tmp_path, data=id_csv, extra={"DRIFTWARDEN_PS_MAX_RESTARTS": "1"})
    yield space
    for pids in space.pids().values():  # whatever the test did, nothing it started may outlive it
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _train(ws: ShardWorkspace, *extra: str) -> tuple[str, ...]:
    return (
        "train",
        "--model",
        "shop",
        "--data",
        str(ws.data),
        "--mode",
        "async",
        "--embed",
        "merchant_id:16",
        *extra,
    )


def test_sharded_embedding_survives_a_lost_ps_and_serves(ws: ShardWorkspace) -> None:
    args = _train(ws, "--ps", "2", "--workers", "2", "--epochs", "0.08", "--checkpoint-every", "40")
    proc, log = ws.start(*args, log_name="train.log")
    wait_for(log, r"checkpoint step=\d+", proc=proc, timeout=240)
    kill(ws.pids()["ps:1"][0])
    # the chief is stopped and not yet back: the checkpoint it will restore holds still; keep a copy
    wait_for(log, r"relaunching it and the chief", proc=proc)
    (ckpt_dir,) = (ws.root / "var" / "checkpoints").glob("shop-async-*/ckpt")
    kept = shutil.copytree(ckpt_dir, ws.root / "kept-ckpt")
    assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
    out = log.read_text()

    # the strategy's variables: the table is split in two, one half on each parameter server
    placed = re.findall(
        r"embedding merchant_id: 2 shard\(s\): ps:(\d) \[(\d+), 16\], ps:(\d) \[(\d+), 16\]", out
    )
    assert placed, out[-3000:]
    assert {(p[0], p[2]) for p in placed} == {("0", "1")}
    assert {(int(p[1]), int(p[3])) for p in placed} == {(HALF, HALF)}
    shares = re.findall(r"ps shares: ps:0=(\d+) ps:1=(\d+)", out)
    assert shares and all(int(a) >= 2 * HALF * 16 * 4 and int(b) >= 2 * HALF * 16 * 4 for a, b in shares)
    assert re.search(r"worker steps/s: worker:0=[0-9.]+ worker:1=[0-9.]+", out)

    # the parameter server came back and the run resumed from its checkpoint to the planned step
    assert re.search(r"ps:1 at \S+ was lost \(signal 9\).*; relaunching it and the chief", out), out[-3000:]
    resumed = re.search(r"resumed from checkpoint \S+ at step (\d+)", out)
    assert resumed and int(resumed.group(1)) > 0
    planned = re.search(r"planned_steps=(\d+)", out)
    assert planned and f"training done: global_step={planned.group(1)} planned={planned.group(1)}" in out
    assert len(ws.pids()["ps:1"]) == 2

    # the checkpoint keeps each shard under its own key
    import tensorflow as tf

    latest = max(Path(kept).glob("ckpt-*.index"), key=lambda p: int(p.stem.split("-")[1]))
    keys = dict(tf.train.list_variables(str(latest.with_suffix(""))))
    for i in (0, 1):
        assert keys[f"embedding_shards/merchant_id_part_{i}/.ATTRIBUTES/VARIABLE_VALUE"] == [HALF, 16]
        assert keys[f"embedding_shards/merchant_id_adagrad_part_{i}/.ATTRIBUTES/VARIABLE_VALUE"] == [HALF, 16]

    # the contract stays bounded: the most frequent 64 ids and the level count
    version_dir = ws.root / "var" / "models" / "shop" / "1"
    schema = json.loads((version_dir / "driftwarden" / "schema.json").read_text())
    (spec,) = [f for f in schema["features"] if f["name"] == "merchant_id"]
    assert spec["kind"] == "categorical" and len(spec["categories"]) == 64 and spec["levels"] > 150_000

    # the exported version holds the whole table and serves the SavedModel's answers
    saved = dict(tf.train.list_variables(str(version_dir / "variables" / "variables")))
    assert [BUCKETS, 16] in saved.values()  # the whole table, not a shard
    loaded = tf.saved_model.load(str(version_dir))
    rc, text = ws.run("models", "promote", "shop", "1", log_name="promote.log")
    assert rc == 0, text
    rows = _rows(ws.data, [f["name"] for f in schema["features"]], count=20)
    direct = loaded.signatures["serving_default"](
        **{
            f["name"]: tf.constant(
                [_model_value(r[f["name"]], f["kind"]) for r in rows],
                tf.float32 if f["kind"] == "numeric" else tf.string,
            )
            for f in schema["features"]
        }
    )["probability"].numpy()
    settings = serve_settings(
        f"sqlite:///{ws.root / 'var' / 'driftwarden.db'}",
        ws.root / "spool",
        registry_path=ws.root / "var" / "models",
        monitor_enabled=False,
    )
    with Server(settings) as server, server.client() as client:
        got = client.post("/v1/models/shop:predict", json={"instances": rows})
    assert got.status_code == 200, got.text
    served = np.array(got.json()["predictions"], dtype=np.float32)
    np.testing.assert_allclose(served, direct, rtol=1e-6, atol=1e-7)
    assert np.ptp(direct) > 0  # real answers, not one constant
    ws.assert_no_cluster_process()


def _rows(path: Path, names: list[str], *, count: int) -> list[dict[str, object]]:
    """``count`` rows of the file's features as JSON values (a missing one as None)."""
    cols = read_table(path)
    out = []
    for i in range(0, count * 97, 97):
        row: dict[str, object] = {}
        for name in names:
            value = cols[name][i]
            value = value.item() if isinstance(value, np.generic) else value
            row[name] = None if isinstance(value, float) and math.isnan(value) else value
        out.append(row)
    return out


def _model_value(value: object, kind: str) -> object:
    if kind == "numeric":
        return float("nan") if value is None else float(value)  # type: ignore[arg-type]
    return "" if value is None else str(value)


def test_one_ps_is_refused_when_its_shard_passes_the_limit(ws: ShardWorkspace) -> None:
    ws.extra["DRIFTWARDEN_PS_MAX_SHARD_BYTES"] = str(32 << 20)
    rc, out = ws.run(*_train(ws, "--ps", "1", "--workers", "1", "--epochs", "0.01"), log_name="one.log")
    assert rc == 2, out[-3000:]
    assert re.search(
        r"--ps 1: the embedding of 'merchant_id' \(\[524288, 16\] float32.*\) splits into 1 shard\(s\) "
        r"of 64\.0 "
        r"MiB, above ps_max_shard_bytes \(32\.0 MiB\).*train with --ps 2 or more",
        out,
    ), out[-3000:]
    assert "started ps:0" not in out  # refused before any process started
