"""`--workers N`: one load split over N processes, merged into one run identical in form.

Against scripted servers (real processes over HTTP). The timing accuracy of merged runs is
tested with the single-process runs' test (tests/test_timing.py, --workers 2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadgen.client.record import RequestRecord
from tests.conftest import REPO, assert_light_load_unflagged, judged_late, run_cli, wait_served

pytestmark = pytest.mark.servers


def _load(out: Path) -> tuple[dict, pd.DataFrame]:
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "requests.parquet")


@pytest.mark.timing
def test_an_open_loop_schedule_is_the_same_split_over_workers(server, tmp_path):
    url = server("--ttft-ms", "2", "--step-ms", "2")
    runs = {}
    for workers in (1, 3):
        out = tmp_path / f"w{workers}"
        res = run_cli(
            "run",
            "--base-url",
            url,
            "--rate",
            "60",
            "--burstiness",
            "0.5",
            "--num-requests",
            "60",
            "--warmup",
            "6",
            "--output-len",
            "4",
            "--seed",
            "5",
            "--workers",
            str(workers),
            "--quiet",
            "--output",
            str(out),
        )
        assert res.returncode == 0, res.stderr
        runs[workers] = _load(out)
    (s1, f1), (s3, f3) = runs[1], runs[3]
    assert list(f1.columns) == list(f3.columns) and (f1.dtypes == f3.dtypes).all()
    assert f3["index"].tolist() == list(range(66)) and f3["ok"].all()
    assert f3["request_id"].tolist() == f1["request_id"].tolist()  # the same requests
    assert f3["warmup"].tolist() == f1["warmup"].tolist()
    assert (f3["worker"] == f3["index"] % 3).all()
    # each request at its scheduled time of the one schedule, from whichever worker
    offsets = lambda s, f: (f["t_scheduled_ns"] - s["config"]["clock"]["t0_ns"]).to_numpy()  # noqa: E731
    assert np.array_equal(offsets(s1, f1), offsets(s3, f3))
    # ... and the self-check judges the lateness of every worker's requests: its figures are the
    # merged rows', and a run that sent late (four processes on two slow cores can) says so
    late = s3["self_check"]["lateness_ms"]
    sent = f3.loc[f3["t_send_ns"] > 0, "lateness_ms"]
    assert late["count"] == 66 and late["p50"] == pytest.approx(np.percentile(sent, 50))
    assert late["p99"] == pytest.approx(np.percentile(sent, 99))
    if judged_late(s3):
        assert_light_load_unflagged(tmp_path)  # a client that flags every run does not pass
    assert set(s3["self_check"]["workers"]) == {"0", "1", "2"}
    assert s3["sending"]["workers"] == 3 and s3["sending"]["workers_lost"] == []
    assert s3["completed"] == 60 and s3["config"]["workers"] == 3


def test_closed_loop_users_are_split_and_every_request_is_sent_once(server, tmp_path):
    url = server("--ttft-ms", "5", "--step-ms", "5", "--chunk-tokens", "1")
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--concurrency",
        "5",
        "--workers",
        "2",
        "--num-requests",
        "40",
        "--output-len",
        "6",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    s, f = _load(tmp_path)
    assert s["completed"] == 40 and sorted(f["index"]) == list(range(40))
    assert (f["completion_tokens"] == 6).all()
    # users 0, 2, 4 in worker 0 and 1, 3 in worker 1: never more in flight than its users
    for worker, users in ((0, 3), (1, 2)):
        mine = f[f["worker"] == worker]
        events = sorted(
            [(t, 1) for t in mine["t_send_ns"]] + [(t, -1) for t in mine["t_end_ns"]], key=lambda e: (e[0], e[1])
        )
        assert max(np.cumsum([e[1] for e in events])) == users
    assert s["sending"]["ramp_s"] is not None and s["sending"]["ramp_s"] < 0.1


def _rec(index: int, worker: int, chunks_ns: list[int]) -> RequestRecord:
    rec = RequestRecord(index, f"r{index}", False, chunks_ns[0] - 10, worker=worker)
    rec.t_call_ns = rec.t_send_ns = chunks_ns[0] - 10
    rec.t_end_ns = chunks_ns[-1]
    for i, t in enumerate(chunks_ns):
        rec.chunk_t_ns.append(t)
        rec.chunk_usage.append(i + 1)
        rec.chunk_chars.append(3)
    return rec


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def _workers_of(pid: int, n: int, timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = []
        for child in _children(pid):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"spawn_main" in f.read():
                        kids.append(child)
            except OSError:
                pass
        if len(kids) == n:
            return kids
        time.sleep(0.05)
    raise AssertionError(f"no {n} worker processes under {pid}")


def _gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _start(url: str, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--base-url",
            url,
            "--workers",
            "2",
            "--output-len",
            "10",
            "--quiet",
            "--output",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_a_worker_killed_mid_run_loses_only_its_requests_in_flight(server, tmp_path):
    """The killed worker's finished requests are in its journal (loadgen.outputs.journal) and
    kept; only those it had in flight are gone; the run completes and says so."""
    trace = tmp_path / "served.jsonl"
    url = server("--ttft-ms", "5", "--step-ms", "20", "--chunk-tokens", "1", "--trace", str(trace))
    proc = _start(url, tmp_path / "out", "--concurrency", "4", "--num-requests", "60")
    try:
        workers = _workers_of(proc.pid, 2)
        wait_served(trace, 8)  # ~0.2 s per request, 4 users: some done in each worker
        os.kill(workers[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    s, f = _load(tmp_path / "out")
    lost = s["sending"]["workers_lost"]
    assert len(lost) == 1 and "worker" in lost[0] and "journaled by then are kept" in lost[0]
    assert f"WARNING: {lost[0]}" in err
    assert s["completed"] == len(f) > 0 and f["ok"].all() and f["index"].is_unique
    survivor = 0 if "worker 1" in lost[0] else 1
    assert (f["worker"] == survivor).sum() > (f["worker"] != survivor).sum() > 0  # the killed one's, up to its kill
    assert _gone(workers)


def test_an_interrupted_multi_worker_run_keeps_what_finished(server, tmp_path):
    trace = tmp_path / "served.jsonl"
    url = server("--ttft-ms", "5", "--step-ms", "20", "--chunk-tokens", "1", "--trace", str(trace))
    proc = _start(url, tmp_path / "out", "--concurrency", "4", "--num-requests", "400")
    try:
        workers = _workers_of(proc.pid, 2)
        wait_served(trace, 12)
        proc.send_signal(signal.SIGINT)  # as Ctrl-C to the parent alone (SIGTERM goes this way too)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    s, f = _load(tmp_path / "out")
    assert s["interrupted"] and 10 <= s["completed"] < 400 and s["failed"] == 0
    assert set(f.loc[~f["ok"], "error_type"]) <= {"cancelled"}
    assert set(f["worker"]) == {0, 1}
    assert _gone(workers)


def test_a_sweep_measures_each_cell_with_its_workers(tmp_path):
    """`loadgen sweep --workers 2` over the emulator: a cell with one user uses one process, a
    cell with four uses two; both cells are whole and the same in form."""
    res = run_cli(
        "sweep",
        "--variants",
        "baseline",
        "--workloads",
        "chat,output=fixed:16",
        "--concurrency",
        "1,4",
        "--num-requests",
        "8",
        "--warmup",
        "0",
        "--workers",
        "2",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    frames = {}
    for level, workers in (("c1", 1), ("c4", 2)):
        cell = tmp_path / "cells" / "baseline" / "chat" / level
        s = json.loads((cell / "summary.json").read_text())
        frames[level] = pd.read_parquet(cell / "requests.parquet")
        assert s["config"]["workers"] == workers and s["sending"]["workers"] == workers
        assert s["completed"] == 8 and sorted(frames[level]["worker"].unique()) == list(range(workers))
        assert s["cell"]["status"] == "ok"
        assert s["server"] is not None  # the parent scraped the server around the workers' run
    assert list(frames["c1"].columns) == list(frames["c4"].columns)
    assert frames["c1"]["request_id"].tolist() == frames["c4"]["request_id"].tolist()


def assert_stopped_once(res, out: Path, planned: int) -> None:
    """--max-error-rate against a server failing every request, with the load split over two
    workers: the run stops as a whole, once (exit 2, one reason, not an interruption), each worker
    well before its share of `planned` is sent. The server fails at its own pace (FAILING: 20 ms a
    failure, 100 a second a worker at two streams each), so the margin is seconds of the stop's
    latency (the parent hears of failures twice a second), not this machine's speed."""
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    s, f = _load(out)
    reason = s["stopped_early"]
    assert reason.startswith("20 of the last 20 requests failed (last: http_500)") and "worker" not in reason, reason
    assert res.stderr.count("over --max-error-rate 0.5") == 1 and not s["interrupted"]
    assert (~f["ok"]).sum() >= 20 and f["index"].is_unique
    assert set(f["worker"]) == {0, 1} and f.groupby("worker").size().max() < 0.8 * planned / 2


