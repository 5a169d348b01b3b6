"""The client measures every request exactly: against a server whose every chunk time and
token count is known (servers.scripted), TTFT, TPOT and per-token ITL match the truth within
2 ms at p99 at concurrency 64, with one-token and multi-token chunks, on both endpoints, from
one process and from two (--workers 2: the load split, the records merged).

The truth is the server's own record (--trace) of when it wrote each chunk, and the client's
record of when it sent the request. Tokens per chunk are checked against the script. Chunk
times are not: at concurrency 64 on 2 vCPUs the server itself writes up to 1-2 ms behind its
script now and then, which the client sees correctly and must not be charged with. Nor is the
server's own record of when it received a request the start of the truth: a busy server reads
a request late (its loop is writing other streams' chunks), which is part of the TTFT a user
sees, not an error of the client's; that the client's send precedes the server's receipt is
checked. What is left between the client's figures and the truth is the loopback transport of
the chunks and the client's own reading, which is what this test bounds.

Why up to three attempts: this 2-vCPU VM stalls a running process for 1-7 ms about once or
twice a second per core (measured with a busy loop; see docs/performance.md). A p99 over 512
requests is exactly the level such stalls touch, in any of the processes (the server, one or
two clients): one attempt in five to ten fails here by a fraction of a millisecond. A
systematic error (per-chunk gaps read as per-token ITL, a role chunk taken as the first token,
a miscounted chunk) fails every attempt; the negative control below shows that such an error
does exceed the bound.

On a machine too slow for this load the client cannot be this exact, and says so: it marks the
run `client_bound` (its self-check, held here to this test's bound with --timing-threshold-ms),
and a flagged run's figures are not claimed, as long as a light load on the same machine is
not flagged (tests/conftest.py: a client that flags every run cannot pass). On a slow machine the usual case
is the closed
loop's first wave: the client is still sending its 64 first requests when their first chunks
come back, and the self-check's first-chunk read delay sees that. So an attempt
passes when it is within the bound or honestly flagged; what fails is a client that is off by
more than the bound without saying so, in every attempt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from loadgen.client import compiled
from loadgen.load.execute import CLIENT_PATH_ENV
from servers.scripted import ScriptConfig, script_for
from servers.scripted.script import WORDS, prompt_key
from tests.conftest import assert_light_load_unflagged, run_cli, synthetic_prompts

pytestmark = [
    pytest.mark.servers,
    pytest.mark.timing,
]  # figures against the server's own record: runs alone (tests/conftest.py)

SCRIPT: dict[str, Any] = dict(ttft_ms=40.0, step_ms=25.0, step_jitter=0.5, chunk_tokens="sd:3:0.7", seed=3)
SERVER_ARGS = [
    "--ttft-ms",
    "40",
    "--step-ms",
    "25",
    "--step-jitter",
    "0.5",
    "--chunk-tokens",
    "sd:3:0.7",
    "--seed",
    "3",
]
INPUT_LEN, OUTPUT_LEN, SEED = 64, 48, 7
BOUND_MS = 2.0


def _run(url: str, out, *extra: str, env: dict | None = None) -> pd.DataFrame:
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--input-len",
        str(INPUT_LEN),
        "--output-len",
        str(OUTPUT_LEN),
        "--seed",
        str(SEED),
        "--quiet",
        "--output",
        str(out),
        *extra,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    return pd.read_parquet(out / "requests.parquet")


def _token_itl_ms(times_ns, tokens) -> np.ndarray:
    t, n = np.asarray(times_ns), np.asarray(tokens)
    return np.concatenate([np.zeros(n[0] - 1), np.repeat(np.diff(t) / 1e6 / n[1:], n[1:])])


def _server_records(trace: Path, skip: int) -> dict[str, dict]:
    """The scripted server's trace lines after the first `skip`, by prompt key."""
    lines = trace.read_text().splitlines()[skip:]
    return {rec["key"]: rec for rec in map(json.loads, lines)}


