"""How big a day-long run's timeline is (docs/metrics.md "Over time"; docs/performance.md): a
day of one-second samples (86,400 intervals, EAGLE k=3's per-position counts, the client's
sends, ends and in flight, values of a busy 8B server's magnitude) as summary.json would hold it
whole, and as loadgen.results.store writes it: coarsened to at most an hour's intervals in
summary.json (every sum unchanged: checked here) with the whole series in timeline.parquet.

    python -m bench.timeline_size                 # a day
    python -m bench.timeline_size --hours 72
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from loadgen.results import store  # noqa: E402


def day(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    drafts = rng.integers(200, 900, n)
    per_pos = np.stack([rng.binomial(drafts, p) for p in (0.75, 0.55, 0.4)], axis=1)
    running = rng.integers(0, 64, n)
    return {
        "t_s": np.cumsum(rng.normal(1.0, 0.01, n)).round(6).tolist(),
        "dt_s": rng.normal(1.0, 0.01, n).round(6).tolist(),
        "generation_tokens": (drafts * 2.7).astype(int).tolist(),
        "prompt_tokens": rng.integers(0, 40000, n).tolist(),
        "drafts": drafts.tolist(),
        "draft_tokens": (3 * drafts).tolist(),
        "accepted_tokens": per_pos.sum(axis=1).tolist(),
        "accepted_per_position": per_pos.tolist(),
        "running": running.astype(float).tolist(),
        "waiting": rng.integers(0, 5, n).astype(float).tolist(),
        "kv_usage": rng.uniform(0, 0.9, n).tolist(),
        "generation_tok_s": (drafts * 2.7).tolist(),
        "acceptance_rate": (per_pos.sum(axis=1) / (3 * drafts)).tolist(),
        "acceptance_length": (1 + per_pos.sum(axis=1) / drafts).tolist(),
        "client": {
            "sends": rng.poisson(8, n).tolist(),
            "completions": rng.poisson(8, n).tolist(),
            "in_flight": (running + rng.uniform(0, 1, n)).tolist(),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=24.0)
    a = ap.parse_args()
    n = int(a.hours * 3600)
    tl = day(n)
    whole = len(json.dumps(tl))
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        store.write_summary(Path(d), {"timeline": tl})
        took = time.perf_counter() - t
        kept = json.loads((Path(d) / store.SUMMARY).read_text())["timeline"]
        summary_b = (Path(d) / store.SUMMARY).stat().st_size
        parquet_b = (Path(d) / store.TIMELINE).stat().st_size
    for key in ("generation_tokens", "drafts", "accepted_tokens"):
        assert sum(kept[key]) == sum(tl[key]), key
    assert sum(kept["client"]["sends"]) == sum(tl["client"]["sends"])
    print(f"| {a.hours:g} h of 1 s samples | intervals | JSON |")
    print("|---|---|---|")
    print(f"| the whole timeline in summary.json | {n:,} | {whole / 1e6:.1f} MB |")
    print(f"| summary.json as written (coarsened, sums equal) | {len(kept['t_s']):,} | {summary_b / 1e6:.2f} MB |")
    print(f"| timeline.parquet (whole) | {n:,} | {parquet_b / 1e6:.2f} MB (Parquet) |")
    print(f"\nwritten in {took:.2f} s (coarsening, Parquet and JSON)")


if __name__ == "__main__":
    main()
