"""``driftwarden drift`` imports ``scipy.special`` (and the engine and the explanations) in its main thread
while the profile's threads fit the reference's PCA (``monitors.offline._load_what_follows``), not before
reading:
that is safe only while no other thread imports anything meanwhile (two threads importing at once can
deadlock on a circular import or see a module half made). Each run records every module loaded with the
thread that loaded it, in a fresh interpreter: no thread but the main one imports anything, ever."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.tabular import write_table
from monitors.offline import THREADS_IMPORT

PROBE = """
import _frozen_importlib as bootstrap, json, sys, threading
events, alive = [], []
load = bootstrap._find_and_load  # every module loaded goes through it: import statements, import_module

def traced(name, import_):
    events.append((threading.current_thread().name, name))
    if name == "scipy.special" and not alive:
        alive.extend(t.name for t in threading.enumerate())
    return load(name, import_)

bootstrap._find_and_load = traced
from typer.testing import CliRunner
from service.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
assert result.exit_code in (0, 1), result.output
print(json.dumps({"events": events, "alive": alive}))
"""


def _run(code: str, *args: str) -> list[str]:
    """The words ``python -c CODE ARGS`` prints on its last line, in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1].split(" ")


def _imports(args: list[str]) -> dict[str, Any]:
    """Every import of ``driftwarden ARGS`` in a fresh interpreter: (thread, module) in order, and the names
    of the threads alive when ``scipy.special`` was imported."""
    found: dict[str, Any] = json.loads(" ".join(_run(PROBE, *args)))
    return found


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A reference (heavy tails, whose allowed range is fitted on the sort threads; integers, missing values,
    text) and a shifted current, as Parquet and CSV."""
    root = tmp_path_factory.mktemp("threads")
    out: dict[str, Path] = {}
    for name, shift, seed in (("reference", 0.0, 1), ("current", 0.3, 2)):
        rng = np.random.default_rng(seed)
        rows = 20_000
        cols: dict[str, np.ndarray] = {
            "tailed": rng.standard_t(3, rows) + shift,
            "lognormal": rng.lognormal(0.0, 1.0, rows),
            "count": rng.poisson(4, rows).astype(np.int64),
            "gappy": np.where(rng.random(rows) < 0.05, np.nan, rng.normal(shift, 1.0, rows)),
            "word": rng.choice(np.array(["a", "b", "c", None], dtype=object), rows),
            "label": rng.integers(0, 2, rows).astype(np.int64),
            "score": rng.random(rows),
        }
        for suffix in ("parquet", "csv"):
            out[f"{name}.{suffix}"] = write_table(cols, root / f"{name}.{suffix}")
    return out


@pytest.mark.parametrize(
    ("suffix", "extra"),
    [
        ("parquet", []),
        # the reference's calibration loads scipy.optimize (isotonic regression) later, in this thread
        ("parquet", ["--target", "label", "--prediction-column", "score"]),
        ("csv", ["--target", "label"]),
    ],
)
def test_no_thread_but_the_main_one_imports(files: dict[str, Path], suffix: str, extra: list[str]) -> None:
    args = ["drift", str(files[f"reference.{suffix}"]), str(files[f"current.{suffix}"]), *extra]
    found = _imports(args)
    events = [tuple(e) for e in found["events"]]
    loaders = [thread for thread, module in events if module == "scipy.special"]
    assert loaders[:1] == ["MainThread"], loaders
    fitting = [name for name in found["alive"] if name.startswith("profile")]
    assert fitting, found["alive"]  # the import overlaps the PCA's fit
    assert [e for e in events if e[0] != "MainThread"] == []  # the sort, profile, sketch and reading threads


def test_numpy_loads_masked_arrays_on_the_first_unique() -> None:
    """Why ``numpy.ma`` is in THREADS_IMPORT: ``import numpy`` does not load it, ``np.unique``'s first call
    does (numpy 2), and the sort threads call it (the allowed range's tails, ``registry.tails``)."""
    probe = (
        "import sys, numpy as np\n"
        "before = 'numpy.ma' in sys.modules\n"
        "np.unique(np.array([2.0, 1.0, 2.0]))\n"
        "print(before, 'numpy.ma' in sys.modules)"
    )
    assert _run(probe) == ["False", "True"]
    assert "numpy.ma" in THREADS_IMPORT


def test_a_profile_alone_loads_no_statistics() -> None:
    """Only a comparison has ``scipy.special`` loaded, while the reference's PCA is fitted
    (``driftwarden.profile`` builds a profile and computes no test)."""
    probe = (
        "import sys, numpy as np, pyarrow as pa, driftwarden\n"
        "rng = np.random.default_rng(0)\n"
        "driftwarden.profile(pa.table({'a': rng.normal(size=500), 'b': rng.standard_t(3, 500)}))\n"
        "print('scipy.special' in sys.modules)"
    )
    assert _run(probe) == ["False"]
