"""The serving call of a SavedModel answers exactly as TensorFlow's public signature call does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from registry.contracts import check_inputs, rows_to_columns
from registry.saved_model import SignatureRunner
from registry.schema import ModelSchema
from tests.support import TrainedModels


@pytest.fixture(scope="module")
def runner(trained: TrainedModels) -> SignatureRunner:
    return SignatureRunner(trained.paths[1])


def _columns(trained: TrainedModels, rows: list[dict[str, object]]) -> dict[str, np.ndarray]:
    schema = ModelSchema.from_dict(json.loads((trained.paths[1] / "driftwarden" / "schema.json").read_text()))
    values, n = rows_to_columns(schema, rows)
    return check_inputs(schema, values, n, max_rows=n).arrays


def test_the_flat_call_is_used_on_the_pinned_tensorflow(runner: SignatureRunner) -> None:
    assert runner.flat_call  # the probe at load found it and it answered as the public call


@pytest.mark.parametrize("n", [1, 7, 32, 300])
def test_outputs_equal_the_public_signature_call(
    trained: TrainedModels, runner: SignatureRunner, n: int
) -> None:
    import tensorflow as tf

    columns = _columns(trained, trained.rows[:n])
    served = runner(columns)
    fn = tf.saved_model.load(str(trained.paths[1])).signatures["serving_default"]
    feeds = {name: tf.constant(columns[name], dtype=dtype) for name, dtype in runner.inputs.items()}
    direct = {name: value.numpy() for name, value in fn(**feeds).items()}
    assert set(served) == set(direct)
    for name in direct:
        assert served[name].dtype == direct[name].dtype
        assert served[name].tobytes() == direct[name].tobytes()  # bit for bit


def test_without_the_flat_call_the_public_call_answers_the_same(
    trained: TrainedModels, runner: SignatureRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = _columns(trained, trained.rows[:50])
    flat = runner(columns)
    monkeypatch.setattr(runner, "flat_call", False)
    public = runner(columns)
    assert {k: v.tobytes() for k, v in flat.items()} == {k: v.tobytes() for k, v in public.items()}
