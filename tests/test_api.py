"""loadgen as a library, driven from Python as a user would (no click): a run against a
scripted server, a sweep on the emulator end to end, and the library's errors as exceptions."""

from __future__ import annotations

import json

import pytest

from loadgen import api
from loadgen.report.speedup import speedup
from loadgen.shapes import ClosedLoop, Ramp
from workloads import open_workload

pytestmark = pytest.mark.servers


def test_a_run_from_python(server, tmp_path):
    url = server("--ttft-ms", "5", "--step-ms", "5")
    job = api.RunJob(
        api.RunSpec(api_base="", model="", load=ClosedLoop(4), num_requests=12),
        open_workload("synthetic:random,input_len=16,output_len=8"),
        api.Target(base_url=url),
        handle_signals=False,
    )
    outcome = api.run(job, tmp_path / "run")
    assert outcome.summary["completed"] == 12 and not outcome.interrupted
    assert len(outcome.frame) == 12 and outcome.frame["ok"].all()
    written = json.loads((tmp_path / "run" / api.SUMMARY).read_text())
    assert written["completed"] == 12 and written["config"]["load"] == ClosedLoop(4).describe()
    assert written["config"]["base_url"] == url + "/v1"


def test_a_ramp_from_python_without_writing(server):
    url = server("--ttft-ms", "2", "--step-ms", "2")
    job = api.RunJob(
        api.RunSpec(api_base="", model="", load=Ramp("users", 1, 4, 0.3), num_requests=None, duration_s=0.6),
        open_workload("synthetic:random,input_len=8,output_len=4"),
        api.Target(base_url=url),
        handle_signals=False,
    )
    outcome = api.run(job)
    assert outcome.output is None and outcome.summary["completed"] > 4
    assert outcome.summary["config"]["load"]["mode"] == "ramp"


def test_a_sweep_from_python_on_the_emulator(tmp_path):
    plan = api.Plan(
        deployment="llama-3.1-8b",
        engine="emulator",
        variants=["baseline", "ngram"],
        workloads=["code-edit,output=fixed:32"],
        workload_labels=["code-edit"],
        mode="closed",
        levels=[1, 4],
        num_requests=8,
        duration_s=None,
        warmup=1,
        time_scale=1.0,
    )
    result = api.sweep(api.SweepJob(tmp_path / "sweep", plan))
    assert result.complete and not result.interrupted
    assert sorted(result.table["path"]) == [
        "baseline/code-edit/c1",
        "baseline/code-edit/c4",
        "ngram/code-edit/c1",
        "ngram/code-edit/c4",
    ]
    speedups = speedup(result.table, "baseline")
    assert len(speedups) == 2 and (speedups["speedup"] > 1).all()  # n-gram pays on code edits at low load
    # a second call on the same directory is refused, as the CLI refuses it; resuming finds nothing to do
    with pytest.raises(api.LoadgenError, match="already holds a sweep"):
        api.sweep(api.SweepJob(tmp_path / "sweep", plan))
    again = api.sweep(api.SweepJob(tmp_path / "sweep"))
    assert again.complete and len(again.table) == 4
