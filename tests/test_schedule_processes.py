"""test_schedule.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import pytest

from servers.deployments import load

pytestmark = [pytest.mark.servers]


def test_whatif_schedule_writes_a_deployment_to_sweep(tmp_path):
    """`loadgen whatif --schedule --output DIR`: the config on stdout, DIR/schedule-eagle.toml a
    deployment whose variants are no SD, each fixed k and the schedule, and whatif.json keeps it."""
    from tests.conftest import run_cli

    traces = tmp_path / "traces.jsonl"
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--concurrency",
        "4",
        "--num-requests",
        "12",
        "--workload",
        "synthetic:code_edit",
        "--output",
        str(tmp_path / "sim"),
        "--acceptance-traces",
        str(traces),
    )
    assert res.returncode == 0, res.stderr
    out = tmp_path / "whatif"
    res = run_cli(
        "whatif",
        str(traces),
        "--profile",
        "h100-llama-3.1-8b",
        "--drafters",
        "eagle",
        "--batch",
        "1,64",
        "--k",
        "1,3",
        "--schedule",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "whatif.json").read_text())
    sched = doc["schedules"]["eagle"]
    assert set(sched["by_batch"]) == {"1", "64"} and sched["ranges"][0][0] == 1 and sched["ranges"][-1][1] == 256
    assert (
        f"eagle: --speculative-config '{json.dumps(sched['speculative_config'], separators=(',', ':'))}'" in res.stdout
    )
    dep = load(str(out / "schedule-eagle.toml"))
    assert list(dep.variants) == ["baseline", "eagle-k1", "eagle-k3", "eagle-schedule", "eagle-adaptive"]
    assert dep.variants["eagle-schedule"].speculative_config == sched["speculative_config"]
