"""The training commands answer bad input with one line and exit 2, before any data is built or process
started; their output carries no library chatter; `train` and `models list` agree on the row count."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from core.tabular import write_table
from service.cli import app
from training.cluster.datagen import TARGET, generate

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _train(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["train", "--model", "credit", *args])
    return r.exit_code, r.stdout, r.stderr


def _one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr and "rerun the same command" not in stderr
    return lines[0]


def _data(tmp_path: Path, name: str, rows: int = 200, **target: object) -> Path:
    cols = generate(rows, seed=0)
    if "drop" in target:
        del cols[TARGET]
    elif "values" in target:
        cols[TARGET] = np.asarray(target["values"])
    path = tmp_path / name
    write_table(cols, path)
    return path


def test_training_data_errors_are_one_line_exit_2_before_any_cluster(tmp_path: Path) -> None:
    y = generate(200, seed=0)[TARGET]
    cases = {
        "no target column 'default'": _data(tmp_path, "nolabel.csv", drop=True),
        "must hold 0/1 labels (binary classification), found 0, 1, 2": _data(
            tmp_path, "three.csv", values=np.arange(200) % 3
        ),
        "holds text ('no', 'yes'), not 0/1 labels": _data(
            tmp_path, "yesno.csv", values=np.where(y == 1, "yes", "no").astype(object)
        ),
        "has 10 rows, too few to train": _data(tmp_path, "ten.csv", rows=10),
        "holds only the label 0": _data(tmp_path, "zeros.csv", values=np.zeros(200, dtype=np.int64)),
    }
    for mode in ("local", "async"):
        for expected, path in cases.items():
            code, _, err = _train("--data", str(path), "--mode", mode)
            line = _one_line_error(err)
            assert code == 2 and expected in line and str(path) in line, (mode, err)
    # each line says how to fix it
    assert "name the 0/1 label column with --target" in _one_line_error(
        _train("--data", str(tmp_path / "nolabel.csv"))[2]
    )
    assert "recode it to 0 and 1" in _one_line_error(_train("--data", str(tmp_path / "three.csv"))[2])
    # nothing was started or registered: no checkpoint folder, no database
    assert not (tmp_path / "var").exists()


def test_options_a_mode_would_ignore_are_errors(tmp_path: Path) -> None:
    data = _data(tmp_path, "d.csv", rows=100)
    code, _, err = _train("--data", str(data), "--mode", "sync", "--ps", "2")
    assert code == 2 and "--ps applies to --mode async only" in _one_line_error(err)
    code, _, err = _train("--data", str(data), "--mode", "local", "--workers", "3")
    assert code == 2 and "--workers does not apply to --mode local" in _one_line_error(err)
    code, _, err = _train(
        "--data", str(data), "--ps", "2", "--cluster", '{"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"]}'
    )
    assert code == 2 and "come from the --cluster spec" in _one_line_error(err)


def test_data_generate_checks_the_output_path_before_generating(tmp_path: Path) -> None:
    r = runner.invoke(app, ["data", "generate", "--out", str(tmp_path / "z.txt"), "--rows", "5000000"])
    line = _one_line_error(r.stderr)
    assert r.exit_code == 2 and line.startswith("error: --out ")  # named as the option, before generating
    assert "unsupported file type '.txt'" in line and ".csv" in line and ".parquet" in line
    missing = tmp_path / "nonexistent"
    r = runner.invoke(app, ["data", "generate", "--out", str(missing / "z.csv"), "--rows", "100"])
    line = _one_line_error(r.stderr)
    assert r.exit_code == 2 and f"the folder {missing} does not exist" in line and "mkdir -p" in line
    assert not missing.exists()
    r = runner.invoke(app, ["data", "generate", "--out", str(tmp_path / "ok.csv"), "--rows", "100"])
    assert r.exit_code == 0 and (tmp_path / "ok.csv").exists(), r.output


NOISE = re.compile(
    r"^[IWEF]\d{4} |absl::InitializeLog|oneDNN|cpu_feature_guard|tensorflow/|INFO alembic|alembic\.runtime",
    re.M,
)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRIFTWARDEN_", "TF_"))}
    env["DRIFTWARDEN_DATABASE_URL"] = f"sqlite:///{cwd / 'var' / 'driftwarden.db'}"
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_train_and_monitor_output_has_no_library_chatter_and_rows_agree_with_models_list(
    tmp_path: Path,
) -> None:
    write_table(generate(1000, seed=3), tmp_path / "d.csv")
    res = _cli(
        "train", "--model", "credit", "--data", "d.csv", "--mode", "local", "--epochs", "0.5", cwd=tmp_path
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert not NOISE.search(out), out  # a fresh database was migrated and TensorFlow loaded: both quiet
    m = re.search(
        r"registered credit:1 \(staged\) .*\(held-out rows (\d+)\); training rows (\d+)", res.stdout
    )
    assert m, res.stdout
    assert (int(m[1]), int(m[2])) == (200, 800)
    listed = _cli("models", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (version,) = json.loads(listed.stdout)
    assert version["lineage"]["train_rows"] == int(m[2])
    table = _cli("models", "list", cwd=tmp_path)
    assert re.search(rf"│ credit\s+│ 1\s+│.*│ {m[2]}\s+│", table.stdout), table.stdout
    (tmp_path / "fresh").mkdir()
    mon = _cli("monitor", "--once", cwd=tmp_path / "fresh")  # migrates its fresh database
    assert not NOISE.search(mon.stdout + mon.stderr), mon.stdout + mon.stderr


def test_cluster_node_help_and_docs_agree_on_the_chief() -> None:
    r = runner.invoke(app, ["cluster", "node", "--help"], terminal_width=200)
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert "The chief is not a node: `driftwarden train` starts it on its own machine" in text
    assert "`driftwarden cluster chief` in async mode" in text
    doc = (ROOT / "docs" / "training.md").read_text()
    chief_row = next(line for line in doc.splitlines() if line.startswith("| chief |"))
    assert "`driftwarden cluster chief` (async)" in chief_row and "`driftwarden train` starts it" in chief_row
    assert "cluster node" not in chief_row
    assert "The chief is not a `cluster node`" in doc


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_docs_training_commands_name_model_and_data_and_parse(mode: str) -> None:
    doc = (ROOT / "docs" / "training.md").read_text()
    commands = re.findall(r"`(driftwarden train [^`]*)`", doc)
    assert any(f"--mode {mode}" in c for c in commands)
    for command in commands:
        if command.strip() == "driftwarden train":
            continue  # the role table names the command, not an invocation
        assert "--model" in command and "--data" in command, command
        r = runner.invoke(app, [*command.split()[1:], "--help"])
        assert r.exit_code == 0, (command, r.output)  # every option in the doc exists


def test_a_column_the_contract_cannot_describe_is_one_line_exit_2(tmp_path: Path) -> None:
    cols = generate(400, seed=0)
    cols["cust_id"] = np.array([f"c{i:05d}" for i in range(400)], dtype=object)  # free text, 400 values
    write_table(cols, tmp_path / "ids.csv")
    code, _, err = _train("--data", str(tmp_path / "ids.csv"), "--mode", "local")
    line = _one_line_error(err)
    assert code == 2 and "ids.csv" in line and "cust_id" in line, err


def _command(
    *args: str, env_extra: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_help_does_not_import_tensorflow() -> None:
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        "cmds = (['--help'], ['train', '--help'], ['cluster', 'node', '--help'],\n"
        "        ['data', 'generate', '--help'], ['drift', '--help'])\n"
        "for args in cmds:\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    assert r.exit_code == 0, r.output\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
    res = _command("--help")
    assert res.returncode == 0 and "train" in res.stdout and "demo" in res.stdout


def test_cli_errors_say_what_to_fix(tmp_path: Path) -> None:
    res = _command("train", "--model", "m", "--data", str(tmp_path / "missing.csv"), cwd=tmp_path)
    assert res.returncode == 2 and "does not exist" in res.stderr and "data generate" in res.stderr
    bad = tmp_path / "nolabel.csv"
    cols = generate(200, seed=0)
    del cols[TARGET]
    write_table(cols, bad)
    res = _command("train", "--model", "m", "--data", str(bad), "--mode", "local", cwd=tmp_path)
    assert res.returncode == 2 and "no target column 'default'" in res.stderr
    res = _command(
        "cluster", "node", "--role", "chief", "--index", "0", "--cluster", '{"ps": ["127.0.0.1:1"]}'
    )
    assert res.returncode == 2 and "must be ps or worker" in res.stderr
    res = _command("cluster", "node", "--role", "ps", "--index", "3", "--cluster", '{"ps": ["127.0.0.1:1"]}')
    assert res.returncode == 2 and "1 ps task" in res.stderr
