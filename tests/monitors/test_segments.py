"""Segments (monitors/segments.py), pure: the generator's credit data as row samples, the generator's own
P(default | x) as the model. A shift confined to one region flags that region's segment alone; the whole
window shifted flags none; bins from the settings; too few rows, no verdict; labels flipped in one region."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.tabular import Columns
from monitors.config import MonitorConfig, SegmentSpec
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from monitors.rows import RowSample
from monitors.segments import partitions, segment_table
from registry.schema import FeatureKind, ModelSchema, Task, infer_schema
from tests.monitors.helpers import true_probability
from tests.monitors.segmentdata import SCHEDULED, sample, shifted
from training.cluster.datagen import BANDS, LOSS_GIVEN_DEFAULT, TARGET, TARGETS, default_logit, generate


@pytest.fixture(scope="module")
def reference_sample(reference: Columns, schema: ModelSchema) -> RowSample:
    return sample({k: v[:20_000] for k, v in reference.items()}, schema)


@pytest.fixture(scope="module")
def profile(profile_dict: dict[str, Any]) -> Profile:
    return profile_from_dict(profile_dict)


def table(
    window: RowSample, reference: RowSample, profile: Profile, *, level: float = SCHEDULED, **settings: Any
) -> list[dict[str, Any]]:
    return segment_table(
        reference=reference, window=window, profile=profile, config=MonitorConfig(**settings), level=level
    )


def flagged(rows: list[dict[str, Any]]) -> list[str]:
    return [r["segment"] for r in rows if r["flagged"]]


def test_a_shift_confined_to_one_region_flags_that_region_alone(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=7)
    rows = table(sample(shifted(cols, cols["region"] == "north"), schema), reference_sample, profile)
    assert flagged(rows) == ["region=north"]
    top = rows[0]
    assert top["segment"] == "region=north" and top["feature"] == "region" and top["value"] == "north"
    assert top["drift"]["drifted"] and top["drift"]["features"][0] == "income"
    assert top["drift"]["own"] == ["income"] and top["drift"]["p_value"] < 1e-12
    assert 0.2 < top["share"] < 0.3 and top["rows"] == int(np.count_nonzero(cols["region"] == "north"))
    assert top["metric"] == "roc_auc" and top["estimate"] == "realised"
    assert {"missing_rate", "reference_missing_rate", "features", "flagged"} <= set(top["quality"])
    # the income of a quarter of each home_ownership level moved too: drifted, but not that segment's own
    rent = next(r for r in rows if r["segment"] == "home_ownership=RENT")
    assert rent["drift"]["drifted"] and not rent["flagged"] and rent["drift"]["own"] == []
    assert any("as in the rest of the window" in reason for reason in rent["reasons"])
    # every default segment is there: each categorical feature's levels, region's four among them
    names = {r["segment"] for r in rows}
    assert {f"region={v}" for v in ("north", "south", "east", "west")} <= names
    assert {"home_ownership=RENT", "home_ownership=MORTGAGE", "home_ownership=OWN"} <= names
    assert all(r["judged"] for r in rows)


def test_no_shift_flags_nothing_at_a_scheduled_level(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    for seed in (11, 12, 13):
        rows = table(sample(generate(20_000, seed=seed), schema), reference_sample, profile)
        assert flagged(rows) == [], seed
        assert not any(r["drift"]["drifted"] for r in rows), seed


def test_the_whole_window_shifted_flags_no_segment(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=8)
    rows = table(sample(shifted(cols, np.ones(20_000, dtype=bool)), schema), reference_sample, profile)
    assert flagged(rows) == []
    assert all(r["drift"]["drifted"] and "income" in r["drift"]["features"] for r in rows)


def test_bins_from_the_settings_segment_a_numeric_feature(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=9)
    young = cols["age"] < 30
    rows = table(
        sample(shifted(cols, young), schema),
        reference_sample,
        profile,
        segments=[{"feature": "age", "bins": [30, 50]}],
    )
    ages = [r for r in rows if r["feature"] == "age"]
    assert sorted(r["segment"] for r in ages) == ["age=(-inf, 30)", "age=[30, 50)", "age=[50, inf)"]
    low = next(r for r in ages if r["segment"] == "age=(-inf, 30)")
    assert low["low"] is None and low["high"] == 30 and "value" not in low
    assert flagged(rows) == ["age=(-inf, 30)"]
    # a numeric feature named without bins: its reference quartiles
    quartiles = table(
        sample(generate(5_000, seed=10), schema),
        reference_sample,
        profile,
        segments=[{"feature": "credit_score"}],
    )
    assert len([r for r in quartiles if r["feature"] == "credit_score"]) == 4


def test_segment_max_levels_zero_keeps_only_the_named_features(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    window = sample(generate(5_000, seed=14), schema)
    assert table(window, reference_sample, profile, segment_max_levels=0) == []
    rows = table(window, reference_sample, profile, segment_max_levels=0, segments=[{"feature": "region"}])
    assert {r["feature"] for r in rows} == {"region"}
    few = table(
        window, reference_sample, profile, segment_max_levels=3
    )  # home_ownership has 3, the rest more
    assert {r["feature"] for r in few} == {"home_ownership"}


def test_a_segment_with_too_few_rows_has_no_verdict(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=15)
    keep = (cols["region"] != "west") | (np.cumsum(cols["region"] == "west") <= 20)  # 20 rows of west
    cols = shifted({k: v[keep] for k, v in cols.items()}, np.zeros(int(keep.sum()), dtype=bool))
    west = cols["region"] == "west"
    cols["income"] = np.where(west, cols["income"] * 0.3, cols["income"])  # a shift it cannot judge
    rows = table(sample(cols, schema), reference_sample, profile)
    row = next(r for r in rows if r["segment"] == "region=west")
    assert row["rows"] == 20 and not row["judged"] and not row["flagged"]
    assert row["drift"] is None and row["change"] is None and "fewer than 50" in row["reasons"][0]
    assert rows[-1] is row or not rows[-1]["judged"]  # unjudged segments rank last
    assert flagged(rows) == []


def test_labels_flipped_in_one_region_flag_its_realised_performance(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=16)
    south = cols["region"] == "south"
    flip = south & (np.random.default_rng(3).random(south.size) < 0.3)
    cols[TARGET] = np.where(flip, 1 - cols[TARGET], cols[TARGET])
    rows = table(sample(cols, schema), reference_sample, profile)
    assert flagged(rows) == ["region=south"]
    top = rows[0]
    assert top["estimate"] == "realised" and top["change"] < -0.1 and not top["drift"]["drifted"]
    assert top["current"] == pytest.approx(top["reference"] + top["change"])
    # without labels the estimate (CBPE) cannot see a flip of labels: nothing flagged
    unlabelled = table(sample(cols, schema, labels=False), reference_sample, profile)
    assert flagged(unlabelled) == [] and unlabelled[0]["estimate"] == "cbpe"


def test_the_table_is_json_ready_and_ranked_by_the_worst_change(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    import json

    cols = generate(20_000, seed=17)
    rows = table(
        sample(shifted(cols, cols["region"] == "east", factor=0.4), schema), reference_sample, profile
    )
    json.dumps(rows, allow_nan=False)
    judged = [r for r in rows if r["judged"]]
    assert judged[0]["segment"] == "region=east"
    p = [r["drift"]["p_value"] for r in judged if not r["flagged"]]
    z = [r.get("z") or 0.0 for r in judged if not r["flagged"]]
    assert all((z[i], -p[i]) >= (z[i + 1], -p[i + 1]) for i in range(len(p) - 1))


def _task_probabilities(cols: Columns) -> np.ndarray:
    """The generator's own P(band | x) of the multi-class target, in the order of BANDS."""
    logit = default_logit(cols)
    low, below_high = 1 / (1 + np.exp(5 + logit)), 1 / (1 + np.exp(logit))
    return np.column_stack([low, below_high - low, 1 - below_high])


