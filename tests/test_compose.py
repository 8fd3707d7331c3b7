"""docker-compose.yml and the Dockerfile stay consistent with the real entry points (no Docker here)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml

from core.config import Settings
from service.cli import app
from training.cluster import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _driftwarden_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in _compose()["services"].items() if s.get("image") == "driftwarden:latest"}


def _resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    cmd: click.Command = typer.main.get_command(app)
    rest = list(args)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), rest[0])
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
