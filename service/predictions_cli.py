"""``driftwarden predictions ...``: the log's own commands (:mod:`predictions.cli`) and ``import``, which
reads a version's contract from the registry and so lives above both domains."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from predictions.cli import predictions_app
from predictions.cli import register as register_predictions


@predictions_app.command("import")
def import_cmd(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="CSV or Parquet rows a model scored (any size).")
    ],
    model: Annotated[str, typer.Option("--model", "-m", help="The registered model that scored them.")],
    prediction_column: Annotated[
        str,
        typer.Option(
            "--prediction-column",
            help="The model's answer per row: a probability, a value, or a JSON list of class probabilities.",
        ),
    ],
    id_column: Annotated[
        str | None,
        typer.Option(
            "--id-column", help="Each row's own id: rows the log already holds are skipped (idempotent)."
        ),
    ] = None,
    time_column: Annotated[
        str | None,
        typer.Option(
            "--time-column",
            help="When each row was scored (RFC 3339 or a Parquet timestamp; without an offset: UTC; from "
            "1970-01-01T00:00:00Z to 9999-12-30T23:59:59Z). "
            "Default: now.",
        ),
    ] = None,
    label_column: Annotated[
        str | None, typer.Option("--label-column", help="The ground truth, where known (stored as feedback).")
    ] = None,
    version: Annotated[
        int | None,
        typer.Option("--version", min=1, help="The version that scored them (default: the serving one)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check every row and count; write nothing.")
    ] = False,
    allow_missing_features: Annotated[
        bool,
        typer.Option(
            "--allow-missing-features",
            help="Log the contract's features the file lacks as missing (default: the import is refused, "
            "naming them).",
        ),
    ] = False,
) -> None:
    """Log a batch job's scored rows into the prediction log (source `import`).

    The file is checked whole first, in batches (bounded memory): a feature column of the version's contract
    that the file lacks refuses it, naming the columns (unless --allow-missing-features); a row whose
    prediction does not fit the version's task, whose label the task cannot take or whose time or id is
    unusable stops the import with one line naming the row (CSV: its line, the header is line 1; Parquet: its
    row from 1), before anything is written. Then the rows are written through the log's writer
    (spooled while the database is down); the version's contract flags values, never refuses them. With
    --id-column, run it again safely: ids the log holds are skipped.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from core.config import get_settings
    from core.database import open_database
    from core.tabular import TableStream
    from core.terminal import make_console
    from service.file_import import FileImport, import_file

    spec = FileImport(
        path=file,
        model_name=model,
        prediction_column=prediction_column,
        id_column=id_column,
        time_column=time_column,
        label_column=label_column,
        version=version,
        dry_run=dry_run,
        allow_missing_features=allow_missing_features,
    )
    rows = TableStream(file).rows  # Parquet knows it; a CSV's is counted by the first pass
    settings = get_settings()
    db = open_database()
    passes = 1 if dry_run else 2
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=make_console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task(f"import {file.name}", total=rows * passes if rows is not None else None)
            done = import_file(spec=spec, db=db, settings=settings, progress=lambda n: bar.advance(task, n))
    finally:
        db.dispose()
    if dry_run:
        typer.echo(f"{done.rows} rows checked for {model}:{done.version}; nothing written (--dry-run)")
        return
    typer.echo(
        f"{done.stored} of {done.rows} rows logged for {model}:{done.version} in {done.seconds:.1f} s "
        f"({done.duplicates} already logged, {done.flagged} flagged by the contract; "
        f"{done.labels} labels stored, {done.labels_present} already stored)"
        + (f"; {done.spooled} spooled until the database takes them" if done.spooled else "")
    )


def register(app: typer.Typer) -> None:
    """Add ``predictions ...`` (the log's commands and ``import``) to the root CLI."""
    register_predictions(app)