def _expected_loss(cols: Columns) -> np.ndarray:
    """The generator's own expected loss of the regression target."""
    return np.asarray(cols["loan_amount"] / 1000.0 * LOSS_GIVEN_DEFAULT / (1 + np.exp(-default_logit(cols))))


@pytest.mark.parametrize("task", [Task.MULTICLASS, Task.REGRESSION])
def test_other_tasks_segment_by_their_own_metric(task: Task) -> None:
    target = TARGETS[task]
    reference = generate(20_000, seed=41, task=task)
    if task is Task.MULTICLASS:
        schema = infer_schema(reference, target=target, task=task, classes=BANDS)
        predict, metric, estimate = _task_probabilities, "macro_f1", "cbpe"
        encode = lambda y: np.array([BANDS.index(v) for v in y], dtype=np.float64)  # noqa: E731
    else:
        schema = infer_schema(reference, target=target, task=task)
        predict, metric, estimate = _expected_loss, "rmse", "dle"
        encode = lambda y: np.asarray(y, dtype=np.float64)  # noqa: E731
    profile = profile_from_dict(
        build_reference_profile(
            reference, schema, predictions=predict(reference), labels=encode(reference[target])
        )
    )

    def rows_of(cols: Columns, *, labels: bool) -> RowSample:
        base = sample({**cols, TARGET: np.zeros(len(cols[target]))}, schema, labels=False)
        y = encode(cols[target]) if labels else None
        return RowSample(columns=base.columns, kinds=base.kinds, predictions=predict(cols), labels=y)

    window = generate(20_000, seed=42, task=task)
    north = window["region"] == "north"
    window["income"] = np.where(north, window["income"] * 0.55, window["income"])
    ref = rows_of(reference, labels=True)
    for labels, wanted in ((True, "realised"), (False, estimate)):
        rows = segment_table(
            reference=ref,
            window=rows_of(window, labels=labels),
            profile=profile,
            config=MonitorConfig(),
            level=SCHEDULED,
        )
        assert flagged(rows) == ["region=north"], (task, labels)
        assert {r["metric"] for r in rows} == {metric} and {r["estimate"] for r in rows} == {wanted}
        assert all(np.isfinite(r["change"]) for r in rows)


