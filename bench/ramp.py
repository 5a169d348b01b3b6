"""A ramp on the real-time emulator beside the same ramp in virtual time (issue 20's acceptance
line): `loadgen run --ramp 1:32:60` against the embedded emulator and `loadgen simulate` with the
same ramp, requests and seed; output throughput in each 10-second window, side by side.

    python -m bench.ramp                       # 1:32:60, 70 s of sending, 10 s windows
    python -m bench.ramp --ramp 1:64:60 --time-scale 2

Pass/fail line: every whole window within 10%."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def per_window(out: Path, window_s: float) -> np.ndarray:
    frame = pd.read_parquet(out / "requests.parquet")
    t0 = frame["t_send_ns"].min()
    t = np.concatenate([np.asarray(x, dtype=np.int64) for x in frame["chunk_t_ns"]])
    n = np.concatenate([np.asarray(x) for x in frame["chunk_tokens"]])
    return np.bincount(((t - t0) / 1e9 // window_s).astype(int), weights=n) / window_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ramp", default="1:32:60")
    ap.add_argument("--duration", type=float, default=70.0)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--workload", default="chat,output=fixed:128")
    ap.add_argument("--time-scale", default=None)
    args = ap.parse_args()
    common = [
        "--ramp",
        args.ramp,
        "--duration",
        str(args.duration),
        "--workload",
        args.workload,
        "--seed",
        "3",
        "--speculative-config",
        '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}',
    ]
    with tempfile.TemporaryDirectory() as tmp:
        sim, real = Path(tmp) / "sim", Path(tmp) / "real"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "simulate",
                "--profile",
                "h100-llama-3.1-8b",
                *common,
                "--output",
                str(sim),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        scale = ["--time-scale", args.time_scale] if args.time_scale else []
        res = subprocess.run(
            [sys.executable, "-m", "loadgen", "run", *common[:-2], *scale, "--quiet", "--output", str(real)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            sys.exit(res.stderr.strip().splitlines()[-1])
        got, want = per_window(real, args.window), per_window(sim, args.window)
        summary = json.loads((real / "summary.json").read_text())
    full = int(args.duration // args.window)
    print(f"{'window':>12} {'real tok/s':>11} {'model tok/s':>12} {'real/model':>11}")
    ratios = []
    for i in range(full):
        ratios.append(got[i] / want[i])
        print(
            f"{f'{i * args.window:g}-{(i + 1) * args.window:g} s':>12} "
            f"{got[i]:>11.0f} {want[i]:>12.0f} {ratios[-1]:>11.3f}"
        )
    worst = max(abs(r - 1) for r in ratios)
    print(
        f"\nworst window {worst:.1%} (target within 10%: {'met' if worst <= 0.10 else 'MISSED'}); "
        f"client_bound {summary['client_bound']}, time scale {summary.get('time_scale', 1):g}"
    )


if __name__ == "__main__":
    main()
