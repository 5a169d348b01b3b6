"""test_sweep.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from loadgen.planning.plan import PlanError, levels, split_workloads
from loadgen.results import cells as stored
from tests.conftest import cli

pytestmark = pytest.mark.unit


def test_the_embedded_default_plan():
    res = cli("sweep", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "4 variants x 2 workloads x 7 levels = 56 cells" in res.stdout
    assert "concurrency 1, 2, 4, 8, 16, 32, 64" in res.stdout and "on engine emulator" in res.stdout
    for v in ("baseline", "ngram", "eagle", "eagle3"):
        assert f"  {v}: CUDA_VISIBLE_DEVICES=0 " in res.stdout
    assert "workload chat: chat,output=fixed:128" in res.stdout


def test_side_by_side_slots_get_their_own_gpus_and_ports():
    from loadgen.planning.plan import Plan
    from loadgen.sweep.slots import slots
    from servers.deployments import load

    plan = Plan(
        deployment="llama-3-70b",
        engine="vllm",
        variants=["baseline", "ngram", "eagle"],
        workloads=["chat"],
        workload_labels=["chat"],
        mode="closed",
        levels=[1],
        num_requests=1,
        duration_s=None,
        warmup=0,
        gpus=list(range(8)),
        parallel=True,
    )
    got = slots(plan, load("llama-3-70b"))
    assert [(s.variants, s.gpus, s.port) for s in got] == [
        (("baseline", "eagle"), (0, 1, 2, 3), 8000),
        (("ngram",), (4, 5, 6, 7), 8001),
    ]
    plan.parallel = False
    assert [(s.variants, s.gpus, s.port) for s in slots(plan, load("llama-3-70b"))] == [
        (("baseline", "ngram", "eagle"), (0, 1, 2, 3), 8000)
    ]


def test_levels_and_workload_lists():
    assert levels("1..256", integer=True, flag="--concurrency") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert levels("1..8,12,3", integer=True, flag="--concurrency") == [1, 2, 3, 4, 8, 12]
    assert levels("3..20", integer=True, flag="--concurrency") == [3, 6, 12, 20]
    assert levels("0.5,1..4", integer=False, flag="--rates") == [0.5, 1, 2, 4]
    for bad in ("0..4", "4..1", "1.5", "x", "1..y"):
        with pytest.raises(PlanError, match="--concurrency"):
            levels(bad, integer=True, flag="--concurrency")
    assert split_workloads(["chat,code-edit,output=fixed:128"]) == ["chat", "code-edit,output=fixed:128"]
    assert split_workloads(["synthetic:random,input_len=8", "gsm8k:/d/x.jsonl"]) == [
        "synthetic:random,input_len=8",
        "gsm8k:/d/x.jsonl",
    ]
    with pytest.raises(PlanError):
        split_workloads(["output=fixed:1,chat"])


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--variants", "baseline,nope"], "nope not in deployment"),
        (["--servers", "nope"], "unknown deployment 'nope'"),
        (["--concurrency", "0..4"], "--concurrency"),
        (["--concurrency", "1", "--rates", "1"], "one of --concurrency"),
        (["--workloads", "nope:x"], "--workloads: unknown workload format"),
        (["--gpus", "a"], "--gpus"),
        (["--retry-failed"], "--retry-failed goes with --resume"),
        (
            ["--servers", "qwen3-8b", "--engine", "vllm", "--concurrency", "1"],
            "or try it on --engine emulator",
        ),  # not installed, or the CPU build
        (["--servers", "qwen3-8b", "--engine", "vllm", "--virtual"], "--virtual simulates the emulator's engine"),
        (["--virtual", "--time-scale", "2"], "--time-scale does not apply to --virtual"),
        (["--virtual", "--repeats", "2"], "--repeats does not apply to --virtual"),
        (["--virtual", "--parallel", "--gpus", "0,1"], "--parallel does not apply to --virtual"),
        (["--virtual", "--workers", "2"], "--workers does not apply to --virtual"),
        (["--virtual", "--ray"], "--ray does not apply to --virtual"),
        (["--replay", "."], "--replay serves a real sweep's requests in virtual time: add --virtual"),
        (["--virtual", "--replay", "/nonexistent-sweep"], "--replay /nonexistent-sweep: no sweep there"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, args, expect):
    # the vllm this Python has, or none: not another environment's on PATH (a pyenv shim of the
    # machine's own Python, where .ci/run installed vLLM's CPU build, seen from a virtual environment)
    env = {"PATH": str(Path(sys.executable).parent)} if "vllm" in args else None
    res = cli("sweep", *args, "--output", str(tmp_path / "out"), env=env)
    assert res.returncode == 2 and expect in res.stderr and res.stderr.strip().count("\n") == 0, res.stderr


def test_resume_rules(tmp_path):
    res = cli("sweep", "--resume", "--output", str(tmp_path))
    assert res.returncode == 2 and "nothing to resume" in res.stderr
    (tmp_path / stored.MANIFEST).write_text(json.dumps({"plan": {}}))
    res = cli("sweep", "--output", str(tmp_path))
    assert res.returncode == 2 and "already holds a sweep" in res.stderr
    res = cli("sweep", "--resume", "--concurrency", "4", "--output", str(tmp_path))
    assert res.returncode == 2 and "drop --concurrency" in res.stderr
    assert os.listdir(tmp_path) == [stored.MANIFEST]


def test_a_measurement_gives_the_signal_handlers_back():
    """Between two cells SIGTERM must still reach the sweep's own handler (stop, keep what
    finished, exit 130). asyncio's remove_signal_handler leaves SIGTERM at its default, which
    killed the sweep outright when the signal fell between cells (seen in CI as exit -15)."""
    import asyncio

    from loadgen.load.execute import stop_on_signals

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:

        async def measure() -> bool:
            stop = asyncio.Event()
            with stop_on_signals(asyncio.get_running_loop(), stop):
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.wait_for(stop.wait(), 5)
            return stop.is_set()

        assert asyncio.run(measure())  # inside: the signal stops the measurement
        assert signal.getsignal(signal.SIGTERM) is mine  # after: the handler from before is back
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_deployment_with_bad_controls_is_refused_before_any_server(tmp_path):
    """A schedule vLLM would refuse (overlapping batch-size ranges): one line at load, exit 2,
    not a sweep whose every cell's server fails to start (exit 1)."""
    dep = tmp_path / "bad.toml"
    dep.write_text(
        'model = "meta-llama/Llama-3.1-8B-Instruct"\nengine = "emulator"\n[variants.a]\n'
        'speculative_config = { method = "ngram", num_speculative_tokens = 3, '
        "num_speculative_tokens_per_batch_size = [[1, 4, 3], [4, 8, 1]] }\n"
    )
    res = cli("sweep", "--servers", str(dep), "--concurrency", "1", "--output", str(tmp_path / "out"))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "variant 'a'" in res.stderr and "ranges must be non-overlapping" in res.stderr, res.stderr
    assert not (tmp_path / "out" / "servers").exists()


def test_a_virtual_sweep_plans_what_the_real_one_sends():
    """On the embedded default, `sweep --virtual` plans the real-time sweep's cells: the same
    workloads (128-token answers), levels and requests per cell, from the same seed, so the two
    are one experiment in two clocks, not two."""
    real, virtual = cli("sweep", "--dry-run"), cli("sweep", "--virtual", "--dry-run")
    assert real.returncode == virtual.returncode == 0, (real.stderr, virtual.stderr)

    def plan(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if ln.startswith(("4 variants", "  workload", "measured requests"))]

    assert plan(real.stdout) == plan(virtual.stdout) and len(plan(real.stdout)) == 4, (real.stdout, virtual.stdout)
    assert "  workload chat: chat,output=fixed:128" in plan(virtual.stdout)
