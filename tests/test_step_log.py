"""loadgen's accepted drafts against a record it did not write: the emulator's step log
(`--step-log`: per request, per engine step, the drafts verified, those accepted, the tokens
emitted and the chunk that carried them, written by the server). Request by request, under
coalescing (a slow reader through servers/faultproxy.py, stream_interval 2), n-gram misses, k 0
by batch size and drafts accepted past the end, loadgen's three figures are the engine's:
the stream as read is the stream as written, the per-request counts are the engine's, the
rule's decomposition (past the end, merged steps) is the engine's, and the stream's own count
is what the engine streamed."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pandas as pd
import pytest

from servers.embedded import emulator_server, server_process
from tests.conftest import engine_record, reconciled, run_cli, summed

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}
CASES = {
    # a slow reader: the proxy reads 1 KiB every 50 ms; the server holds 1 KiB unsent, then merges
    "eagle-slow-reader": (
        EAGLE, "summary", ["--send-buffer", "1024"],
        ["--fault", "latency", "--ms", "50", "--recv-buffer", "1024"], None,
    ),
    "eagle-stream-interval": (EAGLE, "summary", [], None, {"stream_interval": 2}),
    # n-gram misses, and k 0 once 3 or more requests share a step: steps that drafted nothing
    "ngram-k-by-batch": (
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5,
         "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 256, 0]]},
        "detailed", [], None, {"stream_interval": 2},
    ),
    # synthetic acceptance high at every position: last steps accept past max_tokens
    "synthetic-past-the-end": (
        {**EAGLE, "method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
         "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.95, 0.9, 0.85]},
        "summary", [], None, None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_every_request_is_the_engines_own_record(case, tmp_path):
    spec, metrics, server_args, proxy, body = CASES[case]
    log = tmp_path / "steps.jsonl"
    args = ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", metrics]
    with ExitStack() as stack:
        srv = stack.enter_context(emulator_server(LLAMA, *args, "--step-log", str(log), *server_args))
        url = srv.url
        if proxy is not None:
            url = stack.enter_context(
                server_process(
                    ["servers.faultproxy", "--upstream", srv.url, *proxy], host="127.0.0.1", timeout_s=30, cpu=None
                )
            ).url
        res = run_cli(
            "run", "--base-url", url, "--concurrency", "4", "--num-requests", "8", "--output-len", "128",
            "--input-len", "64", "--quiet", "--output", str(tmp_path / "run"),
            *(["--extra-body", json.dumps(body)] if body else []),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    engine = engine_record(log)
    assert frame["ok"].all() and sorted(engine) == sorted(frame["index"]), (sorted(engine), list(frame["index"]))
    for row in frame.itertuples():
        mine = engine[row.index]
        assert list(row.chunk_tokens) == mine["chunks"], (row.index, list(row.chunk_tokens), mine["steps"])
        assert row.server_accepted_tokens == mine["accepted"] and row.server_spec_steps == mine["verify"]
        if metrics == "detailed":  # absent where no step drafted, as vLLM's to_dict leaves it out
            per_step = [] if row.server_step_accepted is None else list(row.server_step_accepted)
            assert per_step == [s[1] for s in mine["steps"][1:] if s[0] > 0]
    rec = reconciled(tmp_path / "run", speculative_config=spec)
    assert rec["exact"] is True and rec["requests_checked"] == 8, rec
    assert rec["past_end"]["tokens"] == summed(engine, "past_end"), rec
    assert rec["coalesced"]["tokens"] == summed(engine, "merged"), rec
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    if spec["method"] != "ngram":  # a model drafter drafts every step: the step counter tells every merge
        assert summary["acceptance_client"]["accepted_tokens"] == summed(engine, "streamed")
    if case.startswith("eagle"):  # coalescing happened: the engine merged steps into chunks
        assert summed(engine, "merged") > 0
    if case == "ngram-k-by-batch":  # steps that drafted nothing
        assert any(s[0] == 0 for r in engine.values() for s in r["steps"][1:])
    if case == "synthetic-past-the-end":
        assert summed(engine, "past_end") > 0