# a server failing every request, each 20 ms after it arrives
FAILING = ("--ttft-ms", "2", "--step-ms", "2", "--faults", "http500_html", "--fault-delay-ms", "20")


def test_max_error_rate_is_one_judgement_over_all_workers(server, tmp_path):
    url = server(*FAILING)
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--concurrency",
        "4",
        "--workers",
        "2",
        "--num-requests",
        "2000",
        "--output-len",
        "4",
        "--max-error-rate",
        "0.5",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert_stopped_once(res, tmp_path, 2000)


def test_a_cells_warm_up_goes_from_this_process_before_its_workers():
    """A sweep cell with --workers 2 sends its separate warm-up from this process, on a session
    still open, before the worker processes send the measured requests (every warm-up request
    succeeds, and the measured ones are all the cell's)."""
    from loadgen.planning.plan import Cell, Plan
    from loadgen.sweep.cell import Server, run_cell
    from servers.embedded import emulator_server
    from workloads import open_workload

    model, spec = "meta-llama/Llama-3.1-8B-Instruct", "chat,output=fixed:16"
    plan = Plan(
        deployment="llama-3.1-8b",
        engine="emulator",
        variants=["baseline"],
        workloads=[spec],
        workload_labels=["chat"],
        mode="closed",
        levels=[4],
        num_requests=8,
        duration_s=None,
        warmup=3,
        workers=2,
    )
    seen: list[RequestRecord] = []
    with emulator_server(model) as srv:
        at = Server(srv.url, model, on_record=seen.append)
        out = run_cell(plan, Cell("baseline", "chat", 4, "closed"), open_workload(spec), at)
    assert out is not None and out.summary["config"]["workers"] == 2
    assert len(seen) >= 3 and all(r.ok for r in seen), [r.error_message for r in seen if not r.ok]
    assert out.summary["completed"] == 8 and out.summary["failed"] == 0
