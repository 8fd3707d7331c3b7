"""``import driftwarden``: light (no TensorFlow, no database driver, no engine until a comparison), with a
typed, documented public surface."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import driftwarden

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["tensorflow", "sqlalchemy", "psycopg", "scipy", "pandas", "numpy", "monitors", "training", "service"]


def test_importing_driftwarden_loads_no_tensorflow_no_database_and_no_engine() -> None:
    code = (
        "import json, os, sys; import driftwarden; "
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]; "
        "print(json.dumps([loaded, os.environ.get('OPENBLAS_NUM_THREADS')]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    loaded, blas_threads = json.loads(done.stdout)
    assert loaded == []
    assert blas_threads == "1"  # as driftwarden drift sets it before numpy loads (core/numpy_settings.py)


def test_the_public_surface_is_all_of_all_each_documented() -> None:
    assert driftwarden.__version__ and driftwarden.__version__ != "0+unknown"
    guide = (ROOT / "docs" / "python-api.md").read_text()
    for name in driftwarden.__all__:
        thing = getattr(driftwarden, name)
        assert f"`{name}" in guide, f"docs/python-api.md does not describe {name}"
        if name != "__version__":
            assert inspect.getdoc(thing), f"{name} has no docstring"
    public = {n for n in dir(driftwarden) if not n.startswith("_")} - {
        "client",
        "comparing",
        "errors",
        "report",
        "settings",
        "tables",
        "annotations",
    }
    assert public <= set(driftwarden.__all__)


def test_compare_and_profile_take_their_options_by_keyword() -> None:
    for function in (driftwarden.compare, driftwarden.profile):
        params = inspect.signature(function).parameters
        assert all(
            p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD)
            for name, p in params.items()
            if name not in {"reference", "current"}
        )
        assert params["target"].annotation and params["task"].default is None
