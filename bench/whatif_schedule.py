"""A k schedule from `loadgen whatif --schedule`, measured against fixed k on the emulator
(docs/whatif.md, "The schedule against fixed k, on the emulator").

1. traces: `loadgen simulate --profile h100-llama-3-70b-tp4 --workload code-edit,output=fixed:256
   --num-requests 300 --acceptance-traces FILE` (exact acceptance of every drafter);
2. `loadgen whatif FILE --drafters draft_model --k 1,2,3,4,5 --batch 1,2,4,8,16,32,64 --schedule
   --output DIR`: the best fixed k per batch size, as a schedule and a deployment file;
3. `loadgen sweep --servers DIR/schedule-draft_model.toml --engine emulator --variants
   draft_model-k1,-k3,-k5,-schedule --workloads code-edit,output=fixed:256 --concurrency 1..64
   --duration 15 --warmup 1 --time-scale 2`;
then prints output tok/s per level for each fixed k and the schedule, and the schedule over the
best fixed k.

    python3 -m bench.whatif_schedule                       # the recorded table (~15 minutes)
    python3 -m bench.whatif_schedule --concurrency 1,16,64       # the same schedule, three levels
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = "h100-llama-3-70b-tp4"
WORKLOAD = "code-edit,output=fixed:256"


def _loadgen(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        sys.exit(f"whatif_schedule: loadgen {args[0]} failed: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="traces to simulate")
    ap.add_argument("--k", default="1,2,3,4,5", help="fixed k the what-if considers")
    ap.add_argument("--measure-k", default="1,3,5", help="fixed k the sweep measures beside the schedule")
    ap.add_argument("--batch", default="1,2,4,8,16,32,64", help="batch sizes the what-if judges k at")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="levels the sweep measures")
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--time-scale", default="2")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--dir", help="keep everything here (default: a temporary directory)")
    return ap.parse_args()


def _traces(args, root: Path) -> Path:
    """1. exact acceptance traces of every drafter, simulated (kept where --dir has them)."""
    traces = root / "traces.jsonl"
    if not traces.exists():
        _loadgen(
            "simulate",
            "--profile",
            PROFILE,
            "--workload",
            WORKLOAD,
            "--data-dir",
            args.data_dir,
            "--concurrency",
            "8",
            "--num-requests",
            str(args.requests),
            "--acceptance-traces",
            str(traces),
            "--output",
            str(root / "sim"),
        )
    return traces


def _schedule(args, root: Path, traces: Path) -> tuple[Path, dict | None]:
    """2. the what-if's best fixed k per batch size: its deployment file and its schedule."""
    _loadgen(
        "whatif",
        str(traces),
        "--profile",
        PROFILE,
        "--drafters",
        "draft_model",
        "--k",
        args.k,
        "--batch",
        args.batch,
        "--schedule",
        "--output",
        str(root / "whatif"),
    )
    schedule = json.loads((root / "whatif" / "whatif.json").read_text()).get("schedules", {}).get("draft_model")
    return root / "whatif" / "schedule-draft_model.toml", schedule


def _sweep(args, deployment: Path, variants: list[str], sweep: Path) -> None:
    """3. the fixed k and the schedule measured on the emulator."""
    _loadgen(
        "sweep",
        "--servers",
        str(deployment),
        "--engine",
        "emulator",
        "--variants",
        ",".join(variants),
        "--workloads",
        WORKLOAD,
        "--data-dir",
        args.data_dir,
        "--concurrency",
        args.concurrency,
        "--duration",
        f"{args.duration:g}",
        "--warmup",
        "1",
        "--time-scale",
        args.time_scale,
        "--quiet",
        "--output",
        str(sweep),
        *(["--resume"] if sweep.exists() else []),
    )


def main() -> None:
    args = _args()
    import pandas as pd

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="whatif-schedule-"))
    deployment, schedule = _schedule(args, root, _traces(args, root))
    variants = [f"draft_model-k{k}" for k in args.measure_k.split(",")] + ["draft_model-schedule"]
    sweep = root / "sweep"
    _sweep(args, deployment, variants, sweep)
    cells = pd.read_parquet(sweep / "cells.parquet")
    ok = cells[cells["status"] == "ok"]
    table = ok.pivot_table(index="level", columns="variant", values="output_throughput_tok_s")[variants]
    fixed = table[variants[:-1]]
    table["schedule / best fixed"] = table["draft_model-schedule"] / fixed.max(axis=1)
    table.columns = [c.replace("draft_model-", "") for c in table.columns]
    print(f"schedule chosen by whatif (batch ranges and k): {json.dumps((schedule or {}).get('ranges'))}")
    print(f"cells flagged: {int(ok[['client_bound', 'server_behind']].fillna(False).any(axis=1).sum())} of {len(ok)}\n")
    print(table.to_string(float_format=lambda v: f"{v:,.0f}" if v > 10 else f"{v:.3f}"))


if __name__ == "__main__":
    main()
