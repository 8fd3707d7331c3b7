"""The HTTP edge: duplicate feedback ids said, 413 for big bodies, 415 for compressed ones, 400 naming an
empty body, 400 for a bad version, 405 with Allow, /docs served without a CDN, and the spool under the
configured data folder."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from tests.support import Server, TrainedModels


def test_duplicate_feedback_ids_are_reported(server: Server, trained: TrainedModels) -> None:
    with server.client() as c:
        ids = c.post("/v1/models/credit:predict", json={"instances": trained.rows[:2]}).json()[
            "prediction_ids"
        ]
        r = c.post(
            "/v1/models/credit/feedback",
            json={
                "labels": [
                    {"prediction_id": ids[0], "label": 0},
                    {"prediction_id": ids[1], "label": 1},
                    {"prediction_id": ids[0], "label": 1},
                ]
            },
        )
        single = c.post(
            "/v1/models/credit/feedback", json={"labels": [{"prediction_id": ids[1], "label": 0}]}
        )
    assert r.status_code == 200, r.text
    assert r.json() == {"stored": 2, "unknown_ids": [], "duplicate_ids": [ids[0]]}
    assert single.json() == {"stored": 1, "unknown_ids": [], "duplicate_ids": []}
    from sqlalchemy import create_engine, text

    engine = create_engine(server.settings.database_url.get_secret_value())
    with engine.connect() as conn:
        label = conn.execute(
            text("select label from prediction_feedback where prediction_id = :p"), {"p": ids[0]}
        ).scalar_one()
    engine.dispose()
    assert label == 1.0  # the last label of the repeated id, as the answer says


def test_a_body_over_the_limit_answers_413(server: Server) -> None:
    limit = server.settings.max_body_bytes
    big = b"x" * (limit + 1)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming too
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    with server.client() as c:
        for path in ("/v1/models/credit:predict", "/v2/models/credit/infer", "/v1/models/credit/feedback"):
            for body in (big, chunks()):
                r = c.post(path, content=body)
                assert r.status_code == 413, (path, r.status_code, r.text)
                assert "rule: max_body_bytes" in r.json()["error"] and str(limit) in r.json()["error"]


def test_a_compressed_body_answers_415_naming_content_encoding(
    server: Server, trained: TrainedModels
) -> None:
    packed = gzip.compress(json.dumps({"instances": trained.rows[:1]}).encode())
    with server.client() as c:
        for method, path in [
            ("POST", "/v1/models/credit:predict"),
            ("POST", "/v2/models/credit/infer"),
            ("POST", "/v1/models/credit/feedback"),
            ("PUT", "/v1/models/credit/labels/canary"),
            ("POST", "/v1/silences"),
            ("POST", "/v1/models/credit/retrain"),
        ]:
            for headers, said in (({"Content-Encoding": "gzip"}, "Content-Encoding: gzip"), ({}, "gzip")):
                r = c.request(method, path, content=packed, headers=headers)
                assert r.status_code == 415, (path, headers, r.status_code, r.text)
                error = r.json()["error"]
                assert said in error and "uncompressed" in error and "rule: content_encoding" in error
                assert "UTF-8" not in error and "utf-8" not in error, error


def test_an_empty_body_is_said_to_be_empty(server: Server) -> None:
    with server.client() as c:
        label = c.put("/v1/models/credit/labels/canary", content=b"")
        silence = c.post("/v1/silences", content=b"")
    assert label.status_code == 400 and silence.status_code == 400, (label.text, silence.text)
    assert label.json()["error"] == 'the body is empty: send a JSON object, e.g. {"version": 3}'
    assert silence.json()["error"] == "the body is empty: send a JSON object"


def test_a_non_numeric_version_answers_400(server: Server, trained: TrainedModels) -> None:
    with server.client() as c:
        answers = [
            c.post("/v1/models/credit/versions/abc:predict", json={"instances": trained.rows[:1]}),
            c.post("/v2/models/credit/versions/abc/infer", json={"inputs": []}),
            c.get("/v1/models/credit/versions/abc"),
            c.get("/v1/models/credit/versions/abc/metadata"),
            c.get("/v2/models/credit/versions/abc"),
            c.get("/v2/models/credit/versions/abc/ready"),
            c.get("/v2/models/credit/versions/%C2%B2"),  # "²" is a digit to str.isdigit, not a version
        ]
        missing = c.get("/v1/models/credit/versions/99")
    for r in answers:
        assert r.status_code == 400, (r.request.url, r.status_code, r.text)
        assert (
            "version must be a positive integer" in r.json()["error"] and "rule: version" in r.json()["error"]
        )
    assert missing.status_code == 404  # a number that is not loaded is still "not found"


def test_other_methods_on_predict_routes_answer_405_with_allow_post(server: Server) -> None:
    with server.client() as c:
        for method, path in [
            ("GET", "/v1/models/credit:predict"),
            ("GET", "/v1/models/credit/versions/1:predict"),
            ("GET", "/v1/models/credit/labels/canary:predict"),
            ("PUT", "/v1/models/credit:predict"),
            ("DELETE", "/v1/models/credit:predict"),
            ("GET", "/v2/models/credit/infer"),
            ("GET", "/v2/models/credit/versions/1/infer"),
        ]:
            r = c.request(method, path)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            assert r.headers["allow"] == "POST", (method, path, r.headers)
            assert "not served" not in r.json()["error"]
        assert "send the request with POST" in c.get("/v1/models/credit:predict").json()["error"]
        assert c.get("/v1/models/credit").status_code == 200  # the status route is untouched


def test_a_tf_serving_verb_this_server_does_not_answer_is_a_404_saying_so(server: Server) -> None:
    with server.client() as c:
        for path in ("/v1/models/credit:classify", "/v1/models/credit/versions/1:regress"):
            r = c.post(path, json={"examples": [{}]})  # once a 405 "send it with GET", which then was a 404
            assert r.status_code == 404, (path, r.text)
            assert "is not served here; this server answers :predict" in r.json()["error"]
        r = c.post("/v1/models/credit", json={})  # the status route itself: still a 405 naming GET
        assert r.status_code == 405 and "send the request with GET" in r.json()["error"]


def test_docs_page_loads_every_asset_locally(server: Server) -> None:
    with server.client() as c:
        page = c.get("/docs")
        assert page.status_code == 200 and "swagger" in page.text.lower()
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        urls += re.findall(r"""url: ?["']([^"']+)["']""", page.text)  # the OpenAPI document
        assert len(urls) >= 4, page.text
        assert not re.search(r"https?://", page.text), "the docs page references a remote URL"
        for url in urls:
            assert url.startswith("/"), url
            r = c.get(url)
            assert r.status_code == 200 and r.content, url
        js = next(u for u in urls if u.endswith(".js"))
        assert "SwaggerUIBundle" in c.get(js).text
        assert c.get("/openapi.json").json()["info"]["title"] == "driftwarden serving"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_the_spool_lives_in_the_data_folder_not_the_working_directory(
    tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(data / "models"))
    monkeypatch.delenv("DRIFTWARDEN_SPOOL_PATH", raising=False)
    settings = Settings(
        database_url=SecretStr(f"sqlite:///{data / 'dw.db'}"), retention_interval_s=0, monitor_enabled=False
    )
    assert settings.spool_path == data / "spool"
    with Server(settings):
        pass
    assert (data / "spool").is_dir() and any((data / "spool").iterdir())
    assert not (elsewhere / "var").exists()
    # an explicit spool_path still wins
    assert Settings(spool_path=tmp_path / "s").spool_path == tmp_path / "s"
