"""The client measures every request exactly: against a server whose every chunk time and
token count is known (servers.scripted), TTFT, TPOT and per-token ITL match the script within
2 ms at p99 at concurrency 64, with one-token and multi-token chunks, on both endpoints, from
one process and from two (--workers 2: the load split, the records merged).

Why one retry: this 2-vCPU VM stalls a running process for 1-7 ms about once or twice a
second per core (measured with a busy loop; see docs/performance.md). A p99 over 512 requests
is exactly the level such stalls touch, in either process. A systematic error (per-chunk gaps
read as per-token ITL, a role chunk taken as the first token, a miscounted chunk) fails both
attempts; the negative control below shows that such an error does exceed the bound.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from servers.scripted import ScriptConfig, script_for
from servers.scripted.script import WORDS
from tests.conftest import run_cli, synthetic_prompts

SCRIPT = dict(ttft_ms=40.0, step_ms=25.0, step_jitter=0.5, chunk_tokens="sd:3:0.7", seed=3)
SERVER_ARGS = ["--ttft-ms", "40", "--step-ms", "25", "--step-jitter", "0.5",
               "--chunk-tokens", "sd:3:0.7", "--seed", "3"]
INPUT_LEN, OUTPUT_LEN, SEED = 64, 48, 7
BOUND_MS = 2.0


def _run(url: str, out, *extra: str) -> pd.DataFrame:
    res = run_cli("run", "--base-url", url, "--input-len", str(INPUT_LEN),
                  "--output-len", str(OUTPUT_LEN), "--seed", str(SEED), "--quiet",
                  "--output", str(out), *extra)
    assert res.returncode == 0, res.stderr
    return pd.read_parquet(out / "requests.parquet")


def _token_itl_ms(times_ns, tokens) -> np.ndarray:
    t, n = np.asarray(times_ns), np.asarray(tokens)
    return np.concatenate([np.zeros(n[0] - 1), np.repeat(np.diff(t) / 1e6 / n[1:], n[1:])])


def _errors(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """|measured - scripted| per request (TTFT, TPOT), per token (ITL); and the error a tool
    would make reading each inter-chunk gap as one token's latency."""
    cfg = ScriptConfig(**SCRIPT)
    prompts = synthetic_prompts(len(frame), input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=SEED)
    ttft, tpot, itl, per_chunk = [], [], [], []
    for row in frame.itertuples():
        truth = script_for(cfg, prompts[row.index], OUTPUT_LEN)
        assert list(row.chunk_tokens) == list(truth.tokens), f"request {row.index}: tokens per chunk"
        ttft.append(row.ttft_ms - truth.ttft_s * 1e3)
        tpot.append(row.tpot_ms - truth.tpot_s() * 1e3)
        true_itl = np.array(truth.token_itl_s()) * 1e3
        itl.extend(_token_itl_ms(row.chunk_t_ns, row.chunk_tokens) - true_itl)
        gaps = np.diff(np.asarray(row.chunk_t_ns)) / 1e6
        per_chunk.extend(np.repeat(gaps, np.asarray(row.chunk_tokens)[1:]) - true_itl[row.chunk_tokens[0] - 1:])
    return {k: np.abs(np.array(v)) for k, v in
            (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("per_chunk_as_itl", per_chunk))}


@pytest.mark.parametrize("endpoint,workers", [("completions", 1), ("chat", 1), ("completions", 2)])
def test_timings_match_the_script_at_concurrency_64(server, tmp_path, endpoint, workers):
    url = server(*SERVER_ARGS)
    attempts = []
    for attempt in range(2):
        out = tmp_path / f"attempt{attempt}"
        frame = _run(url, out, "--endpoint", endpoint, "--concurrency", "64", "--num-requests", "512",
                     "--workers", str(workers))
        assert frame["ok"].all() and len(frame) == 512
        assert sorted(frame["worker"].unique()) == list(range(workers))
        assert (frame["worker"] == frame["index"] % workers).all()
        assert (frame["token_count_source"] == "continuous_usage").all()
        err = _errors(frame)
        # Negative control: reading chunk gaps as per-token ITL is far outside the bound.
        assert np.percentile(err["per_chunk_as_itl"], 99) > 5 * BOUND_MS
        p99 = {k: float(np.percentile(err[k], 99)) for k in ("ttft", "tpot", "itl")}
        attempts.append(p99)
        if max(p99.values()) <= BOUND_MS:
            return
    pytest.fail(f"p99 |measured - scripted| over {BOUND_MS} ms in both attempts: {attempts}")


def test_final_usage_only_gives_exact_totals_and_estimated_chunks(server, tmp_path):
    url = server(*SERVER_ARGS, "--no-continuous-usage")
    frame = _run(url, tmp_path, "--concurrency", "8", "--num-requests", "24")
    assert frame["ok"].all()
    assert (frame["token_count_source"] == "final_usage").all()
    assert (frame["completion_tokens"] == OUTPUT_LEN).all()
    assert all(sum(t) == OUTPUT_LEN for t in frame["chunk_tokens"])
    cfg = ScriptConfig(**SCRIPT)  # the chunks themselves are exact; only their split is estimated
    prompts = synthetic_prompts(len(frame), input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=SEED)
    for row in frame.itertuples():
        assert len(row.chunk_tokens) == len(script_for(cfg, prompts[row.index], OUTPUT_LEN).tokens)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["token_count_source"] == "final_usage"


def test_no_usage_counts_chunks_and_says_so(server, tmp_path):
    url = server(*SERVER_ARGS, "--no-usage")
    frame = _run(url, tmp_path, "--concurrency", "8", "--num-requests", "16")
    assert (frame["token_count_source"] == "chunks").all()
    assert all(set(t) == {1} for t in frame["chunk_tokens"])
    res_summary = json.loads((tmp_path / "summary.json").read_text())
    assert res_summary["token_count_source"] == "chunks"


def test_a_user_tokenizer_recovers_exact_chunk_tokens_without_usage(server, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    tok = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}},
                                         unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    url = server(*SERVER_ARGS, "--no-usage")
    frame = _run(url, tmp_path / "out", "--concurrency", "8", "--num-requests", "16",
                 "--tokenizer", str(tmp_path / "tokenizer.json"), "--token-ids")
    assert (frame["token_count_source"] == "tokenizer").all()
    cfg = ScriptConfig(**SCRIPT)
    prompts = synthetic_prompts(len(frame), input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=SEED)
    for row in frame.itertuples():
        assert list(row.chunk_tokens) == list(script_for(cfg, prompts[row.index], OUTPUT_LEN).tokens)
        # --token-ids from a server that returns none: the tokenizer's ids of the text
        assert len(row.output_token_ids) == row.completion_tokens and 0 not in set(row.output_token_ids)
        assert list(row.prompt_token_ids) == tok.encode(prompts[row.index], add_special_tokens=False).ids
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["config"]["token_ids_from_tokenizer"] == 16
