"""Training on real TensorFlow cluster processes (ps, workers, chief) through the real CLI."""

from __future__ import annotations

import json
import re

import pytest

from tests.training.helpers import Workspace, kill, pid_alive, wait_for

pytestmark = pytest.mark.cluster

ACCURACY = re.compile(r"registered credit:(\d+) \(staged\) .*held-out accuracy ([0-9.]+)")


def _train(ws: Workspace, *extra: str) -> tuple[str, ...]:
    return ("train", "--model", "credit", "--data", str(ws.data), *extra)


@pytest.mark.parametrize(
    "mode_args",
    [("--mode", "async", "--ps", "1", "--workers", "2"), ("--mode", "sync", "--workers", "2")],
    ids=["async-1ps-2workers", "sync-2workers"],
)
def test_train_registers_accurate_version(workspace: Workspace, mode_args: tuple[str, ...]) -> None:
    rc, out = workspace.run(*_train(workspace, *mode_args, "--epochs", "2"), log_name="train.log")
    assert rc == 0, out[-4000:]
    m = ACCURACY.search(out)
    assert m, out[-2000:]
    assert float(m.group(2)) >= 0.85
    rc, listing = workspace.run("models", "list", "--json", log_name="list.log")
    assert rc == 0, listing
    versions = json.loads(listing[listing.index("[") :])
    assert [v["version"] for v in versions] == [int(m.group(1))]
    v = versions[0]
    assert v["state"] == "staged"
    assert v["lineage"]["mode"] == mode_args[1]
    assert v["lineage"]["train_rows"] == 16_000
    assert v["metrics"]["accuracy"] == pytest.approx(float(m.group(2)), abs=1e-4)
    files = {
        p.name for p in (workspace.root / "var" / "models" / "credit" / m.group(1) / "driftwarden").iterdir()
    }
    assert {"schema.json", "profile.json", "metrics.json", "lineage.json"} <= files
    workspace.assert_no_cluster_process()


def test_async_run_survives_a_killed_worker_with_exact_global_step(workspace: Workspace) -> None:
    proc, log = workspace.start(*_train(workspace, "--mode", "async", "--epochs", "6"), log_name="train.log")
    wait_for(log, r"checkpoint step=\d+", proc=proc)
    victim = workspace.pids()["worker:0"][0]
    kill(victim)
    assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
    out = log.read_text()
    planned = re.search(r"planned_steps=(\d+)", out)
    assert planned
    assert f"training done: global_step={planned.group(1)} planned={planned.group(1)}" in out
    assert re.search(r"worker:0 at \S+ was lost \(signal 9\)", out), out[-3000:]
    assert len(workspace.pids()["worker:0"]) == 2, "the lost worker was not relaunched"
    assert not pid_alive(victim)
    workspace.assert_no_cluster_process()


def test_killed_chief_is_relaunched_and_killed_command_resumes_on_rerun(workspace: Workspace) -> None:
    args = _train(workspace, "--mode", "async", "--epochs", "6", "--checkpoint-every", "40")
    proc, log = workspace.start(*args, log_name="first.log")
    wait_for(log, r"checkpoint step=(\d+)", proc=proc)
    # 1. the chief process dies: the launcher relaunches it and it resumes from its checkpoint
    kill(workspace.pids()["chief:0"][0])
    resumed = wait_for(log, r"resumed from checkpoint \S+ at step (\d+)", proc=proc)
    assert int(resumed.group(1)) > 0
    wait_for(log, rf"checkpoint step=(?!{resumed.group(1)}\b)\d+", proc=proc)
    # 2. the whole command is SIGKILLed: every process dies with it; the same command resumes
    kill(proc.pid)
    proc.wait()
    workspace.assert_no_cluster_process()
    last = [int(s) for s in re.findall(r"checkpoint step=(\d+)", log.read_text())][-1]
    rc, out = workspace.run(*args, log_name="second.log")
    assert rc == 0, out[-4000:]
    again = re.search(r"resumed from checkpoint \S+ at step (\d+)", out)
    assert again, out[-3000:]
    assert int(again.group(1)) >= last
    assert ACCURACY.search(out)
    workspace.assert_no_cluster_process()


def test_sync_run_relaunches_all_workers_and_restores_after_a_loss(workspace: Workspace) -> None:
    proc, log = workspace.start(
        *_train(workspace, "--mode", "sync", "--epochs", "6", "--checkpoint-every", "40"),
        log_name="train.log",
    )
    wait_for(log, r"checkpoint step=\d+", proc=proc)
    kill(workspace.pids()["worker:1"][0])
    assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
    out = log.read_text()
    assert re.search(r"worker:1 at \S+ was lost \(signal 9\)", out), out[-3000:]
    assert "relaunching 2 (attempt 1/" in out
    resumed = re.search(r"resumed from checkpoint \S+ at step (\d+)", out)
    assert resumed and int(resumed.group(1)) > 0
    assert ACCURACY.search(out)
    workspace.assert_no_cluster_process()


def test_lost_parameter_server_fails_with_its_name(workspace: Workspace) -> None:
    proc, log = workspace.start(*_train(workspace, "--mode", "async", "--epochs", "6"), log_name="train.log")
    wait_for(log, r"checkpoint step=\d+", proc=proc)
    kill(workspace.pids()["ps:0"][0])
    rc = proc.wait(timeout=120)
    out = log.read_text()
    assert rc == 1, out[-3000:]
    assert re.search(r"training failed: ps:0 at 127\.0\.0\.1:\d+ was lost \(signal 9\)", out), out[-3000:]
    assert "rerun the same command to resume" in out
    workspace.assert_no_cluster_process()


def test_train_on_an_external_cluster_started_node_by_node(workspace: Workspace) -> None:
    """As on many machines: each runs `cluster node`; the chief machine runs `train --cluster`."""
    from training.cluster.nodes import ClusterSpec

    spec = ClusterSpec.local(host="127.0.0.1", chief=1, ps=1, workers=2)
    spec_file = workspace.root / "cluster.json"
    spec_file.write_text(json.dumps(spec.as_dict()))
    nodes = [
        workspace.start(
            "cluster",
            "node",
            "--role",
            role,
            "--index",
            str(i),
            "--cluster",
            str(spec_file),
            log_name=f"{role}-{i}.log",
        )[0]
        for role, i, _ in spec.nodes()
        if role != "chief"
    ]
    try:
        rc, out = workspace.run(
            *_train(workspace, "--cluster", str(spec_file), "--epochs", "1"), log_name="t.log"
        )
        assert rc == 0, out[-4000:]
        assert ACCURACY.search(out)
        assert re.search(r"cluster up in [0-9.]+s: .*" + re.escape(spec.ps[0]), out)
        assert all(n.poll() is None for n in nodes), (
            "the external nodes belong to their machines: never stopped"
        )
        rc, out = workspace.run(
            *_train(workspace, "--cluster", str(spec_file), "--mode", "sync"), log_name="s.log"
        )
        assert rc == 2 and "--mode async" in out
    finally:
        for n in nodes:
            n.kill()
            n.wait()
