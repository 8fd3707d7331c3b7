"""docker-compose.yml and the Dockerfile stay consistent with the real entry points (no Docker here)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer._click.core import Command, Context  # typer vendors its own click
from typer.core import TyperGroup

from core.config import Settings
from service.cli import app
from training.cluster.nodes import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _driftwarden_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in _compose()["services"].items() if s.get("image") == "driftwarden:latest"}


def _resolve(args: list[str]) -> tuple[Command, list[str]]:
    cmd = typer.main.get_command(app)
    rest = list(args)
    while isinstance(cmd, TyperGroup) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(Context(cmd), rest[0])
        assert sub is not None, f"`driftwarden {' '.join(args)}`: no command {rest[0]!r}"
        cmd, rest = sub, rest[1:]
    return cmd, rest


def test_every_service_command_parses_against_the_cli() -> None:
    services = _driftwarden_services()
    assert {"api", "migrate", "ps-0", "worker-0", "worker-1", "trainer"} <= set(services)
    for name, svc in services.items():
        cmd, rest = _resolve(svc["command"])
        # parsing validates every option name, value type and required option, without running anything
        ctx = cmd.make_context(f"driftwarden ({name})", list(rest), resilient_parsing=False)
        assert ctx.params is not None


def test_environment_names_are_real_settings() -> None:
    fields = {f"DRIFTWARDEN_{f.upper()}" for f in Settings.model_fields}
    for name, svc in _driftwarden_services().items():
        unknown = {k for k in svc.get("environment", {}) if k.startswith("DRIFTWARDEN_")} - fields
        assert not unknown, f"{name}: unknown settings {unknown}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for var in re.findall(r"(DRIFTWARDEN_[A-Z_]+)=", dockerfile):
        assert var in fields, var


def test_cluster_spec_matches_the_cluster_services() -> None:
    compose = _compose()["services"]
    spec_path = "/etc/driftwarden/cluster.json"
    spec = ClusterSpec.parse((ROOT / "deploy" / "cluster.json").read_text())
    for role, index, address in spec.nodes():
        host = address.rsplit(":", 1)[0]
        if role == "chief":
            assert compose["trainer"]["hostname"] == host
            assert spec_path in compose["trainer"]["command"]
            continue
        svc = compose[host]
        assert svc["command"][:6] == ["cluster", "node", "--role", role, "--index", str(index)]
        assert svc["command"][-1] == spec_path
    mounts = _compose()["x-driftwarden"]["volumes"]
    assert "./deploy:/etc/driftwarden:ro" in mounts


PACKAGES = [
    p.rstrip("*")
    for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
]


def test_every_top_level_package_is_installed() -> None:
    top = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests", "bench")}
    assert top == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_dockerfile_ships_every_package_and_the_entry_point(package: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"COPY {package} ./{package}" in dockerfile
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["driftwarden"] == "service.cli:main"
    assert json.loads(re.search(r"ENTRYPOINT (\[.*\])", dockerfile).group(1)) == ["driftwarden"]  # type: ignore[union-attr]


# ------------------------------------------------------------------ the monitoring stack (deploy/, issue 8)

MONITORING = {
    "prometheus": ("prom/prometheus:", 9090),
    "alertmanager": ("prom/alertmanager:", 9093),
    "grafana": ("grafana/grafana:", 3000),
}


def _bind_mounts(svc: dict[str, Any]) -> dict[str, Path]:
    """Container path -> repository path of a service's bind mounts (``./...`` sources)."""
    out = {}
    for mount in svc.get("volumes", []):
        source, target = mount.split(":")[:2]
        if source.startswith("./"):
            out[target] = ROOT / source
    return out


def _in_repo(svc: dict[str, Any], container_path: str) -> Path:
    """Where a path inside the container comes from in the repository (via the service's bind mounts)."""
    for target, source in sorted(_bind_mounts(svc).items(), key=lambda kv: -len(kv[0])):
        if container_path == target or container_path.startswith(target + "/"):
            return source / container_path[len(target) :].lstrip("/")
    raise AssertionError(f"{container_path} is not mounted from the repository")


def _flag(svc: dict[str, Any], name: str) -> str:
    values = [arg.split("=", 1)[1] for arg in svc["command"] if arg.startswith(f"--{name}=")]
    assert len(values) == 1, (name, svc["command"])
    return values[0]


def _api_port() -> int:
    cmd = _compose()["services"]["api"]["command"]
    port = int(cmd[cmd.index("--port") + 1])
    assert f"{port}:{port}" in _compose()["services"]["api"]["ports"]
    return port


@pytest.mark.parametrize("name", sorted(MONITORING))
def test_monitoring_service_official_image_port_healthcheck_volumes(name: str) -> None:
    compose = _compose()
    svc = compose["services"][name]
    image, port = MONITORING[name]
    assert svc["image"].startswith(image) and not svc["image"].endswith(":latest"), svc["image"]
    assert f"{port}:{port}" in svc["ports"]
    test = svc["healthcheck"]["test"]
    assert test[0] == "CMD" and any(f"localhost:{port}/" in word for word in test), test
    named = [m.split(":")[0] for m in svc["volumes"] if not m.startswith(("./", "/"))]
    assert named, f"{name}: no named volume for its data"
    assert set(named) <= set(compose["volumes"]), named
    mounts = _bind_mounts(svc)
    assert mounts, f"{name}: nothing of deploy/ is mounted"
    for target, source in mounts.items():
        assert source.is_dir() and any(source.iterdir()), f"{name}: {source} (mounted at {target}) is empty"
        assert source.resolve().is_relative_to(ROOT / "deploy"), source


