"""The catalog of drift tests: one list by feature kind and name, read by the engine, config and report."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from monitors.config import FeatureOverride, MonitorConfig
from monitors.drift.catalog import DEFAULT, TESTS, choices, lookup, reported_names
from monitors.engine import compare
from monitors.profile import profile_from_dict
from monitors.report import report_from_dict
from registry.schema import FeatureKind
from training.cluster.datagen import generate


def test_names_are_unique_per_kind_and_reported_ones_are_the_class_names() -> None:
    for kind in FeatureKind:
        names = choices(kind)
        assert len(names) == len(set(names)) and DEFAULT in names
        for name in names:
            assert lookup(kind, name).__name__  # every name resolves to a class
    for t in TESTS:
        if t.reported:
            assert t.name == t.test.name  # the key of a report's statistics is the test's own name
    with pytest.raises(ValueError, match=r"unknown categorical test 'ks'; choose from \['chi_square'"):
        lookup(FeatureKind.CATEGORICAL, "ks")


def test_config_accepts_every_catalog_name_and_rejects_others() -> None:
    for name in choices(FeatureKind.NUMERIC):
        MonitorConfig(
            numeric_test=name,
            prediction=FeatureOverride(test=name),
            features={"x": FeatureOverride(test=name)},
        )
    for name in choices(FeatureKind.CATEGORICAL):
        MonitorConfig(categorical_test=name, features={"x": FeatureOverride(test=name)})
    with pytest.raises(ValidationError, match="unknown numeric test 't_test'"):
        MonitorConfig(numeric_test="t_test")
    with pytest.raises(ValidationError, match="unknown categorical test 'wasserstein'"):
        MonitorConfig(categorical_test="wasserstein")
    with pytest.raises(ValidationError, match="unknown numeric test 'chi_square'"):
        MonitorConfig.model_validate({"prediction": {"test": "chi_square"}})
    with pytest.raises(ValidationError, match="unknown test 'kss'"):
        MonitorConfig.model_validate({"features": {"age": {"test": "kss"}}})


def test_report_statistics_follow_the_catalog_order_also_after_storage(profile_dict: dict[str, Any]) -> None:
    report = compare(profile=profile_from_dict(profile_dict), columns=generate(2_000, seed=3))
    kinds = {f.kind for f in report.features}
    assert kinds == {"numeric", "categorical"}
    for f in report.features:
        assert tuple(f.statistics) == reported_names(f.kind)
    # a stored report (JSONB does not keep key order) comes back in the same order
    stored = json.loads(json.dumps(report.as_dict(), sort_keys=True))
    again = report_from_dict(stored)
    assert [tuple(f.statistics) for f in again.features] == [tuple(f.statistics) for f in report.features]
    assert again.multivariate is not None
    assert tuple(again.multivariate.statistics) == reported_names(FeatureKind.NUMERIC)
