"""How much load one loadgen process measures without distorting it.

A scripted server (servers.scripted) streams canned chunks on one core; `loadgen run` (one
process, as users run it) measures on the other (taskset). Three questions:

1. unpaced: the server writes each response's chunks as fast as it can; open-loop request
   rates step up. Which chunk and request rate does loadgen sustain with its send lateness p99
   under 5 ms?
2. paced: S concurrent streams, one token per chunk every 10 ms (vLLM-like inter-token
   latency), S stepping up. Which chunk rate does loadgen sustain before its self-check flags
   it client_bound, and how far are its per-token ITLs from the truth?
3. timing: at 256 paced streams, the error of TTFT, TPOT and per-token ITL against the script
   (measured minus scripted, p99 of its absolute value).

    python bench/client_capacity.py            # full run, ~3 minutes
    python bench/client_capacity.py --quick    # fewer steps, ~1 minute
    python bench/client_capacity.py --csv out.csv

Prints one table; the figures recorded for this machine are in docs/performance.md.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers.embedded import scripted_server  # noqa: E402
from servers.scripted import ScriptConfig, script_for  # noqa: E402
from workloads import random_lengths  # noqa: E402

LATENESS_LIMIT_MS = 5.0
INPUT_LEN, SEED = 16, 1


def _cpus() -> tuple[int | None, list[str]]:
    """Server on CPU 0, client on CPU 1 when the machine has two and taskset exists."""
    if (os.cpu_count() or 1) >= 2 and subprocess.run(["which", "taskset"], capture_output=True).returncode == 0:
        return 0, ["taskset", "-c", "1"]
    return None, []


def _loadgen(url: str, out: Path, client_pin: list[str], *args: str) -> tuple[dict, pd.DataFrame]:
    cmd = [*client_pin, sys.executable, "-m", "loadgen", "run", "--base-url", url, "--quiet",
           "--input-len", str(INPUT_LEN), "--seed", str(SEED), "--output", str(out), *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode not in (0, 1):
        raise SystemExit(f"loadgen failed: {res.stderr.strip()}")
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "requests.parquet")


def _errors(frame: pd.DataFrame, cfg: ScriptConfig, output_len: int) -> dict[str, float]:
    """p99 |measured - scripted| of TTFT, TPOT (per request) and per-token ITL, in ms."""
    gen = random_lengths(None, input_len=INPUT_LEN, output_len=output_len, seed=SEED)
    prompts = [r.prompt for r in itertools.islice(gen, int(frame["index"].max()) + 1)]
    ttft, tpot, itl = [], [], []
    for row in frame[frame["ok"]].itertuples():
        truth = script_for(cfg, prompts[row.index], output_len)
        if list(row.chunk_tokens) != list(truth.tokens):
            itl.append(float("inf"))  # a miscounted chunk is an unbounded error
            continue
        ttft.append(row.ttft_ms - truth.ttft_s * 1e3)
        tpot.append(row.tpot_ms - truth.tpot_s() * 1e3)
        t, n = np.asarray(row.chunk_t_ns), np.asarray(row.chunk_tokens)
        measured = np.concatenate([np.zeros(n[0] - 1), np.repeat(np.diff(t) / 1e6 / n[1:], n[1:])])
        itl.extend(measured - np.array(truth.token_itl_s()) * 1e3)
    p99 = lambda v: float(np.percentile(np.abs(v), 99)) if len(v) else float("nan")  # noqa: E731
    return {"ttft_err_p99_ms": p99(ttft), "tpot_err_p99_ms": p99(tpot), "itl_err_p99_ms": p99(itl)}


def _row(mode: str, load: str, s: dict, **extra) -> dict:
    w = s["window"]
    return {"mode": mode, "load": load,
            "chunks_per_s": round(w["output_tokens"] / w["duration_s"]) if w and w["duration_s"] else 0,
            "req_per_s": round(s["request_throughput_req_s"], 1),
            "lateness_p99_ms": round(s["self_check"]["lateness_ms"]["p99"], 2),
            "loop_lag_p99_ms": round(s["self_check"]["loop_lag_ms"]["p99"], 2),
            "client_bound": s["client_bound"], "failed": s["failed"], **extra}


def unpaced(rates: list[float], tmp: Path, server_cpu, client_pin) -> list[dict]:
    rows, out_len = [], 64
    with scripted_server("--ttft-ms", "0", "--step-ms", "0", "--chunk-tokens", "1",
                         "--prefill-us-per-token", "0", cpu=server_cpu) as srv:
        for rate in rates:
            n = int(rate * 8)  # about 8 s of arrivals
            s, _ = _loadgen(srv.url, tmp / f"unpaced-{rate:g}", client_pin, "--rate", f"{rate:g}",
                            "--num-requests", str(n), "--output-len", str(out_len))
            rows.append(_row("unpaced", f"{rate:g} req/s", s))
    return rows


def paced(streams: list[int], tmp: Path, server_cpu, client_pin, step_ms: float = 10.0) -> list[dict]:
    rows, out_len = [], 128
    cfg = ScriptConfig(ttft_ms=20.0, step_ms=step_ms, chunk_tokens="1", prefill_us_per_token=0.0)
    with scripted_server("--ttft-ms", "20", "--step-ms", f"{step_ms:g}", "--chunk-tokens", "1",
                         "--prefill-us-per-token", "0", cpu=server_cpu) as srv:
        for c in streams:
            s, f = _loadgen(srv.url, tmp / f"paced-{c}", client_pin, "--concurrency", str(c),
                            "--num-requests", str(3 * c), "--output-len", str(out_len))
            rows.append(_row("paced", f"{c} streams x {step_ms:g} ms", s, **_errors(f, cfg, out_len)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer load steps")
    ap.add_argument("--csv", help="also write the table to this CSV file")
    args = ap.parse_args()
    server_cpu, client_pin = _cpus()
    rates = [100, 400, 800] if args.quick else [100, 200, 400, 600, 800, 1000]
    streams = [64, 256, 384] if args.quick else [64, 128, 256, 320, 384, 512]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = unpaced(rates, tmp, server_cpu, client_pin) + paced(streams, tmp, server_cpu, client_pin)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    print()
    for mode in ("unpaced", "paced"):
        ok = table[(table["mode"] == mode) & (table["lateness_p99_ms"] < LATENESS_LIMIT_MS)
                   & ~table["client_bound"] & (table["failed"] == 0)]
        best = ok.loc[ok["chunks_per_s"].idxmax()] if len(ok) else None
        print(f"{mode}: sustained {best['chunks_per_s']:,} chunks/s, {best['req_per_s']} req/s "
              f"at {best['load']} (lateness p99 {best['lateness_p99_ms']} ms)" if best is not None
              else f"{mode}: no step met lateness p99 < {LATENESS_LIMIT_MS} ms")
    at256 = table[table["load"].str.startswith("256 streams")]
    if len(at256):
        r = at256.iloc[0]
        print(f"timing error at 256 streams: TTFT p99 {r['ttft_err_p99_ms']:.2f} ms, TPOT p99 "
              f"{r['tpot_err_p99_ms']:.2f} ms, per-token ITL p99 {r['itl_err_p99_ms']:.2f} ms")
    if server_cpu is None:
        print("note: fewer than 2 CPUs or no taskset: server and client shared cores")
    if args.csv:
        table.to_csv(args.csv, index=False, quoting=csv.QUOTE_MINIMAL)


if __name__ == "__main__":
    main()
