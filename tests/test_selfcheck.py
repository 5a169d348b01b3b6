"""The client's self-check: a starved event loop is flagged client_bound, a healthy one is not."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.load.execute import LoadShape, RunSpec, execute
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from servers.scripted.script import prompt_key
from tests.conftest import synthetic_prompts
from workloads import random_lengths

pytestmark = [
    pytest.mark.servers,
    pytest.mark.timing,
]  # the client judging its own delays: runs alone (tests/conftest.py)


def _summary(result) -> dict:
    return summarize(
        request_frame(result.records),
        result.loop_lag(),
        config={"clock": {"t0_ns": result.t0_ns}, "load": {}},
        load_info=result.load_info,
    )


async def _run(url: str, starve: bool, num: int = 60, output_len: int = 8, block_s: float = 0.02):
    spec = RunSpec(api_base=url + "/v1", model="scripted", load=LoadShape(rate=40.0), num_requests=num)
    running = True

    async def hog():  # blocks the loop 20 ms out of every 30, like a CPU-bound client would
        while running:
            time.sleep(block_s)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(hog()) if starve else None
    try:
        return await execute(spec, random_lengths(None, input_len=16, output_len=output_len))
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
    if starved["self_check"]["client_path"] == "compiled":
        # the server writes every 5 ms while the loop is blocked for 20: reads hold several
        # chunks, and say how late the earlier ones' times can be
        assert starved["self_check"]["chunk_bound_ms"]["p99"] > 5
        assert any("chunk's gap" in r for r in starved["self_check"]["reasons"])
        healthy = _summary(asyncio.run(_run(url, starve=False)))
        assert healthy["self_check"]["chunk_bound_ms"]["p99"] < 1


def test_healthy_run_is_not_flagged_and_its_figures_are_right(tmp_path):
    """A light load, always judged: under time dilation (tests/conftest.py, light_run) the VM's
    stalls of a few milliseconds, which rightly flag a light run in real time on a busy host,
    count four times less, so a healthy client is never flagged here; and what the flag
    promises is checked against the server's own record of when it wrote: TTFT and each
    request's last chunk within 2 ms (in emulated time) at p99. A client that flags every run,
    or one whose unflagged figures are wrong, fails."""
    import numpy as np

    from tests.conftest import LIGHT_SCALE, light_run

    summary, frame, served = light_run(tmp_path)
    assert summary["client_bound"] is False, summary["self_check"]["reasons"]
    t0 = summary["config"]["clock"]["t0_ns"]
    emulated = lambda t: t0 + (t - t0) / LIGHT_SCALE  # noqa: E731 - the client's conversion
    by_key = {rec["key"]: rec for rec in served}
    prompts = synthetic_prompts(len(frame), input_len=16, output_len=8, seed=0)
    ttft_err, end_err = [], []
    for row in frame.itertuples():
        rec = by_key[prompt_key(prompts[row.index])]
        ttft_err.append(row.ttft_ms - (emulated(rec["write_ns"][0]) - row.t_send_ns) / 1e6)
        end_err.append((row.chunk_t_ns[-1] - emulated(rec["write_ns"][-1])) / 1e6)
    assert len(ttft_err) == 40
    assert np.percentile(np.abs(ttft_err), 99) < 2.0, sorted(ttft_err)[-5:]
    # (the server notes a write's time just after making it: a stall of its own there puts its
    # record after the client's read, so the error is judged both ways)
    assert np.percentile(np.abs(end_err), 99) < 2.0, sorted(end_err, key=abs)[-5:]


def test_cli_starved_process_says_so(server, tmp_path):
    """`loadgen run` whose process is stopped for 30 ms out of every 80 (SIGSTOP/SIGCONT, as a
    busy machine or a VM's host would): the run is flagged in the summary and the console says
    so. Not timed: only the flag and its message are checked."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    url = server("--ttft-ms", "5", "--step-ms", "5")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--base-url",
            url,
            "--rate",
            "50",
            "--num-requests",
            "100",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--quiet",
            "--output",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        while proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.03)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["client_bound"] is True and summary["self_check"]["reasons"]
    assert "WARNING: client_bound" in out + err  # the console: either stream
