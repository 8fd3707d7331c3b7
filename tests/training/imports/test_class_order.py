"""``models import --target``: the class order is checked, not assumed (issue 40, item 2).

A 3-class model whose outputs are ``[low, mid, high]`` (not the sorted ``[high, low, mid]``) and a binary
model whose probability is of label 0, written in plain Keras (fixed weights: no training), and the same
answers served elsewhere: the wrong order is refused in one line naming the order that fits and the flag
that settles it, nothing registered; with the flag the version registers above chance. The pure check
(``training.imports.class_order``) is tested for its false alarms and for a large K.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from registry.saved_model import load
from registry.service import list_versions
from tests import own_models
from tests.training.helpers import refused, run_cli
from training.imports.class_order import check_binary, check_multiclass

ORDER = ("low", "mid", "high")  # the model's output order; sorted it would be high, low, mid


def _score_weights() -> np.ndarray:
    """The kernel of ``score = a + 0.5 b`` on the dense input ``[a, b, c]``."""
    return np.array([[1.0], [0.5], [0.0]], dtype=np.float32)


def write_ordered_multiclass(path: Path) -> Path:
    """A Keras model on one dense ``[batch, 3]`` input: softmax of ``[-3s, 0, 3s]`` (low, mid, high)."""
    import keras

    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(3, activation="softmax")])
    kernel = _score_weights() @ np.array([[-3.0, 0.0, 3.0]], dtype=np.float32)
    model.layers[0].set_weights([kernel, np.array([0.0, 1.0, 0.0], dtype=np.float32)])
    model.export(str(path), verbose=False)
    return path


def write_label0_binary(path: Path) -> Path:
    """A Keras model on ``[a, b, c]`` answering the probability of label **0**: sigmoid(-(2s - 0.4))."""
    import keras

    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.layers[0].set_weights([-2.0 * _score_weights(), np.array([0.4], dtype=np.float32)])
    model.export(str(path), verbose=False)
    return path


def write_two_column_binary(path: Path) -> Path:
    """A Keras model on ``[a, b, c]`` answering ``[P(label 1), P(label 0)]``: softmax of ``[2s, 0.4]``."""
    import keras

    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2, activation="softmax")])
    kernel = _score_weights() @ np.array([[2.0, 0.0]], dtype=np.float32)
    model.layers[0].set_weights([kernel, np.array([0.0, 0.4], dtype=np.float32)])
    model.export(str(path), verbose=False)
    return path


def _score(data: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(data["a"] + 0.5 * data["b"])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("order")
    data = own_models.reference(2_000, seed=4)
    s = _score(data)
    logits = np.stack([-3.0 * s, np.ones_like(s), 3.0 * s], axis=1)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    rng = np.random.default_rng(9)
    noise = rng.dirichlet(np.ones(3), len(s))  # answers that know nothing of the labels
    write_table(
        {
            **data,
            "probs": np.array([json.dumps(r) for r in probs.tolist()], dtype=object),
            "noise": np.array([json.dumps(r) for r in noise.tolist()], dtype=object),
            "p_zero": 1.0 / (1.0 + np.exp(2.0 * s - 0.4)),
        },
        root / "reference.csv",
    )
    return {
        "reference": root / "reference.csv",
        "multiclass": write_ordered_multiclass(root / "multiclass"),
        "binary": write_label0_binary(root / "binary"),
        "two": write_two_column_binary(root / "two"),
    }


def _versions(database_url: str, name: str) -> list[int]:
    db = open_database(database_url)
    try:
        with db.session() as s:
            return sorted(v.version for v in list_versions(session=s, model_name=name))
    finally:
        db.dispose()


def _doc(registry: Path, name: str, version: int, doc: str) -> dict:
    return json.loads((registry / name / str(version) / "driftwarden" / f"{doc}.json").read_text())


def test_shuffled_classes_are_refused_naming_the_order_and_registered_with_it(
    files: dict[str, Path], cli: Path, database_url: str
) -> None:
    base = ("models", "import", "seg", files["multiclass"], "-r", files["reference"], "--features", "a,b,c")
    refused(
        run_cli(*base, "--target", "y_cls"), "--classes low,mid,high", "another order", "(the sorted labels)"
    )
    refused(
        run_cli(*base, "--target", "y_cls", "--classes", "mid,high,low"),
        "--classes low,mid,high",
        "from --classes",
    )
    assert _versions(database_url, "seg") == []
    assert not (cli / "seg").exists() or not any((cli / "seg").glob("[0-9]*"))

    done = run_cli(*base, "--target", "y_cls", "--classes", "low,mid,high")
    assert done.exit_code == 0, done.output
    assert _doc(cli, "seg", 1, "schema")["classes"] == list(ORDER)
    metrics = _doc(cli, "seg", 1, "metrics")
    assert metrics["accuracy"] > 0.6, metrics  # chance is about 1/3

    # without --target there are no labels to check against: the order is taken as given
    assert run_cli(*base).exit_code == 0
    assert _versions(database_url, "seg") == [1, 2]


def test_served_elsewhere_shuffled_or_no_better_than_chance_is_refused(
    files: dict[str, Path], cli: Path, database_url: str
) -> None:
    base = (
        "models",
        "import",
        "ext",
        "-r",
        files["reference"],
        "--target",
        "y_cls",
        "--features",
        "a,b,c,color",
    )
    refused(run_cli(*base, "--prediction-column", "probs"), "--classes low,mid,high")
    noise = run_cli(*base, "--prediction-column", "noise")
    refused(noise, "not clearly above chance", "--accept-below-chance")
    assert _versions(database_url, "ext") == []
    ok = run_cli(*base, "--prediction-column", "probs", "--classes", "low,mid,high")
    assert ok.exit_code == 0, ok.output
    assert _doc(cli, "ext", 1, "metrics")["accuracy"] > 0.6
    insisted = run_cli(*base, "--prediction-column", "noise", "--accept-below-chance")
    assert insisted.exit_code == 0, insisted.output
    assert _versions(database_url, "ext") == [1, 2]


def test_a_probability_of_label_0_is_refused_and_settled_by_positive_class(
    files: dict[str, Path], cli: Path, database_url: str
) -> None:
    base = ("models", "import", "bin", files["binary"], "-r", files["reference"], "--features", "a,b,c")
    refused(run_cli(*base, "--target", "y_bin"), "of the other label", "--positive-class 0")
    refused(run_cli(*base, "--target", "y_bin", "--positive-class", "2"), "--positive-class must be 0 or 1")
    refused(run_cli(*base, "--target", "y_cls", "--positive-class", "0"), "applies to a binary model")
    elsewhere = ("models", "import", "bin", "-r", files["reference"], "--features", "a,b,c,color")
    refused(
        run_cli(*elsewhere, "--prediction-column", "p_zero", "--target", "y_bin"), "recode --target 'y_bin'"
    )
    refused(
        run_cli(*elsewhere, "--prediction-column", "p_zero", "--target", "y_bin", "--positive-class", "0"),
        "served elsewhere",
    )
    assert _versions(database_url, "bin") == []

    done = run_cli(*base, "--target", "y_bin", "--positive-class", "0")
    assert done.exit_code == 0, done.output
    assert _doc(cli, "bin", 1, "metrics")["roc_auc"] > 0.8
    assert _doc(cli, "bin", 1, "lineage")["positive_class"] == 0
    data = own_models.reference(50, seed=11)
    served = np.asarray(
        load(cli / "bin" / "1")({k: data[k].astype(np.float32) for k in ("a", "b", "c")})["probability"]
    )
    source = own_models.direct(files["binary"], data).reshape(-1)
    np.testing.assert_allclose(served, 1.0 - source, atol=1e-5)


# -- the pure check ---------------------------------------------------------------------------------


def test_a_right_order_is_not_called_wrong_even_when_two_classes_are_confused() -> None:
    """A model that tells class 0 apart but cannot tell 1 from 2: swapping 1 and 2 gains nothing real."""
    flagged = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        y = rng.integers(0, 3, 600)
        p = rng.dirichlet(np.ones(3), 600)
        p[y == 0, 0] += 2.0
        p /= p.sum(axis=1, keepdims=True)
        found = check_multiclass(labels=y.astype(float), probabilities=p)
        assert found is not None and not found.at_chance
        flagged += found.reordered
    assert flagged == 0


def test_the_best_of_many_orders_is_found() -> None:
    rng = np.random.default_rng(1)
    k = 9
    y = rng.integers(0, k, 3_000)
    logits = rng.normal(0, 1, (3_000, k))
    logits[np.arange(3_000), y] += 2.5
    shuffle = rng.permutation(k)  # column j holds the class shuffle[j]
    p = np.exp(logits[:, shuffle])
    p /= p.sum(axis=1, keepdims=True)
    found = check_multiclass(labels=y.astype(float), probabilities=p)
    assert found is not None and found.reordered
    assert found.best == tuple(int(v) for v in shuffle)
    assert found.best_accuracy > 0.5
    labels = np.where(rng.random(3_000) < 0.1, np.nan, y)  # unlabelled rows are left out
    assert check_multiclass(labels=labels, probabilities=p).best == found.best  # type: ignore[union-attr]


def test_binary_flipped_and_at_chance() -> None:
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 1_000).astype(float)
    p = 1.0 / (1.0 + np.exp(-(2.0 * y - 1.0 + rng.normal(0, 1, 1_000))))
    right = check_binary(labels=y, probabilities=p)
    flipped = check_binary(labels=y, probabilities=1.0 - p)
    assert right is not None and not right.flipped and not right.at_chance
    assert flipped is not None and flipped.flipped and flipped.auc == pytest.approx(1.0 - right.auc)
    assert check_binary(labels=np.ones(10), probabilities=np.linspace(0, 1, 10)) is None


def test_a_two_column_output_whose_first_column_is_label_1(
    files: dict[str, Path], cli: Path, database_url: str
) -> None:
    base = ("models", "import", "two", files["two"], "-r", files["reference"], "--features", "a,b,c")
    refused(run_cli(*base, "--target", "y_bin"), "of the other label", "--positive-class 0")
    assert _versions(database_url, "two") == []
    done = run_cli(*base, "--target", "y_bin", "--positive-class", "0")
    assert done.exit_code == 0, done.output
    assert _doc(cli, "two", 1, "metrics")["roc_auc"] > 0.8
    data = own_models.reference(50, seed=12)
    served = np.asarray(
        load(cli / "two" / "1")({k: data[k].astype(np.float32) for k in ("a", "b", "c")})["probability"]
    )
    np.testing.assert_allclose(served, own_models.direct(files["two"], data)[:, 0], atol=1e-5)
