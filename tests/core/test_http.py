"""core.http's body reading: an empty body and a compressed one are answered in words that say what to do,
the words each route family chose for a bad body stay as they were, and JSON nested deeper than
``MAX_JSON_DEPTH`` is refused before any parser reads it."""

from __future__ import annotations

import gzip
import json
import random
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from core.errors import DomainError
from core.http import (
    MAX_JSON_DEPTH,
    JsonBody,
    caller_request_id,
    error_response,
    json_response,
    nests_deeper,
    read_body,
    request_id_of,
    runtime,
)

EXAMPLE = '{"version": 3}'
OBJECT = JsonBody(limit=1024, rule="test body limit", example=EXAMPLE, nul="text fields")
OPTIONAL = JsonBody(limit=1024, optional=True)
SETTING = JsonBody()  # limit: the max_body_bytes setting


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    app.state.dw = SimpleNamespace(settings=SimpleNamespace(max_body_bytes=64))

    async def refused(request: Request, exc: DomainError) -> Response:
        return error_response(exc.status_code, str(exc), None)

    app.add_exception_handler(DomainError, refused)  # type: ignore[arg-type]

    @app.post("/object")
    async def read_object(request: Request) -> Response:
        return json_response(await OBJECT.object(request))

    @app.post("/optional")
    async def read_optional(request: Request) -> Response:
        return json_response(await OPTIONAL.object(request))

    @app.post("/model")
    async def read_model(request: Request) -> Response:
        return json_response((await OBJECT.model(request, Spec)).model_dump())

    @app.post("/value")
    async def read_value(request: Request) -> Response:
        return json_response({"value": await SETTING.value(request)})

    @app.get("/ids")
    async def ids(request: Request) -> Response:
        return json_response({"echoed": request_id_of(request), "logged": caller_request_id(request)})

    @app.post("/raw")
    async def raw(request: Request) -> Response:
        return json_response(
            {"size": len(await read_body(request, runtime(request).settings.max_body_bytes))}
        )

    return TestClient(app)


