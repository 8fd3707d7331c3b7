"""An imported version recorded: the reference profiled, the wrapped SavedModel and its documents written,
the staged version and its lineage."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.database import Database
from registry.schema import ModelSchema, Task
from registry.service import latest_version, publish_version
from registry.signature import SourceSignature
from training.imports.spec import Imported, ImportSpec, Layout


def publish_wrapped(
    *,
    spec: ImportSpec,
    db: Database,
    registry: Path,
    module: Any,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    answers: np.ndarray,
    labels: np.ndarray | None,
    layout: Layout,
    signature: SourceSignature,
) -> Imported:
    """Profile the reference, write the wrapped SavedModel and its documents, record the staged version."""
    from training.cluster.export import write_saved_model

    assert spec.path is not None
    lineage: dict[str, Any] = {
        "source": "import",
        "source_path": str(spec.path.resolve()),
        "source_sha256": content_hash(spec.path),
        "signature": spec.signature,
        "input_layout": "dense" if layout.dense else "per_feature",
        "reference": str(spec.reference.resolve()),
        "reference_rows": int(len(answers)),
        "task": schema.kind.short,
        "model_fn": _model_fn(spec.model_fn, schema, columns),
    }
    if schema.kind is Task.BINARY and spec.positive_class == 0:
        lineage["positive_class"] = 0  # the source answers P(label 0); the version serves 1 - it
    return register_version(
        spec=spec,
        db=db,
        registry=registry,
        write_model=lambda path: write_saved_model(module, path),
        schema=schema,
        columns=columns,
        answers=answers,
        labels=labels,
        lineage=lineage,
        documents={"signature": signature.to_dict()},
    )


def register_version(
    *,
    spec: ImportSpec,
    db: Database,
    registry: Path,
    write_model: Callable[[Path], None] | None,
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    answers: np.ndarray,
    labels: np.ndarray | None,
    lineage: dict[str, Any],
    documents: Mapping[str, Any] | None = None,
) -> Imported:
    """Profile the reference (and measure its metrics with a target), record the next staged version."""
    from monitors.performance import metrics_for
    from monitors.profile import build_reference_profile

    task = schema.kind
    profile = build_reference_profile(columns, schema, predictions=answers, labels=labels)
    metrics: dict[str, Any] = {}
    if labels is not None:
        metrics.update(metrics_for(task, y_true=labels, predictions=answers, classes=schema.classes))
        metrics["rows"] = int(metrics["rows"])
        metrics["measured_on"] = "reference"
    with db.session() as session:
        prev = latest_version(session=session, model_name=spec.model_name)
        registered = publish_version(
            session=session,
            registry=registry,
            model_name=spec.model_name,
            documents={"schema": schema.to_dict(), "profile": profile, **(documents or {})},
            metrics=metrics,
            lineage=lineage,
            write_model=write_model,
            parent_version=prev.version if prev else None,
            actor="import",
        )
    return Imported(version=registered, schema=schema, metrics=metrics, rows=int(len(answers)))


def _model_fn(
    ref: str | None, schema: ModelSchema, columns: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """The builder's lineage entry, probed on this contract's encoded width (None without one)."""
    if ref is None:
        return None
    from training.cluster.builders import output_width, probe
    from training.cluster.features import fit_preprocessing

    width = fit_preprocessing(columns, schema).width
    return probe(
        ref, input_dim=width, outputs=output_width(schema.kind, len(schema.classes)), task=schema.kind
    )


def content_hash(path: Path) -> str:
    """SHA-256 over a folder's files (relative paths and contents, in sorted order)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
