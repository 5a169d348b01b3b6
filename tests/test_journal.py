"""Long runs lose nothing: `loadgen run` journals every finished request to its results
directory as it goes (records-W.jsonl, flushed four times a second). A run SIGKILLed midway
(one process, and --workers 2) leaves every request that had finished more than a quarter
second before the kill (the flush interval, plus the client's own loop lag at the time), each
once, according to the server's own log of what it finished; `loadgen summarize` and `loadgen
check --results` read the directory; a journal cut short gives the same per-request figures as
the finished run it was cut from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from loadgen.outputs import journal
from servers.embedded import canned_server
from servers.scripted.script import prompt_key
from tests.conftest import REPO, cli, process_tree, run_cli, still_running, synthetic_prompts


def _served(trace: Path) -> list[dict]:
    lines = trace.read_text().splitlines() if trace.exists() else []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:  # the line being written
            pass
    return out


@pytest.mark.timing
@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_run_keeps_every_request_finished_a_quarter_second_before(workers, tmp_path):
    trace = tmp_path / "served.jsonl"
    out = tmp_path / "run"
    with canned_server("--ttft-ms", "5", "--pacing-ms", "5", "--trace", str(trace)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen",
                "run",
                "--base-url",
                srv.url,
                "--concurrency",
                "8",
                "--num-requests",
                "100000",
                "--input-len",
                "16",
                "--output-len",
                "32",
                "--workers",
                str(workers),
                "--quiet",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        tree = set()
        try:
            deadline = time.monotonic() + 60
            while len(_served(trace)) < 250 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
            tree = process_tree(proc.pid)
            t_kill = time.monotonic_ns()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + 10  # the workers follow their parent (PR_SET_PDEATHSIG): at
        while still_running(tree) and time.monotonic() < deadline:  # once, or as soon as a busy
            time.sleep(0.1)  # machine schedules their exit
        assert not still_running(tree)
        served = _served(trace)
    assert len(served) >= 250, proc.stderr.read().decode()[-2000:]
    j = journal.read(out)
    # The journal is flushed every FLUSH_S by the client's event loop: a request the server
    # finished more than that before the kill is on disk, give or take the client's own delay
    # (its loop's lag over the last second, journaled with the records, and 20 ms to read the
    # stream's end), which the README says.
    recent = [lag for at, lag in zip(j.lag_at_ns, j.lag_ns) if at > t_kill - 1_000_000_000]
    cutoff = t_kill - int(journal.FLUSH_S * 1e9) - max(recent, default=0) - 20_000_000
    assert max(recent, default=0) < 250_000_000, f"the client's loop lagged {max(recent) / 1e6:.0f} ms"
    finished = [s["write_ns"][-1] for s in served if s["write_ns"]]
    before = {s["key"] for s in served if s["write_ns"] and s["write_ns"][-1] < cutoff}
    assert len(before) >= 100
    # ... which is a claim about the last second: requests did finish between a second and a
    # quarter second before the kill, and are held to it
    assert sum(t_kill - 1_000_000_000 <= t < cutoff for t in finished) >= 10
    assert j.cut and j.files == workers
    indices = [r.index for r in j.records]
    assert len(indices) == len(set(indices))  # each request once
    prompts = synthetic_prompts(max(indices) + 1, input_len=16, output_len=32, seed=0)
    journaled = {prompt_key(prompts[r.index]) for r in j.records if r.ok}
    assert before <= journaled, f"{len(before - journaled)} finished requests missing"
    # loadgen summarize reads it, and says the run was cut
    res = cli("summarize", str(out))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["journal"]["cut"] and summary["interrupted"]
    assert summary["completed"] == sum(r.ok and not r.warmup for r in j.records)
    frame = pd.read_parquet(out / "requests.parquet")
    assert len(frame) == len(j.records) and frame["index"].is_unique
    res = cli("check", "--results", str(out), "--slo", "ttft_p99<=10s")
    assert res.returncode == 0, res.stdout + res.stderr


def test_check_results_summarizes_a_cut_run_itself(tmp_path):
    """A killed run's directory holds no summary.json: check --results makes it from the journal."""
    with canned_server("--ttft-ms", "1") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "4",
            "--num-requests",
            "40",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--quiet",
            "--output",
            str(tmp_path),
        )
    assert res.returncode == 0, res.stderr
    _cut(tmp_path, keep=25)
    for name in ("summary.json", "requests.parquet"):
        (tmp_path / name).unlink()
    res = cli("check", "--results", str(tmp_path), "--slo", "ttft_p99<=10s")
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["journal"]["cut"] and summary["completed"] == 25


