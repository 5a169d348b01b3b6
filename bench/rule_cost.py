"""What the accepted-draft rule costs per request (loadgen/measures/rule.py), on the stored real
streams of tests/data/reconcile_streams.json (the emulator and real vLLM with the Qwen pair, a
draft model and n-gram at k 3, with vLLM's per-step record): each request judged as reconcile()
judges it, by its per-step record where it has one, else by its counts, timed over many
passes; then long answers of the same shapes (`--tokens`, default 256: seeded streams of verify
steps accepting 0..k, one-token steps that drafted nothing for n-gram, a chunk merging two steps
now and then, cut by max_tokens), where the per-step record's search has the most to do.
Target: n-gram with the per-step record within 2x of the model drafter's cost.

    python3 -m bench.rule_cost [--passes 2000] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from loadgen.measures.reconcile import can_skip
from loadgen.measures.rule import explain, explain_steps

STREAMS = Path(__file__).resolve().parents[1] / "tests" / "data" / "reconcile_streams.json"
TARGET_RATIO = 2.0


def judged(stream: dict, per_step: bool) -> list[tuple]:
    """Each request's arguments to the rule, as reconcile() builds them (decode chunks: the first
    chunk's tokens beyond the prefill's one first)."""
    k, skip = stream["k"], can_skip(stream["speculative_config"])
    out: list[tuple] = []
    for r in stream["requests"]:
        chunks = [r["chunks"][0] - 1, *r["chunks"][1:]]
        if per_step and r["per_step"] is not None:
            out.append((explain_steps, (chunks, r["per_step"], k, r["finish"], skip)))
        else:
            out.append((explain, (chunks, r["accepted"], r["verify"], k, r["finish"], skip)))
    return out


def long_stream(tokens: int, k: int, ngram: bool, seed: int, requests: int = 8) -> dict:
    """Requests of `tokens` output tokens as an engine at k makes them: each decode step a verify
    step accepting 0..k (a one-token step that drafted nothing a third of the time for n-gram),
    one chunk a step but every fifth chunk two steps merged, the last step cut by max_tokens."""
    rng = random.Random(seed)
    out = []
    for i in range(requests):
        emitted, per_step, steps = 1, [], []  # steps: each decode step's tokens
        while emitted < tokens:
            if ngram and rng.random() < 1 / 3:
                steps.append(1)
                emitted += 1
                continue
            a = rng.randint(0, k)
            e = min(a + 1, tokens - emitted)
            per_step.append(a)
            steps.append(e)
            emitted += e
        chunks, j = [1], 0
        while j < len(steps):
            take = 2 if rng.random() < 0.2 and j + 1 < len(steps) else 1
            chunks.append(sum(steps[j : j + take]))
            j += take
        accepted = sum(per_step)
        out.append({"index": i, "chunks": chunks, "finish": "length", "accepted": accepted,
                    "verify": len(per_step), "per_step": per_step})  # fmt: skip
    method = (
        {"method": "ngram", "num_speculative_tokens": k}
        if ngram
        else {"method": "draft_model", "model": "m", "num_speculative_tokens": k}
    )
    return {"k": k, "speculative_config": method, "requests": out}


def cost_us(calls: list[tuple], passes: int) -> float:
    """Microseconds per request, the best of three timings of `passes` passes."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(passes):
            for fn, args in calls:
                fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best / (passes * len(calls)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    streams = json.loads(STREAMS.read_text())
    streams[f"long{args.tokens}/draft-model"] = long_stream(args.tokens, 3, False, seed=1)
    streams[f"long{args.tokens}/ngram"] = long_stream(args.tokens, 3, True, seed=1)
    rows = []
    for name in sorted(streams):
        for per_step in (True, False):
            calls = judged(streams[name], per_step)
            passes = args.passes if not name.startswith("long") else max(1, args.passes // 10)
            rows.append((name, "per-step record" if per_step else "counts only", cost_us(calls, passes)))
    print(f"{'stream':<24}{'judged by':<18}{'µs/request':>12}")
    for name, how, us in rows:
        print(f"{name:<24}{how:<18}{us:>12.1f}")
    for source in sorted({n.split("/")[0] for n in streams}):
        model = next(us for n, h, us in rows if n == f"{source}/draft-model" and h == "per-step record")
        ngram = next(us for n, h, us in rows if n == f"{source}/ngram" and h == "per-step record")
        ok = ngram <= TARGET_RATIO * model
        print(
            f"{source}: n-gram with the record {ngram / model:.2f}x the model drafter's (target <= {TARGET_RATIO:g}x): "
            f"{'PASS' if ok else 'FAIL'}"
        )


if __name__ == "__main__":
    main()
