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
from tests.conftest import drop_one_draft, reconciled, run_cli

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
    with emulator_server(model, *args, "--time-scale", "0.25", *per_request) as srv:
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
            str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        m = scrape(srv.url)
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert frame["ok"].all() and len(frame) == 24
    assert (frame["token_count_source"] == "continuous_usage").all()
    assert m["vllm:generation_tokens_total"] == frame["completion_tokens"].sum() == 24 * 48
    assert m["vllm:prompt_tokens_total"] == frame["prompt_tokens"].sum()
    assert m["vllm:request_success_total{'finished_reason': 'length'}"] == 24
    decode = [n for tokens in frame["chunk_tokens"] for n in list(tokens)[1:]]
    summary = json.loads((tmp_path / "summary.json").read_text())
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
    assert sd["accepted_tokens"] == m["vllm:spec_decode_num_accepted_tokens_total"]
    client = summary["acceptance_client"]  # the client's step trace: one chunk per step here
    rec = client["reconciliation"]  # three counts: the stream's, the per-request ones, the counter
    past_end = rec["past_end"]["tokens"]  # (from each request's own count: what its stream cannot show)
    # the stream's own count (one chunk per step: its tokens beyond one) plus the drafts accepted
    # past max_tokens is the counter; the per-request counts sum to it
    assert client["steps_source"] == "chunks" and client["accepted_tokens"] == sum(n - 1 for n in decode)
    assert client["accepted_tokens"] + past_end == sd["accepted_tokens"] == rec["server_per_request"]
    assert rec["exact"] and rec["source"] == "stream_with_step_counter" and rec["stream"]["coalesced_steps"] == 0
    assert rec["coalesced"]["tokens"] == 0 and rec["unexplained"]["tokens"] == 0 == rec["stream_unmatched"]["tokens"]
    if variant == "synthetic":  # 0.9 at the first position: some last step accepts past the end
        assert past_end > 0 and any("past the end" in d for d in rec["differences"])
    assert sd["drafts"] == m["vllm:spec_decode_num_drafts_total"]
    assert sd["draft_tokens"] == m["vllm:spec_decode_num_draft_tokens_total"]
    assert sd["acceptance_rate"] == pytest.approx(sd["accepted_tokens"] / sd["draft_tokens"])
    assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
    accepted = m["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted == sum(n - 1 for n in decode) + past_end
    assert accepted > 0
    _positions_and_requests_agree(m, sd, summary, frame, decode, spec["num_speculative_tokens"])
    _a_lost_draft_is_reported(tmp_path, client["accepted_tokens"])


def _positions_and_requests_agree(m: dict, sd: dict, summary: dict, frame, decode: list, k: int) -> None:
    """The per-position counters against the streamed steps, and the per-request counts against
    each request's chunks and, summed, against the Prometheus deltas."""
    accepted = m["vllm:spec_decode_num_accepted_tokens_total"]
    per_pos = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{'position': '{j}'}}"] for j in range(k)]
    assert sum(per_pos) == accepted
    for j in range(k):  # position j was accepted in every decode step that accepted more than j
        streamed = sum(1 for n in decode if n - 1 > j)  # ...and in last steps that went past the end
        assert streamed <= per_pos[j] <= streamed + (frame["finish_reason"] == "length").sum()
        assert sd["per_position"][j] * sd["drafts"] == pytest.approx(per_pos[j])
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))
    assert m["vllm:spec_decode_num_draft_tokens_total"] >= accepted
    assert m["vllm:spec_decode_num_drafts_total"] <= len(decode)
    assert max(decode) <= k + 1
    # per request: the server's counts are what its chunks imply (one chunk per step here)...
    for tokens, acc, steps in zip(frame["chunk_tokens"], frame["server_accepted_tokens"], frame["server_spec_steps"]):
        streamed = sum(n - 1 for n in list(tokens)[1:])  # past the end: at most the last step's unstreamed drafts
        assert streamed <= acc <= streamed + k - (tokens[-1] - 1)
        assert steps <= len(tokens) - 1
    # ...and over the run they are the Prometheus deltas, exactly
    rep = summary["acceptance_client"]["server_reported"]
    assert rep["requests"] == 24 and rep["accepted_tokens"] == accepted
    assert rep["draft_tokens"] == m["vllm:spec_decode_num_draft_tokens_total"]
    assert rep["spec_steps"] == m["vllm:spec_decode_num_drafts_total"]
    assert rep["mean_acceptance_length"] == pytest.approx(sd["mean_acceptance_length"])


