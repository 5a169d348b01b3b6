"""How long `loadgen sweep` with no options (the README's main job) takes here, against its
target of 5 minutes on 2 cores, and how many of its cells the machine could not keep up with.

    python bench/sweep_default.py            # the full default: 56 cells, ~3 minutes
    python bench/sweep_default.py --data-dir ../shared/datasets   # the real data sets
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 300.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", help="LOADGEN_DATA_DIR for the sweep (default: the offline stand-ins)")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "LOADGEN_DATA_DIR"}
    if args.data_dir:
        env["LOADGEN_DATA_DIR"] = str(Path(args.data_dir).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "loadgen", "sweep", "--quiet", "--output", str(out)],
                             cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if res.returncode not in (0, 1):
            sys.exit(f"sweep failed ({res.returncode}): {res.stderr.strip().splitlines()[-1:]}")
        cells = pd.read_parquet(out / "cells.parquet")
        print(res.stdout)
    rows = [
        ("cells", f"{len(cells)}"),
        ("cells ok", f"{int((cells['status'] == 'ok').sum())}"),
        ("wall time", f"{wall:.0f} s (target < {TARGET_S:.0f} s: {'met' if wall < TARGET_S else 'MISSED'})"),
        ("mean per cell", f"{wall / max(1, len(cells)):.2f} s"),
        ("cells client_bound", f"{int(cells['client_bound'].fillna(False).sum())}"),
        ("cells server_behind", f"{int(cells['server_behind'].fillna(False).sum())}"),
        ("CPUs", f"{os.cpu_count()}"),
        ("data", args.data_dir or "offline stand-ins"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


if __name__ == "__main__":
    main()
