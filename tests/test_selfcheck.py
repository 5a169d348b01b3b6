"""The client's self-check: a starved event loop is flagged client_bound, a healthy one is not."""
from __future__ import annotations

import asyncio
import time

from loadgen.measure import request_frame
from loadgen.run import LoadShape, RunSpec, execute
from loadgen.summary import summarize
from workloads import random_lengths


def _summary(result) -> dict:
    return summarize(request_frame(result.records), (result.loop_lag_at_ns, result.loop_lag_ns),
                     config={"clock": {"t0_ns": result.t0_ns}, "load": {}},
                     load_info=result.load_info)


async def _run(url: str, starve: bool):
    spec = RunSpec(api_base=url + "/v1", model="scripted", load=LoadShape(rate=40.0),
                   num_requests=60)
    running = True

    async def hog():  # blocks the loop 20 ms out of every 30, like a CPU-bound client would
        while running:
            time.sleep(0.02)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(hog()) if starve else None
    try:
        return await execute(spec, random_lengths(None, input_len=16, output_len=8))
    finally:
        running = False
        if task:
            await task


def test_starved_loop_is_flagged_client_bound(server):
    url = server("--ttft-ms", "5", "--step-ms", "5")
    starved = _summary(asyncio.run(_run(url, starve=True)))
    assert starved["client_bound"] is True
    assert any("loop lag" in r for r in starved["self_check"]["reasons"])
    assert starved["self_check"]["loop_lag_ms"]["p99"] > 10


def test_healthy_run_is_not_flagged(server):
    url = server("--ttft-ms", "5", "--step-ms", "5")
    healthy = _summary(asyncio.run(_run(url, starve=False)))
    assert healthy["client_bound"] is False, healthy["self_check"]["reasons"]
    assert healthy["completed"] == 60


def test_cli_starved_by_another_process_says_so(server, tmp_path):
    """`loadgen run` sharing one core with a busy process that the scheduler favours (the
    client at nice 19, the hog at the default 0): the run is flagged in the summary and the
    console says so. Not timed: only the flag and its message are checked."""
    import json
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO
    url = server("--ttft-ms", "5", "--step-ms", "5")
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    hog = subprocess.Popen([*pin, sys.executable, "-c", "while True: pass"])
    try:
        res = subprocess.run([*pin, "nice", "-n", "19", sys.executable, "-m", "loadgen", "run",
                              "--base-url", url, "--rate", "50", "--num-requests", "100",
                              "--input-len", "16", "--output-len", "16", "--quiet",
                              "--output", str(tmp_path / "run")],
                             capture_output=True, text=True, timeout=120, cwd=REPO)
    finally:
        hog.kill()
        hog.wait()
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["client_bound"] is True and summary["self_check"]["reasons"]
    assert "WARNING: client_bound" in res.stdout + res.stderr  # the console: either stream
