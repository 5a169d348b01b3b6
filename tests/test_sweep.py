"""`loadgen sweep` end to end against the emulated engine: stored results and scraped
acceptance, interruption (SIGKILL, SIGTERM) and --resume, servers that die or never come up,
variants side by side; and after every exit path, no process it started is left."""

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

from loadgen.results import cells as stored
from tests.conftest import REPO, cli, process_tree, run_cli, server_pids, still_running

pytestmark = pytest.mark.servers

DATA = REPO.parent / "shared" / "datasets"
SMALL = ["--num-requests", "6", "--warmup", "1", "--quiet"]


def deployment(tmp_path: Path, variants: str, *, extra: str = "") -> str:
    """A deployment file on the emulator, twice as fast as real time."""
    path = tmp_path / "dep.toml"
    path.write_text(
        'model = "meta-llama/Llama-3.1-8B-Instruct"\nengine = "emulator"\n'
        'emulator_args = ["--time-scale", "0.5"]\n' + extra + variants
    )
    return str(path)


BASE_EAGLE = (
    '[variants.baseline]\n[variants.eagle]\nspeculative_config = { method = "eagle", '
    'model = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", num_speculative_tokens = 3 }\n'
)


def cells(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / stored.TABLE)


def summary(out: Path, key: str) -> dict:
    return json.loads((out / stored.CELLS / key / "summary.json").read_text())


