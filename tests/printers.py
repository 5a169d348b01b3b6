"""Every printer of a run's figures over one run's directory (tests/test_printers.py, and the
engines' own tests for dialects the emulator does not speak): the console's summary and
warnings, `loadgen report`, `loadgen export` (llm-d's Benchmark Report) and `loadgen summarize`.
None may fail on a figure its server does not report; each says "n/a" or leaves it out."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.outputs import console
from tests.conftest import cli


def every_printer(run_dir: Path) -> str:
    """Run them all; returns the console's text. Fails naming the printer that failed."""
    summary = json.loads((run_dir / "summary.json").read_text())
    text = console.render(summary) + "\n" + "\n".join(console.warnings(summary))
    for command in (["report", str(run_dir)], ["export", str(run_dir)], ["summarize", str(run_dir)]):
        res = cli(*command)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (command, res.stderr[-2000:])
    assert (run_dir / "report" / "report.md").is_file() and list((run_dir / "llmd").glob("*"))
    return text
