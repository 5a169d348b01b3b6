"""Start a rendered server (`servers.deployments.Launch`), wait until it serves the model, and
always tear its whole process group down.

The server runs in its own process group, so stopping it reaches every process it started
(vLLM's tensor-parallel workers). It is also asked (PR_SET_PDEATHSIG) to get SIGTERM if the
process that started it dies, even by SIGKILL, so no server outlives its sweep. Its output goes
to a log file whose last lines explain any failure to start. While it starts (vLLM's CPU build
takes 1-7 minutes on 2 cores), `start(progress=...)` is told every few seconds how long it has
taken and which stage its log last reached (STAGES).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from servers import engines, localmodels
from servers.deployments import Launch

_PR_SET_PDEATHSIG = 1
PROGRESS_EVERY_S = 15.0
# what a server's log says as it starts, the stage a person is told (vLLM's lines, then other engines')
STAGES = tuple(
    (re.compile(pattern), stage)
    for pattern, stage in (
        (r"non-default args", "reading its configuration"),
        (r"Initializing a V1 LLM engine", "starting its engine process"),
        (r"distributed_init_method|init_distributed", "starting its worker process"),
        (r"Starting to load model|Loading model|loading model", "loading the model"),
        (r"Loading weights took|Model loading took|model loaded", "model loaded"),
        (r"KV cache size", "allocating the KV cache"),
        (r"Compiling a graph|torch\.compile takes|Warming up|warmup model", "compiling and warming up"),
        (r"init engine .* took", "engine ready, starting the API server"),
        (r"Starting vLLM server|Application startup complete|server is listening", "serving"),
    )
)


class LaunchError(RuntimeError):
    pass


def die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (run in a child, e.g. between fork and exec)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def spawn(argv, *, stdout, stderr, env: dict[str, str] | None = None, cwd=None, text: bool = False) -> subprocess.Popen:
    """Start `argv` in a process group of its own, to get SIGTERM when this process dies."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        process_group=0,
        preexec_fn=die_with_parent,
        text=text,
    )


def stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL to what is left after `grace_s`;
    waits for `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:  # whatever is left of the group (workers that ignored SIGTERM)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def port_in_use(host: str, port: int) -> bool:
    """Something listens on host:port (a socket in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def _ephemeral() -> tuple[int, int]:
    """The range the kernel takes a connection's own port from (Linux: 32768-60999 unless set)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a server to be started on it. Taken below the kernel's ephemeral range
    where there is room: a port from that range (bind to 0) is free when asked but is also any
    outgoing connection's own port, so the server that binds it a moment later can find it taken
    by a client's connection ("Address already in use": a test's sweep failed so once)."""
    import random

    low, _ = _ephemeral()
    if low > 21000:  # 20000 up: Ray's workers take 10002-19999 as they start
        for port in random.sample(range(20000, low), 64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0, api_key: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (OSError, ValueError):
        return 0, b""


def serves(url: str, model: str, api_key: str | None = None) -> bool:
    """/health answers 200 and /v1/models lists `model`."""
    if _get(url + "/health")[0] != 200:
        return False
    status, body = _get(url + "/v1/models", api_key=api_key)
    if status != 200:
        return False
    try:
        return model in {m.get("id") for m in json.loads(body).get("data", [])}
    except (ValueError, AttributeError):
        return False


class Server:
    """One server. `start()` launches it (or, for an external one, checks it) and waits until
    ready; `stop()` ends its process group. Use as a context manager for teardown on every
    exit path."""

    def __init__(
        self,
        launch: Launch,
        log_path: Path,
        api_key: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.launch = launch
        self.progress = progress  # told how a slow start goes, unless start() is told otherwise
        self.api_key = api_key  # for /v1/models of a server that wants one
        self.log_path = Path(log_path)
        self._log_from = 0  # where this start's lines begin in the log (set by start)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        if not engines.starts(self.launch.engine):
            return serves(self.launch.url, self.launch.served_model_name, self.api_key)
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, n: int = 5) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in lines[-n:])

    def start(self, progress: Callable[[str], None] | None = None) -> Server:
        """Start the server and wait until it serves; `progress` is told what it is doing while
        it starts (every PROGRESS_EVERY_S seconds); default: the one it was made with."""
        progress = progress or self.progress
        la = self.launch
        self.starts += 1
        if not engines.starts(la.engine):
            deadline = time.monotonic() + min(la.startup_timeout_s, 30.0)
            while not serves(la.url, la.served_model_name, self.api_key):
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"external server {la.url} does not serve {la.served_model_name!r} "
                        "(GET /health and /v1/models); start it or fix url"
                    )
                time.sleep(0.5)
            return self
        for name, path in la.prepare:  # model files loadgen writes, once
            try:
                if localmodels.is_local(name):
                    if progress is not None and not localmodels.made(name):
                        progress(f"{la.variant}: making {name} in {path} (once; a few minutes for real weights)")
                    localmodels.ensure(name)
                else:  # the engine's own (a packaged model file)
                    engines.get(la.engine).prepare(name, path)
            except (ValueError, localmodels.ModelError, OSError) as e:
                raise LaunchError(f"cannot prepare {name} at {path}: {e}") from None
        parts = urlsplit(la.url)
        if port_in_use(parts.hostname or "127.0.0.1", parts.port or 80):
            raise LaunchError(
                f"port {parts.port} is already in use on {parts.hostname}; stop what "
                "listens there or choose another --port"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self._write_files()
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {self.starts}: {la.shell()}\n".encode())
            log.flush()
            try:
                self.proc = spawn(argv, stdout=log, stderr=log, env=la.env)
            except OSError as e:
                raise LaunchError(f"cannot start {la.variant} server ({la.argv[0]}): {e.strerror or e}") from None
        self._wait_ready(progress)
        return self

    def _write_files(self) -> tuple[str, ...]:
        """Write the files the server reads (Launch.files) beside its log; its command with
        their folder in place."""
        la = self.launch
        if not la.files:
            return la.argv
        folder = self.log_path.with_name(f"{self.log_path.stem}.files")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in la.files:
                (folder / name).write_text(text)
        except OSError as e:
            raise LaunchError(f"cannot write {la.variant}'s files in {folder}: {e.strerror or e}") from None
        return la.argv_in(str(folder))

    def stage(self) -> str | None:
        """The stage of its start that the server's log last reached (STAGES), None before any."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_from)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        found = -1  # the furthest stage reached: a later line can name an earlier one (a child's config)
        for line in text.splitlines():
            for i, (pattern, _) in enumerate(STAGES):
                if i > found and pattern.search(line):
                    found = i
        return STAGES[found][1] if found >= 0 else None

    def _wait_ready(self, progress: Callable[[str], None] | None = None) -> None:
        la = self.launch
        began = time.monotonic()
        deadline = began + la.startup_timeout_s
        told = began
        assert self.proc is not None  # start() spawned it
        while True:
            code = self.proc.poll()
            if code is not None:
                raise LaunchError(
                    f"{la.variant} server exited with code {code} before serving; "
                    f"log {self.log_path}: {self.log_tail()}"
                )
            if serves(la.url, la.served_model_name, self.api_key):
                if progress is not None and time.monotonic() - began > PROGRESS_EVERY_S:
                    progress(f"{la.variant}: serving after {time.monotonic() - began:.0f} s")
                return
            now = time.monotonic()
            if progress is not None and now - told >= PROGRESS_EVERY_S:
                told = now
                progress(f"{la.variant}: starting, {now - began:.0f} s: {self.stage() or 'starting its process'}")
            if time.monotonic() > deadline:
                self.stop()
                raise LaunchError(
                    f"{la.variant} server not ready within {la.startup_timeout_s:.0f} s "
                    f"(no /health and model {la.served_model_name!r} at {la.url}); "
                    f"log {self.log_path}: {self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the whole group, SIGKILL after `grace_s`; waits for the leader."""
        if self.proc is not None:
            stop_group(self.proc, grace_s)

    def restart(self, progress: Callable[[str], None] | None = None) -> Server:
        self.stop()
        return self.start(progress)

    def __enter__(self) -> Server:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
