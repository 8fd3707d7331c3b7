"""What :func:`driftwarden.compare` accepts as a side: a pandas DataFrame, a pyarrow Table, or a path.

Frames and tables stay in memory: they are read batch by batch, like a file, by the same
:class:`core.tabular.TableStream` that ``driftwarden drift`` reads its files with (no temporary file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driftwarden.errors import InvalidInput

if TYPE_CHECKING:
    from monitors.offline import Source

TableLike = Any
"""A pandas DataFrame, a pyarrow Table (or RecordBatch), or a ``.csv`` / ``.parquet`` path (str or Path)."""


def as_source(value: TableLike, *, side: str) -> Source:
    """``value`` as one side of a comparison (``side`` names it in messages: REFERENCE or CURRENT)."""
    import pyarrow as pa

    from core.tabular import MemoryTable

    if isinstance(value, str | os.PathLike):
        return Path(value)
    if isinstance(value, pa.RecordBatch):
        value = pa.Table.from_batches([value])
    if isinstance(value, pa.Table):
        return MemoryTable(value, name="(a pyarrow Table)")
    pandas = sys.modules.get("pandas")  # not loaded: the value cannot be a DataFrame
    if pandas is not None and isinstance(value, pandas.DataFrame):
        return MemoryTable(_from_pandas(value, side=side, pa=pa), name="(a pandas DataFrame)")
    raise InvalidInput(
        f"{side.lower()}: expected a pandas DataFrame, a pyarrow Table or the path of a .csv or .parquet "
        f"file, got {type(value).__module__}.{type(value).__qualname__}"
    )


def _from_pandas(frame: Any, *, side: str, pa: Any) -> Any:
    """A DataFrame as an Arrow table, its columns as they are (numbers without a copy), its index left out;
    a column Arrow cannot type (mixed numbers and text) is refused, named."""
    names = [str(c) for c in frame.columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidInput(f"{side}: duplicate column names {twice}: rename them so each is unique")
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise InvalidInput(
            f"{side}: a column cannot be read as one type ({reason}); give each column numbers or text only"
        ) from None