def _error(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    message: str = r.json()["error"]
    return message


@pytest.mark.parametrize("body", [b"", b"  \n"])
def test_an_empty_body_is_said_to_be_empty_not_nonetype(client: TestClient, body: bytes) -> None:
    for path in ("/object", "/model"):
        message = _error(client.post(path, content=body), 400)
        assert message == f"the body is empty: send a JSON object, e.g. {EXAMPLE}"
    message = _error(client.post("/value", content=body), 400)
    assert message == "the body is empty: send a JSON object"
    assert client.post("/optional", content=body).json() == {}


def test_a_gzip_body_is_refused_naming_content_encoding(client: TestClient) -> None:
    packed = gzip.compress(b'{"version": 3}')
    for path in ("/object", "/value", "/raw"):
        message = _error(client.post(path, content=packed, headers={"Content-Encoding": "gzip"}), 415)
        assert message == (
            "Content-Encoding: gzip is not supported: send the body uncompressed, without that header "
            "(rule: content_encoding)"
        )
        assert "UTF-8" not in message
        # the same bytes without the header: recognised by gzip's magic bytes, not parsed as bad UTF-8
        message = _error(client.post(path, content=packed), 415)
        assert message == (
            "the body is gzip-compressed (gzip's magic bytes): gzip is not supported, send it uncompressed "
            "(rule: content_encoding)"
        )
    # any other coding too, and before the size: a compressed body is refused whatever its length
    r = client.post("/raw", content=b"x" * 100, headers={"Content-Encoding": "br"})
    assert _error(r, 415).startswith("Content-Encoding: br is not supported")


def test_identity_is_no_encoding(client: TestClient) -> None:
    r = client.post("/object", content=b'{"version": 3}', headers={"Content-Encoding": "identity"})
    assert r.status_code == 200 and r.json() == {"version": 3}


def test_a_route_family_keeps_its_words(client: TestClient) -> None:
    assert _error(client.post("/object", content=b"{"), 400).startswith("the body is not valid JSON (")
    assert _error(client.post("/object", json=[1]), 400) == "the body must be a JSON object, got list"
    assert _error(client.post("/object", json={"a": "x\x00"}), 400) == (
        "the body holds a NUL character (\\u0000), which text fields cannot store"
    )
    assert client.post("/optional", json={"a": "x\x00"}).status_code == 200  # nul=None: allowed
    assert _error(client.post("/model", json={"version": "x"}), 400).startswith("version: ")
    assert _error(client.post("/object", content=b"[" + b" " * 2000 + b"]"), 413).endswith(
        "(rule: test body limit)"
    )
    assert _error(client.post("/value", content=b" " * 65), 413).endswith("(rule: max_body_bytes)")
    assert client.post("/value", content=b"[1]").json() == {"value": [1]}


@pytest.mark.parametrize(
    ("header", "logged"),
    [(None, None), ("", None), ("caller-7", "caller-7"), ("has space", None), ("x" * 129, None)],
)
def test_only_a_callers_sane_request_id_is_the_one_logged(
    client: TestClient, header: str | None, logged: str | None
) -> None:
    """``request_id_of`` echoes the caller's sane id or makes one up; ``caller_request_id`` is the caller's
    sane id or None (what the prediction log keeps)."""
    found = client.get("/ids", headers={} if header is None else {"X-Request-Id": header}).json()
    assert found["logged"] == logged
    if logged is None:
        assert len(found["echoed"]) == 32 and found["echoed"] != header
    else:
        assert found["echoed"] == logged


def _depth(value: Any) -> int:
    """Nesting of a parsed JSON value (the reference :func:`core.http.nests_deeper` must agree with)."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def test_nesting_depth_counts_brackets_outside_strings_only() -> None:
    """Random documents whose keys and strings are full of brackets, quotes and backslashes: the byte scan
    agrees with the parsed value's depth at every limit."""
    rng = random.Random(41)
    alphabet = ["[", "]", "{", "}", '"', "\\", "a"]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))

    def value(depth: int) -> Any:
        r = rng.random()
        if depth and r < 0.4:
            return [value(depth - 1) for _ in range(rng.randint(0, 3))]
        if depth and r < 0.7:
            return {text(): value(depth - 1) for _ in range(rng.randint(0, 3))}
        return text() if r < 0.9 else 1.5

    for _ in range(2000):
        doc = value(rng.randint(0, 10))
        body = json.dumps(doc).encode()
        for limit in (0, 1, 2, 4, 7):
            assert nests_deeper(body, limit) is (_depth(doc) > limit), (body, limit)
    wide = [[["]"]], {"[": [1]}] * 2000  # 10,000 brackets outside strings: the numpy path
    for limit in (2, 3):
        assert nests_deeper(json.dumps(wide).encode(), limit) is (_depth(wide) > limit)
    deep: Any = "\\"
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep, '"[{']
    assert nests_deeper(json.dumps([*wide, deep]).encode()) and not nests_deeper(
        json.dumps([*wide, deep[0]]).encode()
    )
    assert nests_deeper(b"[" * 200_000)
    assert not nests_deeper(b'["' + b"[" * 300 + b'"]')  # inside a string
    assert nests_deeper(b'["\\\\"' + b"[" * 300)  # an escaped backslash ends the string before them
    assert not nests_deeper(b'["\\"' + b"[" * 300 + b'"]')  # an escaped quote does not


def test_a_json_body_nested_too_deeply_is_a_400_naming_the_rule(client: TestClient) -> None:
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    r = client.post("/object", content=b'{"a": ' + deep + b"}")
    assert r.status_code == 400 and r.json()["error"].endswith("(rule: max_json_depth)"), r.text
    at_the_bound = b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1)
    assert client.post("/object", content=b'{"a": ' + at_the_bound + b"}").status_code == 200
