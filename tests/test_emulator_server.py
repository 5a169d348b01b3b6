"""The emulated engine behind vLLM's API, driven by `loadgen run`: its /metrics agree exactly
with what the clients received, for every speculative-decoding variant, and so does what
`loadgen run` scraped from them into summary.json; so do the per-request SD metrics
(`--per-request-spec-decode-metrics`) on each response."""

from __future__ import annotations

import json
import urllib.request

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servers.embedded import emulator_server
from tests.conftest import engine_record, reconciled, run_cli, summed

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VARIANTS = {
    "baseline": (LLAMA, None),
    "ngram": (LLAMA, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}),
    "eagle": (LLAMA, {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}),
    "eagle3": (LLAMA, {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4}),
    "draft_model": (
        LLAMA,
        {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3},
    ),
    "mtp": ("zai-org/GLM-4.5-Air", {"method": "mtp", "num_speculative_tokens": 2}),
    "suffix": (LLAMA, {"method": "suffix", "num_speculative_tokens": 8}),
    "synthetic": (
        LLAMA,
        {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 3,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": [0.9, 0.6, 0.3],
        },
    ),
}


def scrape(url: str) -> dict[str, float]:
    """Sample name (+ sorted labels other than engine/model_name) -> value, summed over engine;
    `_created` samples are left out."""
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            extra = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("engine", "model_name")))
            key = s.name + (str(dict(extra)) if extra else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_metrics_agree_exactly_with_what_clients_received(variant, tmp_path):
    model, spec = VARIANTS[variant]
    args = ["--speculative-config", json.dumps(spec)] if spec else []
    per_request = ["--per-request-spec-decode-metrics", "summary"] if spec else []  # vLLM: only with SD
    log = tmp_path / "steps.jsonl"
    with emulator_server(model, *args, "--time-scale", "0.25", *per_request, "--step-log", str(log)) as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "8",
            "--num-requests",
            "24",
            "--output-len",
            "48",
            "--input-len",
            "64",
            "--quiet",
            "--output",
            str(tmp_path / "run"),
        )
        assert res.returncode == 0, res.stderr
        m = scrape(srv.url)
    frame = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert frame["ok"].all() and len(frame) == 24
    assert (frame["token_count_source"] == "continuous_usage").all()
    assert m["vllm:generation_tokens_total"] == frame["completion_tokens"].sum() == 24 * 48
    assert m["vllm:prompt_tokens_total"] == frame["prompt_tokens"].sum()
    assert m["vllm:request_success_total{'finished_reason': 'length'}"] == 24
    engine = engine_record(log)
    for row in frame.itertuples():  # the stream as read is the stream as the server wrote it
        assert list(row.chunk_tokens) == engine[row.index]["chunks"], row.index
    decode = [n for tokens in frame["chunk_tokens"] for n in list(tokens)[1:]]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    server, sd = summary["server"], summary["spec_decode"]
    assert server["generation_tokens"] == 24 * 48 and server["requests_finished"]["length"] == 24
    assert server["histograms"]["e2e"]["count"] == 24 and not server["restarted"]
    if spec is None:
        assert set(decode) == {1}
        assert not any(k.startswith("vllm:spec_decode") for k in m)
        assert sd is None
        assert frame["server_accepted_tokens"].isna().all()  # no SD: no per-request metrics
        assert summary["acceptance_client"]["server_reported"] is None
        return
    client = summary["acceptance_client"]  # the client's step trace: one chunk per step here
    rec = client["reconciliation"]  # three counts: the stream's, the per-request ones, the counter
    # each figure against the engine's own record, not against another figure
    assert summed(engine, "merged") == 0  # nothing coalesced at this load
    assert client["steps_source"] == "chunks" and client["accepted_tokens"] == summed(engine, "streamed")
    assert sd["accepted_tokens"] == m["vllm:spec_decode_num_accepted_tokens_total"] == summed(engine, "accepted") > 0
    assert rec["server_per_request"] == summed(engine, "accepted")
    assert rec["past_end"]["tokens"] == summed(engine, "past_end") and rec["coalesced"]["tokens"] == 0
    assert rec["exact"] and rec["source"] == "stream_with_step_counter" and rec["stream"]["coalesced_steps"] == 0
    assert rec["unexplained"]["tokens"] == 0 == rec["stream_unmatched"]["tokens"] and rec["requests_checked"] == 24
    if variant == "synthetic":  # 0.9 at the first position: some last step accepts past the end
        assert summed(engine, "past_end") > 0 and any("past the end" in d for d in rec["differences"])
    assert sd["drafts"] == m["vllm:spec_decode_num_drafts_total"] == summed(engine, "verify")
    assert sd["draft_tokens"] == m["vllm:spec_decode_num_draft_tokens_total"]
    assert sd["acceptance_rate"] == pytest.approx(sd["accepted_tokens"] / sd["draft_tokens"])
    assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
    _positions_and_requests_agree(m, sd, summary, frame, engine, spec["num_speculative_tokens"])