def test_a_segment_of_one_class_falls_back_to_the_estimate(
    reference_sample: RowSample, profile: Profile, schema: ModelSchema
) -> None:
    cols = generate(20_000, seed=18)
    cols[TARGET] = np.where(cols["region"] == "east", 0, cols[TARGET])  # no ROC AUC without a positive
    rows = {r["segment"]: r for r in table(sample(cols, schema), reference_sample, profile)}
    assert rows["region=east"]["estimate"] == "cbpe" and np.isfinite(rows["region=east"]["current"])
    assert rows["region=west"]["estimate"] == "realised"


def test_missing_values_are_a_segment_of_their_own(schema: ModelSchema) -> None:
    def with_missing(cols: Columns, seed: int) -> Columns:
        out = {k: np.array(v, copy=True) for k, v in cols.items()}
        missing = np.random.default_rng(seed).random(out["region"].size) < 0.08
        out["region"] = np.where(missing, np.array(None, dtype=object), out["region"])
        return out

    reference = with_missing(generate(20_000, seed=51), 1)
    profile = profile_from_dict(
        build_reference_profile(
            reference, schema, predictions=true_probability(reference), labels=reference[TARGET]
        )
    )
    window = with_missing(generate(20_000, seed=52), 2)
    window = shifted(window, np.equal(window["region"], np.array([None], dtype=object)))
    rows = table(sample(window, schema), sample(reference, schema), profile)
    assert flagged(rows) == ["region=(missing)"]
    assert rows[0]["value"] is None and 0.06 < rows[0]["share"] < 0.1


def test_bin_names_are_exact_and_distinct(profile: Profile) -> None:
    config = MonitorConfig(segments=[SegmentSpec(feature="income", bins=[1234567.25, 1234567.5])])
    (income,) = [p for p in partitions(profile=profile, config=config, kinds={"income": FeatureKind.NUMERIC})]
    assert [s.name for s in income.segments] == [
        "income=(-inf, 1234567.25)",
        "income=[1234567.25, 1234567.5)",
        "income=[1234567.5, inf)",
    ]