def test_a_sweep_stores_every_cell_with_the_servers_acceptance(tmp_path):
    before = server_pids()
    out = tmp_path / "out"
    res = run_cli(
        "sweep",
        "--servers",
        "llama-3.1-8b",
        "--engine",
        "emulator",
        "--variants",
        "baseline,eagle",
        "--workloads",
        "synthetic:random,input_len=64,output_len=16,code-edit,output=fixed:16",
        "--data-dir",
        str(DATA),
        "--concurrency",
        "1..4",
        *SMALL,
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    table = cells(out)
    keys = [
        f"{v}/{w}/c{c}" for v in ("baseline", "eagle") for w in ("synthetic-random", "code-edit") for c in (1, 2, 4)
    ]
    assert list(table["path"]) == keys and (table["status"] == "ok").all()
    assert (table["completed"] == 6).all() and (table["output_throughput_tok_s"] > 0).all()
    for key in keys:
        s = summary(out, key)
        frame = pd.read_parquet(out / stored.CELLS / key / "requests.parquet")
        assert len(frame) == 6 and frame["ok"].all() and not frame["warmup"].any()
        assert s["cell"]["key"] == key and s["cell"]["status"] == "ok"
        # the warm-up ran before the window: the server's counters cover exactly these requests
        assert s["server"]["generation_tokens"] == frame["completion_tokens"].sum() == 6 * 16
        decode = [n for tokens in frame["chunk_tokens"] for n in list(tokens)[1:]]
        if key.startswith("baseline"):
            assert s["spec_decode"] is None and set(decode) == {1}
            continue
        sd = s["spec_decode"]
        # the streamed drafts, plus those accepted past max_tokens (at most k = 3 a request)
        streamed = sum(n - 1 for n in decode)
        assert 0 < streamed <= sd["accepted_tokens"] <= streamed + 3 * 6
        assert s["acceptance_client"]["reconciliation"]["stream_accepted_tokens"] == streamed
        assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
        row = table[table["path"] == key].iloc[0]
        assert row["acceptance_rate"] == pytest.approx(sd["acceptance_rate"])
    manifest = json.loads((out / stored.MANIFEST).read_text())
    assert manifest["plan"]["levels"] == [1, 2, 4] and manifest["argv"][0] == "sweep"
    assert {"loadgen", "aiohttp", "python"} <= set(manifest["versions"]) and "git_revision" in manifest
    assert "--speculative-config" in manifest["servers"]["eagle"]["command"]
    assert "Speedup over baseline" in res.stdout and "eagle" in res.stdout
    assert (out / "servers" / "eagle.log").read_text().count("listening on") == 1
    assert server_pids() <= before


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", "sweep", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_mid_way_then_resumed_gives_every_cell_once(tmp_path, sig):
    out = tmp_path / "out"
    args = [
        "--servers",
        deployment(tmp_path, BASE_EAGLE),
        "--workloads",
        "synthetic:random,input_len=32,output_len=24",
        "--concurrency",
        "1..4",
        *SMALL,
        "--output",
        str(out),
    ]
    proc = _start(args)
    tree: set = set()
    try:

        def two_done() -> bool:
            tree.update(process_tree(proc.pid))
            return len(stored.finished(out)) >= 2

        _wait_for(two_done, 60, "two finished cells")
        tree.update(process_tree(proc.pid))
        done = {k: (out / stored.CELLS / k / "summary.json").stat().st_mtime_ns for k in stored.finished(out)}
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert tree, "the sweep started no server"
    try:
        _wait_for(lambda: not still_running(tree), 15, "the sweep's servers to exit")
    finally:  # whatever the outcome, this test leaves nothing it started running
        for pid, _ in still_running(tree):
            os.kill(pid, signal.SIGKILL)
    if sig == signal.SIGTERM:
        assert proc.returncode == 130
        assert "--resume" in proc.stderr.read()
    res = run_cli("sweep", "--resume", "--output", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    table = cells(out)
    expect = [f"{v}/synthetic-random/c{c}" for v in ("baseline", "eagle") for c in (1, 2, 4)]
    assert list(table["path"]) == expect and (table["status"] == "ok").all()
    for key, mtime in done.items():  # finished before the kill: kept, not run again
        assert (out / stored.CELLS / key / "summary.json").stat().st_mtime_ns == mtime
    assert not list((out / stored.CELLS).glob("*/*/.*"))
    resumed = json.loads((out / stored.MANIFEST).read_text())["resumed"]
    assert len(resumed) == 1 and resumed[0]["argv"][:2] == ["sweep", "--resume"]
    proc.stdout.close()
    proc.stderr.close()


def test_a_cell_killed_midway_is_continued_by_resume_keeping_its_requests(tmp_path):
    """kill -9 of a sweep in the middle of a cell, then --resume: the cell's requests journaled
    before the kill are kept as they were (not sent again), each once, and the cell completes
    with the rest, its journal's next part."""
    from loadgen.outputs import journal

    out = tmp_path / "out"
    total = 160
    args = [
        "--servers",
        deployment(tmp_path, "[variants.baseline]\n"),
        "--workloads",
        "synthetic:random,input_len=16,output_len=16",
        "--concurrency",
        "4",
        "--num-requests",
        str(total),
        "--warmup",
        "1",
        "--quiet",
        "--output",
        str(out),
    ]
    key = "baseline/synthetic-random/c4"
    progress = out / stored.CELLS / "baseline" / "synthetic-random" / ".run-c4"
    proc = _start(args)
    tree: set = set()
    try:

        def journaled() -> bool:
            tree.update(process_tree(proc.pid))
            return journal.exists(progress) and journal.read(progress).rows >= 40

        _wait_for(journaled, 90, "40 journaled requests")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        _wait_for(lambda: not still_running(tree), 15, "the sweep's servers to exit")
    finally:
        for pid, _ in still_running(tree):
            os.kill(pid, signal.SIGKILL)
    before = {r.index: r.t_send_ns for r in journal.read(progress).records}
    assert 40 <= len(before) < total and not stored.finished(out)
    res = run_cli("sweep", "--resume", "--output", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    assert "continued from its journal" in res.stderr
    final = out / stored.CELLS / key
    frame = pd.read_parquet(final / "requests.parquet")
    assert sorted(frame["index"]) == list(range(total))  # every request, each once
    start = journal.meta(final).starts["0"]  # kept as measured before the kill (in emulated time) ...
    t0, scale = start["t0_ns"], start["time_scale"]
    sent = dict(zip(frame["index"], frame["t_send_ns"]))
    assert all(sent[i] == t0 + round((t - t0) / scale) for i, t in before.items())
    again = pd.read_parquet(final / "requests.parquet", filters=[("t_send_ns", ">", max(sent[i] for i in before))])
    assert not set(again["index"]) & set(before)  # ... and not sent again
    s = summary(out, key)
    assert s["cell"]["status"] == "ok" and s["completed"] == total
    assert s["resumed"]["parts"] == 2 and s["resumed"]["requests_before"] == len(before)
    assert not progress.exists() and journal.parts(out / stored.CELLS / key) == 2
    res = cli("summarize", str(final))  # a cell's directory is a run's: summarized from its journal
    assert res.returncode == 0, res.stderr
    again = summary(out, key)
    assert again["completed"] == total and again["cell"] == s["cell"] and again["ttft_ms"] == s["ttft_ms"]
    assert not again["journal"]["cut"]  # its first part was cut, and continued
    proc.stdout.close()
    proc.stderr.close()


def test_a_server_that_dies_mid_cell_fails_that_cell_and_the_sweep_goes_on(tmp_path):
    # the server crashes on its 11th request: c1 takes 7 (1 warm-up + 6); c2 its warm-up, two
    # measured requests side by side, and the crash comes with the next (cutting the one still
    # streaming, unless both ended in the same step)
    dep = deployment(tmp_path, "[variants.baseline]\n", extra="")
    text = (
        Path(dep)
        .read_text()
        .replace('["--time-scale", "0.5"]', '["--time-scale", "0.5", "--exit-after-requests", "10"]')
    )
    Path(dep).write_text(text)
    before = server_pids()
    out = tmp_path / "out"
    res = run_cli(
        "sweep",
        "--servers",
        dep,
        "--workloads",
        "synthetic:random,input_len=32,output_len=24",
        "--concurrency",
        "1,2,4",
        *SMALL,
        "--output",
        str(out),
    )
    assert res.returncode == 1, res.stderr
    table = cells(out).set_index("path")
    assert list(table["status"]) == ["ok", "failed", "ok"]
    err = table.loc["baseline/synthetic-random/c2", "error"]
    assert "exited with code 70 during the cell" in err and "--exit-after-requests 10: crashing" in err
    frame = pd.read_parquet(out / stored.CELLS / "baseline/synthetic-random/c2/requests.parquet")
    assert 1 <= frame["ok"].sum() <= 2 and len(frame) == 6  # what it measured is kept
    assert summary(out, "baseline/synthetic-random/c4")["cell"]["server"]["starts"] == 2
    assert "restarting" in res.stderr
    assert server_pids() <= before


def test_a_server_that_never_becomes_healthy_fails_fast_with_its_log(tmp_path):
    hang = tmp_path / "fake-vllm"
    pidfile = tmp_path / "hang.pid"
    hang.write_text(f"#!/bin/sh\necho loading weights...\necho $$ > {pidfile}\nexec sleep 60\n")
    hang.chmod(0o755)
    broken = deployment(
        tmp_path,
        "[variants.baseline]\n[variants.medusa]\nspeculative_config = "
        '{ method = "medusa", model = "x/medusa", num_speculative_tokens = 3 }\n',
    )
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = run_cli(
        "sweep",
        "--servers",
        broken,
        "--workloads",
        "synthetic:random,input_len=32,output_len=8",
        "--concurrency",
        "1",
        *SMALL,
        "--output",
        str(out),
    )
    assert time.monotonic() - t0 < 30
    assert res.returncode == 1
    table = cells(out).set_index("path")
    assert table.loc["baseline/synthetic-random/c1", "status"] == "ok"
    err = table.loc["medusa/synthetic-random/c1", "error"]
    assert "exited with code 2 before serving" in err and "loadgen-emulator: error" in err
    # a server that runs but never answers: stopped (its whole group) at the timeout
    hung = tmp_path / "hung.toml"
    hung.write_text(f'model = "m"\nexecutable = "{hang}"\nstartup_timeout_s = 2\n[variants.baseline]\n')
    t0 = time.monotonic()
    res = run_cli(
        "sweep",
        "--servers",
        str(hung),
        "--workloads",
        "synthetic:random",
        "--concurrency",
        "1",
        *SMALL,
        "--output",
        str(tmp_path / "out2"),
    )
    assert time.monotonic() - t0 < 30 and res.returncode == 1
    err = cells(tmp_path / "out2").iloc[0]["error"]
    assert "not ready within 2 s" in err and "loading weights..." in err
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_variants_side_by_side_on_their_own_gpus_and_ports(tmp_path):
    before = server_pids()
    out = tmp_path / "out"
    res = run_cli(
        "sweep",
        "--servers",
        deployment(tmp_path, BASE_EAGLE),
        "--parallel",
        "--gpus",
        "0,1",
        "--workloads",
        "synthetic:random,input_len=32,output_len=16",
        "--concurrency",
        "1,2",
        *SMALL,
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    table = cells(out)
    assert len(table) == 4 and (table["status"] == "ok").all()
    cmds = {v: summary(out, f"{v}/synthetic-random/c1")["cell"]["server"]["command"] for v in ("baseline", "eagle")}
    assert cmds["baseline"].startswith("CUDA_VISIBLE_DEVICES=0 ") and cmds["eagle"].startswith(
        "CUDA_VISIBLE_DEVICES=1 "
    )
    urls = {summary(out, f"{v}/synthetic-random/c1")["cell"]["server"]["url"] for v in ("baseline", "eagle")}
    assert len(urls) == 2
    assert "Speedup over baseline" in res.stdout
    assert server_pids() <= before


def test_an_external_server_with_an_api_key(tmp_path):
    from servers.embedded import emulator_server

    key = "s3cr3t-sweep-KEY"
    with emulator_server("meta-llama/Llama-3.1-8B-Instruct", "--api-key", key, "--time-scale", "0.5") as srv:
        dep = tmp_path / "ext.toml"
        dep.write_text(
            f'model = "meta-llama/Llama-3.1-8B-Instruct"\nengine = "external"\nurl = "{srv.url}"\n[variants.baseline]\n'
        )
        out = tmp_path / "out"
        res = run_cli(
            "sweep",
            "--servers",
            str(dep),
            "--workloads",
            "synthetic:random,input_len=32,output_len=8",
            "--concurrency",
            "1,2",
            *SMALL,
            "--output",
            str(out),
            env={"LOADGEN_API_KEY": key},
        )
        assert res.returncode == 0, res.stderr
        assert (cells(out)["status"] == "ok").all()
        assert (
            summary(out, "baseline/synthetic-random/c1")["cell"]["server"]["command"]
            == f"(external server at {srv.url})"
        )
        for path in out.rglob("*"):
            assert path.is_dir() or key.encode() not in path.read_bytes(), path
        assert srv.pid in {pid for pid in server_pids()}  # not ours to stop


def test_a_virtual_sweep_simulates_every_cell_as_loadgen_simulate_does(tmp_path):
    """`sweep --virtual`: no server starts, every cell is written as a real sweep writes it, and
    each is what `loadgen simulate` gives for the same variant's flags, load and requests."""
    before = server_pids()
    out = tmp_path / "v"
    res = run_cli(
        "sweep",
        "--servers",
        "llama-3.1-8b",
        "--engine",
        "emulator",
        "--variants",
        "baseline,eagle",
        "--workloads",
        "chat,output=fixed:48",
        "--data-dir",
        str(DATA),
        "--concurrency",
        "1,8",
        "--num-requests",
        "12",
        "--virtual",
        "--quiet",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    assert server_pids() <= before and not list((out / "servers").glob("*.log"))
    assert "Virtual sweep (every cell simulated, no server)" in res.stderr
    table = cells(out)
    assert len(table) == 4 and (table["status"] == "ok").all() and not table["client_bound"].any()
    assert json.loads((out / stored.MANIFEST).read_text())["plan"]["virtual"] is True
    eagle = '{"method":"eagle","model":"yuhuili/EAGLE-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}'
    for variant, spec in (("baseline", None), ("eagle", eagle)):
        for level in (1, 8):
            sim = tmp_path / f"sim-{variant}-{level}"
            r = run_cli(
                "simulate",
                "--profile",
                "h100-llama-3.1-8b",
                "--workload",
                "chat,output=fixed:48",
                "--data-dir",
                str(DATA),
                "--concurrency",
                str(level),
                "--num-requests",
                "12",
                "--no-enable-prefix-caching",
                *(["--speculative-config", spec] if spec else []),
                "--output",
                str(sim),
            )
            assert r.returncode == 0, r.stderr
            want = json.loads((sim / "summary.json").read_text())
            got = summary(out, f"{variant}/chat/c{level}")
            assert got["output_throughput_tok_s"] == pytest.approx(want["output_throughput_tok_s"], rel=1e-9)
            assert got["ttft_ms"]["p50"] == pytest.approx(want["ttft_ms"]["p50"], rel=1e-9)
            assert (got["spec_decode"] or {}).get("accepted_tokens") == (want["spec_decode"] or {}).get(
                "accepted_tokens"
            )
    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    assert "every cell was simulated in virtual time" in (out / "report" / "report.md").read_text()
    dry = cli("sweep", "--virtual", "--dry-run")
    assert dry.returncode == 0 and "virtual time: every cell simulated" in dry.stdout


def test_a_virtual_sweep_replays_the_real_cells_requests_as_they_were_served(tmp_path):
    """`sweep --virtual --replay REAL`: each virtual cell serves the real cell's measured requests
    with their token ids, so every request's prompt and output tokens are the real one's, and the
    n-gram drafter, replayed over those ids by vLLM's lookup, accepts what the real server's
    (the emulator's own n-gram, served over HTTP) accepted: counted by the real stream on one side
    and the virtual engine's counter on the other. The warm-up the real cell sent first is left
    out."""
    common = ["--servers", "llama-3.1-8b", "--engine", "emulator", "--variants", "baseline,ngram"]
    common += ["--workloads", "code-edit,output=fixed:32", "--data-dir", str(DATA), "--concurrency", "2"]
    common += ["--num-requests", "6", "--quiet"]
    real, virtual = tmp_path / "real", tmp_path / "virtual"
    res = run_cli("sweep", *common, "--warmup", "1", "--token-ids", "--output", str(real))
    assert res.returncode == 0, res.stderr
    res = run_cli("sweep", *common, "--virtual", "--replay", str(real), "--output", str(virtual))
    assert res.returncode == 0, res.stderr
    for variant in ("baseline", "ngram"):
        key = f"{variant}/code-edit/c2"
        r = pd.read_parquet(real / "cells" / key / "requests.parquet")
        v = pd.read_parquet(virtual / "cells" / key / "requests.parquet")
        r = r[~r["warmup"]].set_index("request_id")[["prompt_tokens", "completion_tokens"]]
        v = v.set_index("request_id")[["prompt_tokens", "completion_tokens"]]
        assert len(v) == len(r) == 6 and v.sort_index().equals(r.sort_index())
    got, want = summary(virtual, "ngram/code-edit/c2"), summary(real, "ngram/code-edit/c2")
    # the real stream's accepted drafts (the server's counter adds those accepted past max_tokens,
    # which no token ids hold: docs/sweep.md)
    assert got["spec_decode"]["accepted_tokens"] == want["acceptance_client"]["accepted_tokens"] > 0
    lacking = [*common[: common.index("--concurrency")], "--concurrency", "4", "--num-requests", "6", "--quiet"]
    res = run_cli("sweep", *lacking, "--virtual", "--replay", str(real), "--output", str(tmp_path / "m"))
    table = cells(tmp_path / "m")  # a cell the real sweep lacks: failed, in one line naming it
    assert (table["status"] == "failed").all() and table["error"].str.contains("--replay: cell").all(), res.stderr


def test_traces_of_a_draft_model_cell_estimate_its_drafter_at_the_runs_k(tmp_path):
    """Every cell's config records its variant's speculative config, so `loadgen traces` on a
    draft-model cell estimates the draft model at the run's k without --drafter (and the
    accepted-draft rule knows a model drafter drafts every step)."""
    out = tmp_path / "out"
    res = run_cli(
        "sweep", "--servers", "qwen3-8b", "--engine", "emulator", "--variants", "draft_model",
        "--workloads", "synthetic:random,input_len=64,output_len=24", "--concurrency", "1",
        "--num-requests", "2", "--warmup", "0", "--token-ids", "--quiet", "--output", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    cell = out / "cells" / "draft_model" / "synthetic-random" / "c1"
    config = json.loads((cell / "summary.json").read_text())["config"]
    assert json.loads(config["speculative_config"])["method"] == "draft_model"
    traces = run_cli("traces", str(cell))
    assert traces.returncode == 0, traces.stderr
    assert "acc_draft_model: estimated from this run at k=3" in traces.stdout + traces.stderr, traces
    assert "drafters: ngram, draft_model" in traces.stdout
