"""The API's read-scoped and admin-scoped routes, with a body for each write."""

from __future__ import annotations

from typing import Any

Route = tuple[str, str, dict[str, Any] | None]  # method, path, JSON body

SILENCE = {
    "matchers": [{"name": "model", "value": "credit"}],
    "duration": "2h",
    "comment": "t",
}


READ_ROUTES: list[Route] = [
    ("GET", "/v1/alerts", None),
    ("GET", "/v1/silences", None),
    ("GET", "/v1/jobs", None),
    ("GET", "/v1/models/credit/alert-rules", None),
    ("GET", "/v1/models/credit/versions", None),
    ("GET", "/v1/models/credit/drift", None),
    ("GET", "/v1/models/credit/drift/history", None),
    ("GET", "/reports/credit/drift", None),
]


ADMIN_ROUTES: list[Route] = [
    ("POST", "/v1/silences", SILENCE),
    ("PUT", "/v1/models/credit/alert-rules", {"rules": []}),
    ("GET", "/v1/webhooks", None),
    ("POST", "/v1/models/credit/versions/1:promote", None),
    ("POST", "/v1/models/credit:rollback", None),
    ("POST", "/v1/models/credit/retrain", None),
    ("POST", "/v1/models/credit/monitors:run", None),
]
