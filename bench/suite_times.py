"""The test suite's time, per test file, and where its wall time goes (docs/performance.md,
"Test suite").

Runs the README's test command (`python3 -m pytest`, two xdist workers by pyproject.toml) with a
JUnit XML report and the workers' lock log (tests/conftest.py, LOADGEN_TEST_LOCK_LOG), then
prints per file: tests, and seconds of tests run on a worker (setup and teardown included); then
per worker: seconds running tests, of which timing tests (which run alone), seconds waiting for
the lock (the other worker's timing test, or the end of its own test before one of these), and
when it ended. Given JUnit files instead, it prints their per-file times side by side
(a before and an after).

    python3 -m bench.suite_times                         # run the suite, print the tables
    python3 -m bench.suite_times --keep DIR              # ... and keep junit.xml and lock.jsonl in DIR
    python3 -m bench.suite_times BEFORE.xml AFTER.xml    # compare two runs' files
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def per_file(junit: Path) -> tuple[dict[str, float], collections.Counter]:
    seconds: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + ".py"
        seconds[name] += float(case.get("time") or 0)
        count[name] += 1
    return seconds, count


def _run(out: Path) -> float:
    start = time.monotonic()
    log = out / "lock.jsonl"
    log.unlink(missing_ok=True)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={out / 'junit.xml'}"],
        cwd=REPO,
        env={**os.environ, "LOADGEN_TEST_LOCK_LOG": str(log)},
    )
    wall = time.monotonic() - start
    if res.returncode != 0:
        print(f"suite_times: the suite failed (exit {res.returncode}); times below are of that run")
    return wall


def _workers(log: Path) -> None:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not rows:
        return
    t0 = min(r["start"] for r in rows)
    print("\n| worker | running tests (s) | of which timing (s) | waiting for the lock (s) | ended at (s) |")
    print("|---|---|---|---|---|")
    for w in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == w]
        print(
            f"| {w} | {sum(r['ran_s'] for r in mine):.0f} | {sum(r['ran_s'] for r in mine if r['timing']):.0f} | "
            f"{sum(r['waited_s'] for r in mine):.0f} | "
            f"{max(r['start'] + r['waited_s'] + r['ran_s'] for r in mine) - t0:.0f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", nargs="*", type=Path, help="JUnit XML files to compare (no run)")
    ap.add_argument("--keep", type=Path, help="keep the run's junit.xml and lock.jsonl here")
    args = ap.parse_args()
    if len(args.junit) > 2:
        sys.exit("suite_times: give at most two JUnit files (a before and an after)")
    for f in args.junit:
        if not f.is_file():
            sys.exit(f"suite_times: {f}: no such file")
    if args.junit:
        runs = [per_file(f) for f in args.junit]
        out = None
    else:
        out = args.keep or Path(tempfile.mkdtemp(prefix="suite-"))
        out.mkdir(parents=True, exist_ok=True)
        wall = _run(out)
        print(f"wall time: {wall:.0f} s ({wall / 60:.1f} min)")
        runs = [per_file(out / "junit.xml")]
    names = sorted(set().union(*(r[0] for r in runs)), key=lambda n: -max(r[0].get(n, 0) for r in runs))
    head = " | ".join(f"tests | s ({f})" for f in args.junit) if args.junit else "tests | s"
    print(f"\n| file | {head} |")
    print("|---|" + "---|---|" * len(runs))
    for n in names:
        cells = " | ".join(f"{r[1].get(n, 0)} | {r[0].get(n, 0):.1f}" for r in runs)
        print(f"| {n} | {cells} |")
    totals = " | ".join(f"{sum(r[1].values())} | {sum(r[0].values()):.0f}" for r in runs)
    print(f"| all | {totals} |")
    if out is not None and (out / "lock.jsonl").exists():
        _workers(out / "lock.jsonl")


if __name__ == "__main__":
    main()
