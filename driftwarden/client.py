"""``Client``: the HTTP API from Python (predict, feedback, ingest, drift, history, alerts, retrain).

Every method is one request (``history`` follows the pages) over an ``httpx.Client``; an answer of 400 or
more raises the :class:`driftwarden.errors.ApiError` subclass of its status, with the server's message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from driftwarden.errors import InvalidInput, Unreachable, error_for
from driftwarden.report import Report

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_URL = "http://localhost:8501"
"""Where ``driftwarden serve`` listens by default."""
HISTORY_PAGE = 1000  # runs per page of the history route (its most)


@dataclass(frozen=True)
class Predictions:
    """A model's answers to some rows: ``predictions`` (one per row, in order), ``prediction_ids`` (send
    them back with :meth:`Client.feedback`), the ``model_version`` that answered, the server's ``body``."""

    predictions: list[Any]
    prediction_ids: list[str]
    model_version: str | None = None
    body: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.predictions)


class Client:
    """The HTTP API of a driftwarden server at ``url``, with a bearer ``token`` (``driftwarden tokens
    create``) whose scopes fit the calls: predict, feedback, ingest, read (drift, history, alerts), admin
    (run_monitor, retrain). Use it as a context manager, or call :meth:`close`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __repr__(self) -> str:
        return f"<driftwarden.Client {self.url}>"

    # -- serving and the prediction log ----------------------------------------------------------------

    def predict(
        self, model: str, rows: Any, *, version: int | str | None = None, label: str | None = None
    ) -> Predictions:
        """The serving version's answers to ``rows`` (a list of feature dicts, or a DataFrame), through
        TF Serving's REST ``:predict``; ``version`` or ``label`` asks one version."""
        where = f"/v1/models/{_part(model)}"
        if version is not None:
            where += f"/versions/{_part(str(version))}"
        elif label is not None:
            where += f"/labels/{_part(label)}"
        body = self._request("POST", f"{where}:predict", json={"instances": _records(rows)})
        return Predictions(
            predictions=list(body.get("predictions") or []),
            prediction_ids=[str(i) for i in body.get("prediction_ids") or []],
            model_version=body.get("model_version"),
            body=body,
        )

    def feedback(self, model: str, prediction_ids: Sequence[str], labels: Sequence[Any]) -> dict[str, Any]:
        """Ground truth for earlier predictions, one label per prediction id: the server's answer
        (``stored``, ``unknown_ids``, ``duplicate_ids``)."""
        if len(prediction_ids) != len(labels):
            raise InvalidInput(
                f"feedback: {len(prediction_ids)} prediction ids but {len(labels)} labels: one label per id"
            )
        pairs = [
            {"prediction_id": str(pid), "label": _plain(label)}
            for pid, label in zip(prediction_ids, labels, strict=True)
        ]
        return self._request("POST", f"/v1/models/{_part(model)}/feedback", json={"labels": pairs})

    def ingest(self, model: str, records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """Log predictions another server answered: each record has ``inputs`` and ``prediction``, and may
        have ``id``, ``time``, ``version``, ``label``; the server's answer (``stored``, ``prediction_ids``,
        ...)."""
        body = {"records": [_plain(dict(r)) for r in records]}
        return self._request("POST", f"/v1/models/{_part(model)}/predictions", json=body)

    # -- monitoring -------------------------------------------------------------------------------------

    def drift(self, model: str) -> Report:
        """The model's latest drift report (its newest monitor run)."""
        doc = self._request("GET", f"/v1/models/{_part(model)}/drift")
        return Report.from_dict(doc["report"], title=f"Drift report: {model}")

    def drift_document(self, model: str) -> dict[str, Any]:
        """The latest drift report as the server sends it: ``report``, ``headline``, the run's details."""
        return self._request("GET", f"/v1/models/{_part(model)}/drift")

    def run_monitor(self, model: str) -> Report:
        """Evaluate the model's drift now (scope admin) and return the new run's report."""
        doc = self._request("POST", f"/v1/models/{_part(model)}/monitors:run")
        return Report.from_dict(doc["report"], title=f"Drift report: {model}")

    def history(
        self,
        model: str,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        *,
        limit: int | None = None,
    ) -> pd.DataFrame:
        """The model's monitor runs stored in [``since``, ``until``), newest first, one row per run (every
        page, or the first ``limit`` runs): run_id, created_at, window_start, window_end, rows,
        dataset_drifted, n_drifted, drifted_features, backfill, ... Times are UTC ``datetime`` columns."""
        import pandas as pd

        params: dict[str, Any] = {}
        if since is not None:
            params["since"] = _instant(since)
        if until is not None:
            params["until"] = _instant(until)
        runs: list[dict[str, Any]] = []
        cursor = None
        while limit is None or len(runs) < limit:
            page = HISTORY_PAGE if limit is None else min(HISTORY_PAGE, limit - len(runs))
            query = {**params, "limit": page, **({"cursor": cursor} if cursor else {})}
            doc = self._request("GET", f"/v1/models/{_part(model)}/drift/history", params=query)
            runs += doc.get("runs") or []
            cursor = doc.get("next_cursor")
            if not cursor:
                break
        frame = pd.DataFrame(runs)
        for column in ("created_at", "window_start", "window_end"):
            if column in frame:
                frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
        return frame

    def alerts(
        self,
        model: str | None = None,
        *,
        state: str | None = None,
        severity: str | None = None,
        limit: int = 100,
    ) -> pd.DataFrame:
        """Alerts, newest first (of one ``model``, in one ``state``: pending, firing, resolved; of one
        ``severity``), one row per alert."""
        import pandas as pd

        query = {"model": model, "state": state, "severity": severity, "limit": limit}
        doc = self._request("GET", "/v1/alerts", params={k: v for k, v in query.items() if v is not None})
        return pd.DataFrame(doc.get("alerts") or [])

    # -- retraining -------------------------------------------------------------------------------------

    def retrain(self, model: str, *, idempotency_key: str | None = None, **params: Any) -> dict[str, Any]:
        """Queue a retraining job (scope admin): ``params`` are the route's body (``reason``, ``mode``,
        ``epochs``, ``workers``, ``ps``, ``drill``); the job as the server describes it (``created``: False
        when an active job of the model, or the job of the same ``idempotency_key``, answers instead)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._request("POST", f"/v1/models/{_part(model)}/retrain", json=params, headers=headers)

    def job(self, job_id: int) -> dict[str, Any]:
        """One retraining job: state, progress, gate checks, log tail."""
        return self._request("GET", f"/v1/jobs/{int(job_id)}")

    # -- the wire ---------------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{method} {self.url}{path}: no answer in time ({exc})") from None
        except httpx.TransportError as exc:
            raise Unreachable(f"{method} {self.url}{path}: cannot reach the server ({exc})") from None
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            message = body.get("error") if isinstance(body, dict) else None
            if not isinstance(message, str):
                message = str(body)[:500] or response.reason_phrase
            raise error_for(response.status_code)(
                response.status_code, message, body, method=method, url=str(response.request.url)
            )
        if not isinstance(body, dict):
            raise error_for(500)(
                response.status_code, f"expected a JSON object, got {str(body)[:200]!r}", body
            )
        return body


def _part(value: str) -> str:
    """One path segment, escaped (a name cannot reach another route)."""
    return quote(str(value), safe="")


def _instant(value: datetime | str) -> str:
    """A time for a query: RFC 3339; a naive datetime is read as UTC."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return str(value)


def _records(rows: Any) -> list[dict[str, Any]]:
    """Rows as JSON objects: a DataFrame's records or a list of mappings; NaN and numpy scalars made plain."""
    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):
        rows = rows.to_dict(orient="records")
    return [_plain(dict(row)) for row in rows]


def _plain(value: Any) -> Any:
    """``value`` as JSON can carry it: numpy scalars as Python numbers, NaN as null, containers walked."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):  # numpy scalars and arrays
        return _plain(value.tolist())
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
