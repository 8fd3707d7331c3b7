"""The predictor attribution asks for a version's answers: its own SavedModel through TensorFlow (imported
only when one is loaded), else the surrogate fitted on its reference (a version served elsewhere).

A loaded model is kept per version folder in a small LRU cache of this process (a version's files never
change once published), since the scheduled runs ask every few minutes.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from monitors.profile import Profile
from monitors.rows import Additive, Predictor
from monitors.surrogate import surrogate_answers, surrogate_parts, surrogate_predict
from registry.inputs import model_answers
from registry.schema import ModelSchema

if TYPE_CHECKING:
    from collections.abc import Mapping

    from registry.saved_model import SignatureRunner

log = logging.getLogger("driftwarden.monitors.predictors")

BATCH = 65_536  # rows per model call
CACHED_MODELS = 4


def has_model(version_dir: Path | None) -> bool:
    """Whether the version folder holds a SavedModel."""
    return version_dir is not None and (version_dir / "saved_model.pb").is_file()


@lru_cache(maxsize=CACHED_MODELS)
def _runner(path: str) -> SignatureRunner:
    """The version's loaded signature, once per folder in this process."""
    from registry.saved_model import load

    return load(Path(path))


def predictor_for(
    *, version_dir: Path | None, profile: Profile, schema: ModelSchema | None
) -> Predictor | None:
    """The version's own model (``method="model"``), else its profile's surrogate (``"surrogate"``, with its
    fit); None: neither."""
    if schema is not None and version_dir is not None and has_model(version_dir):
        try:
            runner = _runner(str(version_dir.resolve()))
        except Exception as exc:  # a SavedModel TensorFlow cannot load: the surrogate, if any, answers
            log.warning(
                "attribution: the model of %s does not load (%s); its surrogate answers", version_dir, exc
            )
        else:

            def predict(columns: Mapping[str, np.ndarray]) -> np.ndarray:
                return model_answers(runner, schema, columns, batch=BATCH)

            return Predictor(predict=predict, method="model")
    surrogate = profile.surrogate
    if surrogate is None:
        return None

    def answer(columns: Mapping[str, np.ndarray]) -> np.ndarray:
        return surrogate_predict(surrogate, columns)

    additive = Additive(
        parts=lambda columns: surrogate_parts(surrogate, columns),
        answers=lambda scores: surrogate_answers(surrogate, scores),
    )
    return Predictor(
        predict=answer, method="surrogate", fit=dict(surrogate.get("fit") or {}), additive=additive
    )