def _errors(frame: pd.DataFrame, served: dict[str, dict]) -> dict[str, np.ndarray]:
    """|measured - true| per request (TTFT, TPOT), per token (ITL), the truth being the
    server's record of its writes; and the error a tool would make reading each inter-chunk
    gap as one token's latency."""
    cfg = ScriptConfig(**SCRIPT)
    prompts = synthetic_prompts(len(frame), input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=SEED)
    ttft, tpot, itl, per_chunk = [], [], [], []
    for row in frame.itertuples():
        script = script_for(cfg, prompts[row.index], OUTPUT_LEN)
        tokens = np.asarray(script.tokens)
        assert list(row.chunk_tokens) == list(tokens), f"request {row.index}: tokens per chunk"
        rec = served[prompt_key(prompts[row.index])]
        writes = np.asarray(rec["write_ns"])
        assert len(writes) == len(tokens), f"request {row.index}: one write per chunk"
        assert rec["t_recv_ns"] >= row.t_send_ns, f"request {row.index}: received before it was sent"
        ttft.append(row.ttft_ms - (writes[0] - row.t_send_ns) / 1e6)
        tpot.append(row.tpot_ms - (writes[-1] - writes[0]) / 1e6 / (OUTPUT_LEN - 1))
        true_itl = _token_itl_ms(writes, tokens)
        itl.extend(_token_itl_ms(row.chunk_t_ns, row.chunk_tokens) - true_itl)
        gaps = np.diff(np.asarray(row.chunk_t_ns)) / 1e6
        per_chunk.extend(np.repeat(gaps, tokens[1:]) - true_itl[tokens[0] - 1 :])
    return {
        k: np.abs(np.array(v))
        for k, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("per_chunk_as_itl", per_chunk))
    }


@pytest.mark.parametrize(
    "endpoint,workers,path",
    [("completions", 1, "compiled"), ("chat", 1, "compiled"), ("completions", 2, "compiled"), ("chat", 1, "python")],
)
def test_timings_match_the_server_at_concurrency_64(server, tmp_path, endpoint, workers, path):
    """On the compiled read path (where the package built it) and on the pure-Python one."""
    if path == "compiled" and not compiled.available():
        path = "python"  # no C compiler at install: the same test on the path that runs
    trace = tmp_path / "server-trace.jsonl"
    trace.touch()
    url = server(*SERVER_ARGS, "--trace", str(trace))
    attempts = []
    for attempt in range(3):
        out = tmp_path / f"attempt{attempt}"
        before = len(trace.read_text().splitlines())
        frame = _run(
            url,
            out,
            "--endpoint",
            endpoint,
            "--concurrency",
            "64",
            "--num-requests",
            "512",
            "--workers",
            str(workers),
            "--timing-threshold-ms",
            str(BOUND_MS),
            env={CLIENT_PATH_ENV: path},
        )
        assert frame["ok"].all() and len(frame) == 512
        assert sorted(frame["worker"].unique()) == list(range(workers))
        assert (frame["worker"] == frame["index"] % workers).all()
        assert (frame["token_count_source"] == "continuous_usage").all()
        served = _server_records(trace, before)
        assert len(served) == 512
        err = _errors(frame, served)
        # Negative control: reading chunk gaps as per-token ITL is far outside the bound.
        assert np.percentile(err["per_chunk_as_itl"], 99) > 5 * BOUND_MS
        p99 = {k: float(np.percentile(err[k], 99)) for k in ("ttft", "tpot", "itl")}
        summary = json.loads((out / "summary.json").read_text())
        check = summary["self_check"]
        assert check["client_path"] == path
        attempts.append(
            {**p99, "client_bound": summary["client_bound"], "read_delay_p99": check["read_delay_ms"]["p99"]}
        )
        if max(p99.values()) <= BOUND_MS:
            return
        if summary["client_bound"]:  # honest, as long as the client does not flag everything
            assert_light_load_unflagged(tmp_path)
            return
    pytest.fail(f"p99 |measured - true| over {BOUND_MS} ms, unflagged, in every attempt: {attempts}")


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

    tok = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    url = server(*SERVER_ARGS, "--no-usage")
    frame = _run(
        url,
        tmp_path / "out",
        "--concurrency",
        "8",
        "--num-requests",
        "16",
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
        "--token-ids",
    )
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
