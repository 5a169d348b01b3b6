"""A --parallel sweep's worker process: `python -m loadgen.sweep.worker OUTPUT SLOT` runs one
slot's cells (loadgen.sweep.job.run_worker); the API key comes in LOADGEN_API_KEY (argv
is visible to ps). Exit 130 when interrupted, 2 with one line on an error."""

from __future__ import annotations

import os
import sys

from loadgen.errors import LoadgenError
from loadgen.sweep.job import run_worker


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m loadgen.sweep.worker OUTPUT SLOT", file=sys.stderr)
        return 2
    try:
        return 130 if run_worker(args[0], args[1], os.environ.get("LOADGEN_API_KEY")) else 0
    except LoadgenError as e:
        print(f"loadgen: error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
