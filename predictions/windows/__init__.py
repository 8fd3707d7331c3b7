"""Windows of the prediction log, read from the database in chunks of numpy columns (for the monitors).

A window is the last ``rows`` answered predictions and/or those of the last ``minutes`` of one model
(optionally of one version), in log order (batch ``id``, then position). The log holds one row per request
(``prediction_batches``, :mod:`predictions.models`), so a window is a range of batch ids, of which the oldest
batch may be cut: the last N predictions end inside a request (``WindowSummary.skip``: its oldest predictions
left out). A time window cuts at the batch's ``logged_at``, which is each of its predictions' time. It is read
in two steps:

1. **Summary** (:func:`summarize_window`): prediction count, first/last ``logged_at`` and the batch id range
   (for a last-N window an index scan of the newest batches on ``(model_name, id)``, which carries their
   sizes, with a running sum); batches written while the window is read get higher ids and are left out.
2. **Chunks** (:func:`read_chunks`): the batch ids are cut into ranges of about ``chunk_rows`` predictions.
   On PostgreSQL each range is one query returning one row: the range's typed inputs (``numbers``),
   outputs and sizes concatenated in id order (``string_agg``), read with ``np.frombuffer``; categories are
   counted from their codes with ``np.bincount`` (:mod:`predictions.typed`). A range whose batches are not all
   typed in one layout holding every asked feature (a request that bypassed the contract, a window across
   versions with other features) is read batch by batch and decoded in Python, so a window may mix both and
   the values stay the same. SQLite reads batch by batch. Two threads fetch the next ranges while the current
   one is counted (PostgreSQL). Each chunk also counts its predictions by their batch's ``source`` (``serve``,
   ``ingest``, ``cloudevents``, ``import``) from the batches' sizes (``Chunk.sources``), with no other read.

A sample of a window's raw rows (:func:`read_sample`: the rows at chosen places, each numeric and
categorical value, the answers, the labels) maps the places to batches by the running sum of the window's
batch sizes and reads, on PostgreSQL, only those rows' slices of the batches' binary columns.

The labels (:func:`labelled_arrays`) are read from ``prediction_feedback`` alone: each label carries its
prediction's batch id, position, output, version and status, so a window's labels are a range of the
feedback's ``(model_name, log_id)`` index. Chunks can carry them too (``labels=True``: scattered by batch id
and position).

The package: :mod:`.spec` (what a window is), :mod:`.summary` (where it lies, its blocks), :mod:`.chunks`
(its rows in chunks), :mod:`.decoding` (batches into columns), :mod:`.labels`, :mod:`.sample`, and
:mod:`.reader`, the one interface the monitors use (:class:`WindowReader`).

Values: a numeric feature is a float (JSON ``null``, an absent key or a value of another type is NaN); a
categorical feature is counted by its text (``None`` when absent); a prediction or label without a value is
NaN.
"""

from predictions.windows.chunks import read_chunks, read_vectors
from predictions.windows.decoding import count_sources
from predictions.windows.labels import labelled_arrays, labelled_chunks
from predictions.windows.reader import WindowReader
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

__all__ = [
    "CHUNK_ROWS",
    "READER",
    "BlockStat",
    "Chunk",
    "SampleRows",
    "WindowReader",
    "WindowSpec",
    "WindowSummary",
    "block_stats",
    "count_sources",
    "labelled_arrays",
    "labelled_chunks",
    "mean_size",
    "narrow",
    "newest_id",
    "read_chunks",
    "read_sample",
    "read_vectors",
    "summarize_blocks",
    "summarize_window",
]
