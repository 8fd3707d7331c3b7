"""The one interface the monitors read a window of the prediction log through: :class:`WindowReader`.

A run plans its window (its summary; with the sketch cache, the aligned blocks of batch ids it covers, see
:meth:`WindowSummary.holds_block`), reads a range's chunks, reads its labels apart (from the feedback alone),
a multi-class window's vectors, and a uniform sample of its raw rows. Each method is one of this package's
functions bound to the database the reader was made for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

import numpy as np
from sqlalchemy import Engine

from predictions.windows.chunks import read_chunks, read_vectors
from predictions.windows.labels import labelled_arrays
from predictions.windows.sample import SampleRows, read_sample
from predictions.windows.spec import CHUNK_ROWS, READER, Chunk, WindowSpec, WindowSummary
from predictions.windows.summary import (
    BlockStat,
    block_stats,
    mean_size,
    narrow,
    newest_id,
    summarize_blocks,
    summarize_window,
)


@dataclass(frozen=True)
class WindowReader:
    """Windows of one database's prediction log (a replica's, when the monitors read from one)."""

    engine: Engine
    NAME: ClassVar[str] = READER  # the reader's name, as a window reports it
    CHUNK_ROWS: ClassVar[int] = CHUNK_ROWS  # predictions per chunk unless told otherwise

    def summarize(
        self, *, model_name: str, spec: WindowSpec, now: datetime | None = None
    ) -> WindowSummary | None:
        """The window's count, time span and batch id range (None: it is empty)."""
        return summarize_window(engine=self.engine, model_name=model_name, spec=spec, now=now)

    def newest_id(self, *, model_name: str, spec: WindowSpec, now: datetime | None = None) -> int | None:
        """The id of the window's newest batch (None: it is empty)."""
        return newest_id(engine=self.engine, model_name=model_name, spec=spec, now=now)

    def mean_size(self, *, model_name: str, spec: WindowSpec, now: datetime | None = None) -> float:
        """The mean predictions per batch of the window's newest batches."""
        return mean_size(engine=self.engine, model_name=model_name, spec=spec, now=now)

    def plan(
        self, *, model_name: str, spec: WindowSpec, block_ids: int, now: datetime | None, upto: int | None
    ) -> tuple[WindowSummary | None, list[BlockStat]]:
        """The window's summary and its aligned blocks of ``block_ids`` batch ids (``upto``: as it stood when
        its newest batch had this id)."""
        return summarize_blocks(
            engine=self.engine, model_name=model_name, spec=spec, block_ids=block_ids, now=now, upto=upto
        )

    def blocks(self, *, summary: WindowSummary, block_ids: int) -> list[BlockStat]:
        """The aligned blocks of the window's batch id range, with the window's predictions in each."""
        return block_stats(engine=self.engine, summary=summary, block_ids=block_ids)

    def chunks(
        self,
        *,
        summary: WindowSummary,
        numeric: Sequence[str],
        categorical: Sequence[str],
        chunk_rows: int = CHUNK_ROWS,
        labels: bool = True,
        ids: tuple[int, int, int] | None = None,
    ) -> Iterator[Chunk]:
        """The window's predictions in chunks (``ids``: only those between two batch ids, about how many
        rows they hold; ``labels`` False: every label NaN, read them with :meth:`labelled`)."""
        if ids is not None:
            low, high, rows = ids
            summary = narrow(summary, first_id=low, last_id=high, rows=rows)
        return read_chunks(
            engine=self.engine,
            summary=summary,
            numeric=numeric,
            categorical=categorical,
            chunk_rows=chunk_rows,
            labels=labels,
        )

    def labelled(self, *, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
        """The window's labelled predictions and their labels, in log order, from the feedback alone."""
        return labelled_arrays(engine=self.engine, summary=summary)

    def vectors(
        self, *, summary: WindowSummary, width: int, chunk_rows: int = CHUNK_ROWS
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """A multi-class window's probability vectors and labels, in log order, chunk by chunk."""
        return read_vectors(engine=self.engine, summary=summary, width=width, chunk_rows=chunk_rows)

    def sample(
        self,
        *,
        summary: WindowSummary,
        positions: np.ndarray,
        numeric: Sequence[str],
        categorical: Sequence[str],
        width: int | None = None,
    ) -> SampleRows:
        """The window's rows at ``positions`` (increasing places, 0 its oldest prediction)."""
        return read_sample(
            engine=self.engine,
            summary=summary,
            positions=positions,
            numeric=numeric,
            categorical=categorical,
            width=width,
        )
