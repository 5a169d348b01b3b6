"""`python -m servers.canned`: serve canned one-token chunks (client benchmarks).

Prints `listening on http://HOST:PORT` once it accepts connections, then serves until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import sys

from servers.canned.app import CannedOptions, CannedServer
from servers.http import run_until_stopped, server_parser


def _parser() -> argparse.ArgumentParser:
    p = server_parser("python -m servers.canned", __doc__, "canned")
    p.add_argument("--ttft-ms", type=float, default=0.0, help="first event this long after the request")
    p.add_argument(
        "--pacing-ms", type=float, default=0.0, help="time between events; 0 (default): as fast as the client reads"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        opts = CannedOptions(
            model=args.model,
            ttft_ms=args.ttft_ms,
            pacing_ms=args.pacing_ms,
            events_per_write=args.events_per_write,
            trace_path=args.trace,
        )
    except ValueError as e:
        sys.exit(f"python -m servers.canned: error: {e}")
    server = CannedServer(opts)
    run_until_stopped(server.handle, args.host, args.port, "python -m servers.canned", server.close)


if __name__ == "__main__":
    main()
