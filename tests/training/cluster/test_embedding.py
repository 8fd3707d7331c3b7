"""Issue 45 without a cluster: the --embed option, hash buckets, the bounded contract of a high-cardinality
categorical, the shard plan and its limit, the cluster figures' wording, and a local run through export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.config import Settings
from core.errors import Invalid
from registry.contracts import flag_rows
from registry.schema import MAX_CATEGORIES, ModelSchema, infer_feature, infer_schema
from tests.training.sharddata import with_id, write_with_id
from training.cluster.embedding import check_mode, default_buckets, parse_embed
from training.cluster.features import fit_preprocessing
from training.cluster.sharding import (
    ShardPlan,
    check_shards,
    describe,
    parse_cluster_event,
    rates_event,
    shares_event,
)


def test_embed_option_reads_names_and_widths() -> None:
    assert parse_embed(["merchant_id:16", "city, zip:4"]) == {"merchant_id": 16, "city": None, "zip": 4}
    for bad in ("merchant_id:0", "merchant_id:x", ":8", "merchant_id:513"):
        with pytest.raises(Invalid, match="--embed"):
            parse_embed([bad])


def test_buckets_are_the_power_of_two_above_twice_the_levels() -> None:
    assert default_buckets(160_000) == 1 << 19
    assert default_buckets(1000) == 2048
    assert default_buckets(1024) == 4096  # 2,048 is not above 2 x 1,024
    assert all(b > 2 * n and b & (b - 1) == 0 for n in range(1, 3000, 37) for b in [default_buckets(n)])


def test_high_cardinality_column_keeps_its_level_count_and_its_most_frequent_levels() -> None:
    values = np.array([f"m{i % 5000}" for i in range(6000)] + ["top"] * 50, dtype=object)
    spec = infer_feature("merchant_id", values, wide_above=1000)
    assert spec.levels == 5001
    assert len(spec.categories) == MAX_CATEGORIES
    assert "top" in spec.categories  # the most frequent first; 1,000 ids seen twice fill the rest
    assert spec.categories == tuple(sorted(spec.categories))
    with pytest.raises(ValueError, match="--embed merchant_id"):
        infer_feature("merchant_id", values[:500], wide_above=1000)  # 500 levels: neither named nor above
    assert infer_feature("merchant_id", values[:500], wide=True).levels == 500


def test_contract_takes_any_value_of_a_hashed_feature_and_round_trips() -> None:
    cols = with_id(3000, levels=2500)
    schema = infer_schema(cols, target="default", wide_above=1000)
    again = ModelSchema.from_dict(schema.to_dict())
    assert again == schema and again.feature("merchant_id").levels == 2500
    assert "levels" not in next(f for f in schema.to_dict()["features"] if f["name"] == "region")
    row = {
        f.name: (cols[f.name][0].item() if f.kind.value == "numeric" else str(cols[f.name][0]))
        for f in schema.features
    }
    flags = flag_rows(schema, [{**row, "merchant_id": "never-seen"}, {**row, "region": "nowhere"}])
    assert flags[0] is None or not any(f.startswith("merchant_id:") for f in flags[0])
    assert flags[1] is not None and "region:unseen_category" in flags[1]


def test_preprocessing_embeds_named_and_wide_features() -> None:
    cols = with_id(3000, levels=2500)
    schema = infer_schema(cols, target="default", wide_above=1000)
    prep = fit_preprocessing(cols, schema, embed={"merchant_id": 16}, embed_dim=8)
    (emb,) = prep.embedded
    assert (emb.name, emb.buckets, emb.dim) == ("merchant_id", 8192, 16)
    assert prep.width == prep.dense_width + 16 and prep.encoded_width == prep.dense_width + 1
    auto = fit_preprocessing(cols, schema, embed_dim=8)  # above embed_min_levels: embedded unnamed
    assert [(e.name, e.dim) for e in auto.embedded] == [("merchant_id", 8)]


def _prep(buckets: int, dim: int) -> object:
    cols = with_id(2000, levels=1500)
    schema = infer_schema(cols, target="default", wide_above=1000)
    return fit_preprocessing(cols, schema, embed={"merchant_id": dim}, embed_buckets=buckets)


def test_shard_plan_follows_the_partitioner_settings_and_refuses_past_the_limit() -> None:
    prep = _prep(1 << 19, 16)  # a 32 MiB table, 64 MiB with its accumulator
    settings = Settings(ps_max_shard_bytes=32 << 20)
    (two,) = check_shards(prep=prep, ps=2, settings=settings)  # type: ignore[arg-type]
    assert two == ShardPlan("merchant_id", 1 << 19, 16, 2) and two.largest_bytes == 32 << 20
    with pytest.raises(Invalid, match=r"--ps 1: the embedding of 'merchant_id'.*train with --ps 2 or more"):
        check_shards(prep=prep, ps=1, settings=settings)  # type: ignore[arg-type]
    (one,) = check_shards(prep=prep, ps=1, settings=Settings())  # type: ignore[arg-type]
    assert one.shards == 1  # the default limit (1 GiB) lets one ps hold it whole
    (capped,) = check_shards(prep=prep, ps=4, settings=Settings(ps_max_shards=3))  # type: ignore[arg-type]
    assert capped.shards == 3
    (small,) = check_shards(prep=_prep(1024, 8), ps=2, settings=Settings())  # type: ignore[arg-type]
    assert small.shards == 1  # 32 KiB: below ps_min_shard_bytes, stays whole


def test_cluster_figures_read_back_as_written() -> None:
    shares = shares_event({"ps:0": 33_608_584, "ps:1": 33_555_600})
    rates = rates_event({"worker:0": 21.5, "worker:1": 19.0})
    assert parse_cluster_event(shares) == {"ps_bytes": {"ps:0": 33_608_584, "ps:1": 33_555_600}}
    assert parse_cluster_event(f"12:00 INFO {rates}") == {
        "worker_steps_per_s": {"worker:0": 21.5, "worker:1": 19.0}
    }
    assert parse_cluster_event("checkpoint step=40 path=x") is None
    line = describe({**parse_cluster_event(shares), **parse_cluster_event(rates)})  # type: ignore[dict-item]
    assert line == "variables ps:0 32.05 MiB, ps:1 32.00 MiB; steps/s worker:0 21.5, worker:1 19"


def test_local_run_trains_the_embedding_and_exports_it(tmp_path: Path) -> None:
    from training.cluster.export import ServingModule, predict
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec, prepare
    from training.cluster.trainers import local

    data = write_with_id(tmp_path / "ids.csv", 3000, levels=2500)
    job = TrainingRunSpec(model_name="m", data=data, mode=Mode.LOCAL, epochs=1, embed=("merchant_id:4",))
    prepared = prepare(job)
    weights = local.train(job, prepared, Progress("t", show_bar=False))
    import tensorflow as tf

    from training.cluster.embedded_net import INIT_STDDEV

    table = weights[-1]
    assert table.shape == (8192, 4)
    start = tf.random.stateless_normal([8192, 4], seed=[0, 0], stddev=INIT_STDDEV).numpy()
    moved = np.flatnonzero(np.any(table != start, axis=1))  # sparse updates: only the rows batches looked up
    assert 0 < moved.size < 8192
    module = ServingModule(weights, prepared.prep, prepared.schema)
    out = predict(module, prepared.holdout_inputs)
    assert out.shape == (prepared.holdout_y.size,) and np.all((out >= 0) & (out <= 1))
    changed = dict(prepared.holdout_inputs)
    changed["merchant_id"] = np.array(["m-unseen"] * len(out), dtype=object)
    assert not np.allclose(predict(module, changed), out)  # the id's embedding is part of the answer


def test_sync_mode_refuses_an_embedding_in_one_line() -> None:
    with pytest.raises(
        Invalid, match=r"--mode sync cannot train the embedding of 'merchant_id'.*--mode async"
    ):
        check_mode("sync", ["merchant_id"])
    check_mode("sync", [])  # nothing embedded: sync trains as always
    check_mode("async", ["merchant_id"])
