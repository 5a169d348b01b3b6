"""`loadgen` command line: one small module per command, shared options in options.py."""

from loadgen.cli import capacity, check, fit, report, run, simulate, summarize, sweep, whatif, workloads  # noqa: F401  (registers the commands)
from loadgen.cli.app import main

__all__ = ["main"]
