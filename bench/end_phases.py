"""Where the end of a run takes its memory: `loadgen summarize DIR` (requests.parquet from the
journal, then summary.json) with the process's RSS sampled every 2 ms, and the peak reported per
phase (writing requests.parquet; the per-chunk figures' first pass and the passes after; the
rest), beside Arrow's own peak allocation. docs/performance.md ("A run's memory, flat with its
length") compares two runs' journals with it:

    python3 -m bench.end_phases RUN_DIR [RUN_DIR ...]   # results directories of `loadgen run`

Run against another checkout's loadgen with PYTHONPATH=THAT_CHECKOUT (the before of a change)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import sys, threading, time
import loadgen  # first: it chooses Arrow's allocator before Arrow starts
import pyarrow as pa
import loadgen.measures.chunks as chunks
import loadgen.measures.summary as summary
from loadgen.results import recover

def rss():
    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024

phase, peaks = ['imports'], {}
def sample():
    while True:
        peaks[phase[0]] = max(peaks.get(phase[0], 0.0), rss())
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
time.sleep(0.01)

def during(mod, name, label):
    f = getattr(mod, name)
    def g(*a, **k):
        before, phase[0] = phase[0], label
        try:
            return f(*a, **k)
        finally:
            phase[0] = before if before != 'imports' else 'the rest'
    setattr(mod, name, g)

during(recover.requests, 'write_from_journal', 'writing requests.parquet')
during(chunks, '_first_pass', 'per-chunk figures, first pass')
during(summary, 'chunk_figures', 'per-chunk figures, later passes')
recover.summarize_dir(sys.argv[1])
time.sleep(0.01)
arrow = pa.default_memory_pool().max_memory() / 2**20
print(' | '.join(f'{k} {v:.0f}' for k, v in peaks.items()) + f' | Arrow peak {arrow:.0f}')
"""


def main() -> int:
    if len(sys.argv) < 2:
        print("end_phases: error: give one or more results directories of `loadgen run`", file=sys.stderr)
        return 2
    for d in sys.argv[1:]:
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}
        out = subprocess.run(  # from / : the loadgen imported is PYTHONPATH's, not the directory's
            [sys.executable, "-c", CHILD, str(Path(d).resolve())], capture_output=True, text=True, env=env, cwd="/"
        )
        line = out.stdout.strip() or out.stderr.strip().splitlines()[-1]
        print(f"{d}: peak RSS (MiB) by phase: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
