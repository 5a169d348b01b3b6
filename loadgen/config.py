"""A run's config record (`summary.json` `config`): everything that defines the run, no secrets.
One function for `run`, `check`, the sweep's cells and `simulate`, each adding its own keys."""

from __future__ import annotations

import os
import platform
import sys
from urllib.parse import urlsplit, urlunsplit

from loadgen import __version__


def public_url(url: str | None) -> str | None:
    """The URL without any user:password part, for writing into results."""
    if not url:
        return url
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc.rsplit("@", 1)[-1], p.path, "", ""))


def run_config(
    command: str,
    *,
    base_url: str | None,
    model: str,
    endpoint: str,
    load: dict,
    num_requests: int | None,
    duration_s: float | None,
    warmup: int,
    seed: int,
    workload: dict,
    clock: dict | None,
    **extra,
) -> dict:
    """The keys every run has, then `extra` (the command's own) in the order given."""
    return {
        "command": command,
        "loadgen_version": __version__,
        "base_url": base_url,
        "model": model,
        "endpoint": endpoint,
        "load": load,
        "num_requests": num_requests,
        "duration_s": duration_s,
        "warmup": warmup,
        "seed": seed,
        "workload": workload,
        **extra,
        "clock": clock,
    }


def described_load(shape, think=None) -> dict:
    """A run's `load` record: the shape's, and the think time between a conversation's turns
    when there is one."""
    out = shape.describe()
    if think is not None and think.mean_s > 0:
        out["think_time"] = think.describe()
    return out


def clock(t0_ns: int, t0_unix: float | None, kind: str = "monotonic") -> dict:
    return {"t0_ns": t0_ns, "t0_unix": t0_unix, "clock": kind}


def host() -> dict:
    import aiohttp

    return {
        "name": platform.node(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "cpus": os.cpu_count(),
        "loadgen": __version__,
    }


def argv_without_secrets(argv: list[str] | None = None) -> list[str]:
    """The command line, with any --api-key value masked."""
    out, skip = [], False
    for arg in sys.argv[1:] if argv is None else argv:
        if skip:
            out.append("***")
            skip = False
        elif arg == "--api-key":
            out.append(arg)
            skip = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(arg)
    return out