def _positions_and_requests_agree(m: dict, sd: dict, summary: dict, frame, engine: dict, k: int) -> None:
    """The per-position counters against the streamed steps, and the per-request counts against
    the engine's record of each request and, summed, against the Prometheus deltas."""
    accepted = m["vllm:spec_decode_num_accepted_tokens_total"]
    decode = [n for tokens in frame["chunk_tokens"] for n in list(tokens)[1:]]
    per_pos = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{'position': '{j}'}}"] for j in range(k)]
    assert sum(per_pos) == accepted
    for j in range(k):  # position j was accepted in every decode step that accepted more than j
        streamed = sum(1 for n in decode if n - 1 > j)  # ...and in last steps that went past the end
        assert streamed <= per_pos[j] <= streamed + (frame["finish_reason"] == "length").sum()
        assert sd["per_position"][j] * sd["drafts"] == pytest.approx(per_pos[j])
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))
    assert max(decode) <= k + 1
    for row in frame.itertuples():  # per request: the server's counts are the engine's
        assert row.server_accepted_tokens == engine[row.index]["accepted"]
        assert row.server_spec_steps == engine[row.index]["verify"]
    rep = summary["acceptance_client"]["server_reported"]  # ...and over the run, the Prometheus deltas
    assert rep["requests"] == 24 and rep["accepted_tokens"] == accepted
    assert rep["draft_tokens"] == m["vllm:spec_decode_num_draft_tokens_total"]
    assert rep["spec_steps"] == m["vllm:spec_decode_num_drafts_total"]
    assert rep["mean_acceptance_length"] == pytest.approx(sd["mean_acceptance_length"])


@pytest.mark.parametrize("variant", ["baseline", "eagle"])
def test_coalesced_chunks_are_not_accepted_drafts(variant, tmp_path):
    """stream_interval (vLLM's request field) merges several steps' tokens into a chunk, as vLLM
    does under load: a baseline's stream still counts 0 accepted drafts, and an SD variant's the
    engine's own count of what it streamed, its merged steps the engine's (the step log)."""
    model, spec = VARIANTS[variant]
    args = ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "summary"] if spec else []
    log = tmp_path / "steps.jsonl"
    with emulator_server(model, *args, "--time-scale", "0.25", "--step-log", str(log)) as srv:
        res = run_cli(
            "run", "--base-url", srv.url, "--concurrency", "4", "--num-requests", "8", "--output-len", "40",
            "--input-len", "64", "--extra-body", '{"stream_interval": 4}', "--quiet", "--output", str(tmp_path / "run"),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert frame["ok"].all() and (frame["completion_tokens"] == 40).all()
    for tokens in frame["chunk_tokens"]:  # the first token at once, then chunks of 4 or more, the last any
        assert tokens[0] == 1 and all(n >= 4 for n in list(tokens)[1:-1]), list(tokens)
    engine = engine_record(log)
    client = json.loads((tmp_path / "run" / "summary.json").read_text())["acceptance_client"]
    rec = client["reconciliation"]
    assert rec["stream"]["coalesced_steps"] == summed(engine, "merged") > 0
    assert client["accepted_tokens"] == summed(engine, "streamed") and any("coalesced" in d for d in rec["differences"])
    if spec is None:  # no SD counter at all: vLLM without a speculative config: nothing to reconcile
        assert client["accepted_source"] == rec["source"] == "server_drafted_nothing"
        assert client["accepted_tokens"] == rec["server_counter"] == 0 and rec["exact"] is None
        return
    # EAGLE drafts at every step: told so, the rule places every request's merged steps and its
    # drafts past the end where the engine's record has them
    told = reconciled(tmp_path / "run", speculative_config=spec)
    assert told["exact"] is True and told["requests_checked"] == 8
    assert told["coalesced"]["tokens"] == summed(engine, "merged")
    assert told["past_end"]["tokens"] == summed(engine, "past_end")
    assert client["stream_accepted_tokens"] > summed(engine, "streamed")  # the stream alone over-counts
