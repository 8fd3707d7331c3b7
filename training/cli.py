"""Training commands: ``data generate``, ``train`` and ``cluster node``. TensorFlow loads inside commands only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from training.datagen import Scenario

data_app = typer.Typer(help="Synthetic data sets with planted drift.", no_args_is_help=True)


@data_app.command("generate")
def data_generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output file: .csv or .parquet.")],
    rows: Annotated[int, typer.Option("--rows", "-n", min=1, help="Number of rows.")] = 20_000,
    scenario: Annotated[Scenario, typer.Option("--scenario", "-s", help="Which drift to plant.")] = Scenario.BASELINE,
    seed: Annotated[int, typer.Option("--seed", help="Random seed; same seed, same table.")] = 0,
    severity: Annotated[float, typer.Option("--severity", min=0.0, help="Scale of the planted drift.")] = 1.0,
) -> None:
    """Generate a credit-risk table (target column `default`) under a drift scenario."""
    from service.tabular import write_table
    from training.datagen import TARGET, generate

    cols = generate(rows, scenario=scenario, seed=seed, severity=severity)
    write_table(cols, out)
    typer.echo(f"wrote {rows} rows ({scenario.value}, seed {seed}, default rate {cols[TARGET].mean():.3f}) to {out}")


def register(app: typer.Typer) -> None:
    """Add the training commands to the root CLI."""
    app.add_typer(data_app, name="data")