def test_prometheus_scrapes_the_api_and_loads_the_rules() -> None:
    svc = _compose()["services"]["prometheus"]
    config_file = _in_repo(svc, _flag(svc, "config.file"))
    config = yaml.safe_load(config_file.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    api = jobs["driftwarden"]
    assert api.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in api["static_configs"] for t in sc["targets"]]
    assert targets == [f"api:{_api_port()}"]
    assert "api" in svc["depends_on"]
    # every rule_files glob resolves to the rules in the repository
    rules = [
        p for pattern in config["rule_files"] for p in _in_repo(svc, pattern).parent.glob(Path(pattern).name)
    ]
    assert ROOT / "deploy/prometheus/rules/driftwarden.yml" in rules
    # alerts go to the alertmanager service
    managers = [
        t for am in config["alerting"]["alertmanagers"] for sc in am["static_configs"] for t in sc["targets"]
    ]
    assert managers == [f"alertmanager:{MONITORING['alertmanager'][1]}"]


def test_alertmanager_sends_to_the_api_receiver_grouped_by_model() -> None:
    svc = _compose()["services"]["alertmanager"]
    config = yaml.safe_load(_in_repo(svc, _flag(svc, "config.file")).read_text())
    assert "model" in config["route"]["group_by"]
    urls = [w["url"] for r in config["receivers"] for w in r.get("webhook_configs", [])]
    assert f"http://api:{_api_port()}/v1/alerts/alertmanager" in urls
    assert len(urls) >= 2, "the example team webhook is missing"


def _api_datasource(provisioning: Path) -> dict[str, Any]:
    (datasource,) = yaml.safe_load((provisioning / "datasources/driftwarden.yaml").read_text())["datasources"]
    assert isinstance(datasource, dict)
    return datasource


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboards() -> None:
    """Every panel reads Prometheus, but the drift dashboard's history panel (in a collapsed row), which reads
    the driftwarden API: each through a data source provisioned here, with its fixed uid."""
    svc = _compose()["services"]["grafana"]
    provisioning = _in_repo(svc, "/etc/grafana/provisioning")
    (datasource,) = yaml.safe_load((provisioning / "datasources/prometheus.yaml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    api = _api_datasource(provisioning)
    assert api["uid"] != datasource["uid"]
    (provider,) = yaml.safe_load((provisioning / "dashboards/driftwarden.yaml").read_text())["providers"]
    dashboards = sorted(_in_repo(svc, provider["options"]["path"]).glob("*.json"))
    assert [d.name for d in dashboards] == [
        "driftwarden-drift.json",
        "driftwarden-infra.json",
        "driftwarden-service.json",
    ]
    for path in dashboards:
        board = json.loads(path.read_text())
        panels = [*board["panels"], *(p for row in board["panels"] for p in row.get("panels", []))]
        uids = {p["datasource"]["uid"] for p in panels if "datasource" in p}
        uids |= {v["datasource"]["uid"] for v in board.get("templating", {}).get("list", [])}
        expected = {datasource["uid"]} | ({api["uid"]} if path.name == "driftwarden-drift.json" else set())
        assert uids == expected, (path.name, uids)
    home = _in_repo(svc, svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home in dashboards


def test_grafana_reads_the_api_with_the_plugin_and_a_token_it_is_given() -> None:
    """The API data source: the Infinity plugin, installed by the grafana service (on a Grafana it supports);
    the api service's URL, the only host it may call; a bearer token from the environment variable the grafana
    service passes on from the host (never a value written in the repository)."""
    svc = _compose()["services"]["grafana"]
    api = _api_datasource(_in_repo(svc, "/etc/grafana/provisioning"))
    assert api["type"] == "yesoreyeram-infinity-datasource"
    plugins = [entry.split()[0] for entry in svc["environment"]["GF_INSTALL_PLUGINS"].split(",")]
    assert api["type"] in plugins
    version = tuple(int(part) for part in svc["image"].split(":", 1)[1].split(".")[:2])
    assert version >= (11, 6), "the Infinity plugin's releases need Grafana 11.6 or later"
    url = f"http://api:{_api_port()}"
    assert api["url"] == url and api["jsonData"]["allowedHosts"] == [url]
    assert api["jsonData"]["httpHeaderName1"] == "Authorization"
    match = re.fullmatch(r"Bearer \$\{(\w+)\}", api["secureJsonData"]["httpHeaderValue1"])
    assert match, api["secureJsonData"]
    variable = match.group(1)
    assert not variable.startswith("DRIFTWARDEN_"), "a variable of Grafana's, not a setting of the API"
    assert svc["environment"][variable] == f"${{{variable}:-}}"
