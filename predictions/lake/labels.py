"""Labels into the lake: beside the database's feedback (``lake_mode=also``) or instead of it (``only``).

With ``only`` the log is not in the database, so a label cannot be checked against its prediction there:
every label is written to the lake as it comes (its prediction may be in a file not yet committed, or in
another writer's), and the reader's join by prediction id (Spark's, on the window) leaves out labels of
predictions the lake does not hold. A repeated id in one call keeps its last label; a label resent later is
a new row, and the newest ``received_at`` wins, as in the database.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

import pyarrow as pa

from core.errors import Unavailable
from predictions.lake.sink import LakeSink


def store_lake_labels(
    *, sink: LakeSink, model_name: str, labels: Sequence[tuple[str, float]], skip: Collection[str] = ()
) -> int:
    """Commit ``labels`` (but those of ids in ``skip``: unknown to the database) to the lake now; returns
    the labels written. A lake that cannot be written raises :class:`Unavailable` naming it (nothing is
    written half; the caller may resend)."""
    latest = {pid: label for pid, label in labels if pid not in skip}
    if not latest:
        return 0
    now = datetime.now(UTC)
    try:
        return sink.write_labels(model_name, [(pid, label, now) for pid, label in latest.items()])
    except (OSError, pa.ArrowException) as exc:
        first = str(exc).strip().splitlines()
        raise Unavailable(
            f"lake {sink.target.url!r} cannot be written, labels not stored: {first[0] if first else exc}"
        ) from exc
