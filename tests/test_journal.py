"""Long runs lose nothing: `loadgen run` journals every finished request to its results
directory as it goes (records-W.arrows, flushed four times a second). A run SIGKILLed midway
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

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from loadgen.outputs import journal
from servers.embedded import canned_server
from servers.scripted.script import prompt_key
from tests.conftest import REPO, cli, process_tree, run_cli, still_running, synthetic_prompts

pytestmark = pytest.mark.servers


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
    """The journal as a kill after `keep` requests would leave it: no end, the rest of the
    records gone, and half of the next batch written."""
    import pyarrow as pa

    path = journal.path_for(directory, 0)
    reader = pa.ipc.open_stream(pa.memory_map(str(path)))
    rows = pa.Table.from_batches(list(reader), schema=reader.schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, reader.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        for batch in rows.slice(0, keep).to_batches(max_chunksize=7):
            w.write_batch(batch)
    whole = sink.getvalue().to_pybytes()[:-8]  # without the end-of-stream marker
    extra = pa.BufferOutputStream()
    with pa.ipc.new_stream(extra, reader.schema) as w:
        w.write_batch(rows.slice(keep, 5).to_batches()[0])
    schema_len = len(reader.schema.serialize())
    message = extra.getvalue().to_pybytes()[schema_len:-8]
    path.write_bytes(whole + message[: len(message) // 2])
    (directory / "end-0.json").unlink()


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
    assert len(cut) == 40 and summary["journal"]["unreadable_batches"] == 1
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


def _mixed_records(n: int = 300) -> list:
    """Records of every kind the frame distinguishes: continuous usage (a step per chunk, some
    chunks without tokens), usage on some chunks only, none (final usage or nothing), failed
    requests, the server's own SD counts, headers or not, text and token ids."""
    import random
    from array import array

    from loadgen.client.record import RequestRecord

    rnd = random.Random(1)
    out = []
    for i in range(n):
        base = 10**14 + i * 1000
        rec = RequestRecord(
            i, f"r{i}", i % 7 == 0, base, t_call_ns=base + 5, t_send_ns=base + 10, t_end_ns=base + 10**8
        )
        rec.status, rec.queue_delay_ns, rec.read_delay_ns = 200, 3, rnd.randint(0, 1000)
        rec.prompt_tokens = rnd.choice([None, 12])
        rec.usage_completion_tokens = rnd.choice([None, 40])
        chunks = rnd.randint(0, 30)
        rec.chunk_t_ns = array("q", sorted(rnd.sample(range(base + 20, base + 10**8), chunks)))
        kind = rnd.choice(["usage", "usage", "some", "none"])
        if kind == "usage":
            rec.chunk_usage = array("q", np.cumsum([rnd.choice([0, 1, 1, 2, 3]) for _ in range(chunks)]).tolist())
        else:
            rec.chunk_usage = array("q", [rnd.choice([-1, 3]) if kind == "some" else -1 for _ in range(chunks)])
        rec.chunk_chars = array("q", [rnd.randint(1, 9) for _ in range(chunks)])
        if rnd.random() < 0.1:
            rec.error_type, rec.error_message, rec.status = "http", "HTTP 500: boom", 500
        if rnd.random() < 0.2:
            rec.server_draft_tokens, rec.server_accepted_tokens = 30, 17
            rec.server_spec_steps = rnd.choice([0, 9])
        if rnd.random() < 0.3:
            rec.t_headers_ns = rec.t_send_ns + 7
        if rnd.random() < 0.2:
            rec.chunk_text = [f"t{k}" for k in range(chunks)]
            rec.token_ids, rec.prompt_token_ids = list(range(chunks)), [1, 2, 3]
        out.append(rec)
    return out


