"""Registry operations: allocate, register, list and move model versions between states, with their history.

Every state change (register, promote, archive, rollback, reject) and every label move records a
:class:`~registry.models.VersionEvent` saying who/what did it, when, from which state to which and why. Bad
requests raise :class:`core.errors.DomainError` subclasses: ``NotFound`` for an unknown model or version,
``Conflict`` for a change the version's state does not allow, ``Invalid`` for a bad name, version or reason.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from core.database import begin_sqlite, utcnow
from core.errors import Conflict, Invalid, NotFound
from registry.compat import ContractDiff, compare_contracts
from registry.models import (
    EventAction,
    FeatureSummary,
    ModelDetail,
    ModelVersion,
    ModelVersionRead,
    SchemaSummary,
    VersionDetail,
    VersionEvent,
    VersionEventRead,
    VersionLabel,
    VersionState,
)
from registry.names import check_label, check_name, check_version
from registry.schema import ModelSchema
from registry.signature import SourceSignature

META_DIR = "driftwarden"  # per-version metadata folder beside the SavedModel files
SERVED_ELSEWHERE = "elsewhere"  # lineage ``serving`` of a version registered without a model: monitored only
DEFAULT_ACTOR = "system"  # who changed a state when the caller does not say (library use, tests)


ACCEPT_HINT = "--accept-contract-change (API: body field 'accept_contract_change': true)"


class ContractBreak(Conflict):
    """A promotion refused: the candidate's contract breaks what clients of the serving version send or read.

    ``details`` (the route's 409 body beside ``error``) lists every change (:mod:`registry.compat`).
    """

    def __init__(self, *, model_name: str, version: int, serving: int, diff: ContractDiff) -> None:
        self.details = {"serving_version": serving, "contract_changes": diff.to_list()}
        listed = "; ".join(c.text for c in diff.breaking)
        super().__init__(
            f"{model_name}:{version} would break clients of version {serving}: {listed}; "
            f"to promote it anyway: {ACCEPT_HINT}"
        )


class OutsideRegistry(Invalid):
    """A path built from a valid name resolves outside the registry root (a symbolic link points away)."""


def model_dir(*, registry: Path, model_name: str) -> Path:
    """``<registry>/<model>/``, resolved and proven to be a direct child of the resolved registry root."""
    check_name(model_name)
    root = registry.resolve()
    path = (root / model_name).resolve()
    if path.parent != root:
        raise OutsideRegistry(
            f"the folder of model {model_name!r} resolves to {path}, outside the registry {root}: "
            "remove the symbolic link or fix DRIFTWARDEN_REGISTRY_PATH"
        )
    return path


def version_dir(*, registry: Path, model_name: str, version: int) -> Path:
    """``<registry>/<model>/<version>/`` (TF Serving's layout), resolved and proven inside the registry."""
    check_version(version)
    parent = model_dir(registry=registry, model_name=model_name)
    path = (parent / str(version)).resolve()
    if path.parent != parent:
        raise OutsideRegistry(
            f"the folder of {model_name}:{version} resolves to {path}, outside the registry "
            f"{registry.resolve()}: remove the symbolic link"
        )
    return path


def next_version(*, session: Session, registry: Path, model_name: str) -> int:
    """One more than the highest version known to the table or present on disk."""
    folder = model_dir(registry=registry, model_name=model_name)
    in_db = session.scalar(
        select(func.max(ModelVersion.version)).where(ModelVersion.model_name == model_name)
    )
    on_disk = [int(p.name) for p in folder.glob("*") if p.name.isascii() and p.name.isdigit()]
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


def _record(
    session: Session,
    row: ModelVersion,
    *,
    action: EventAction,
    actor: str,
    from_state: VersionState | None = None,
    to_state: VersionState | None = None,
    label: str | None = None,
    previous_version: int | None = None,
    reason: str | None = None,
) -> VersionEvent:
    event = VersionEvent(
        model_name=row.model_name,
        version=row.version,
        action=action,
        from_state=from_state,
        to_state=to_state,
        label=label,
        previous_version=previous_version,
        reason=reason,
        actor=actor,
        at=utcnow(),
    )
    session.add(event)
    return event


def _move(
    session: Session,
    row: ModelVersion,
    to: VersionState,
    *,
    action: EventAction,
    actor: str,
    previous_version: int | None = None,
    reason: str | None = None,
) -> None:
    _record(
        session,
        row,
        action=action,
        actor=actor,
        from_state=row.state,
        to_state=to,
        previous_version=previous_version,
        reason=reason,
    )
    row.state = to
    row.updated_at = utcnow()
    session.flush()


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
    actor: str = "training",
) -> ModelVersion:
    """Record a published version (its history starts with a ``register`` event)."""
    check_name(model_name)
    check_version(version)
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
    _record(session, row, action=EventAction.REGISTER, actor=actor, to_state=state)
    session.flush()
    return row


def publish_version(
    *,
    session: Session,
    registry: Path,
    model_name: str,
    documents: Mapping[str, Any],
    metrics: dict[str, Any],
    lineage: dict[str, Any],
    write_model: Callable[[Path], None] | None,
    parent_version: int | None = None,
    actor: str = "training",
) -> ModelVersion:
    """Write a version's folder (the model by ``write_model``, the documents under ``META_DIR``) in a staging
    folder, move it into place and record the version; ``write_model=None`` registers a model served
    elsewhere (documents only, lineage ``serving: elsewhere``)."""
    registry.mkdir(parents=True, exist_ok=True)
    staging = registry / model_name / f".staging-{uuid.uuid4().hex}"
    version = next_version(session=session, registry=registry, model_name=model_name)
    lineage = {**lineage, "model": model_name, "version": version}
    if write_model is None:
        lineage["serving"] = SERVED_ELSEWHERE
    try:
        if write_model is not None:
            write_model(staging)
        meta = staging / META_DIR
        meta.mkdir(parents=True)
        docs = {"metrics": metrics, "lineage": lineage, **documents}
        for name, doc in docs.items():
            (meta / f"{name}.json").write_text(json.dumps(doc, indent=2, default=_json_default))
        path = publish_files(staging=staging, registry=registry, model_name=model_name, version=version)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return register_version(
        session=session,
        model_name=model_name,
        version=version,
        path=path,
        metrics=metrics,
        lineage=lineage,
        parent_version=parent_version,
        actor=actor,
    )


def served_elsewhere(row: ModelVersion) -> bool:
    """The version was registered from a reference alone: driftwarden monitors it and does not serve it."""
    return (row.lineage or {}).get("serving") == SERVED_ELSEWHERE


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays in a version's documents."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value)!r}")


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


def require_model(*, session: Session, model_name: str) -> None:
    """Raise NotFound unless ``model_name`` (a valid name) has a registered version."""
    check_name(model_name)
    if count_versions(session=session, model_name=model_name) == 0:
        raise NotFound(
            f"no model {model_name!r} in the registry: `driftwarden models list` shows the registered "
            "ones; `driftwarden train` registers a new one"
        )


def require_version(*, session: Session, model_name: str, version: int) -> ModelVersion:
    """The version, or NotFound naming the model's versions."""
    require_model(session=session, model_name=model_name)
    check_version(version)
    row = get_version(session=session, model_name=model_name, version=version)
    if row is None:
        known = sorted(r.version for r in list_versions(session=session, model_name=model_name))
        raise NotFound(
            f"model {model_name!r} has no version {version} (its versions: {', '.join(map(str, known))})"
        )
    return row


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


def _savepoint(session: Session) -> SessionTransaction:
    """A savepoint inside the session's transaction, on SQLite too.

    The SQLite driver (``pysqlite``) opens a transaction only before a write: a savepoint taken before any
    write would become the outermost transaction, committed on release, and a later rollback of the session
    would not undo it. So on SQLite a transaction is begun first when none is open.
    """
    begin_sqlite(session)
    return session.begin_nested()


def _serve(
    session: Session, row: ModelVersion, *, action: EventAction, actor: str, current: ModelVersion | None
) -> ModelVersion:
    """Make ``row`` the serving version; the one serving so far is archived (both recorded).

    The previous version is archived and flushed before ``row`` becomes serving, so one change never has two
    serving rows. Two changes at the same time (API and CLI at once) may both read the same serving version;
    the partial unique index ``uq_model_versions_one_serving`` lets only one of them store a serving row,
    and the other gets :class:`~core.errors.Conflict`, its changes undone to a savepoint (the session stays
    usable). The read comes before the savepoint: on SQLite, a transaction that read before writing cannot
    write after another one committed ("database is locked" instead of the conflict). ``current``: the
    serving version (or None) as the caller read it, before anything else.
    """
    previous = current.version if current is not None else None
    try:
        with _savepoint(session):
            if current is not None:
                _move(
                    session,
                    current,
                    VersionState.ARCHIVED,
                    action=EventAction.ARCHIVE,
                    actor=actor,
                    reason=f"{action.value} of version {row.version}",
                )
            _move(session, row, VersionState.SERVING, action=action, actor=actor, previous_version=previous)
    except IntegrityError:
        raise Conflict(
            f"another promotion of {row.model_name!r} happened at the same time; retry "
            f"(`driftwarden models list --model {row.model_name}` shows the version serving now)"
        ) from None
    return row


class ContractUnreadable(Conflict):
    """A version's contract cannot be read, so what a promotion changes for clients is unknown."""


def contract_diff(*, session: Session, row: ModelVersion) -> tuple[int, ContractDiff] | None:
    """The serving version's number and what ``row`` would change for its clients; None when no other
    version serves (a first promotion has nothing to compare). :class:`ContractUnreadable` when a contract
    cannot be read."""
    return _compare(serving_version(session=session, model_name=row.model_name), row)


def _compare(current: ModelVersion | None, row: ModelVersion) -> tuple[int, ContractDiff] | None:
    if current is None or current.id == row.id:
        return None
    schemas = []
    signatures = []
    for version in (current, row):
        try:
            schemas.append(read_schema(path=Path(version.path)))
            signatures.append(read_signature(path=Path(version.path)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ContractUnreadable(
                f"the contract of {version.model_name}:{version.version} is not readable at {version.path} "
                f"({type(exc).__name__}: {exc}): what the change means for clients is not known"
            ) from None
    pair = (signatures[0], signatures[1])
    return current.version, compare_contracts(schemas[0], schemas[1], signatures=pair)


@dataclass(frozen=True)
class Promotion:
    """A promotion's outcome: the version now serving, the one serving before, what changed for clients."""

    row: ModelVersion
    previous: int | None  # the version serving before (None: the first promotion)
    changes: ContractDiff | None  # from the previous version's contract; None: nothing compared
    not_compared: str | None = None  # why contracts that exist were not compared (one is not readable)

    @property
    def changed(self) -> bool:
        return self.previous != self.row.version


def promote_version(
    *,
    session: Session,
    model_name: str,
    version: int,
    actor: str = DEFAULT_ACTOR,
    accept_contract_change: bool = False,
) -> Promotion:
    """Make ``version`` the serving one; the previous serving version is archived. Serving already: no-op.

    A contract that breaks the serving version's clients (:mod:`registry.compat`) is refused
    (:class:`ContractBreak`) unless ``accept_contract_change``; one that cannot be read is not compared,
    saying why (``not_compared``).
    """
    row = require_version(session=session, model_name=model_name, version=version)
    if row.state is VersionState.REJECTED:
        raise Conflict(
            f"{model_name}:{version} was rejected ({row.state_reason}); a rejected version cannot serve: "
            "promote another version"
        )
    if row.state is VersionState.SERVING:
        return Promotion(row=row, previous=row.version, changes=None)
    current = serving_version(session=session, model_name=model_name)  # read once: compared and archived
    not_compared = None
    try:
        compared = _compare(current, row)
    except ContractUnreadable as exc:
        compared, not_compared = None, str(exc)
    if compared is not None and compared[1].breaking and not accept_contract_change:
        serving, diff = compared
        raise ContractBreak(model_name=model_name, version=version, serving=serving, diff=diff)
    previous = current.version if current is not None else None
    _serve(session, row, action=EventAction.PROMOTE, actor=actor, current=current)
    changes = compared[1] if compared is not None else None
    return Promotion(row=row, previous=previous, changes=changes, not_compared=not_compared)


def promote(
    *,
    session: Session,
    model_name: str,
    version: int,
    actor: str = DEFAULT_ACTOR,
    accept_contract_change: bool = False,
) -> ModelVersion:
    """:func:`promote_version`, returning the version now serving."""
    return promote_version(
        session=session,
        model_name=model_name,
        version=version,
        actor=actor,
        accept_contract_change=accept_contract_change,
    ).row


def rollback_target(*, session: Session, model_name: str) -> ModelVersion:
    """The version that served before the current one: the last one archived out of serving, not rejected.

    As ``kubectl rollout undo``: rolling back twice returns to the version rolled back from (reject it
    first to rule it out).
    """
    require_model(session=session, model_name=model_name)
    current = serving_version(session=session, model_name=model_name)
    left_serving = session.scalars(
        select(VersionEvent.version)
        .where(VersionEvent.model_name == model_name, VersionEvent.from_state == VersionState.SERVING)
        .order_by(VersionEvent.id.desc())
    )
    for version in left_serving:
        row = get_version(session=session, model_name=model_name, version=version)
        if row is not None and row.state is VersionState.ARCHIVED:
            return row
    now = f"version {current.version} serves" if current is not None else "no version serves"
    raise Conflict(
        f"model {model_name!r} has no previous serving version to roll back to ({now}, and no version that "
        "served before it is left unrejected): promote a version with `driftwarden models promote`"
    )


def rollback(*, session: Session, model_name: str, actor: str = DEFAULT_ACTOR) -> ModelVersion:
    """Serve the previous serving version again (see :func:`rollback_target`); the current one is archived.

    Never refused for its contract (it served before: its clients' requests are the older ones); the
    commands print what it changes (:func:`contract_diff` of the target before the rollback).
    """
    target = rollback_target(session=session, model_name=model_name)
    current = serving_version(session=session, model_name=model_name)
    return _serve(session, target, action=EventAction.ROLLBACK, actor=actor, current=current)


def reject(
    *, session: Session, model_name: str, version: int, reason: str, actor: str = DEFAULT_ACTOR
) -> ModelVersion:
    """Mark a version rejected, with the reason (required). The serving version must be replaced first."""
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("a reason is required to reject a version (e.g. --reason 'accuracy 0.70 < 0.91')")
    reason = reason.strip()
    row = require_version(session=session, model_name=model_name, version=version)
    if row.state is VersionState.SERVING:
        raise Conflict(
            f"{model_name}:{version} is serving: promote another version or roll back "
            f"(`driftwarden models rollback {model_name}`) before rejecting it"
        )
    if row.state is VersionState.REJECTED:
        raise Conflict(f"{model_name}:{version} is already rejected ({row.state_reason})")
    _move(session, row, VersionState.REJECTED, action=EventAction.REJECT, actor=actor, reason=reason)
    row.state_reason = reason
    session.flush()
    return row


def set_label(
    *, session: Session, model_name: str, label: str, version: int, actor: str = DEFAULT_ACTOR
) -> VersionLabel:
    """Point ``label`` of a model at ``version`` (not a rejected one); setting it where it points: no-op."""
    check_label(label)
    row = require_version(session=session, model_name=model_name, version=version)
    if row.state is VersionState.REJECTED:
        raise Conflict(
            f"{model_name}:{version} was rejected ({row.state_reason}); a label cannot point at it"
        )
    existing = session.get(VersionLabel, (model_name, label))
    previous: int | None = None
    if existing is None:
        existing = VersionLabel(model_name=model_name, label=label, version_id=row.id)
        session.add(existing)
    elif existing.version_id == row.id:
        return existing
    else:
        before = session.get(ModelVersion, existing.version_id)
        previous = before.version if before is not None else None
        existing.version_id = row.id
        existing.updated_at = utcnow()
    _record(
        session,
        row,
        action=EventAction.LABEL,
        actor=actor,
        label=label,
        previous_version=previous,
        reason=f"moved from version {previous}" if previous is not None else None,
    )
    session.flush()
    return existing


def labels_of(*, session: Session, model_name: str) -> dict[str, int]:
    """Each label of a model and the version it points to."""
    rows = session.execute(
        select(VersionLabel.label, ModelVersion.version)
        .join(ModelVersion, VersionLabel.version_id == ModelVersion.id)
        .where(VersionLabel.model_name == model_name)
        .order_by(VersionLabel.label)
    ).all()
    return {label: version for label, version in rows}


def history(*, session: Session, model_name: str, version: int | None = None) -> list[VersionEvent]:
    """The recorded changes of a model (or of one of its versions), oldest first."""
    stmt = select(VersionEvent).where(VersionEvent.model_name == model_name).order_by(VersionEvent.id)
    if version is not None:
        stmt = stmt.where(VersionEvent.version == version)
    return list(session.scalars(stmt))


def schema_summary(schema: ModelSchema) -> SchemaSummary:
    """The short form of a contract: each feature's kind, dtype, nullability and observed range/categories."""
    return SchemaSummary(
        target=schema.target,
        task=schema.task,
        features=[
            FeatureSummary(
                name=f.name,
                kind=f.kind.value,
                dtype=f.dtype,
                nullable=f.nullable,
                missing_rate=f.missing_rate,
                observed_min=f.observed_min,
                observed_max=f.observed_max,
                categories=list(f.categories),
            )
            for f in schema.features
        ],
        outputs=[o.name for o in schema.outputs],
    )


def show(
    *, session: Session, model_name: str, version: int | None = None, with_schema: bool | None = None
) -> ModelDetail:
    """A model (or one version of it): versions with labels, metrics, lineage, and the state history.

    ``with_schema`` (default: only when one version is asked for) adds each version's contract summary.
    """
    if version is None:
        require_model(session=session, model_name=model_name)
        rows = list_versions(session=session, model_name=model_name)
    else:
        rows = [require_version(session=session, model_name=model_name, version=version)]
    if with_schema is None:
        with_schema = version is not None
    labels = labels_of(session=session, model_name=model_name)
    events = [VersionEventRead.model_validate(e) for e in history(session=session, model_name=model_name)]
    serving = serving_version(session=session, model_name=model_name)
    details = []
    for row in rows:
        detail = VersionDetail(
            **ModelVersionRead.model_validate(row).model_dump(),
            labels=sorted(label for label, v in labels.items() if v == row.version),
            history=[e for e in events if e.version == row.version],
        )
        if with_schema:
            try:
                detail.schema_summary = schema_summary(read_schema(path=Path(row.path)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                detail.schema_error = f"schema not readable at {row.path}: {type(exc).__name__}: {exc}"
        details.append(detail)
    return ModelDetail(
        model_name=model_name,
        serving=serving.version if serving is not None else None,
        labels=labels,
        versions=details,
        history=events if version is None else [e for e in events if e.version == version],
    )


def read_meta(*, path: Path, name: str) -> dict[str, Any]:
    """Read one metadata document (``schema``, ``profile``, ``metrics``, ``lineage``) of a version."""
    data: dict[str, Any] = json.loads((path / META_DIR / f"{name}.json").read_text())
    return data


def read_schema(*, path: Path) -> ModelSchema:
    """The input/output contract stored with a version."""
    return ModelSchema.from_dict(read_meta(path=path, name="schema"))


def read_signature(*, path: Path) -> SourceSignature | None:
    """An imported version's own signature (None: trained here, or imported before it was recorded)."""
    if not (path / META_DIR / "signature.json").is_file():
        return None
    return SourceSignature.from_dict(read_meta(path=path, name="signature"))


@dataclass(frozen=True)
class ServingPlan:
    """What the registry says one model should serve: its serving version and its labelled versions."""

    serving: int | None
    labels: dict[str, int]
    paths: dict[int, str]
    elsewhere: dict[int, str] = field(default_factory=dict)  # versions served elsewhere (no model): folders


def serving_plans(*, session: Session, only: list[str]) -> dict[str, ServingPlan]:
    """The serving and labelled (not rejected) versions of each model of ``only``, or of every model."""
    out: dict[str, ServingPlan] = {}
    names = only or list(session.scalars(select(ModelVersion.model_name).distinct()))
    for name in names:
        serving = session.scalar(
            select(ModelVersion).where(
                ModelVersion.model_name == name, ModelVersion.state == VersionState.SERVING
            )
        )
        labelled = session.execute(
            select(VersionLabel.label, ModelVersion)
            .join(ModelVersion, VersionLabel.version_id == ModelVersion.id)
            .where(VersionLabel.model_name == name)
        ).all()
        live = [(label, row) for label, row in labelled if row.state is not VersionState.REJECTED]
        rows = {row.version: row for _, row in live}
        if serving is not None:
            rows[serving.version] = serving
        out[name] = ServingPlan(
            serving=serving.version if serving else None,
            labels={label: row.version for label, row in live},
            paths={v: row.path for v, row in rows.items() if not served_elsewhere(row)},
            elsewhere={v: row.path for v, row in rows.items() if served_elsewhere(row)},
        )
    return out
