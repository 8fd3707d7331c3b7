"""The API contract: schemathesis, every check, against a real server: zero failures, zero 5xx.

The server runs as in production (uvicorn, PostgreSQL, a real model, the admin token set); schemathesis
reads ``/openapi.json``, sends examples, coverage cases, fuzzed and stateful sequences (predict -> feedback,
versions -> version routes, through the document's links) and checks every answer against the document:
status codes, content types, bodies, headers, 405 with ``Allow`` on undeclared methods, schema-valid data
accepted and schema-violating data refused, auth enforced where declared.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Server, TrainedModels, postgres_schema, seed_registry, serve_settings

ADMIN_TOKEN = "contract-admin-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 12  # per operation and phase: about a minute and a half on two cores


@pytest.fixture(scope="module")
def contract_server(
    postgres_url: str, trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with postgres_schema(postgres_url) as url:
        seed_registry(url, trained, serving=1, labels={"canary": 2})
        settings = serve_settings(
            url, tmp_path_factory.mktemp("spool"), log_durability="durable", admin_token=ADMIN_TOKEN
        )
        with Server(settings) as srv:
            yield srv


def test_the_document_declares_bodies_errors_and_security(contract_server: Server) -> None:
    doc = httpx.get(f"{contract_server.url}/openapi.json").json()
    predict = doc["paths"]["/v1/models/{name}:predict"]["post"]
    assert set(predict["requestBody"]["content"]["application/json"]["schema"]["properties"]) == {
        "signature_name",
        "instances",
        "inputs",
    }
    assert {"400", "404", "413", "500", "503"} <= set(predict["responses"])
    assert "feedback" in predict["responses"]["200"]["links"]
    infer = doc["paths"]["/v2/models/{name}/infer"]["post"]
    assert "application/octet-stream" in infer["requestBody"]["content"]
    assert any(p["name"] == "Inference-Header-Content-Length" for p in infer["parameters"])
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (method, path)  # the app answers 400, never 422
            for code, answer in op["responses"].items():
                if code.startswith(("4", "5")):
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, code)
    promote = doc["paths"]["/v1/models/{name}/versions/{version}:promote"]["post"]
    assert promote["security"] == [{"HTTPBearer": []}] and {"401", "403"} <= set(promote["responses"])
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, method in [
        ("/v1/models/{name}/versions", "get"),  # scope read
        ("/v1/models/{name}/drift", "get"),
        ("/v1/alerts", "get"),
        ("/v1/models/{name}/feedback", "post"),  # scope feedback
        ("/v1/alerts/alertmanager", "post"),  # its own credentials, else admin
    ]:
        op = doc["paths"][path][method]
        assert op["security"] == [{"HTTPBearer": []}], (method, path)
        assert {"401", "403"} <= set(op["responses"]), (method, path)
    assert "security" not in predict and "401" not in predict["responses"]  # open: predict_requires_token off
    assert "security" not in doc["paths"]["/v2/models/{name}"]["get"]
    report = doc["paths"]["/reports/{name}/drift"]["get"]
    assert "text/html" in report["responses"]["200"]["content"]
    # the HTML report also opens with a signed link: its two query parameters are documented
    query = {p["name"]: p for p in report["parameters"] if p["in"] == "query"}
    assert query["expires"]["schema"] == {"type": "integer"} and not query["expires"]["required"]
    assert query["signature"]["schema"] == {"type": "string"} and not query["signature"]["required"]
    assert "signed link" in report["description"] and "401" in report["responses"]


def test_undeclared_methods_answer_405_with_allow(contract_server: Server) -> None:
    with contract_server.client() as c:
        for method, path, allow in [
            ("TRACE", "/v1/alerts", "GET"),
            ("GET", "/v1/alerts/alertmanager", "POST"),  # not GET /v1/alerts/{alert_id}
            ("GET", "/v1/models/credit/versions/1:promote", "POST"),
            ("DELETE", "/v1/models/credit/alert-rules", "GET, PUT"),
            ("OPTIONS", "/v1/jobs/1:cancel", "POST"),
            ("GET", "/v1/models/credit:predict", "POST"),
        ]:
            r = c.request(method, path)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            assert r.headers["allow"] == allow, (method, path, r.headers)
            assert "rule: method" in r.json()["error"]
        live = c.get("/v2/health/live")
        assert live.headers["content-type"] == "application/json" and live.json() == {"live": True}


def _schemathesis(contract_server: Server, tmp_path: Path, report: Path) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).with_name("schemathesis")
    return subprocess.run(
        [
            str(cli),
            "--config-file",
            str(CONFIG),
            "run",
            f"{contract_server.url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            "20261130",
            "--workers",  # one: see TOOL_CRASH
            "1",
            "--header",
            f"Authorization: Bearer {ADMIN_TOKEN}",
            "--report",
            "json",
            "--report-json-path",
            str(report),
            "--request-timeout",
            "30",
            "--max-response-time",  # generous (10 s by default): two loaded cores must not make it flaky
            "30",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # schemathesis keeps a cache folder in its working directory
    )


# CPython 3.11 before 3.11.8 keeps the AST constructor's recursion counter in state shared by every thread,
# and a garbage collection inside one parse lets another thread's parse move it (python/cpython#106905, fixed
# by #113035); hypothesis then fails to describe one of schemathesis' own lambdas with this SystemError. It
# is a crash of the generator, reported as a schemathesis "Runtime Error", never an answer of the API. With
# two workers (threads) it struck twice in a row in one CI run (this machine has 3.11.7), so schemathesis
# runs one worker: no second thread parses; a crash still gets one more run.
TOOL_CRASH = "AST constructor recursion depth mismatch"


def _only_tool_crashes(out: str) -> bool:
    """Whether schemathesis failed only because the generator crashed as above: no check failed, and every
    error it counted is that crash."""
    if re.search(r"\b\d+ failed\b", out) or "ST101" in out:
        return False
    errors = re.search(r"\b(\d+) errors?\b", out)
    crashes = sum(1 for line in out.splitlines() if line.strip().startswith(TOOL_CRASH))
    return errors is not None and 0 < int(errors.group(1)) == crashes


def test_schemathesis_finds_no_failure(contract_server: Server, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    run = _schemathesis(contract_server, tmp_path, report)
    if run.returncode != 0 and _only_tool_crashes(run.stdout + run.stderr):  # once: a crash is no verdict
        warnings.warn(f"schemathesis' generator crashed ({TOOL_CRASH}); run again", stacklevel=1)
        run = _schemathesis(contract_server, tmp_path, report)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[:20000]
    assert "ST101" not in out  # no server error, ever
    summary = json.loads(report.read_text())
    assert summary, "schemathesis wrote no report"
    assert "Tested:" in out and "Tested: 0" not in out, out[-3000:]
