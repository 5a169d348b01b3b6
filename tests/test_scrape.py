"""Reading vLLM's /metrics text: sums over engines, no `_created` in any counter, deltas with
restart detection, histogram bucket deltas, renamed metrics, and vLLM's derived acceptance."""

from __future__ import annotations

import pytest

from loadgen.load.scrape import Window, parse, server, spec_decode

pytestmark = pytest.mark.unit

M = 'model_name="m"'


def text(
    drafts: tuple[float, float],
    draft_tokens: float,
    accepted: float,
    per_pos: list[float],
    gen: float,
    ttft_buckets: list[float],
    *,
    kv_name: str = "vllm:kv_cache_usage_perc",
    kv: float = 0.5,
    created: float = 1.7e9,
) -> str:
    """An exposition as vLLM writes it, with two engines (data parallel) for the drafts."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts counter",
        *(f'vllm:spec_decode_num_drafts_total{{engine="{e}",{M}}} {d}' for e, d in enumerate(drafts)),
        *(f'vllm:spec_decode_num_drafts_created{{engine="{e}",{M}}} {created}' for e in range(2)),
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",{M}}} {draft_tokens}',
        f'vllm:spec_decode_num_draft_tokens_created{{engine="0",{M}}} {created}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",{M}}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{M},position="{i}"}} {v}'
            for i, v in enumerate(per_pos)
        ),
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",{M}}} {gen}',
        f'vllm:generation_tokens_created{{engine="0",{M}}} {created}',
        f"# TYPE {kv_name} gauge",
        f'{kv_name}{{engine="0",{M}}} {kv}',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        *(
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",{M}}} {v}'
            for le, v in zip(("0.1", "1.0", "+Inf"), ttft_buckets)
        ),
        f'vllm:time_to_first_token_seconds_count{{engine="0",{M}}} {ttft_buckets[-1]}',
        f'vllm:time_to_first_token_seconds_sum{{engine="0",{M}}} {ttft_buckets[-1] * 0.2}',
        f'vllm:time_to_first_token_seconds_created{{engine="0",{M}}} {created}',
    ]
    return "\n".join(lines) + "\n"


def test_deltas_sum_engines_and_never_add_created():
    before = parse(text((10, 5), 45, 20, [10, 6, 4], 1000, [1, 2, 2]), t=100.0)
    after = parse(text((40, 25), 195, 110, [50, 35, 25], 1500, [3, 7, 8]), t=102.0)
    w = Window(before, after)
    sd = spec_decode(w)
    assert sd["drafts"] == 50 and sd["draft_tokens"] == 150 and sd["accepted_tokens"] == 90
    assert sd["acceptance_rate"] == pytest.approx(0.6)
    assert sd["mean_acceptance_length"] == pytest.approx(1 + 90 / 50)
    assert sd["per_position"] == pytest.approx([40 / 50, 29 / 50, 21 / 50])
    assert sd["drafts_per_s"] == pytest.approx(25.0)
    s = server(w)
    assert s["generation_tokens"] == 500 and s["generation_tok_s"] == pytest.approx(250.0)
    assert s["histograms"]["ttft"]["buckets"] == {"0.1": 2, "1.0": 5, "+Inf": 6}
    assert s["histograms"]["ttft"]["count"] == 6
    assert s["kv_usage"] == {"mean": 0.5, "max": 0.5, "samples": 2}
    assert not s["restarted"]


def test_a_counter_that_went_down_flags_a_restart():
    before = parse(text((10, 5), 45, 20, [10, 6, 4], 1000, [1, 2, 2]), t=0.0)
    after = parse(text((3, 0), 9, 4, [2, 1, 1], 30, [1, 1, 1]), t=1.0)
    w = Window(before, after)
    assert w.restarted and server(w)["restarted"]
    assert spec_decode(w)["drafts"] == 3  # counted since the restart


def test_renamed_gauge_and_no_speculative_decoding():
    old = (
        "\n".join(
            [
                "# TYPE vllm:gpu_cache_usage_perc gauge",
                f"vllm:gpu_cache_usage_perc{{{M}}} 0.25",
                "# TYPE vllm:generation_tokens counter",
                f"vllm:generation_tokens_total{{{M}}} 7",
            ]
        )
        + "\n"
    )
    w = Window(parse(old, t=0.0), parse(old, t=1.0), [parse(old.replace("0.25", "0.75"), t=0.5)])
    assert spec_decode(w) is None
    assert server(w)["kv_usage"] == {"mean": pytest.approx(5 / 12), "max": 0.75, "samples": 3}
    assert server(w)["generation_tokens"] == 0
    assert server(w)["gauges"]["kv_usage"] == [[0.0, 0.25], [0.5, 0.75], [1.0, 0.25]]
