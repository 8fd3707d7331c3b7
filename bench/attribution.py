"""Seconds of ``monitors.attribution.attribute`` on a small Keras model at 2,000 window rows.

    .venv/bin/python bench/attribution.py                      # 2, 4, 8 and 12 drifted features
    .venv/bin/python bench/attribution.py --drifted 8 --repeat 5 --threads 2

A Keras functional model of 12 numeric ``[batch, 1]`` inputs (Dense 16 relu, Dense 1 sigmoid), trained for a
few epochs, is imported into a scratch registry as a team's own SavedModel (``driftwarden models import``'s
path) and asked through ``monitors.predictors.predictor_for``, as a monitor run asks it. The window moves
every feature by 0.5 sd; the first ``--drifted`` of them are attributed. Prints, per count, the coalitions
evaluated, the model rows and the median / best seconds over ``--repeat`` calls (after one warm-up call).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

FEATURES = [f"f{i}" for i in range(12)]


def _table(n: int, *, seed: int, shift: float = 0.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = {name: rng.normal(shift, 1.0, n) for name in FEATURES}
    z = sum((1.0 / (1 + i)) * cols[name] for i, name in enumerate(FEATURES))
    cols["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * z))).astype(np.int64)
    return cols


def _keras_model(path: Path, data: dict[str, np.ndarray]) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    inputs = {name: keras.Input(shape=(1,), name=name, dtype="float32") for name in FEATURES}
    x = keras.layers.Concatenate()(list(inputs.values()))
    x = keras.layers.Dense(16, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="binary_crossentropy")
    feeds = {name: data[name].astype("float32")[:, None] for name in FEATURES}
    model.fit(feeds, data["y"].astype("float32"), epochs=3, batch_size=128, verbose=0)
    model.export(str(path), verbose=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drifted", type=int, nargs="*", default=[2, 4, 8, 12])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=2, help="TensorFlow intra-op threads (0: one per core)"
    )
    args = parser.parse_args()

    from core.database import open_database
    from core.tabular import write_table
    from monitors.attribution import attribute
    from monitors.predictors import predictor_for
    from monitors.profile import read_profile
    from monitors.rows import RowSample
    from registry.saved_model import limit_threads
    from registry.schema import FeatureKind
    from registry.service import read_schema
    from training.imports import ImportSpec, import_saved_model

    limit_threads(intra_op=args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = _table(10_000, seed=0)
        write_table(data, root / "reference.csv")
        source = _keras_model(root / "keras", data)
        db = open_database(f"sqlite:///{root / 'bench.db'}", upgrade=True)
        try:
            spec = ImportSpec(model_name="bench", path=source, reference=root / "reference.csv", target="y")
            path = Path(import_saved_model(spec=spec, db=db, registry=root / "registry").version.path)
        finally:
            db.dispose()
        profile = read_profile(path / "driftwarden" / "profile.json")
        predictor = predictor_for(version_dir=path, profile=profile, schema=read_schema(path=path))
        assert predictor is not None
        kinds = dict.fromkeys(FEATURES, FeatureKind.NUMERIC)

        def sample(cols: dict[str, np.ndarray]) -> RowSample:
            features = {name: cols[name] for name in FEATURES}
            return RowSample(features, kinds, predictor.predict(features))

        reference = sample(_table(5_000, seed=1))
        window = sample(_table(20_000, seed=2, shift=0.5))
        print(
            f"attribute() on a Keras model (12 inputs), TF intra-op threads {args.threads}, window 2,000 rows"
        )
        print(f"{'drifted':>8} {'coalitions':>11} {'model rows':>11} {'median s':>9} {'best s':>8}")
        for count in args.drifted:
            drifted = FEATURES[:count]
            attribute(
                reference=reference, window=window, drifted=drifted, predictor=predictor, profile=profile
            )
            times, doc = [], None
            for _ in range(args.repeat):
                started = time.perf_counter()
                doc = attribute(
                    reference=reference, window=window, drifted=drifted, predictor=predictor, profile=profile
                )
                times.append(time.perf_counter() - started)
            assert doc is not None
            rows = doc["evaluations"] * doc["rows"]
            median = statistics.median(times)
            print(f"{count:>8} {doc['evaluations']:>11} {rows:>11,} {median:>9.3f} {min(times):>8.3f}")


if __name__ == "__main__":
    main()
