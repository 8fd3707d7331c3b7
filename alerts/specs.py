"""What a caller may send: alert rules (with their params per kind), silences and webhook subscriptions.

Each is validated with pydantic; :func:`errors_at` turns a validation error into one line naming the path
of every bad field in the caller's document (``rules[1].params.margin``, ``models.credit[0].for``), the
rule broken and, for a rule, its name.
"""

from __future__ import annotations

import enum
import re
import string
import urllib.parse
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from alerts.labels import LABEL_NAME, LABEL_RULE, Matcher, check_matcher
from core.durations import LONGEST, require_duration
from core.errors import Invalid
from core.times import ClientTime, require_time
from monitors.horizon import LOWER_IS_BETTER  # re-exported: metrics that grow when the model gets worse


class Kind(enum.StrEnum):
    """What a rule watches."""

    DATASET_DRIFT = "dataset_drift"
    FEATURE_DRIFT = "feature_drift"
    PREDICTION_DRIFT = "prediction_drift"
    PERFORMANCE = "performance"
    ESTIMATED_PERFORMANCE = "estimated_performance"
    DATA_QUALITY = "data_quality"
    CONCEPT_DRIFT = "concept_drift"
    HARMFUL_DRIFT = "harmful_drift"
    HEALTH = "health"
    RETRAIN_REJECTED = "retrain_rejected"


MONITOR_KINDS = frozenset(Kind) - {Kind.HEALTH, Kind.RETRAIN_REJECTED}  # evaluated after a monitor run
HEALTH_KINDS = frozenset({Kind.HEALTH})  # evaluated after a health pass
PERFORMANCE_KINDS = frozenset({Kind.PERFORMANCE, Kind.ESTIMATED_PERFORMANCE})  # may roll back
SEVERITIES = ("info", "warning", "critical")
ACTIONS = ("notify", "retrain")
EVENTS = ("alert.firing", "alert.resolved", "job.finished", "job.rejected", "retrain.requested")
RULE_NAME = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$"
RESERVED_LABELS = frozenset(
    {"alertname", "model", "severity", "feature", "check", "segment"}
)  # set by the rule

Severity = Literal["info", "warning", "critical"]
RULE_SEVERITIES: tuple[str, ...] = get_args(Severity)
Action = Literal["notify", "retrain"]
Event = Literal["alert.firing", "alert.resolved", "job.finished", "job.rejected", "retrain.requested"]
Metric = Literal[
    "roc_auc", "accuracy", "f1", "precision", "recall", "macro_f1", "log_loss", "mae", "rmse", "r2"
]


