"""Calibration: the simulator in the study's offline-batch setting, beside its Fig. 1.

For each kind of request (chat ~ ShareGPT, summarization ~ CNN/DailyMail, math ~ GSM8K,
code_edit ~ InstructCoder) and batch size B = 1, 16, 64, 128, B copies of one prompt start
together, as `LLM.generate` on B copies does; the run ends when all are done. Speedup =
throughput with speculative decoding / throughput without, per prompt, averaged over the prompts (each
prompt's speedup counts once, as a per-prompt
batch of the study does). Nothing here is fitted to the speedups: the cost model is the study's fit (8B) or the
roofline (70B), acceptance comes from acceptance statistics (bench/fit_acceptance.py), and the
fall with B comes out of the cost model.

    python -m bench.calibrate                      # Llama-3.1-8B, 48 cells, ~4 minutes
    python -m bench.calibrate --csv calib.csv      # model, method, workload, batch, paper, simulated, rel_error
    python -m bench.calibrate --profile h100-llama-3-70b-tp4
"""

from __future__ import annotations

import argparse
import csv
import itertools

from servers.emulator import profile as profiles  # noqa: E402
from servers.emulator.engine import Engine, EngineConfig, EngineError  # noqa: E402
from servers.emulator.spec import parse  # noqa: E402
from workloads import kind_like  # noqa: E402

BATCHES = (1, 16, 64, 128)
DATASET = {"math": "GSM8K", "summarization": "CNN", "chat": "ShareGPT", "code_edit": "InstructCoder"}
# paper.md, Fig. 1 (read off the figure, +-0.03): B = 1 / 16 / 64 / 128
PAPER = {
    "h100-llama-3.1-8b": {
        "eagle3": {
            "math": (1.75, 1.70, 1.48, 1.21),
            "summarization": (1.68, 1.58, 1.39, 1.23),
            "chat": (1.70, 1.67, 1.55, 1.28),
            "code_edit": (2.02, 1.90, 1.56, 1.29),
        },
        "eagle": {
            "math": (1.73, 1.68, 1.47, 1.22),
            "summarization": (1.45, 1.40, 1.27, 1.14),
            "chat": (1.67, 1.66, 1.53, 1.29),
            "code_edit": (1.97, 1.87, 1.52, 1.30),
        },
        "ngram": {
            "math": (1.17, 1.15, 1.10, 1.05),
            "summarization": (1.34, 1.28, 1.18, 1.12),
            "chat": (1.27, 1.25, 1.19, 1.11),
            "code_edit": (1.89, 1.73, 1.47, 1.30),
        },
    },
    "h100-llama-3-70b-tp4": {
        "eagle": {
            "math": (1.91, 1.75, 1.42, 1.01),
            "summarization": (1.84, 1.57, 1.27, 1.02),
            "chat": (1.96, 1.77, 1.50, 1.06),
            "code_edit": (2.48, 2.15, 1.65, 1.22),
        },
        "draft_model": {
            "math": (2.35, 2.12, 1.70, 1.27),
            "summarization": (2.10, 1.70, 1.34, 1.12),
            "chat": (2.16, 1.98, 1.66, 1.25),
            "code_edit": (2.55, 2.20, 1.70, 1.28),
        },
        "ngram": {
            "math": (1.16, 1.13, 1.08, 1.00),
            "summarization": (1.28, 1.21, 1.12, 1.06),
            "chat": (1.19, 1.15, 1.10, 1.05),
            "code_edit": (1.89, 1.71, 1.45, 1.19),
        },
    },
    "h100-qwen3-8b": {
        "eagle3": {
            "math": (1.82, 1.75, 1.50, 1.15),
            "summarization": (1.82, 1.70, 1.46, 1.23),
            "chat": (1.62, 1.56, 1.44, 1.14),
            "code_edit": (1.98, 1.82, 1.47, 1.17),
        },
        "draft_model": {
            "math": (1.70, 1.68, 1.47, 1.16),
            "summarization": (1.46, 1.37, 1.15, 0.97),
            "chat": (1.35, 1.31, 1.13, 0.92),
            "code_edit": (1.79, 1.69, 1.40, 1.12),
        },
        "ngram": {
            "math": (1.11, 1.10, 1.05, 0.99),
            "summarization": (1.53, 1.47, 1.36, 1.25),
            "chat": (1.14, 1.10, 1.08, 1.02),
            "code_edit": (2.17, 2.01, 1.62, 1.37),
        },
    },
}
SPECS = {  # k = 3 for every method; n-gram with the study's prompt_lookup_min 3, max 7
    "eagle": '{"method": "eagle", "model": "eagle-head", "num_speculative_tokens": 3}',
    "eagle3": '{"method": "eagle3", "model": "eagle3-head", "num_speculative_tokens": 3}',
    "draft_model": '{"method": "draft_model", "model": "draft", "num_speculative_tokens": 3}',
    "ngram": '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, "prompt_lookup_max": 7}',
}


