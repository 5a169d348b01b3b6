"""Metric definitions (docs/metrics.md) on hand-made records whose every time is known."""

import pytest

from loadgen.client.record import RequestRecord
from loadgen.measures.frame import request_frame, token_gaps
from loadgen.measures.summary import summarize

pytestmark = pytest.mark.unit

MS = 1_000_000
BASE = 5_000  # ms: monotonic times are never 0 (0 means "not sent")


def _rec(index, t_sched, t_send, chunks, warmup=False, error=None, prompt=10):
    """chunks: [(arrival ms, tokens)] with exact continuous usage."""
    r = RequestRecord(index, f"r{index}", warmup, (BASE + t_sched) * MS)
    r.t_send_ns = (BASE + t_send) * MS
    cum = 0
    for t, n in chunks:
        cum += n
        r.chunk_t_ns.append((BASE + t) * MS)
        r.chunk_usage.append(cum)
        r.chunk_chars.append(5 * n)
    r.usage_completion_tokens = cum
    r.prompt_tokens = prompt
    r.t_end_ns = (BASE + (chunks[-1][0] + 1 if chunks else t_send)) * MS
    r.done = True
    r.error_type = error
    return r


def test_per_request_definitions_with_multi_token_chunks():
    # sent at 100 ms (scheduled at 98), first token at 150, then chunks of 3 and 2 tokens
    f = request_frame([_rec(0, 98, 100, [(150, 1), (180, 3), (200, 2)])])
    row = f.iloc[0]
    assert row.ttft_ms == pytest.approx(50.0)
    assert row.e2e_ms == pytest.approx(100.0)
    assert row.tpot_ms == pytest.approx((100 - 50) / (6 - 1))
    assert row.ttft_from_scheduled_ms == pytest.approx(52.0)
    assert row.lateness_ms == pytest.approx(2.0)
    assert row.decode_tokens_per_chunk == pytest.approx(2.5)
    itl, gaps, decode = token_gaps(f)
    assert itl.tolist() == pytest.approx([10, 10, 10, 10, 10])  # 30 ms over 3, 20 ms over 2
    assert itl.mean() == pytest.approx(row.tpot_ms)
    assert gaps.tolist() == pytest.approx([30, 20])
    assert decode.tolist() == [3, 2]


def test_tokens_of_the_first_chunk_beyond_the_first_have_zero_itl():
    f = request_frame([_rec(0, 0, 0, [(40, 3), (60, 2)])])
    itl, _, _ = token_gaps(f)
    assert itl.tolist() == pytest.approx([0, 0, 10, 10])
    assert f.iloc[0].tpot_ms == pytest.approx(20 / 4)


def test_the_summarys_per_chunk_figures_are_the_definitions_over_every_request():
    """loadgen.measures.chunks computes ITL, gaps and tokens per chunk in batches; over many
    requests of every shape (one chunk, multi-token chunks, failures, warm-up) its figures are
    describe() of token_gaps()'s arrays over the measured requests, exactly."""
    import random

    from loadgen.measures.describe import describe

    rnd = random.Random(5)
    recs = []
    for i in range(200):
        t, chunks = 100, []
        for _ in range(rnd.randint(1, 12)):
            t += rnd.randint(1, 40)
            chunks.append((t, rnd.randint(1, 4)))
        recs.append(_rec(i, 0, 0, chunks, warmup=i < 5, error="http" if i % 17 == 0 else None))
    f = request_frame(recs)
    itl, gaps, decode = token_gaps(f[f["ok"] & ~f["warmup"]])
    s = summarize(f, ([], []), config=_config())
    assert s["itl_ms"] == describe(itl) and s["inter_chunk_ms"] == describe(gaps)
    assert s["tokens_per_chunk"] == describe(decode) and s["tokens_per_chunk_mean"] == decode.mean()


def _config():
    return {"clock": {"t0_ns": BASE * MS}, "load": {"concurrency": 2}}


