"""How much load one loadgen process measures without distorting it.

A scripted server (servers.scripted) streams canned chunks on one core; `loadgen run` (one
process, as users run it) measures on the other (taskset). Each step runs --repeat times and
the table shows medians (the machine's own stalls make single runs noisy).

1. unpaced: the server writes each response's 64 chunks as fast as it can; open-loop request
   rates step up. Which chunk and request rate does loadgen sustain with its send lateness p99
   under 5 ms?
2. paced: S concurrent streams, one token per chunk every 10 ms (a fast decode), S stepping up.
   Which chunk rate does loadgen sustain before its self-check flags it client_bound?
3. timing: TTFT, TPOT and per-token ITL errors, p99 of |measured - truth|, for the paced steps
   and for 256 streams at 20 ms (the step time the study's fitted cost model gives an 8B model
   on an H100 at batch 256). Two truths: the script (what the server was told to do) and the
   server's own trace of when it wrote each chunk (which leaves out the server's lateness and
   isolates the client's error). The server's own delays are shown beside them: picking up a
   new request (`server_pickup`: from the client's socket write to the server reading the first
   byte, which is inside TTFT) and writing later than its script (`server_late`).

    python bench/client_capacity.py            # all steps, 3 repeats: about 5 minutes
    python bench/client_capacity.py --quick    # fewer steps, 1 repeat: about 1 minute
    python bench/client_capacity.py --csv out.csv

Prints one table; the figures recorded for this machine are in docs/performance.md.
"""
from __future__ import annotations

import argparse
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
from servers.scripted.script import prompt_key  # noqa: E402
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


def _token_itl(times_ns, tokens) -> np.ndarray:
    t, n = np.asarray(times_ns, dtype=np.int64), np.asarray(tokens)
    return np.concatenate([np.zeros(n[0] - 1), np.repeat(np.diff(t) / 1e6 / n[1:], n[1:])])


def _errors(frame: pd.DataFrame, cfg: ScriptConfig, output_len: int, trace: Path) -> dict[str, float]:
    """p99 |measured - truth| in ms, against the script and against the server's trace."""
    gen = random_lengths(None, input_len=INPUT_LEN, output_len=output_len, seed=SEED)
    prompts = [r.prompt for r in itertools.islice(gen, int(frame["index"].max()) + 1)]
    written = {r["key"]: r for r in map(json.loads, trace.read_text().splitlines())}
    err = {k: [] for k in ("ttft", "tpot", "itl", "ttft_vs_server", "itl_vs_server")}
    pickup, late = [], []  # the server's own delays: receiving a request, writing on time
    for row in frame[frame["ok"]].itertuples():
        truth = script_for(cfg, prompts[row.index], output_len)
        if list(row.chunk_tokens) != list(truth.tokens):
            err["itl"].append(float("inf"))  # a miscounted chunk is an unbounded error
            continue
        itl = _token_itl(row.chunk_t_ns, row.chunk_tokens)
        err["ttft"].append(row.ttft_ms - truth.ttft_s * 1e3)
        err["tpot"].append(row.tpot_ms - truth.tpot_s() * 1e3)
        err["itl"].extend(itl - np.array(truth.token_itl_s()) * 1e3)
        w = written.get(prompt_key(prompts[row.index]))
        if w and len(w["write_ns"]) == len(row.chunk_tokens):
            err["ttft_vs_server"].append(row.ttft_ms - (w["write_ns"][0] - w["t_recv_ns"]) / 1e6)
            err["itl_vs_server"].extend(itl - _token_itl(w["write_ns"], row.chunk_tokens))
            pickup.append((w["t_recv_ns"] - row.t_send_ns) / 1e6)
            late.extend((np.array(w["write_ns"]) - np.array(w["deadline_ns"])) / 1e6)
    out = {f"{k}_err_p99_ms": float(np.percentile(np.abs(v), 99)) if v else float("nan")
           for k, v in err.items()}
    out["ttft_err_mean_ms"] = float(np.mean(err["ttft"])) if err["ttft"] else float("nan")
    out["server_pickup_p99_ms"] = float(np.percentile(pickup, 99)) if pickup else float("nan")
    out["server_late_p99_ms"] = float(np.percentile(late, 99)) if late else float("nan")
    return out