def test_the_end_of_a_run_in_pieces_gives_the_figures_of_the_run_in_memory(tmp_path, monkeypatch):
    """requests.parquet written from the journal in row groups and summary.json computed from it
    a column and a batch at a time (the per-chunk distributions in three passes, as for a day's
    run) give the same figures as the whole frame in memory: exactly, but mean and std (sums in
    another order: within 1e-12)."""
    import asyncio

    from loadgen.load.execute import LoadShape, RunSpec, execute
    from loadgen.measures import pooled, rows
    from loadgen.measures.frame import request_frame
    from loadgen.measures.summary import summarize
    from loadgen.results import requests
    from workloads import random_lengths

    with canned_server("--ttft-ms", "2", "--pacing-ms", "1") as srv:
        spec = RunSpec(
            api_base=srv.url + "/v1", model="canned", load=LoadShape(concurrency=8), num_requests=300, warmup=5
        )
        spec.journal = str(tmp_path)
        result = asyncio.run(execute(spec, random_lengths(None, input_len=16, output_len=40)))
    lag = (result.loop_lag_at_ns, result.loop_lag_ns)
    config = {"clock": {"t0_ns": result.t0_ns}}
    whole = summarize(request_frame(journal.read(tmp_path).records), lag, config=config, goodput={"ttft": 20.0})
    monkeypatch.setattr(requests, "ROW_GROUP_CHUNKS", 2000)  # row groups of some 80 requests here
    requests.write_from_journal(tmp_path)
    meta = pq.ParquetFile(tmp_path / "requests.parquet").metadata
    assert meta.num_row_groups >= 3 and meta.num_rows == 305
    for g in range(meta.num_row_groups):
        group = pq.ParquetFile(tmp_path / "requests.parquet").read_row_group(g, columns=["n_chunks", "index"])
        assert 1000 < sum(group.column("n_chunks").to_pylist()) <= 2000 or g == meta.num_row_groups - 1
        assert group.column("index").to_pylist() == sorted(group.column("index").to_pylist())
    monkeypatch.setattr(pooled, "HOLD", 100)  # nothing held whole: every distribution in passes
    monkeypatch.setattr(rows, "BATCH", 37)
    pieces = summarize(rows.Rows(path=tmp_path / "requests.parquet"), lag, config=config, goodput={"ttft": 20.0})

    def same(a, b, path=""):
        if isinstance(a, dict):
            assert list(a) == list(b), path
            for k in a:
                same(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, float) and path.endswith((".mean", ".std")):
            assert a == pytest.approx(b, rel=1e-12), path
        else:
            assert a == b or (a != a and b != b), (path, a, b)

    same(pieces, whole)
    assert whole["completed"] == 300 and whole["itl_ms"]["count"] > 100


def test_loadgen_hands_arrow_the_system_allocator_unless_told_otherwise():
    """Arrow's default pool keeps what it frees (loadgen/allocators.py): importing loadgen
    chooses the system allocator before Arrow allocates, and leaves a user's own choice alone."""
    code = "import loadgen, pyarrow; print(pyarrow.default_memory_pool().backend_name)"
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert got.stdout.strip() == "system"
    env["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert got.stdout.strip() == "jemalloc"


def test_the_journal_takes_under_a_kilobyte_a_request_of_128_chunks(tmp_path):
    """The size a 128-chunk request takes in the journal, from a real run sending about as many
    requests a second as the recorded hour's (100): under 1 kB (JSON lines took 3.3 kB)."""
    with canned_server("--ttft-ms", "2", "--pacing-ms", "0.5") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "12",
            "--duration",
            "4",
            "--num-requests",
            "100000",
            "--input-len",
            "16",
            "--output-len",
            "128",
            "--quiet",
            "--output",
            str(tmp_path),
        )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(tmp_path / "requests.parquet", columns=["n_chunks", "completion_tokens"])
    assert len(frame) >= 100 and (frame["completion_tokens"] == 128).all()
    size = journal.path_for(tmp_path, 0).stat().st_size
    assert size / len(frame) < 1000, f"{size / len(frame):.0f} bytes a request"


def test_summarize_judges_the_client_as_the_run_did(tmp_path):
    """A run rebuilt from its journal keeps how its client measured (each process's end record):
    the read path, where chunk times came from, and on the compiled path how far off each
    chunk's gap can be; so its self-check is the run's own, not one without those views."""
    with canned_server("--ttft-ms", "2", "--pacing-ms", "1") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "4",
            "--num-requests",
            "20",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--quiet",
            "--output",
            str(tmp_path),
        )
    assert res.returncode == 0, res.stderr
    ran = json.loads((tmp_path / "summary.json").read_text())["self_check"]
    res = cli("summarize", str(tmp_path))
    assert res.returncode == 0, res.stderr
    again = json.loads((tmp_path / "summary.json").read_text())["self_check"]
    assert ran["client_path"] in ("compiled", "python")
    keys = ["client_path", "chunk_times", "client_bound", "chunk_time_reads", "chunk_bound_ms", "read_delay_ms"]
    assert {k: again.get(k) for k in keys} == {k: ran.get(k) for k in keys}