def test_summary_excludes_warmup_and_failures_and_counts_errors():
    recs = [
        _rec(0, 0, 0, [(50, 1), (60, 1)], warmup=True),
        _rec(1, 0, 10, [(60, 1), (70, 1)]),
        _rec(2, 0, 20, [(100, 1)], error="reset"),
        _rec(3, 70, 70, [(120, 1), (130, 1)]),
    ]
    s = summarize(request_frame(recs), ([], []), config=_config())
    assert s["completed"] == 2 and s["failed"] == 1 and s["errors"] == {"reset": 1}
    assert s["ttft_ms"]["count"] == 2
    assert s["ttft_ms"]["mean"] == pytest.approx(50.0)
    assert s["token_count_source"] == "continuous_usage"
    for key in (
        "config",
        "completed",
        "failed",
        "errors",
        "duration_s",
        "output_throughput_tok_s",
        "request_throughput_req_s",
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "inter_chunk_ms",
        "e2e_ms",
        "tokens_per_chunk_mean",
        "token_count_source",
        "client_bound",
    ):
        assert key in s
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "inter_chunk_ms", "e2e_ms"):
        assert {"mean", "p50", "p90", "p99"} <= set(s[key])


OPEN = {"clock": {"t0_ns": BASE * MS}, "load": {"rate": 2.0}}  # an open loop's config: no users


def test_an_open_loops_window_ends_at_its_last_send():
    # two requests sent at 0 and 1000 ms: window [0, 1000] ms once the median E2E (<=1000) fits
    recs = [
        _rec(0, 0, 0, [(100 * i, 1) for i in range(1, 11)]),  # tokens at 100..1000
        _rec(1, 1000, 1000, [(1000 + 100 * i, 1) for i in range(1, 11)]),
    ]
    f = request_frame(recs)
    s = summarize(f, ([], []), config=OPEN)
    assert (s["window"]["start_s"], s["window"]["duration_s"], s["window"]["kind"]) == (0.0, 1.0, "steady")
    assert s["window"]["output_tokens"] == 10
    assert s["output_throughput_tok_s"] == pytest.approx(10.0)
    assert s["request_throughput_req_s"] == pytest.approx(1.0)


def test_a_closed_loops_window_ends_when_its_first_user_is_done():
    """Two users, two requests each, each sent as its user's last ends (_rec ends a request 1 ms
    after its last token): A's at 0 (tokens 100..1000, ends 1001) and 1001 (1101..2001, ends
    2002); B's at 0 (100..1500, ends 1501) and 1501 (1601..2501, ends 2502). Two in flight from 0
    until A is done at 2002 (each end and its user's next send at one instant: ends first), one
    after: the window is [0, 2002] ms, not [0, 1501] (the last send, when both users are still
    busy). Its tokens: A 10 + 10, B 15 + 5 (1601..2001) = 40; its requests ended: 1001, 1501, 2002."""
    recs = [
        _rec(0, 0, 0, [(100 * i, 1) for i in range(1, 11)]),
        _rec(1, 0, 0, [(100 * i, 1) for i in range(1, 16)]),
        _rec(2, 1001, 1001, [(1001 + 100 * i, 1) for i in range(1, 11)]),
        _rec(3, 1501, 1501, [(1501 + 100 * i, 1) for i in range(1, 11)]),
    ]
    s = summarize(request_frame(recs), ([], []), config=_config())
    assert (s["window"]["start_s"], s["window"]["duration_s"], s["window"]["kind"]) == (0.0, 2.002, "steady")
    assert s["window"]["output_tokens"] == 40
    assert s["output_throughput_tok_s"] == pytest.approx(40 / 2.002)
    assert s["request_throughput_req_s"] == pytest.approx(3 / 2.002)


def test_no_steady_state_falls_back_to_the_whole_run():
    recs = [_rec(i, 0, 0, [(100, 1), (200, 1)]) for i in range(4)]  # all sent at once
    s = summarize(request_frame(recs), ([], []), config=OPEN)
    assert s["window"]["kind"] == "full_run"
    assert s["output_throughput_tok_s"] == pytest.approx(8 / 0.201)


@pytest.mark.parametrize(
    "recs", [[], [_rec(0, 0, 0, [(50, 1), (60, 1)], warmup=True)]], ids=["nothing sent", "only warm-up sent"]
)
def test_a_run_stopped_early_still_has_a_summary(recs):
    s = summarize(request_frame(recs), ([], []), config=_config())
    assert s["completed"] == 0 and s["window"] is None and s["output_throughput_tok_s"] == 0.0