def _a_lost_draft_is_reported(run, accepted: int) -> None:
    """The stored stream reconciles again by the rule; one accepted draft taken out of one chunk
    does not: the difference is reported (the stream's tokens are no longer the server's usage)."""
    assert reconciled(run)["exact"] is True
    rec = reconciled(run, drop_one_draft)
    assert rec["exact"] is False and rec["stream_unmatched"] == {"tokens": 1, "requests": 1}, rec
    assert rec["accepted_tokens"] == accepted - 1
    assert any("not explained" in d for d in rec["differences"]), rec["differences"]


@pytest.mark.parametrize("variant", ["baseline", "eagle"])
def test_coalesced_chunks_are_not_accepted_drafts(variant, tmp_path):
    """stream_interval (vLLM's request field) merges several steps' tokens into a chunk, as vLLM
    does under load: a baseline still shows 0 accepted drafts, and an SD variant the server's
    count exactly, its coalesced tokens named."""
    model, spec = VARIANTS[variant]
    args = ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "summary"] if spec else []
    with emulator_server(model, *args, "--time-scale", "0.25") as srv:
        res = run_cli(
            "run", "--base-url", srv.url, "--concurrency", "4", "--num-requests", "8", "--output-len", "40",
            "--input-len", "64", "--extra-body", '{"stream_interval": 4}', "--quiet", "--output", str(tmp_path),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        m = scrape(srv.url)
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert frame["ok"].all() and (frame["completion_tokens"] == 40).all()
    decode = [n for tokens in frame["chunk_tokens"] for n in list(tokens)[1:]]
    for tokens in frame["chunk_tokens"]:  # the first token at once, then chunks of 4 or more, the last any
        assert tokens[0] == 1 and all(n >= 4 for n in list(tokens)[1:-1]), list(tokens)
    client = json.loads((tmp_path / "summary.json").read_text())["acceptance_client"]
    rec = client["reconciliation"]
    assert rec["exact"] and rec["stream"]["coalesced_steps"] > 0 and rec["unexplained"]["tokens"] == 0
    assert any("coalesced" in d for d in rec["differences"])
    if spec is None:  # no SD counter at all: vLLM without a speculative config
        assert client["accepted_source"] == rec["source"] == "server_drafted_nothing"
        assert client["accepted_tokens"] == rec["server_counter"] == 0
        assert rec["stream"]["coalesced_steps"] == client["stream_accepted_tokens"] == sum(n - 1 for n in decode)
        assert client["decode_steps"] == 8 * 39 and client["tokens_per_step_mean"] == 1.0
        return
    accepted = m["vllm:spec_decode_num_accepted_tokens_total"]
    # EAGLE drafts at every step: the step counter (draft rounds) tells how many steps the chunks
    # merged, so the stream's count plus the drafts past the end is the counter (and the
    # per-request counts' steps agree: the rule's coalesced steps are the counter's)
    assert client["accepted_tokens"] + rec["past_end"]["tokens"] == rec["server_counter"] == accepted > 0
    assert (
        rec["coalesced"]["tokens"]
        == rec["stream"]["coalesced_steps"]
        == m["vllm:spec_decode_num_drafts_total"] - (len(decode))
    )
    assert client["stream_accepted_tokens"] > accepted - rec["past_end"]["tokens"]  # the stream alone over-counts
    # the engine's decode steps, not the chunks: every verify step is one
    assert client["decode_steps"] >= m["vllm:spec_decode_num_drafts_total"] > len(decode)
