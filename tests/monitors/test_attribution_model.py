"""Attribution through a real SavedModel: a team's plain Keras model (tests/own_models.py) imported into a
registry, asked through ``predictor_for``; and the same model served elsewhere, through its surrogate.

The model's label depends on ``a`` (and ``b``, ``color``), not on ``c``: squeezing ``a`` toward the
decision boundary makes the model separate the rows less well, squeezing ``c`` as much leaves it alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from monitors.attribution import attribute
from monitors.predictors import _runner, has_model, predictor_for
from monitors.profile import Profile, profile_from_dict
from monitors.rows import RowSample
from monitors.surrogate import fit_surrogate
from registry.schema import FeatureKind, ModelSchema
from registry.service import read_schema
from tests import own_models


@dataclass(frozen=True)
class Imported:
    path: Path
    schema: ModelSchema
    profile: Profile
    reference: RowSample


def _sample(schema: ModelSchema, data: dict[str, np.ndarray], predictions: np.ndarray) -> RowSample:
    kinds = {spec.name: spec.kind for spec in schema.features}
    columns = {
        name: np.asarray(data[name], dtype=np.float64)
        if kind is FeatureKind.NUMERIC
        else np.asarray(data[name], dtype=object)
        for name, kind in kinds.items()
    }
    return RowSample(columns, kinds, np.asarray(predictions, dtype=np.float64))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Imported]:
    """The binary Keras model imported as ``own:1`` (SQLite registry), with its profile and a reference
    sample of its own answers."""
    from training.imports import ImportSpec, import_saved_model

    root = tmp_path_factory.mktemp("attribution-model")
    data = own_models.reference(4_000, seed=0)
    write_table(data, root / "reference.csv")
    source = own_models.write_binary(root / "binary", data)
    db = open_database(f"sqlite:///{root / 'registry.db'}", upgrade=True)
    try:
        done = import_saved_model(
            spec=ImportSpec(model_name="own", path=source, reference=root / "reference.csv", target="y_bin"),
            db=db,
            registry=root / "registry",
        )
    finally:
        db.dispose()
    path = Path(done.version.path)
    schema = read_schema(path=path)
    stored = json.loads((path / "driftwarden" / "profile.json").read_text())
    profile = profile_from_dict({k: v for k, v in stored.items() if k != "surrogate"})  # only where asked
    predictor = predictor_for(version_dir=path, profile=profile, schema=schema)
    assert predictor is not None
    sample = {k: v[:3_000] for k, v in own_models.reference(3_000, seed=1).items()}
    yield Imported(path, schema, profile, _sample(schema, sample, predictor.predict(sample)))


def _window(imported: Imported, *, squeeze: str | None) -> RowSample:
    data = own_models.reference(4_000, seed=2)
    if squeeze == "a":
        data["a"] = 0.4 * data["a"]
    elif squeeze == "c":
        data["c"] = np.round(3.0 + 0.4 * (data["c"] - 3.0))
    return _sample(imported.schema, data, np.zeros(4_000))


def _attribute(imported: Imported, predictor: Any, window: RowSample, drifted: list[str]) -> dict[str, Any]:
    doc = attribute(
        reference=imported.reference,
        window=window,
        drifted=drifted,
        predictor=predictor,
        profile=imported.profile,
    )
    assert doc is not None
    return doc


def test_the_versions_own_model_answers_through_predictor_for(imported: Imported) -> None:
    assert has_model(imported.path)
    predictor = predictor_for(version_dir=imported.path, profile=imported.profile, schema=imported.schema)
    assert predictor is not None and predictor.method == "model" and predictor.fit is None
    data = own_models.reference(200, seed=5)
    want = own_models.direct(imported.path.parent.parent.parent / "binary", data).reshape(-1)
    np.testing.assert_allclose(
        predictor.predict(_sample(imported.schema, data, want).columns), want, atol=1e-5
    )
    before = _runner.cache_info().hits
    predictor_for(version_dir=imported.path, profile=imported.profile, schema=imported.schema)
    assert _runner.cache_info().hits == before + 1  # loaded once per version folder


@pytest.mark.parametrize("method", ["model", "surrogate"])
def test_a_shift_the_model_relies_on_against_one_it_ignores(imported: Imported, method: str) -> None:
    if method == "model":
        predictor = predictor_for(version_dir=imported.path, profile=imported.profile, schema=imported.schema)
    else:  # a version served elsewhere: its surrogate, fitted on the reference sample of its answers
        surrogate = fit_surrogate(imported.reference, imported.schema.kind)
        assert surrogate is not None and surrogate["fit"]["value"] > 0.9
        raw = {**_profile_dict(imported), "surrogate": surrogate}
        predictor = predictor_for(version_dir=None, profile=profile_from_dict(raw), schema=imported.schema)
    assert predictor is not None and predictor.method == method

    both = _attribute(imported, predictor, _window(imported, squeeze="a"), ["c", "a"])
    assert both["method"] == method and both["significant"] and both["change"] < 0
    top = both["features"][0]
    assert top["name"] == "a" and top["impact"] > 0.8 and not top["harmless"]
    assert "explains" in both["message"] and both["message"].startswith("a explains")

    alone = _attribute(imported, predictor, _window(imported, squeeze="c"), ["c"])
    (c,) = alone["features"]
    assert c["harmless"] and c["message"].endswith("it explains none of the estimated ROC AUC change")
    sizes = {e["name"]: e["drift"] for e in both["features"]} | {"c (alone)": c["drift"]}
    assert 0.3 < sizes["a"] < 0.7 and 0.3 < sizes["c (alone)"] < 0.7, sizes  # shifts of about one size
    if method == "surrogate":
        assert alone["surrogate_fit"] == predictor.fit and "a surrogate of the model" in alone["message"]


def _profile_dict(imported: Imported) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((imported.path / "driftwarden" / "profile.json").read_text())
    return data


def test_a_model_that_does_not_load_leaves_the_surrogate_to_answer(
    imported: Imported, tmp_path: Path
) -> None:
    broken = tmp_path / "own" / "9"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    assert predictor_for(version_dir=broken, profile=imported.profile, schema=imported.schema) is None
    surrogate = fit_surrogate(imported.reference, imported.schema.kind)
    with_surrogate = profile_from_dict({**_profile_dict(imported), "surrogate": surrogate})
    predictor = predictor_for(version_dir=broken, profile=with_surrogate, schema=imported.schema)
    assert predictor is not None and predictor.method == "surrogate"