def _cut(directory: Path, keep: int) -> None:
    """The journal as a kill after `keep` requests would leave it: no end line, the rest of the
    records gone, and half of the next line written."""
    path = journal.path_for(directory, 0)
    lines = path.read_text().splitlines()
    out, records = [], 0
    for line in lines:
        if line.startswith('{"end"'):
            continue
        if line.startswith('{"r"'):
            if records == keep:
                out.append(line[: len(line) // 2])
                break
            records += 1
        out.append(line)
    path.write_text("\n".join(out))


def test_a_cut_journal_gives_the_finished_runs_figures_for_its_requests(tmp_path):
    with canned_server("--ttft-ms", "2", "--pacing-ms", "1") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "4",
            "--num-requests",
            "60",
            "--input-len",
            "16",
            "--output-len",
            "24",
            "--quiet",
            "--output",
            str(tmp_path),
        )
    assert res.returncode == 0, res.stderr
    whole = pd.read_parquet(tmp_path / "requests.parquet").set_index("request_id")
    _cut(tmp_path, keep=40)
    res = cli("summarize", str(tmp_path))
    assert res.returncode == 0, res.stderr
    cut = pd.read_parquet(tmp_path / "requests.parquet").set_index("request_id")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(cut) == 40 and summary["journal"]["unreadable_lines"] == 1
    cols = ["ttft_ms", "tpot_ms", "e2e_ms", "completion_tokens", "lateness_ms", "t_send_ns", "t_end_ns"]
    pd.testing.assert_frame_equal(cut[cols], whole.loc[cut.index, cols])
    assert summary["ttft_ms"]["p50"] == pytest.approx(float(whole.loc[cut.index, "ttft_ms"].median()))
    assert summary["completed"] == 40


def _records() -> set[int]:
    """The request records the collector tracks, by id. (execute() freezes what was alive
    before the run, which then leaves gc.get_objects(): so a run's records are told from older
    ones by id, not by subtracting a count taken before, which that freeze makes wrong whenever an
    earlier test in this process left records behind.)"""
    import gc

    from loadgen.client.record import RequestRecord

    return {id(o) for o in gc.get_objects() if type(o) is RequestRecord}


@pytest.mark.parametrize("journaled", [True, False])
def test_finished_requests_leave_memory_when_journaled(journaled, tmp_path):
    """The soak's claim (bench/soak.py holds the hour at 256 streams), in seconds: while a
    journaled run goes, the client holds only the requests in flight (each finished one is
    written and dropped), however many have finished; and the results built from the journal
    have every request once. Without a journal every record stays, which shows what this
    test can tell apart."""
    import asyncio

    from loadgen.load.execute import LoadShape, RunSpec, execute
    from workloads import random_lengths

    users, total = 16, 1200
    live: list[tuple[int, int]] = []
    done = [0]

    def counted(rec) -> None:
        done[0] += 1
        if done[0] in (total // 3, 2 * total // 3, total - users):
            live.append((done[0], len(_records() - before)))

    with canned_server("--ttft-ms", "1", "--pacing-ms", "0.2") as srv:
        spec = RunSpec(
            api_base=srv.url + "/v1",
            model="canned",
            load=LoadShape(concurrency=users),
            num_requests=total,
            journal=str(tmp_path) if journaled else None,
        )
        before = _records()
        result = asyncio.run(execute(spec, random_lengths(None, input_len=16, output_len=32), on_record=counted))
    assert [n for n, _ in live] == [total // 3, 2 * total // 3, total - users]
    held = [count for _, count in live]
    if journaled:
        assert all(h <= 2 * users for h in held), held  # the ones in flight, and the one ending
        j = journal.read(tmp_path)
        assert sorted(r.index for r in j.records) == list(range(total)) and not j.cut
        assert result.records == [] and result.journaled
    else:  # held: every finished record
        assert all(h >= n for h, (n, _) in zip(held, live)), held
        assert len(result.records) == total
