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
        "sampling": sampling_used(workload.get("sampling"), extra.get("extra_body")),
        **extra,
        "clock": clock,
    }


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")


def sampling_used(workload: dict | None, extra_body: dict | None) -> dict | None:
    """What every request asked the sampler for: the workload's sampling record, with what
    --extra-body sets on top (it is merged into every body last), and who decided the temperature."""
    if workload is None:
        return None
    out = dict(workload)
    over = {k: v for k, v in (extra_body or {}).items() if k in SAMPLING_KEYS}
    if over:
        out.update(over)
        if "temperature" in over:
            out["temperature_from"] = "--extra-body"
        unset = [k for k in SAMPLING_KEYS[1:] if out.get(k) is None]
        out.pop("server_decides", None)
        if unset and out.get("temperature"):
            out["server_decides"] = unset
    return out


def sampling_label(sampling: dict | None) -> str:
    """The sampling in a few words, for a summary's and a report's header."""
    if not sampling:
        return "not recorded"
    t = sampling.get("temperature")
    head = "greedy (temperature 0)" if t == 0 else f"temperature {t:g}" if isinstance(t, int | float) else "unknown"
    parts = [head] + [f"{k} {sampling[k]}" for k in SAMPLING_KEYS[1:] if sampling.get(k) is not None]
    out = ", ".join(parts)
    if sampling.get("server_decides"):
        out += f"; the server's default {', '.join(sampling['server_decides'])}"
    return f"{out} (from {sampling.get('temperature_from', 'the workload')})"


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
    """The client's machine: a figure is a machine's (its CPU model, and the kind vLLM's CPU build
    tells apart: avx512_bf16, avx512, avx2 or other, servers/deploy/machine.py)."""
    import aiohttp

    from servers.deploy import machine
    from servers.emulator.fingerprint import gpu

    return {
        "name": platform.node(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "cpus": os.cpu_count(),
        "cores": len(os.sched_getaffinity(0)),  # those this process (and a server it starts) may use
        "gpu": gpu(),  # the first NVIDIA GPU's model name (None without one)
        "cpu_model": machine.model_name(),
        "cpu_kind": machine.kind(),
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