def test_goodput_judges_each_request_from_its_scheduled_time():
    recs = [_rec(0, 0, 0, [(50, 1), (60, 1)]), _rec(1, 0, 90, [(140, 1), (150, 1)])]
    s = summarize(request_frame(recs), ([], []), config=_config(), goodput={"ttft": 100.0})
    assert s["goodput"]["good"] == 1 and s["goodput"]["fraction"] == 0.5


def test_client_bound_from_lateness():
    recs = [_rec(i, 0, 20, [(50, 1), (60, 1)]) for i in range(10)]  # each sent 20 ms late
    s = summarize(request_frame(recs), ([], []), config=_config(), lateness_threshold_ms=5.0)
    assert s["client_bound"] and "lateness" in s["self_check"]["reasons"][0]
    ok = summarize(request_frame([_rec(0, 0, 0, [(50, 1)])]), ([], []), config=_config())
    assert not ok["client_bound"]


def test_one_long_stall_over_many_chunks_is_flagged():
    """Per-tick lag p99 hides a single 40 ms stall (one tick of 200); weighted by the chunks
    whose timestamps it covered, it cannot hide."""
    recs = [_rec(i, 0, 0, [(1000 + j, 1) for j in range(0, 40, 4)]) for i in range(30)]
    ticks = [(BASE + 10 * k) * MS for k in range(1, 201)]
    lags = [0] * 200
    stalled = ticks.index((BASE + 1040) * MS)  # the tick covering 1000..1040 ms woke 40 ms late
    lags[stalled] = 40 * MS
    s = summarize(request_frame(recs), (ticks, lags), config=_config())
    assert s["self_check"]["loop_lag_ms"]["p99"] < 5
    assert s["self_check"]["chunk_lag_ms"]["p99"] == pytest.approx(40)
    assert s["client_bound"] and "chunk timestamps" in s["self_check"]["reasons"][0]


def test_a_slow_engines_gaps_are_not_moved_by_a_few_ms_of_lateness():
    """The same 20 ms lateness that flags a run of 40 ms requests (above) is under 1% of what it
    can move where each request takes 5 s and its chunks come 500 ms apart: over the bound, but
    below the precision, so listed and not flagged (loadgen/measures/selfcheck.py, MOVES)."""
    recs = [_rec(i, 0, 20, [(520 + 500 * j, 1) for j in range(10)]) for i in range(10)]
    s = summarize(request_frame(recs), ([], []), config=_config(), lateness_threshold_ms=5.0)
    check = s["self_check"]
    assert not s["client_bound"] and check["reasons"] == [], check
    assert check["below_precision"] and "of the median end-to-end latency" in check["below_precision"][0]
    assert check["figures"]["gap_ms"] == pytest.approx(500) and check["figures"]["ttft_ms"] == pytest.approx(500)


def test_a_first_chunk_that_carries_a_decode_step_follows_the_rule():
    """vLLM merges a request's first outputs when the client reads them late: the prefill's
    token and the first verify step's 4 (3 drafts accepted) in one chunk. Steps 4, 2, 3, 1
    tokens after the prefill: the server accepted 3 + 1 + 2 + 0 = 6 in 4 verify steps; the
    stream's first chunk holds 5 tokens. Its decode tokens are the rule's too, so nothing is
    unexplained and the three counts agree."""
    r = _rec(0, 0, 0, [(50, 5), (80, 2), (110, 3), (140, 1)])
    r.finish_reason, r.server_accepted_tokens, r.server_spec_steps, r.server_draft_tokens = "length", 6, 4, 12
    figures = {
        "spec_decode": {"drafts": 4, "accepted_tokens": 6, "draft_tokens": 12, "per_position": [0.75, 0.5, 0.25]},
        "server": {"generation_tokens": 11},
    }
    s = summarize(request_frame([r]), ([], []), config=_config(), server_figures=figures)
    rec = s["acceptance_client"]["reconciliation"]
    assert rec["unexplained"]["tokens"] == 0 and rec["past_end"]["tokens"] == 0, rec
    assert rec["accepted_tokens"] == rec["server_per_request"] == rec["server_counter"] == 6 and rec["exact"], rec
