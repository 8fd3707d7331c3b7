"""Builders for monitor tests that need a prediction log and a registered version (no TensorFlow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from core.database import Database
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from predictions import typed
from registry.service import promote, register_version
from tests.predictions.logdata import log_columns, plain

__all__ = ["log_columns", "plain", "register_profile"]


def register_profile(
    db: Database, root: Path, profile: dict[str, Any], *, model: str = "credit", version: int = 1
) -> Path:
    """A registered, serving version whose folder holds only ``driftwarden/profile.json``."""
    path = root / model / str(version)
    (path / "driftwarden").mkdir(parents=True)
    (path / "driftwarden" / "profile.json").write_text(json.dumps(profile))
    with db.session() as s:
        register_version(session=s, model_name=model, version=version, path=path, metrics={}, lineage={})
        promote(session=s, model_name=model, version=version)
    return path


def contract(profile: Profile) -> typed.Layout:
    """The typed layout of the profile's features and known categories (as the serving flow logs them)."""
    numeric = [n for n, f in profile.features.items() if isinstance(f, NumericProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    known = [sorted(cast(CategoricalProfile, profile.features[c]).categories) for c in categorical]
    return typed.make_layout(numeric, categorical, known)
