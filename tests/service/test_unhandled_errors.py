"""An exception no route handles is answered (500, the app's ``{"error": ...}`` shape, its request id) and the
client's keep-alive connection stays usable: uvicorn closes a connection only when the app raises.

A real uvicorn server with two routes of the test's own (nothing in the app still raises a bare exception on
purpose): one that raises, one that names the client's port as the server sees it (so the test knows the
second request came on the same connection). On both backends, a statement the database refuses (a missing
table) stays a 500: only an unreachable database is a 503.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi import Request
from sqlalchemy import text

from core.http import runtime
from tests.support import Server, serve_settings


class Boom(RuntimeError):
    """The test's own bug."""


def _server(url: str, tmp_path: Path) -> Server:
    srv = Server(serve_settings(url, tmp_path / "spool", serve_models=["__none__"]))

    async def boom() -> None:
        raise Boom("a bug in a route")

    async def bad_sql(request: Request) -> None:
        with runtime(request).db.session() as s:
            s.execute(text("select * from no_such_table_here"))

    async def peer(request: Request) -> dict[str, int]:
        assert request.client is not None
        return {"port": request.client.port}

    srv.app.add_api_route("/test/boom", boom, methods=["GET"])
    srv.app.add_api_route("/test/bad-sql", bad_sql, methods=["GET"])
    srv.app.add_api_route("/test/peer", peer, methods=["GET"])
    return srv


def test_a_500_keeps_the_keep_alive_connection(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    srv = _server(database_url, tmp_path)
    with caplog.at_level(logging.ERROR, logger="driftwarden"), srv, srv.client() as c:
        first = c.get("/test/peer").json()["port"]
        failed = c.get("/test/boom", headers={"X-Request-Id": "boom-1"})
        assert failed.status_code == 500
        assert failed.json() == {"error": "internal error (Boom)"}
        assert failed.headers["x-request-id"] == "boom-1"
        # the database is up and refuses the statement: a bug, not an outage
        refused = c.get("/test/bad-sql")
        assert refused.status_code == 500, refused.text
        refusal = "OperationalError" if database_url.startswith("sqlite") else "ProgrammingError"
        assert refused.json() == {"error": f"internal error ({refusal})"}
        assert "retry-after" not in refused.headers
        after = c.get("/test/peer")  # on the same connection: not reset, not a new one
        assert after.status_code == 200
        assert after.json()["port"] == first
    logged = [r for r in caplog.records if r.getMessage() == "unexpected error on GET /test/boom"]
    assert len(logged) == 1 and logged[0].exc_info is not None  # the traceback is in the log
    assert logged[0].exc_info[0] is Boom
