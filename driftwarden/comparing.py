"""``compare`` and ``profile``: ``driftwarden drift`` as functions, on frames, tables or files.

Both run :func:`monitors.offline.compare` (the checks of both sides, the schema inferred from the reference,
the reference profile, the current side folded batch by batch into the service's sketch) and
:func:`monitors.offline.explain_comparison`, with the command's defaults: the same data gives the same
report as ``driftwarden drift REFERENCE CURRENT``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driftwarden.errors import InvalidInput
from driftwarden.report import Report
from driftwarden.settings import monitor_config, parse_task
from driftwarden.tables import TableLike, as_source

if TYPE_CHECKING:
    from monitors.offline import RegisteredReference
    from monitors.profile import Profile as EngineProfile
    from registry.schema import ModelSchema

PROFILE_FORMAT = "driftwarden.api-profile/1"


# the command's option names in the engine's messages, as this API's parameters name them
OPTION_WORDS = {
    "--target ": "target=",
    "--prediction-column ": "prediction=",
    "lower --min-rows / ": "lower ",
}


@contextmanager
def _as_invalid_input() -> Iterator[None]:
    """The engine's refusals (:class:`core.errors.DomainError`: the checks' findings, unreadable files) as
    :class:`InvalidInput`, with the same message in the words of this API's parameters."""
    from core.errors import DomainError

    try:
        yield
    except DomainError as exc:
        message = str(exc)
        for option, parameter in OPTION_WORDS.items():
            message = message.replace(option, parameter)
        raise InvalidInput(message) from None


@dataclass(frozen=True, eq=False)
class Profile:
    """A reference profiled once (schema and reference profile, no raw rows beyond the profile's sample),
    compared many times: ``driftwarden.compare(profile, current)``. Save it with :meth:`save`, read it back
    with :meth:`load`; a loaded profile compares exactly like the original."""

    schema: ModelSchema
    document: dict[str, Any]
    target: str | None = None
    prediction: str | None = None

    @property
    def features(self) -> list[str]:
        """The compared features, in the reference's order."""
        return self.schema.feature_names

    @property
    def task(self) -> str:
        """``binary``, ``multiclass`` or ``regression``."""
        return self.schema.kind.short

    @property
    def rows(self) -> int:
        """The reference's row count."""
        return int(self.document.get("rows", 0))

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON-ready data (what :meth:`save` writes)."""
        return {
            "format": PROFILE_FORMAT,
            "target": self.target,
            "prediction": self.prediction,
            "schema": self.schema.to_dict(),
            "profile": self.document,
        }

    def save(self, path: str | Path) -> Path:
        """Write the profile as one JSON file at ``path``; returns the path. A column's infinities are
        written as ``Infinity`` / ``-Infinity`` (the extension of JSON that :meth:`load` and Python's ``json``
        read), as the registry writes a version's profile."""
        from monitors.profile import profile_json

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(profile_json(self.to_dict()))
        return p

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read a profile :meth:`save` wrote; :class:`InvalidInput` when the file is not one."""
        from registry.schema import ModelSchema

        p = Path(path)
        try:
            data = json.loads(p.read_text())
            if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
                raise ValueError(f"its format is not {PROFILE_FORMAT!r}")
            profile = cls(
                schema=ModelSchema.from_dict(data["schema"]),
                document=dict(data["profile"]),
                target=data.get("target"),
                prediction=data.get("prediction"),
            )
            profile.engine()  # the document must parse
        except OSError as exc:
            raise InvalidInput(f"cannot read profile {p}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            reason = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise InvalidInput(f"{p} is not a profile saved by driftwarden.Profile.save ({reason})") from None
        return profile

    def engine(self) -> EngineProfile:
        """The reference profile as the drift engine reads it."""
        from monitors.profile import profile_from_dict

        return profile_from_dict(self.document)

    def reference(self) -> RegisteredReference:
        """The profile as the reference of :func:`monitors.offline.compare`."""
        from monitors.offline import RegisteredReference

        return RegisteredReference(
            ref="the reference profile", profile=self.engine(), schema=self.schema, registered=False
        )

    def __repr__(self) -> str:
        return (
            f"<driftwarden.Profile {self.task}: {len(self.features)} features, {self.rows:,} rows, "
            f"target={self.target!r}, prediction={self.prediction!r}>"
        )


def profile(
    reference: TableLike,
    *,
    target: str | None = None,
    prediction: str | None = None,
    task: str | None = None,
) -> Profile:
    """Profile ``reference`` once (a DataFrame, a pyarrow Table or a .csv/.parquet path) to compare it
    with many current sides: ``compare(profile, current)``."""
    from core.config import get_settings
    from monitors.checks import raise_findings
    from monitors.offline import reference_side

    with _as_invalid_input():
        sides = reference_side(
            as_source(reference, side="REFERENCE"),
            schema=None,
            schema_source="",
            target=target,
            prediction=prediction,
            min_rows=get_settings().drift_min_rows,
            task=parse_task(task),
        )
        raise_findings(sides.findings)
    if sides.failure is not None:
        raise InvalidInput(f"cannot profile {sides.source}: {sides.failure}")
    assert sides.schema is not None and sides.document is not None  # no finding, no failure: it was built
    return Profile(schema=sides.schema, document=sides.document, target=target, prediction=prediction)


def compare(
    reference: TableLike | Profile,
    current: TableLike,
    *,
    target: str | None = None,
    prediction: str | None = None,
    task: str | None = None,
    **settings: Any,
) -> Report:
    """Compare ``current`` with ``reference`` as ``driftwarden drift REFERENCE CURRENT`` does, with the
    same engine, checks and defaults: the drift report of every feature and output.

    Each side is a pandas DataFrame, a pyarrow Table or a .csv/.parquet path; ``reference`` may also be a
    :class:`Profile` (its target and prediction columns are the default ones). ``target`` is the label
    column, ``prediction`` the model's probability (binary) or value (regression); ``task`` is ``binary``
    (the default), ``multiclass`` or ``regression``. ``settings`` are the monitor settings of
    ``driftwarden drift --config`` (``alpha``, ``drift_share``, ``numeric_test``, ``features``, ...).
    Data that fails a check, an unknown column or a bad setting raises :class:`InvalidInput`.
    """
    from core.config import get_settings
    from monitors.offline import compare as compare_sides
    from monitors.offline import explain_comparison

    config = monitor_config(settings)
    wanted = parse_task(task)
    with _as_invalid_input():
        if isinstance(reference, Profile):
            if wanted is not None and wanted is not reference.schema.kind:
                raise InvalidInput(
                    f"task {task!r} differs from the profile's ({reference.task}): leave task out"
                )
            target = reference.target if target is None else target
            prediction = reference.prediction if prediction is None else prediction
            ref: Any = reference.reference()
        else:
            ref = as_source(reference, side="REFERENCE")
        compared = compare_sides(
            as_source(current, side="CURRENT"),
            reference=ref,
            schema=None,
            schema_source="",
            target=target,
            prediction=prediction,
            min_rows=get_settings().drift_min_rows,
            config=config,
            task=wanted,
        )
        report = explain_comparison(compared, config=config, version_dir=None)
    return Report(report, title=f"Drift report: {_name(current)}")


def _name(current: TableLike) -> str:
    """How the report's title names CURRENT: a file's name (as ``driftwarden drift``), else its kind."""
    if isinstance(current, str | Path):
        return Path(current).name
    return "current data"
