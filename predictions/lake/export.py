"""``predictions export``: the database's log of one model copied into the lake, in the sink's layout.

The copy goes hour by hour (the lake's partitions): each hour's predictions are read from the database
(:func:`predictions.service.log_batches`) and written as one file per feature layout named for the hour,
``export-<yyyymmddhh>-<part>.parquet``, so a run again over the same hours **replaces** those files instead
of adding rows a second time (files of a part the new run has not written are removed after it wrote its
own: a reader sees the old copy or the new one, for a moment both parts of a changed hour). The labels of
those predictions go to ``labels/`` by their ``received_at``, under the same names. Rows the live sink
wrote (``lake_mode=also``) are not looked at: export the hours from before the sink was turned on
(``--until``), or the rows of those hours are in the lake twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from core.database import Database
from predictions.lake import layout as lake
from predictions.lake.arrow import label_tables, prediction_tables
from predictions.lake.files import Lake, write_file
from predictions.service import feedback_rows, load_layouts, log_batches

HOUR = timedelta(hours=1)


@dataclass
class Exported:
    """What an export copied."""

    model: str
    since: datetime
    until: datetime
    predictions: int = 0
    labels: int = 0
    hours: int = 0  # hours that held predictions
    files: list[str] = field(default_factory=list)

    def as_dict(self, lake_url: str) -> dict[str, object]:
        """The command's ``--json`` document."""
        return {
            "model": self.model,
            "lake": lake_url,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "predictions": self.predictions,
            "labels": self.labels,
            "hours": self.hours,
            "files": len(self.files),
        }


def hours_between(start: datetime, end: datetime) -> int:
    """How many partition hours ``[start, end)`` touches."""
    return max(0, int((lake.hour_of(end - timedelta(microseconds=1)) - lake.hour_of(start)) / HOUR) + 1)


def export_model(
    *,
    db: Database,
    target: Lake,
    model_name: str,
    since: datetime,
    until: datetime,
    progress: Callable[[int], None] | None = None,
) -> Exported:
    """Copy ``model_name``'s predictions logged in ``[since, until)`` and their labels into ``target``."""
    done = Exported(model_name, since, until)
    with db.session() as session:
        layouts = load_layouts(session)
    hour = lake.hour_of(since)
    while hour < until:
        lo, hi = max(since, hour), min(until, hour + HOUR)
        with db.session() as session:
            batches = log_batches(session=session, model_name=model_name, start=lo, end=hi)
            labels = feedback_rows(session=session, model_name=model_name, start=lo, end=hi)
        if batches:
            stem = f"export-{hour:%Y%m%d%H}"
            written = [
                write_file(
                    target, lake.partition(t.table_name, t.model, t.hour), f"{stem}-{t.part}.parquet", t.table
                )
                for t in prediction_tables(batches, layouts.get)
            ]
            _remove_stale(target, lake.partition(lake.PREDICTIONS, model_name, hour), stem, written)
            done.files += written
            done.predictions += sum(b.size for b in batches)
            done.hours += 1
        for t in label_tables(model_name, labels):
            folder = lake.partition(t.table_name, t.model, t.hour)
            done.files.append(write_file(target, folder, f"export-{hour:%Y%m%d%H}-{t.part}.parquet", t.table))
        done.labels += len(labels)
        if progress is not None:
            progress(1)
        hour += HOUR
    return done


def _remove_stale(target: Lake, folder: str, stem: str, written: list[str]) -> None:
    """Delete the export files of this hour that the run did not write (a part that no longer exists)."""
    import pyarrow.fs as pafs

    keep = {w.rsplit("/", 1)[-1] for w in written}
    infos = target.fs.get_file_info(pafs.FileSelector(target.path(folder), allow_not_found=True))
    for info in infos:
        if info.base_name.startswith(f"{stem}-") and info.base_name not in keep:
            target.fs.delete_file(info.path)
