"""How long `loadgen whatif` takes: 500 acceptance traces (the simulator's, exact, code editing,
every drafter of the 8B profile) x 6 batch sizes x every policy, closed loop and offline.

    python -m bench.whatif_speed              # ~1-2 minutes
    python -m bench.whatif_speed --traces 200

Prints a table: protocol, traces, policies, batch sizes, seconds of evaluation (reading the
traces and building the plans included), CPUs used. The figure is in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadgen.whatif.job import WhatIfJob, whatif  # noqa: E402

PROFILE = "h100-llama-3.1-8b"
BATCHES = (1, 8, 16, 32, 64, 128)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces.jsonl"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "simulate",
                "--profile",
                PROFILE,
                "--concurrency",
                "32",
                "--num-requests",
                str(args.traces),
                "--workload",
                "code-edit",
                "--acceptance-traces",
                str(path),
                "--output",
                str(Path(tmp) / "sim"),
            ],
            check=True,
            capture_output=True,
        )
        print(f"{'protocol':<10}{'traces':>8}{'policies':>10}{'batches':>9}{'seconds':>9}{'CPUs':>6}")
        for protocol in ("closed", "offline"):
            t0 = time.monotonic()
            done = whatif(WhatIfJob(path, PROFILE, batches=BATCHES, protocol=protocol))
            wall = time.monotonic() - t0
            print(
                f"{protocol:<10}{done.doc['traces']:>8}{done.policies:>10}{len(BATCHES):>9}{wall:>9.1f}"
                f"{os.cpu_count():>6}"
            )


if __name__ == "__main__":
    main()
