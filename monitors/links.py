"""Where a model's HTML drift report lives, and a signed link to it that a browser opens without a token.

The link is ``<public_url>/reports/<model>/drift?expires=...&signature=...`` (:mod:`core.auth`), signed with
the link key of ``access/``; the route checks it with :func:`core.http.require_scope_or_signed_link`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from access.service import sign_path
from core.config import Settings, base_url

REPORT_PATH = "/reports/{name}/drift"


def report_path(model_name: str) -> str:
    """The path of ``model_name``'s HTML drift report (a model name needs no escaping in a path)."""
    return REPORT_PATH.format(name=model_name)


def signed_report_url(
    *, session: Session, settings: Settings, model_name: str, ttl: timedelta, now: datetime | None = None
) -> tuple[str, datetime]:
    """``(url, expiry)``: ``model_name``'s report at ``public_url``, opened without a token until expiry."""
    path, expires = sign_path(
        session=session, settings=settings, path=report_path(model_name), ttl=ttl, now=now
    )
    return base_url(settings) + path, expires
