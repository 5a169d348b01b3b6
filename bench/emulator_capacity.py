"""How many concurrent streams the emulator serves in real time on this machine.

The emulator (Llama-3.1-8B profile, EAGLE k=3) runs pinned to CPU 0, `loadgen run` to CPU 1.
At each concurrency, its own lag (how late it wakes for a step's end, from its
`emulator:step_lag_seconds` histogram, before/after difference) says whether it kept the
profile's schedule: p99 under 5 ms counts as real time. The largest such concurrency is the
emulator's capacity here; beyond it the lag is reported (and logged by the emulator), never
silent.

Beside each run, `loadgen simulate` serves the same requests in virtual time with the same
profile: the model's throughput. "real/model" is what the real-time emulator delivered of it,
and "behind" is the emulator's own flag in the run's summary (server.emulator.behind), so a
shortfall the flag does not catch shows.

    python -m bench.emulator_capacity              # 16 .. 512 streams, ~80 s here
    python -m bench.emulator_capacity --quick
    python -m bench.emulator_capacity --speculative-config none   # no speculative decoding
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
    ap.add_argument("--speculative-config", default=SPEC, help="as for vllm serve; 'none': no SD")
    args = ap.parse_args()
    spec = [] if args.speculative_config.lower() == "none" else ["--speculative-config", args.speculative_config]
    levels = [32, 128, 256] if args.quick else [16, 32, 64, 128, 192, 256, 384, 512]
    pinned = (os.cpu_count() or 1) >= 2
    client = ["taskset", "-c", "1"] if pinned else []
    rows = []
    with emulator_server(MODEL, *spec, cpu=0 if pinned else None) as srv, tempfile.TemporaryDirectory() as tmp:
        for c in levels:
            before = lag_histogram(srv.url)
            load = [
                "--concurrency",
                str(c),
                "--num-requests",
                str(2 * c),
                "--warmup",
                str(c // 4),
                "--output-len",
                "128",
            ]
            out = Path(tmp) / str(c)
            subprocess.run(
                [
                    *client,
                    sys.executable,
                    "-m",
                    "loadgen",
                    "run",
                    "--base-url",
                    srv.url,
                    *load,
                    "--quiet",
                    "--output",
                    str(out),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            bound, steps = p99_bound(before, lag_histogram(srv.url))
            s = json.loads((out / "summary.json").read_text())
            model = Path(tmp) / f"{c}-model"
            subprocess.run(
                [sys.executable, "-m", "loadgen", "simulate", "--model", MODEL, *spec, *load, "--output", str(model)],
                capture_output=True,
                text=True,
                check=True,
            )
            m = json.loads((model / "summary.json").read_text())
            behind = ((s.get("server") or {}).get("emulator") or {}).get("behind")
            rows.append(
                (
                    c,
                    bound,
                    steps,
                    s["output_throughput_tok_s"],
                    m["output_throughput_tok_s"],
                    s["tpot_ms"]["p50"],
                    behind,
                    s["client_bound"],
                )
            )
        log = Path(srv.log).read_text()
    print(
        f"{'streams':>8} {'lag p99':>10} {'steps':>7} {'output tok/s':>13} {'model tok/s':>12} "
        f"{'real/model':>11} {'TPOT p50 ms':>12} {'behind':>7} {'client_bound':>13}"
    )
    for c, bound, steps, tput, model_tput, tpot, behind, cb in rows:
        lag = f"<= {bound * 1e3:g} ms" if bound != float("inf") else "> 1 s"
        print(
            f"{c:>8} {lag:>10} {steps:>7} {tput:>13.0f} {model_tput:>12.0f} {tput / model_tput:>11.3f} "
            f"{tpot:>12.2f} {str(behind):>7} {str(cb):>13}"
        )
    ok = [c for c, bound, *_ in rows if bound <= LIMIT_S]
    print(f"\nreal time (emulator lag p99 < {LIMIT_S * 1e3:g} ms) up to {max(ok) if ok else 'no'} concurrent streams")
    warnings = [line for line in log.splitlines() if "behind its schedule" in line]
    print(f"emulator warnings logged: {len(warnings)}" + (f"; last: {warnings[-1]}" if warnings else ""))


if __name__ == "__main__":
    main()
