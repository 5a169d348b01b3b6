"""What sampling a server's /metrics every second (a run's timeline, docs/metrics.md "Over
time") costs the server: its CPU time per scrape, and that as a share of one core at the
sampling interval.

The emulator (serving with EAGLE, so that its speculative-decoding counters and their per-position
labels are there) under a steady closed loop from `loadgen run`, both in real time; meanwhile
this script scrapes /metrics N times as fast as it can and reads the server's own CPU time
(/proc/PID/stat) over the scrapes and over as long a stretch without them. The difference, per
scrape, is what a scrape costs the server; the load keeps its registry as busy as a run's.

    python -m bench.scrape_cost                     # 300 scrapes under 32 users
    python -m bench.scrape_cost --scrapes 1000 --users 64
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from servers.embedded import emulator_server  # noqa: E402

EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def cpu_s(pid: int) -> float:
    """utime + stime of a process and its children that were waited for, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--interval", type=float, default=1.0, help="the sampling interval whose share is printed")
    args = ap.parse_args()
    with emulator_server("meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", EAGLE) as srv:
        pid = srv.pid
        load = subprocess.Popen(
            [sys.executable, "-m", "loadgen", "run", "--base-url", srv.url, "--concurrency", str(args.users)]
            + ["--duration", "600", "--quiet", "--output", "/tmp/scrape-cost-run"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(5)  # the load settles
            url = srv.url.rstrip("/") + "/metrics"
            size = len(urllib.request.urlopen(url).read())
            c0, t0 = cpu_s(pid), time.monotonic()
            for _ in range(args.scrapes):
                urllib.request.urlopen(url).read()
            c1, t1 = cpu_s(pid), time.monotonic()
            time.sleep(t1 - t0)  # as long again without scrapes
            c2, t2 = cpu_s(pid), time.monotonic()
        finally:
            load.terminate()
            load.wait()
    with_scrapes = (c1 - c0) / (t1 - t0)  # server CPU seconds per second
    without = (c2 - c1) / (t2 - t1)
    per_scrape = max(with_scrapes - without, 0.0) * (t1 - t0) / args.scrapes
    print(f"{args.scrapes} scrapes of {size:,} bytes under {args.users} users (emulator, EAGLE k=3)")
    print(
        "| server CPU, s/s, scraping | not scraping | CPU per scrape | share of a core at one scrape a "
        f"{args.interval:g} s |"
    )
    print("|---|---|---|---|")
    print(f"| {with_scrapes:.3f} | {without:.3f} | {per_scrape * 1e3:.2f} ms | {per_scrape / args.interval:.2%} |")


if __name__ == "__main__":
    main()
