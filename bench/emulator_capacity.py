"""How many concurrent streams the emulator serves in real time on this machine.

The emulator (Llama-3.1-8B profile, EAGLE k=3) runs pinned to CPU 0, `loadgen run` to CPU 1.
At each concurrency, its own lag (how late it wakes for a step's end, from its
`emulator:step_lag_seconds` histogram, before/after difference) says whether it kept the
profile's schedule: p99 under 5 ms counts as real time. The largest such concurrency is the
emulator's capacity here; beyond it the lag is reported (and logged by the emulator), never
silent.

    python bench/emulator_capacity.py              # 16 .. 512 streams, ~3 minutes
    python bench/emulator_capacity.py --quick
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servers.embedded import emulator_server  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SPEC = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
LIMIT_S = 0.005


def lag_histogram(url: str) -> dict[float, float]:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "emulator:step_lag_seconds")
    return {float(s.labels["le"]): s.value for s in fam.samples if s.name.endswith("_bucket")}


def p99_bound(before: dict, after: dict) -> tuple[float, int]:
    """Upper bound of the bucket holding the 99th percentile of the lag between two scrapes."""
    delta = {le: after[le] - before.get(le, 0.0) for le in after}
    total = delta[float("inf")]
    for le in sorted(delta):
        if delta[le] >= 0.99 * total:
            return le, int(total)
    return float("inf"), int(total)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    levels = [32, 128, 256] if args.quick else [16, 32, 64, 128, 192, 256, 384, 512]
    pinned = (os.cpu_count() or 1) >= 2
    client = ["taskset", "-c", "1"] if pinned else []
    rows = []
    with emulator_server(MODEL, "--speculative-config", SPEC, cpu=0 if pinned else None) as srv, \
            tempfile.TemporaryDirectory() as tmp:
        for c in levels:
            before = lag_histogram(srv.url)
            out = Path(tmp) / str(c)
            subprocess.run([*client, sys.executable, "-m", "loadgen", "run", "--base-url", srv.url,
                            "--concurrency", str(c), "--num-requests", str(2 * c), "--warmup", str(c // 4),
                            "--output-len", "128", "--quiet", "--output", str(out)],
                           capture_output=True, text=True, check=True)
            bound, steps = p99_bound(before, lag_histogram(srv.url))
            s = json.loads((out / "summary.json").read_text())
            rows.append((c, bound, steps, s["output_throughput_tok_s"], s["tpot_ms"]["p50"], s["client_bound"]))
        log = Path(srv.log).read_text()
    print(f"{'streams':>8} {'lag p99':>10} {'steps':>7} {'output tok/s':>13} {'TPOT p50 ms':>12} {'client_bound':>13}")
    for c, bound, steps, tput, tpot, cb in rows:
        lag = f"<= {bound * 1e3:g} ms" if bound != float("inf") else "> 1 s"
        print(f"{c:>8} {lag:>10} {steps:>7} {tput:>13.0f} {tpot:>12.2f} {str(cb):>13}")
    ok = [c for c, bound, *_ in rows if bound <= LIMIT_S]
    print(f"\nreal time (emulator lag p99 < {LIMIT_S * 1e3:g} ms) up to {max(ok) if ok else 'no'} concurrent streams")
    warnings = [line for line in log.splitlines() if "behind its schedule" in line]
    print(f"emulator warnings logged: {len(warnings)}" + (f"; last: {warnings[-1]}" if warnings else ""))


if __name__ == "__main__":
    main()
