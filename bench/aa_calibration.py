"""A/A calibration of `loadgen compare` with repeats: the same sweep run N times, every pair
compared, and how often a change is marked where there is none.

`loadgen compare` marks a change when its p-value stays under ALPHA = 0.05 after Holm's
correction over the table (docs/report.md). For A/A pairs (no true change) that is a
family-wise error: at most ALPHA of pairs should show any mark, and about ALPHA of all
comparisons should have an uncorrected p under 0.05, if the p-values are calibrated. This
script measures both, with the distribution of marks per pair, on the design of
tests/test_repeats.py (DESIGN: 2 variants x 2 levels (4 and 8 users), the same 16 ShareGPT requests per cell, 3 repeats
in rounds on fresh servers). The test's A/A bound (`false_mark_bound`) is derived from the
same two numbers: the most marks a calibrated compare shows in all but FLAKE of A/A runs.

    python3 -m bench.aa_calibration --sweeps 4            # the figures in docs/report.md
    python3 -m bench.aa_calibration --sweeps 6 --json aa.json

Each sweep takes about a minute on 2 cores. N sweeps give N(N-1)/2 pairs (not independent:
each sweep is in N-1 of them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALPHA = 0.05  # compare's family-wise level (LEVEL = 0.95 in loadgen/report/compare.py)
FLAKE = 1e-3  # the share of A/A runs in which the test may fail by chance
LEVELS = (4, 8)
REPEATS = 3
# ShareGPT's real prompts (../shared/datasets): on the offline stand-in's long, equal prompts
# the 8-user cells' TTFT was bimodal by server start (about 41 or 47 ms, as the first prefill
# step caught one request or several: a fixed-length closed loop keeps that phase for the whole
# cell), so three rounds a side could not estimate the spread, and the test marked changes where
# there were none (2 of 4 full runs, 2026-12-06). ShareGPT's short, varied prompts fit one step.
DATA = REPO.parent / "shared" / "datasets"
DESIGN = (
    "sweep",
    "--servers",
    "llama-3.1-8b",
    "--engine",
    "emulator",
    "--variants",
    "baseline,eagle",
    "--workloads",
    "chat,output=fixed:32",
    "--concurrency",
    ",".join(map(str, LEVELS)),
    "--num-requests",
    "16",
    "--warmup",
    "1",
    "--repeats",
    str(REPEATS),
    "--data-dir",
    str(DATA),
    "--quiet",
)


def _binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def false_mark_bound(nulls: int, alpha: float = ALPHA, flake: float = FLAKE) -> int:
    """The most changes Holm's correction marks among `nulls` comparisons without a true
    change, in all but `flake` of runs. Holm marks a null comparison only when its p-value is
    at most alpha / (the number of comparisons not yet marked), and at least nulls - k + 1 of
    those are nulls when the k-th null is marked, so with independent, calibrated p-values
    P(k or more marked) <= P(Binomial(nulls, alpha / (nulls - k + 1)) >= k). The bound is the
    largest k - 1 for which that exceeds `flake`: k = 1 is the family-wise error (alpha)."""
    for k in range(1, nulls + 1):
        if _binomial_tail(nulls, alpha / (nulls - k + 1), k) <= flake:
            return k - 1
    return nulls


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )
    if res.returncode != 0:
        sys.exit(f"aa_calibration: loadgen {args[0]} failed: {res.stderr.strip().splitlines()[-1:]}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweeps", type=int, default=4, help="sweeps to run (>= 2)")
    ap.add_argument("--dir", help="keep the sweeps here (default: a temporary directory)")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    if args.sweeps < 2:
        sys.exit("aa_calibration: --sweeps must be >= 2 (a pair)")
    import pandas as pd

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="aa-"))
    sweeps = []
    for i in range(args.sweeps):
        out = root / f"s{i}"
        if not (out / "manifest.json").exists():
            _run(*DESIGN, "--output", str(out))
        sweeps.append(out)
        print(f"sweep {i + 1} of {args.sweeps}: {out}", flush=True)
    rows = []
    for (i, a), (j, b) in itertools.combinations(enumerate(sweeps), 2):
        csv = root / f"compare-{i}-{j}.csv"
        _run("compare", str(a), str(b), "--output", str(csv))
        t = pd.read_csv(csv)
        rows.append(
            {
                "pair": f"{i}-{j}",
                "comparisons": len(t),
                "basis": ",".join(sorted(set(t["basis"]))),
                "p_below_0.05": int((t["p"] < 0.05).sum()),
                "marked": int(t["significant"].sum()),
                "marked_cells": int(t.loc[t["significant"], "cell"].nunique()),
            }
        )
    table = pd.DataFrame(rows)
    n = int(table["comparisons"].iloc[0])
    comparisons = int(table["comparisons"].sum())
    figures = {
        "sweeps": args.sweeps,
        "pairs": len(table),
        "comparisons_per_pair": n,
        "uncorrected_rate": float(table["p_below_0.05"].sum() / comparisons),
        "pairs_with_a_mark": int((table["marked"] > 0).sum()),
        "familywise_rate": float((table["marked"] > 0).mean()),
        "max_marked": int(table["marked"].max()),
        "test_bound": false_mark_bound(n),
        "test_bound_with_one_change": false_mark_bound(n - 1),
    }
    print()
    print(table.to_string(index=False))
    print()
    print(f"{'':2}{'figure':<42}{'measured':>10}{'stated':>10}")
    print(f"{'':2}{'uncorrected p < 0.05, share of comparisons':<42}{figures['uncorrected_rate']:>10.3f}{ALPHA:>10.3f}")
    print(f"{'':2}{'pairs with any change marked (Holm)':<42}{figures['familywise_rate']:>10.3f}{ALPHA:>10.3f}")
    print(f"{'':2}{'most changes marked in one pair':<42}{figures['max_marked']:>10d}{figures['test_bound']:>10d}")
    print(
        f"\nThe test's A/A bound: at most {figures['test_bound']} of {n} marked (a calibrated compare "
        f"exceeds it in under {FLAKE:g} of runs); with one true change, at most "
        f"{figures['test_bound_with_one_change']} of the other {n - 1}."
    )
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "table": rows}, indent=1))


if __name__ == "__main__":
    main()