_MAKESPANS: dict[tuple, float] = {}


def makespan(profile: str, method: str | None, prompt_req, batch: int) -> float:
    """Time for `batch` copies of one request, all started together, to finish (cached: the
    baseline is shared by every method)."""
    key = (profile, method, prompt_req.id, batch)
    if key not in _MAKESPANS:
        _MAKESPANS[key] = _makespan(profile, method, prompt_req, batch)
    return _MAKESPANS[key]


def _makespan(profile: str, method: str | None, prompt_req, batch: int) -> float:
    """The engine itself in virtual time, every copy submitted at 0 (a closed loop of B users
    would not start them together: each user takes its next request as it sends one)."""
    spec = parse(SPECS[method]) if method else None
    # prefix caching off, as in the study (paper.md): with it, B copies of one prompt share its
    # prefill, and long prompts' speedups rise at large B (EAGLE on CNN at B = 128: 1.27, not 1.18)
    engine = Engine(
        profiles.load(profile),
        spec,
        EngineConfig(max_num_seqs=1024, max_num_batched_tokens=16384, enable_prefix_caching=False),
    )
    try:
        for i in range(batch):
            engine.submit(
                str(i),
                prompt_req.prompt,
                prompt_req.max_tokens,
                arrival=0.0,
                ignore_eos=prompt_req.ignore_eos,
                min_tokens=prompt_req.min_tokens,
            )
    except EngineError as e:
        raise SystemExit(f"calibration request refused by the engine: {e}") from None
    return engine.run_to_end()


def speedups(profile: str, method: str, kind: str, prompts: int) -> list[float]:
    """Mean over prompts of (baseline makespan / speculative makespan), per batch size."""
    # the study capped output at 8k tokens; a model with a shorter context caps it sooner
    cap = min(8192, profiles.load(profile).max_model_len - 2048)
    reqs = list(kind_like(kind, prompts, seed=7, output_len=cap))
    return [
        sum(makespan(profile, None, r, b) / makespan(profile, method, r, b) for r in reqs) / len(reqs) for b in BATCHES
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="h100-llama-3.1-8b", choices=sorted(PAPER))
    ap.add_argument("--prompts", type=int, default=24, help="prompts per kind (default 24)")
    ap.add_argument("--csv", help="write the cells to this CSV file")
    args = ap.parse_args()
    rows = []
    for method, by_kind in PAPER[args.profile].items():
        for kind, paper in by_kind.items():
            for b, p, s in zip(BATCHES, paper, speedups(args.profile, method, kind, args.prompts)):
                rows.append(
                    {
                        "model": args.profile,
                        "method": method,
                        "workload": DATASET[kind],
                        "batch": b,
                        "paper": p,
                        "simulated": round(s, 3),
                        "rel_error": round((s - p) / p, 3),
                    }
                )
    print(f"{'method':<12}{'workload':<15}" + "".join(f"{'B=' + str(b):>16}" for b in BATCHES))
    for (method, workload), group in itertools.groupby(rows, key=lambda r: (r["method"], r["workload"])):
        cells = list(group)
        print(
            f"{method:<12}{workload:<15}"
            + "".join(
                f"{c['simulated']:>7.2f} ({c['paper']:.2f}){'*' if abs(c['rel_error']) > 0.10 else ' '}" for c in cells
            )
        )
    within = sum(abs(r["rel_error"]) <= 0.10 for r in rows)
    worst = max(rows, key=lambda r: abs(r["rel_error"]))
    print(
        f"\n{within} of {len(rows)} cells within 10% of the paper (* beyond); worst: {worst['method']} "
        f"{worst['workload']} B={worst['batch']} {worst['rel_error']:+.0%}"
    )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