def _row(s: dict) -> dict:
    w = s["window"]
    return {"chunks_per_s": w["output_tokens"] / w["duration_s"] if w and w["duration_s"] else 0.0,
            "req_per_s": s["request_throughput_req_s"],
            "lateness_p99_ms": s["self_check"]["lateness_ms"]["p99"],
            "loop_lag_p99_ms": s["self_check"]["loop_lag_ms"]["p99"],
            "client_bound": float(s["client_bound"]), "failed": float(s["failed"])}


def _median(runs: list[dict], mode: str, load: str) -> dict:
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["client_bound"] = f"{int(sum(r['client_bound'] for r in runs))}/{len(runs)}"
    return {"mode": mode, "load": load, **med}


def unpaced(rates, repeat, tmp: Path, server_cpu, client_pin) -> list[dict]:
    rows = []
    with scripted_server("--ttft-ms", "0", "--step-ms", "0", "--chunk-tokens", "1",
                         "--prefill-us-per-token", "0", cpu=server_cpu) as srv:
        for rate in rates:
            runs = [_row(_loadgen(srv.url, tmp / f"u{rate}-{i}", client_pin, "--rate", f"{rate:g}",
                                  "--num-requests", str(int(rate * 8)), "--output-len", "64")[0])
                    for i in range(repeat)]
            rows.append(_median(runs, "unpaced", f"{rate:g} req/s x 64 chunks"))
    return rows


def paced(streams, step_ms: float, repeat, tmp: Path, server_cpu, client_pin) -> list[dict]:
    rows, out_len = [], 128
    cfg = ScriptConfig(ttft_ms=20.0, step_ms=step_ms, chunk_tokens="1", prefill_us_per_token=0.0)
    for c in streams:
        runs = []
        for i in range(repeat):
            trace = tmp / f"trace-{c}-{step_ms:g}-{i}.jsonl"
            with scripted_server("--ttft-ms", "20", "--step-ms", f"{step_ms:g}", "--chunk-tokens", "1",
                                 "--prefill-us-per-token", "0", "--trace", str(trace), cpu=server_cpu) as srv:
                s, f = _loadgen(srv.url, tmp / f"p{c}-{step_ms:g}-{i}", client_pin, "--concurrency", str(c),
                                "--num-requests", str(3 * c), "--output-len", str(out_len))
            runs.append({**_row(s), **_errors(f, cfg, out_len, trace)})
        rows.append(_median(runs, "paced", f"{c} streams x {step_ms:g} ms"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps, one run each")
    ap.add_argument("--repeat", type=int, default=None, help="runs per step (default 3; 1 with --quick)")
    ap.add_argument("--csv", help="also write the table to this CSV file")
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    server_cpu, client_pin = _cpus()
    rates = [200, 800] if args.quick else [100, 200, 400, 600, 800, 1000]
    streams = [64, 256, 384] if args.quick else [64, 128, 256, 320, 384, 512]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = (unpaced(rates, repeat, tmp, server_cpu, client_pin)
                + paced(streams, 10.0, repeat, tmp, server_cpu, client_pin)
                + paced([256], 20.0, repeat, tmp, server_cpu, client_pin))
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    print(table.round(2).to_string(index=False))
    print()
    for mode in ("unpaced", "paced"):
        ok = table[(table["mode"] == mode) & (table["lateness_p99_ms"] < LATENESS_LIMIT_MS)
                   & (table["client_bound"].str.startswith("0/")) & (table["failed"] == 0)]
        if len(ok):
            best = ok.loc[ok["chunks_per_s"].idxmax()]
            print(f"{mode}: sustained {best['chunks_per_s']:,.0f} chunks/s, {best['req_per_s']:.0f} req/s "
                  f"at {best['load']} (lateness p99 {best['lateness_p99_ms']:.2f} ms, never client_bound)")
        else:
            print(f"{mode}: no step met lateness p99 < {LATENESS_LIMIT_MS} ms")
    for _, r in table[table["load"].str.startswith("256 streams")].iterrows():
        print(f"timing error, {r['load']}: vs script p99 ITL {r['itl_err_p99_ms']:.2f}, TPOT "
              f"{r['tpot_err_p99_ms']:.2f}, TTFT {r['ttft_err_p99_ms']:.2f} (mean {r['ttft_err_mean_ms']:.2f}) ms; "
              f"vs the server's own write times p99 ITL {r['itl_vs_server_err_p99_ms']:.2f}, "
              f"TTFT {r['ttft_vs_server_err_p99_ms']:.2f} ms")
    if server_cpu is None:
        print("note: fewer than 2 CPUs or no taskset: server and client shared cores")
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
