"""A production trace replayed fast against the embedded emulator, in real time and under time
dilation, beside `loadgen simulate` on the same flags: does the client keep the trace's
schedule, and are the figures the model's? (docs/workloads.md, "Keeping the schedule".)

For each --time-scales S: `loadgen run --trace azure:CONV --trace-window W --trace-speed X
--workload chat [--time-scale S]` (the embedded emulator: Llama-3.1-8B, EAGLE k=3), then
`loadgen simulate` with the run's speculative config; prints, per run: wall time, requests
(each sent once?), the schedule's largest error against the trace's gaps / X, send lateness
p99, whether the run was flagged, output tok/s against the simulator's, and the queue.

    python3 -m bench.trace_replay                        # the recorded figures: 600 s at 10x, scales 1 and 3
    python3 -m bench.trace_replay --window 120 --time-scales 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
from workloads.traces import read_trace  # noqa: E402

CONV = REPO.parent / "shared" / "datasets" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def _loadgen(*args: str) -> float:
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        sys.exit(f"trace_replay: loadgen {args[0]} failed: {res.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=f"azure:{CONV}")
    ap.add_argument("--window", type=float, default=600.0, help="trace seconds replayed from its start")
    ap.add_argument("--speed", type=float, default=10.0, help="--trace-speed")
    ap.add_argument("--time-scales", default="1,3", help="one run per scale (1: real time)")
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    args = ap.parse_args()
    trace = read_trace(args.trace).window(0, args.window)
    common = [
        "--trace",
        args.trace,
        "--trace-window",
        f"{args.window:g}",
        "--trace-speed",
        f"{args.speed:g}",
        "--workload",
        args.workload,
        "--data-dir",
        args.data_dir,
    ]
    root = Path(tempfile.mkdtemp(prefix="trace-replay-"))
    rows = []
    for scale in (float(s) for s in args.time_scales.split(",")):
        out, sim = root / f"real-{scale:g}", root / f"sim-{scale:g}"
        wall = _loadgen(
            "run", *common, *([] if scale == 1 else ["--time-scale", f"{scale:g}"]), "--quiet", "--output", str(out)
        )
        summary = json.loads((out / "summary.json").read_text())
        _loadgen(
            "simulate",
            "--profile",
            "h100-llama-3.1-8b",
            "--speculative-config",
            summary["config"]["speculative_config"],
            *common,
            "--output",
            str(sim),
        )
        simulated = json.loads((sim / "summary.json").read_text())
        frame = pd.read_parquet(out / "requests.parquet").sort_values("index")
        sched = (frame["t_scheduled_ns"] - frame["t_scheduled_ns"].iloc[0]).to_numpy() / 1e9
        waiting = (summary.get("server") or {}).get("waiting") or {}
        rows.append(
            {
                "time_scale": scale,
                "wall_s": round(wall),
                "requests": len(frame),
                "trace_requests": len(trace),
                "each_once": bool(frame["request_id"].is_unique and len(frame) == len(trace)),
                "lengths_exact": frame["prompt_tokens"].tolist() == trace.input_len.tolist()
                and frame["completion_tokens"].tolist() == trace.output_len.tolist(),
                "schedule_max_err_ns": float(np.max(np.abs(sched - trace.t_s / args.speed)) * 1e9),
                "lateness_p99_ms": summary["self_check"]["lateness_ms"]["p99"],
                "client_bound": summary["client_bound"],
                "tok_s": summary["output_throughput_tok_s"],
                "simulate_tok_s": simulated["output_throughput_tok_s"],
                "vs_simulate": summary["output_throughput_tok_s"] / simulated["output_throughput_tok_s"] - 1,
                "waiting_mean": waiting.get("mean"),
                "ttft_p50_s": summary["ttft_ms"]["p50"] / 1e3,
            }
        )
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(
            f"{args.trace}: the first {args.window:g} s ({len(trace)} requests) at {args.speed:g}x, "
            f"workload {args.workload}\n"
        )
        print(table.to_string(index=False, float_format=lambda v: f"{v:,.4g}"))


if __name__ == "__main__":
    main()
