"""``driftwarden demo``: the end-to-end tour on the embedded default (SQLite, local cluster on loopback).

Each capability adds a step: generate data -> train on a local async cluster -> register and promote.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from service.config import Settings
from service.tabular import write_table
from training.datagen import Scenario, generate

console = Console(stderr=True)


def step(title: str) -> None:
    """Announce a demo step."""
    console.rule(f"[bold cyan]{title}")


def make_data(*, folder: Path, rows: int, seed: int) -> dict[Scenario, Path]:
    """Baseline training data plus one file per drift scenario (seeded)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i, scenario in enumerate(Scenario):
        path = folder / f"{scenario.value}.csv"
        write_table(generate(rows, scenario=scenario, seed=seed + i), path)
        files[scenario] = path
        console.print(f"  {scenario.value:<16} {rows:>7} rows -> {path}")
    return files


def run_demo(*, settings: Settings, model: str, rows: int, workers: int, epochs: float, seed: int) -> int:
    """Run the tour; returns the registered (and promoted) version."""
    from service.registry.service import promote
    from service.runtime import open_database
    from training.flows import run_training
    from training.jobs import Mode, TrainJob
    from training.progress import Progress

    step("1. Data: a credit-risk table and its drift scenarios")
    data = make_data(folder=Path("var/demo/data"), rows=rows, seed=seed)

    step(f"2. Train {model!r} on a local async cluster (1 ps, {workers} workers, chief)")
    db = open_database()
    progress = Progress(f"train {model} (async)")
    try:
        job = TrainJob(
            model_name=model,
            data=data[Scenario.BASELINE],
            mode=Mode.ASYNC,
            ps=1,
            workers=workers,
            epochs=epochs,
            seed=seed,
            steps_per_closure=settings.steps_per_closure,
            checkpoint_every=settings.checkpoint_every_steps,
        )
        result = run_training(
            job=job,
            db=db,
            registry=settings.registry_path,
            checkpoint_root=settings.checkpoint_path,
            progress=progress,
        )
        progress.close()
        m = result.metrics
        console.print(
            f"  registered [bold]{model}:{result.version.version}[/] at {result.version.path}\n"
            f"  held-out accuracy {m['accuracy']:.4f}, ROC AUC {m['roc_auc']:.4f}, F1 {m['f1']:.4f} "
            f"({result.seconds:.1f}s)"
        )
        step("3. Promote the new version to serving")
        with db.session() as session:
            promote(session=session, model_name=model, version=result.version.version)
        console.print(f"  {model}:{result.version.version} is now serving (`driftwarden models list`)")
        return result.version.version
    finally:
        progress.close()
        db.dispose()