def _path(prefix: str, loc: tuple[int | str, ...]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def errors_at(exc: ValidationError, prefix: str = "", *, limit: int = 5) -> list[str]:
    """``path: message`` for each error of ``exc`` (at most ``limit``), paths under ``prefix``."""
    out = []
    for e in exc.errors()[:limit]:
        message = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        out.append(f"{_path(prefix, tuple(e.get('loc', ())))}: {message}")
    if len(exc.errors()) > limit:
        out.append(f"... and {len(exc.errors()) - limit} more")
    return out


# --- rule params, one model per kind -----------------------------------------------------------------------


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(_Params):
    """The kind takes no params."""


class FeatureParams(_Params):
    """``feature``: one feature's name, or ``*`` for one alert per drifted feature."""

    feature: str = Field(default="*", min_length=1, max_length=128)


class PerformanceParams(_Params):
    """``metric`` worse than an absolute bound or than the reference by more than ``margin``.

    A metric that falls when the model gets worse (ROC AUC, accuracy, F1, macro-F1, R², ...): ``below`` a
    bound, or lower than the reference by more than ``margin`` (absolute). One that grows (``rmse``, ``mae``,
    ``log_loss``): ``above`` a bound, or higher than the reference by more than ``margin`` x the reference's
    value (0.05: 5 % worse). None of the three (the default): worse than the report's limit of the metric,
    the variability of the reference's own chunks on a window of this size (``monitors/horizon.py``), or by
    more than 0.05 on a report without limits. ``roc_auc``, the default, stands for the model's task's own
    metric on a model of another task (multi-class ``macro_f1``, regression ``rmse``).
    """

    metric: Metric = "roc_auc"
    below: float | None = Field(default=None, ge=0, le=1)
    above: float | None = Field(default=None, ge=0, le=1e12, allow_inf_nan=False)
    margin: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _one_bound(self) -> PerformanceParams:
        given = [k for k in ("below", "above", "margin") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(
                "give one of 'below' or 'above' (an absolute bound) or 'margin' (worse than the reference), "
                f"not {' and '.join(given)}"
            )
        grows = self.metric in LOWER_IS_BETTER
        if self.above is not None and not grows:
            raise ValueError(
                f"'{self.metric}' falls when the model gets worse: bound it with 'below', not 'above'"
            )
        if self.below is not None and grows:
            raise ValueError(
                f"'{self.metric}' grows when the model gets worse: bound it with 'above', not 'below'"
            )
        return self


class QualityParams(_Params):
    """The share of rows failing ``check`` above ``above``, per feature (``*``: every feature); without
    ``above`` (the default), the report's own verdict on the check: higher than the reference's rate by at
    least ``quality_min_increase`` and significant at the run's level (docs/monitoring.md)."""

    check: Literal["missing", "out_of_range", "unseen_category", "contract_violation"]
    above: float | None = Field(default=None, ge=0, le=1)
    feature: str = Field(default="*", min_length=1, max_length=128)


class HealthParams(_Params):
    """The health check to watch; ``{model}`` stands for the model's name."""

    check: str = Field(default="model:{model}", min_length=1, max_length=200)


SEGMENT_KINDS = frozenset(
    {"dataset_drift", "feature_drift", "performance", "estimated_performance", "harmful_drift"}
)
"""The kinds that take ``segment``: ``*`` for one alert per segment whose own change the kind watches, or one
segment's name (``region=north``), evaluated from the report's ``segments`` (monitors/segments.py)."""


class SegmentParam(_Params):
    """``segment``: ``*`` (one alert per segment) or one segment's name, as the report's segments name it."""

    segment: str | None = Field(default=None, min_length=1, max_length=256)


def rule_params(kind: Kind, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against ``kind`` (with ``segment`` for the kinds of :data:`SEGMENT_KINDS`), in
    their stored form; ``ValidationError`` otherwise."""
    own = {k: v for k, v in params.items() if k != "segment" or kind not in SEGMENT_KINDS}
    checked = PARAMS[kind].model_validate(own).model_dump(mode="json")
    if kind in SEGMENT_KINDS and "segment" in params:
        segment = SegmentParam.model_validate({"segment": params["segment"]}).segment
        if segment is not None:
            checked["segment"] = segment
    return checked


PARAMS: dict[Kind, type[_Params]] = {
    Kind.DATASET_DRIFT: NoParams,
    Kind.FEATURE_DRIFT: FeatureParams,
    Kind.PREDICTION_DRIFT: NoParams,
    Kind.PERFORMANCE: PerformanceParams,
    Kind.ESTIMATED_PERFORMANCE: PerformanceParams,
    Kind.DATA_QUALITY: QualityParams,
    Kind.CONCEPT_DRIFT: NoParams,
    Kind.HARMFUL_DRIFT: NoParams,
    Kind.HEALTH: HealthParams,
    Kind.RETRAIN_REJECTED: NoParams,
}


MAX_ANNOTATIONS = 20
MAX_TEMPLATE = 2000  # characters of one annotation template
MAX_FORMAT_NUMBER = 100  # the largest width or precision a template's format spec may ask for
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_template(key: str, template: str) -> None:
    """An annotation template ``{name}`` / ``{value:.3f}``: bounded in length, fields plain names, format
    widths and precisions at most :data:`MAX_FORMAT_NUMBER` (``{value:>2000000}`` made 2 MB alerts)."""
    if len(template) > MAX_TEMPLATE:
        raise ValueError(f"{key}: {len(template)} characters; a template has at most {MAX_TEMPLATE}")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{key}: not a template ({exc}); write e.g. '{{model}}: {{value:.3f}}'") from None
    for _, field, spec, _ in parts:
        if field is None:
            continue
        if not FIELD_NAME.fullmatch(field):
            raise ValueError(f"{key}: {{{field}}} is not a plain name (no attributes, indexes or positions)")
        if spec and "{" in spec:
            raise ValueError(f"{key}: {{{field}:{spec}}} nests a field in its format")
        for number in re.findall(r"\d+", spec or ""):
            if int(number) > MAX_FORMAT_NUMBER:
                raise ValueError(
                    f"{key}: {{{field}:{spec}}} asks for {number} characters or digits; at most "
                    f"{MAX_FORMAT_NUMBER}"
                )


class RuleSpec(BaseModel):
    """One alert rule as written in a rules file or an API body (``for`` is accepted for ``for_runs``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(pattern=RULE_NAME)
    kind: Kind
    params: dict[str, Any] = Field(default_factory=dict)
    severity: Severity = "warning"
    for_runs: int = Field(
        default=1, ge=1, le=10_000, strict=True, validation_alias=AliasChoices("for_runs", "for")
    )  # strict: "for": "2" is a mistake to name, not a number to guess
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    actions: list[Action] = Field(default_factory=lambda: list[Action](["notify"]))
    enabled: bool = True

    @field_validator("labels")
    @classmethod
    def _label_names(cls, labels: dict[str, str]) -> dict[str, str]:
        for name in labels:
            if not LABEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a label name ({LABEL_RULE})")
            if name in RESERVED_LABELS:
                raise ValueError(
                    f"label {name!r} is set by the rule itself; reserved: {sorted(RESERVED_LABELS)}"
                )
        return labels

    @field_validator("annotations")
    @classmethod
    def _bounded_templates(cls, annotations: dict[str, str]) -> dict[str, str]:
        if len(annotations) > MAX_ANNOTATIONS:
            raise ValueError(f"{len(annotations)} annotations; at most {MAX_ANNOTATIONS}")
        for key, template in annotations.items():
            check_template(key, template)
        return annotations

    @field_validator("actions")
    @classmethod
    def _unique(cls, actions: list[str]) -> list[str]:
        return list(dict.fromkeys(actions))

    @model_validator(mode="after")
    def _kind_rules(self) -> RuleSpec:
        if self.kind is Kind.RETRAIN_REJECTED and "retrain" in self.actions:
            raise ValueError(
                "a retrain_rejected rule cannot retrain (a rejected retrain would retrain again)"
            )
        return self

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def parse_rule(item: Any, *, path: str) -> RuleSpec:
    """One rule, its params checked against its kind; Invalid naming ``path.field`` (and the rule)."""
    name = item.get("name") if isinstance(item, dict) else None
    named = f" (rule {name!r})" if isinstance(name, str) else ""
    try:
        spec = RuleSpec.model_validate(item)
    except ValidationError as exc:
        raise Invalid("; ".join(errors_at(exc, path)) + named) from None
    try:
        params = rule_params(spec.kind, spec.params)
    except ValidationError as exc:
        raise Invalid("; ".join(errors_at(exc, f"{path}.params")) + named) from None
    return spec.model_copy(update={"params": params})


def parse_rules(items: Any, *, path: str) -> list[RuleSpec]:
    """A list of rules with unique names; Invalid naming ``path[i].field`` of the first bad rule."""
    if not isinstance(items, list):
        raise Invalid(f"{path}: must be a list of rules, got {type(items).__name__}")
    specs: list[RuleSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        spec = parse_rule(item, path=f"{path}[{i}]")
        if spec.name in seen:
            raise Invalid(
                f"{path}[{i}].name: {spec.name!r} is already the name of {path}[{seen[spec.name]}]; "
                "rule names are unique per model"
            )
        seen[spec.name] = i
        specs.append(spec)
    return specs


# --- silences -----------------------------------------------------------------------------------------------


class MatcherSpec(BaseModel):
    """One matcher of a silence."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: str = Field(max_length=1024)
    is_regex: bool = False
    is_equal: bool = True

    @field_validator("name")
    @classmethod
    def _label(cls, name: str) -> str:
        if not LABEL_NAME.match(name):
            raise ValueError(f"{name!r} is not a label name ({LABEL_RULE})")
        return name

    def matcher(self) -> Matcher:
        return Matcher(name=self.name, value=self.value, is_regex=self.is_regex, is_equal=self.is_equal)


class SilenceSpec(BaseModel):
    """A silence as a caller sends it: matchers, and ``ends_at`` or ``duration`` (e.g. ``2h``)."""

    model_config = ConfigDict(extra="forbid")

    matchers: list[MatcherSpec] = Field(min_length=1, max_length=50)
    starts_at: ClientTime | None = None
    ends_at: ClientTime | None = None
    duration: str | None = None
    comment: str = Field(default="", max_length=2000)
    created_by: str = Field(default="api", min_length=1, max_length=128)


def check_silence(spec: SilenceSpec, *, now: datetime) -> tuple[list[Matcher], datetime, datetime]:
    """The matchers and the [start, end) of a silence, or Invalid naming the field that is wrong."""
    matchers = [check_matcher(m.matcher(), where=f"matchers[{i}]") for i, m in enumerate(spec.matchers)]
    if all(m.matches({}) for m in matchers):
        raise Invalid(
            "matchers: at least one matcher must not match an empty label (a silence of everything): "
            "add one such as model=credit"
        )
    starts = spec.starts_at or now
    if starts.tzinfo is None:
        raise Invalid("starts_at: give a time zone (e.g. 2026-01-01T10:00:00Z)")
    if spec.ends_at is not None and spec.duration is not None:
        raise Invalid("ends_at, duration: give one of them, not both")
    if spec.ends_at is not None:
        ends = spec.ends_at
        if ends.tzinfo is None:
            raise Invalid("ends_at: give a time zone (e.g. 2026-01-01T12:00:00Z)")
    elif spec.duration is not None:
        try:
            ends = starts + require_duration(spec.duration, where="duration")
        except OverflowError:
            raise Invalid(f"duration: {spec.duration!r} from starts_at ends after the year 9999") from None
    else:
        raise Invalid('ends_at or duration: a silence needs an end (e.g. "duration": "2h")')
    ends = require_time(ends, field="ends_at" if spec.ends_at is not None else "duration")
    if ends <= max(starts, now):
        raise Invalid(f"ends_at: {ends.isoformat()} is not in the future (and after starts_at)")
    if ends - starts > LONGEST:  # the bound of a duration, for an end given as a time too
        raise Invalid(
            f"ends_at: {ends.isoformat()} is {(ends - starts).days} days after starts_at; a silence lasts at "
            f"most {LONGEST.days}d"
        )
    return matchers, starts, ends


# --- webhook subscriptions ----------------------------------------------------------------------------------


class WebhookFilter(BaseModel):
    """Which messages a subscription gets: empty lists mean all."""

    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(default_factory=list, max_length=200)
    severities: list[Severity] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)

    def wants(self, *, model: str | None, event: str, severity: str | None = None) -> bool:
        """Whether a message of ``event`` about ``model`` (and an alert of ``severity``) passes; a
        subscriber of ``job.finished`` also gets ``job.rejected`` (a rejection is how a job finished)."""
        if self.models and model not in self.models:
            return False
        also = {"job.rejected": "job.finished"}.get(event)
        if self.events and event not in self.events and also not in self.events:
            return False
        return not (severity is not None and self.severities and severity not in self.severities)


class WebhookSpec(BaseModel):
    """A subscription as a caller sends it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2048)
    secret: str | None = Field(default=None, max_length=128)
    filter: WebhookFilter = Field(default_factory=WebhookFilter)
    description: str = Field(default="", max_length=500)
    enabled: bool = True

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(
                f"{url!r} is not an http(s) URL: a webhook URL starts with http:// or https:// and names "
                "a host"
            )
        try:
            port = parsed.port
        except ValueError:
            port = -1
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"{url!r} has a port out of range: a port is a number from 1 to 65535")
        return url
