"""Start a server from `servers/` as a child process, wait until it serves, and always tear it
down (its whole process group) on exit; it also ends if this process is killed
(servers.launcher.spawn)."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from servers.launcher import spawn, stop_group


class ServerStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunningServer:
    url: str  # http://host:port
    pid: int  # the server's process (the leader of its own process group)
    log: str  # its stderr, a temporary file removed when the server stops


@contextmanager
def scripted_server(
    *args: str, host: str = "127.0.0.1", timeout_s: float = 30.0, cpu: int | None = None
) -> Iterator[RunningServer]:
    """Run `python -m servers.scripted ARGS --port 0` and yield its URL and PID.
    `cpu` pins it to one core (taskset), for benchmarks."""
    with server_process(["servers.scripted", *args], host=host, timeout_s=timeout_s, cpu=cpu) as srv:
        yield srv


@contextmanager
def canned_server(
    *args: str, host: str = "127.0.0.1", timeout_s: float = 30.0, cpu: int | None = None
) -> Iterator[RunningServer]:
    """Run `python -m servers.canned ARGS --port 0` (client benchmarks) and yield its URL and PID."""
    with server_process(["servers.canned", *args], host=host, timeout_s=timeout_s, cpu=cpu) as srv:
        yield srv


@contextmanager
def emulator_server(
    model: str, *args: str, host: str = "127.0.0.1", timeout_s: float = 30.0, cpu: int | None = None
) -> Iterator[RunningServer]:
    """Run `python -m servers.emulator serve MODEL ARGS --port 0` (vLLM's flags) and yield its
    URL and PID."""
    with server_process(["servers.emulator", "serve", model, *args], host=host, timeout_s=timeout_s, cpu=cpu) as srv:
        yield srv


@contextmanager
def server_process(module_args: list[str], *, host: str, timeout_s: float, cpu: int | None) -> Iterator[RunningServer]:
    """`python -m MODULE ARGS --host HOST --port 0` in its own process group; its stderr goes
    to a temporary log whose tail is shown if it fails to start."""
    cmd = [sys.executable, "-m", *module_args, "--host", host, "--port", "0"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    with tempfile.NamedTemporaryFile(mode="w+", prefix="loadgen-server-", suffix=".log") as log:
        proc = spawn(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            yield RunningServer(_wait_ready(proc, log, timeout_s), proc.pid, log.name)
        finally:
            stop_group(proc, grace_s=10.0)
            if proc.stdout is not None:
                proc.stdout.close()


def _log_tail(log, n: int = 3) -> str:
    log.seek(0)
    return " | ".join(log.read().strip().splitlines()[-n:])


def _wait_ready(proc: subprocess.Popen, log, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None  # spawned with stdout=PIPE
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("listening on "):
        proc.poll()
        raise ServerStartError("server did not start: " + (_log_tail(log) or line.strip() or "no output"))
    url = line.split()[-1]
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return url
        except OSError:
            time.sleep(0.05)
    raise ServerStartError(f"server at {url} not healthy within {timeout_s:.0f} s")
