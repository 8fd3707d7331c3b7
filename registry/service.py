"""Registry operations: allocate, register, list and move model versions between states."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry.models import ModelVersion, VersionLabel, VersionState, utcnow
from registry.schema import ModelSchema

META_DIR = "driftwarden"  # per-version metadata folder beside the SavedModel files


def version_dir(*, registry: Path, model_name: str, version: int) -> Path:
    """``<registry>/<model>/<version>/``: TF Serving's layout."""
    return registry / model_name / str(version)


def next_version(*, session: Session, registry: Path, model_name: str) -> int:
    """One more than the highest version known to the table or present on disk."""
    in_db = session.scalar(
        select(func.max(ModelVersion.version)).where(ModelVersion.model_name == model_name)
    )
    on_disk = [int(p.name) for p in (registry / model_name).glob("*") if p.name.isdigit()]
    return max([in_db or 0, *on_disk]) + 1


def publish_files(*, staging: Path, registry: Path, model_name: str, version: int) -> Path:
    """Move a fully written staging folder into place atomically and make it read-only."""
    target = version_dir(registry=registry, model_name=model_name, version=version)
    if target.exists():
        raise FileExistsError(
            f"version {model_name}:{version} already exists at {target}; versions are immutable"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), str(target))
    for path in target.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    return target


def register_version(
    *,
    session: Session,
    model_name: str,
    version: int,
    path: Path,
    metrics: dict[str, Any],
    lineage: dict[str, Any],
    parent_version: int | None = None,
    state: VersionState = VersionState.STAGED,
) -> ModelVersion:
    """Record a published version."""
    row = ModelVersion(
        model_name=model_name,
        version=version,
        path=str(path.resolve()),
        metrics=metrics,
        lineage=lineage,
        parent_version=parent_version,
        state=state,
    )
    session.add(row)
    session.flush()
    return row


def list_versions(*, session: Session, model_name: str | None = None) -> list[ModelVersion]:
    """Every version, newest first, optionally of one model."""
    stmt = select(ModelVersion).order_by(ModelVersion.model_name, ModelVersion.version.desc())
    if model_name:
        stmt = stmt.where(ModelVersion.model_name == model_name)
    return list(session.scalars(stmt))


def get_version(*, session: Session, model_name: str, version: int) -> ModelVersion | None:
    """One version, or None."""
    return session.scalar(
        select(ModelVersion).where(ModelVersion.model_name == model_name, ModelVersion.version == version)
    )


def serving_version(*, session: Session, model_name: str) -> ModelVersion | None:
    """The version in state ``serving``, or None."""
    return session.scalar(
        select(ModelVersion).where(
            ModelVersion.model_name == model_name, ModelVersion.state == VersionState.SERVING
        )
    )


def count_versions(*, session: Session, model_name: str) -> int:
    """How many versions of ``model_name`` are registered (0: an unknown model)."""
    return session.scalar(select(func.count()).where(ModelVersion.model_name == model_name)) or 0


def serving_model_names(*, session: Session) -> list[str]:
    """Names of the models that have a version in state ``serving``, sorted."""
    stmt = select(ModelVersion.model_name).where(ModelVersion.state == VersionState.SERVING).distinct()
    return sorted(session.scalars(stmt))


def latest_version(*, session: Session, model_name: str) -> ModelVersion | None:
    """The highest-numbered version of a model, or None."""
    return session.scalar(
        select(ModelVersion)
        .where(ModelVersion.model_name == model_name)
        .order_by(ModelVersion.version.desc())
        .limit(1)
    )


def promote(*, session: Session, model_name: str, version: int) -> ModelVersion:
    """Make ``version`` the serving one; the previous serving version is archived."""
    row = get_version(session=session, model_name=model_name, version=version)
    if row is None:
        raise LookupError(f"no version {model_name}:{version}")
    if row.state is VersionState.REJECTED:
        raise ValueError(f"{model_name}:{version} was rejected ({row.state_reason}); it cannot serve")
    current = serving_version(session=session, model_name=model_name)
    if current is not None and current.id != row.id:
        current.state = VersionState.ARCHIVED
        current.updated_at = utcnow()
        session.flush()
    row.state = VersionState.SERVING
    row.updated_at = utcnow()
    session.flush()
    return row


def reject(*, session: Session, model_name: str, version: int, reason: str) -> ModelVersion:
    """Mark a version rejected, with the reason."""
    row = get_version(session=session, model_name=model_name, version=version)
    if row is None:
        raise LookupError(f"no version {model_name}:{version}")
    row.state = VersionState.REJECTED
    row.state_reason = reason
    session.flush()
    return row


def set_label(*, session: Session, model_name: str, label: str, version: int) -> VersionLabel:
    """Point ``label`` of a model at ``version``."""
    row = get_version(session=session, model_name=model_name, version=version)
    if row is None:
        raise LookupError(f"no version {model_name}:{version}")
    existing = session.get(VersionLabel, (model_name, label))
    if existing is None:
        existing = VersionLabel(model_name=model_name, label=label, version_id=row.id)
        session.add(existing)
    else:
        existing.version_id = row.id
    session.flush()
    return existing


def read_meta(*, path: Path, name: str) -> dict[str, Any]:
    """Read one metadata document (``schema``, ``profile``, ``metrics``, ``lineage``) of a version."""
    data: dict[str, Any] = json.loads((path / META_DIR / f"{name}.json").read_text())
    return data


def read_schema(*, path: Path) -> ModelSchema:
    """The input/output contract stored with a version."""
    return ModelSchema.from_dict(read_meta(path=path, name="schema"))


@dataclass(frozen=True)
class ServingPlan:
    """What the registry says one model should serve: its serving version and its labelled versions."""

    serving: int | None
    labels: dict[str, int]
    paths: dict[int, str]


def serving_plans(*, session: Session, only: list[str]) -> dict[str, ServingPlan]:
    """The serving and labelled (not rejected) versions of each model of ``only``, or of every model."""
    out: dict[str, ServingPlan] = {}
    names = only or list(session.scalars(select(ModelVersion.model_name).distinct()))
    for name in names:
        serving = session.execute(
            select(ModelVersion.version, ModelVersion.path).where(
                ModelVersion.model_name == name, ModelVersion.state == VersionState.SERVING
            )
        ).first()
        labelled = session.execute(
            select(VersionLabel.label, ModelVersion.version, ModelVersion.path, ModelVersion.state)
            .join(ModelVersion, VersionLabel.version_id == ModelVersion.id)
            .where(VersionLabel.model_name == name)
        ).all()
        live = [(label, v, p) for label, v, p, state in labelled if state is not VersionState.REJECTED]
        paths = {v: p for _, v, p in live}
        if serving is not None:
            paths[serving[0]] = serving[1]
        out[name] = ServingPlan(
            serving=serving[0] if serving else None, labels={label: v for label, v, _ in live}, paths=paths
        )
    return out
