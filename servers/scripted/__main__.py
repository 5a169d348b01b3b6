"""`python -m servers.scripted` (or `loadgen-scripted-server`): run the scripted server.

Prints `listening on http://HOST:PORT` once it accepts connections (with `--port 0`, the port
the OS chose), then serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import sys

from servers.http import run_until_stopped, server_parser
from servers.scripted.app import ScriptedServer, ServerOptions
from servers.scripted.script import FAULTS, ScriptConfig


def _parser() -> argparse.ArgumentParser:
    p = server_parser("loadgen-scripted-server", __doc__, "scripted")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--ttft-ms", type=float, default=30.0)
    p.add_argument("--prefill-us-per-token", type=float, default=20.0)
    p.add_argument("--step-ms", type=float, default=20.0, help="time between chunks")
    p.add_argument("--step-jitter", type=float, default=0.0, help="each step is step-ms x (1 +- jitter), seeded")
    p.add_argument(
        "--chunk-tokens", default="sd:3:0.7", help="tokens per chunk: '1', a cycled list '1,3,2', or sd:K:ALPHA"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--faults", default="ok", help=f"comma list cycled over arriving requests; from: {', '.join(FAULTS)}"
    )
    p.add_argument("--fault-after-chunks", type=int, default=2)
    p.add_argument(
        "--fault-delay-ms",
        type=float,
        default=0.0,
        help="answer a 400/500/429/disconnect fault this long after the request",
    )
    p.add_argument("--stall-s", type=float, default=3600.0)
    p.add_argument("--no-usage", action="store_true", help="ignore stream_options.include_usage")
    p.add_argument("--no-continuous-usage", action="store_true", help="ignore stream_options.continuous_usage_stats")
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="run S times slower than the script's times, and say so in /metrics "
        "(emulator:time_scale, as the emulator does): loadgen converts back",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        cfg = ScriptConfig(
            ttft_ms=args.ttft_ms,
            prefill_us_per_token=args.prefill_us_per_token,
            step_ms=args.step_ms,
            step_jitter=args.step_jitter,
            chunk_tokens=args.chunk_tokens,
            events_per_write=args.events_per_write,
            seed=args.seed,
            faults=tuple(f.strip() for f in args.faults.split(",") if f.strip()),
            fault_after_chunks=args.fault_after_chunks,
            fault_delay_ms=args.fault_delay_ms,
            stall_s=args.stall_s,
            time_scale=1.0 if args.time_scale is None else args.time_scale,
        )
    except ValueError as e:
        sys.exit(f"loadgen-scripted-server: error: {e}")
    opts = ServerOptions(
        model=args.model,
        api_key=args.api_key,
        honour_usage=not args.no_usage,
        honour_continuous_usage=not args.no_continuous_usage,
        trace_path=args.trace,
        metrics=args.time_scale is not None,
    )
    server = ScriptedServer(cfg, opts)
    run_until_stopped(server.handle, args.host, args.port, "loadgen-scripted-server", server.close)


if __name__ == "__main__":
    main()
