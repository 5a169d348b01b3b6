"""A 3-minute soak (bench/soak.py, the hour-long version's figures are in docs/performance.md):
256 streams against the canned server, the client's memory flat once the load is up (within
10% from the first tenth of the run to its end: finished requests leave memory as they are
journaled), every request in the results exactly once."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_three_minutes_at_256_streams_hold_memory_flat_and_lose_nothing(tmp_path):
    out = tmp_path / "soak.json"
    res = subprocess.run([sys.executable, "bench/soak.py", "--minutes", "3", "--streams", "256",
                          "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=900)
    figures = json.loads(out.read_text())
    assert figures["exit"] == 0, figures["stderr_tail"]
    assert figures["requests"] > 10_000 and figures["failed"] == 0
    assert figures["duplicated"] == 0 and figures["missing"] <= 256  # never sent: prepared at the deadline
    v = figures["verdict"]
    assert abs(v["growth"]) <= 0.10, res.stdout
    assert res.returncode == 0, res.stdout + res.stderr
