"""Builders of the sharding tests: applications with a high-cardinality id column."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.tabular import write_table
from tests.training.helpers import Workspace
from training.cluster.datagen import generate

ID_LEVELS = 200_000


def with_id(rows: int, *, levels: int = ID_LEVELS, seed: int = 0) -> dict[str, np.ndarray]:
    """``rows`` generated applications plus ``merchant_id``: the first ``levels`` rows each hold a new id
    (so the column has ``min(rows, levels)`` distinct values), the rest repeat them."""
    columns = dict(generate(rows, seed=seed))
    rng = np.random.default_rng(seed)
    codes = np.arange(rows) % levels
    rng.shuffle(codes)
    columns["merchant_id"] = np.array([f"m{c:06d}" for c in codes], dtype=object)
    return columns


def write_with_id(path: Path, rows: int, *, levels: int = ID_LEVELS, seed: int = 0) -> Path:
    """:func:`with_id` written to ``path`` (CSV or Parquet by its suffix)."""
    write_table(with_id(rows, levels=levels, seed=seed), path)
    return path


@dataclass
class ShardWorkspace(Workspace):
    """A :class:`Workspace` whose CLI runs also get ``extra`` settings (``DRIFTWARDEN_*`` variables)."""

    extra: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.extra}
