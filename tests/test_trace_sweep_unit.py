"""test_trace_sweep.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from tests.conftest import cli
from tests.test_trace_sweep import TRACE

pytestmark = pytest.mark.unit


def test_bad_trace_sweep_options_are_one_line(tmp_path):
    for args, says in (
        (("--trace-speeds", "1,2"), "--trace-speeds replays a trace at each speed: give --trace"),
        ((*TRACE, "--trace-speed", "2", "--trace-speeds", "1,2"), "give one of --trace-speed and --trace-speeds"),
        ((*TRACE, "--trace-speeds", "1,2", "--workers", "2"), "--trace replays from one process"),
        ((*TRACE, "--trace-speeds", "0,1"), "--trace-speeds"),
        ((*TRACE, "--trace-speeds", "1", "--concurrency", "4"), "drop --concurrency"),
        ((*TRACE, "--trace-speeds", "1", "--goodput", "ttft<500"), "--goodput"),
    ):
        res = cli("sweep", "--virtual", *args, "--output", str(tmp_path / "x"))
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    capacity = ("capacity", "--servers", "llama-3.1-8b", "--engine", "emulator", "--slo", "ttft_p99<=1s")
    for args, says in (
        ((*TRACE, "--by", "rate"), "--trace searches the trace's speed: drop --by rate"),
        (("--trace-window", "5"), "--trace-window picks a window of --trace: add --trace"),
        ((*TRACE, "--duration", "5"), "drop --duration"),
        ((*TRACE, "--trace-speed", "2"), "No such option '--trace-speed'"),
    ):
        res = cli(*capacity, *args, "--output", str(tmp_path / "x"))
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert says in res.stderr, res.stderr
