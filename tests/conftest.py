"""Shared test helpers: real server processes, the CLI run as a user runs it, and the truth."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import run_args
from servers.embedded import scripted_server
from workloads import random_lengths

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`loadgen ARGS` in a subprocess, as a user would run it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
    )


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`loadgen ARGS` in this process (click's runner), for a command that starts no load and no
    server (input it must refuse, a report, a comparison, a summary of a results directory): the
    same parsing, checks, output and one-line errors as `run_cli`, without starting a Python (a
    second or two apiece). An exception that escapes is written to stderr as a traceback, as the
    interpreter would."""
    import traceback

    from click.testing import CliRunner

    from loadgen.cli import main

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        res = CliRunner().invoke(main, list(args), env=env, prog_name="loadgen")
    finally:
        os.chdir(cwd)
    stderr = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(res.exception))
    return subprocess.CompletedProcess(["loadgen", *args], res.exit_code, res.stdout, stderr)


def synthetic_prompts(n: int, *, input_len: int, output_len: int, seed: int) -> list[str]:
    """The prompts `loadgen run --workload synthetic` sends, in order (request index i)."""
    gen = random_lengths(None, input_len=input_len, output_len=output_len, seed=seed)
    return [r.prompt or "" for r in itertools.islice(gen, n)]


def _environ(entry: Path) -> bytes:
    try:
        return (entry / "environ").read_bytes()
    except OSError:
        return b""


def server_pids() -> set[int]:
    """PIDs of every running server from servers/, llama-server or vLLM that this test process (an
    xdist worker: its own servers, not the other worker's) or its children started, also one
    left behind by a parent that died (to prove none is left: compare with the set taken
    before). Processes are told apart by the environment they inherited from this one; vLLM's
    engine and worker processes rename themselves (setproctitle), which overwrites what
    /proc shows of their environment, so they are told apart by their ancestors instead (an
    orphan of them, whose parent died, counts as everyone's)."""
    mine = os.environ.get("PYTEST_XDIST_WORKER")
    marker = f"PYTEST_XDIST_WORKER={mine}".encode()
    found: dict[int, bool] = {}  # candidate pid -> renamed by vLLM
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            renamed = cmd[0].startswith(b"VLLM::")
            if renamed or (
                b"servers.scripted" in cmd
                or b"servers.emulator" in cmd
                or cmd[0].endswith(b"llama-server")
                or any(c.endswith(b"/vllm") for c in cmd[:2])  # `vllm serve`, run by its Python
            ):
                found[int(entry.name)] = renamed
    if mine is None:
        return set(found)
    pids = {
        pid for pid, renamed in found.items() if not renamed and marker in _environ(Path(f"/proc/{pid}")).split(b"\0")
    }
    for pid in (p for p, renamed in found.items() if renamed):
        st = _stat(pid)
        if st is not None and st[0] <= 1:  # an orphan: its parent died
            pids.add(pid)
        while st is not None and st[0] > 1:
            if st[0] in pids or st[0] == os.getpid():
                pids.add(pid)
                break
            st = _stat(st[0])
    return pids


def describe_pids(pids) -> str:
    """What each of these processes is (for a failure message): PID, parent, command line."""
    out = []
    for pid in sorted(pids):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
            parent = (_stat(pid) or (None,))[0]
        except OSError:
            cmd, parent = "(gone)", None
        out.append(f"{pid} (parent {parent}): {cmd}")
    return "; ".join(out)


@pytest.fixture
def server():
    """A factory: `url = server("--step-ms", "5")` starts a scripted server for this test."""
    stack = []

    def start(*args: str) -> str:
        cm = scripted_server(*args)
        srv = cm.__enter__()
        stack.append(cm)
        return srv.url

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, None when it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def process_tree(root: int) -> set[tuple[int, int]]:
    """Every live descendant of `root`, as (pid, start time) so a reused PID is not mistaken
    for a process that is still running."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents.setdefault(st[0], []).append(int(entry.name))
                starts[int(entry.name)] = st[1]
    out, todo = set(), [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.add((child, starts[child]))
            todo.append(child)
    return out


def still_running(procs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(pid, start) for pid, start in procs if (st := _stat(pid)) is not None and st[1] == start}


def wait_served(trace: Path, n: int, timeout_s: float = 60.0) -> None:
    """Wait until the scripted server has finished `n` responses (its --trace has a line each):
    a run is under way, however long this machine took to start it (a fixed sleep is too short
    on a slow machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if trace.exists() and len(trace.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the server finished fewer than {n} responses in {timeout_s:g} s")


LIGHT_SCALE = 4.0  # the light run's time dilation: a VM stall of up to 16 ms counts under 4 ms


def light_run(tmp_path: Path) -> tuple[dict, object, list[dict]]:
    """A light load that a healthy client measures right on any machine: 40 requests at 40 per
    (emulated) second against a scripted server run LIGHT_SCALE times slower than its script
    (time dilation, as the emulator's --time-scale: the client converts every timestamp back,
    so its own delays, and the machine's stalls, count LIGHT_SCALE times less). Returns the
    summary, the request frame and the server's own record of every write (its --trace), the
    latter still in real time."""
    import json

    import pandas as pd

    trace, out = tmp_path / "light-trace.jsonl", tmp_path / "light"
    with scripted_server(
        "--ttft-ms", "5", "--step-ms", "5", "--time-scale", str(LIGHT_SCALE), "--trace", str(trace)
    ) as srv:
        res = run_cli(*run_args(srv.url, rate="40", num_requests="40", input_len="16", output_len="8", output=str(out)))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["time_scale"] == LIGHT_SCALE and summary["completed"] == 40
    return summary, pd.read_parquet(out / "requests.parquet"), [json.loads(x) for x in trace.read_text().splitlines()]


def judged_late(summary: dict) -> bool:
    """Send lateness over its bound is never silent (docs/metrics.md, the self-check): it flags
    the run where its p99 is over the precision's share of the median end-to-end time it can
    move, and is listed below the precision otherwise. Returns whether it flagged the run."""
    check = summary["self_check"]
    late = check["lateness_ms"]["p99"]
    flagged = any("send lateness" in r for r in check["reasons"])
    below = any("send lateness" in r for r in check["below_precision"])
    if late is None or late <= check["threshold_ms"]:
        assert not flagged and not below, check
        return False
    assert flagged == (late > check["precision"] * check["figures"]["e2e_ms"]) != below, check
    assert summary["client_bound"] or not flagged
    return flagged


def assert_light_load_unflagged(tmp_path: Path) -> None:
    """For a test that accepts an honest client_bound flag in place of a figure: the same
    client, on the same machine, does not flag a light load, so a client that flags every run
    cannot pass such a test."""
    summary, _, _ = light_run(tmp_path)
    assert summary["client_bound"] is False, (
        f"a light load was flagged client_bound too: {summary['self_check']['reasons']}"
    )


# -- Parallel runs and the tests that time the machine ------------------------------------------
# The suite runs on two pytest-xdist workers (pyproject.toml: -n 2 --dist loadfile), a file to a
# worker. A test marked `timing` measures this machine in real time (a figure against a server's
# own record, a client's lateness, a real-time run against its model), so it must not share the
# CPU with another test: it takes an exclusive lock that every other test takes shared, so it starts
# once the other worker's test is over and holds that worker off until it is done. A turnstile in
# front of the lock keeps a waiting timing test from being overtaken. Consecutive timing tests of
# one module keep the lock between them (a module's servers stay up between its tests), and so do
# the tests of a module marked `background` (a Ray cluster, whose processes are busy between its
# tests, shares the CPU with the other worker's tests, never with a timing test). Without xdist
# (`pytest -p no:xdist`, or `-n 0`) nothing is locked: one test at a time.


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: measures this machine in real time; runs alone (tests/conftest.py)")
    config.addinivalue_line("markers", "unit: starts no process; everything in the test's own (tests/conftest.py)")
    config.addinivalue_line("markers", "servers: starts server processes of its own, or loadgen in a subprocess")
    config.addinivalue_line(
        "markers",
        "engines: needs a real engine or tool (vLLM's CPU build, llama.cpp, SGLang, Ray, Prometheus, Chromium)",
    )
    config.addinivalue_line(
        "markers",
        "background: keeps processes busy between its tests (a Ray cluster): "
        "no timing test runs from its first test to its last (tests/conftest.py)",
    )


# Files with the most work that is not timed, first among the files without timing tests, so
# that the two workers end together (a long file taken last would run on one worker alone).
LONG = (
    "test_vllm_cpu.py",  # real vLLM: 3-4 minutes of one worker
    "test_vllm_qwen.py",  # real vLLM with real weights, on the other worker's core: about 3 minutes
    "test_conformance.py",  # real vLLM and the emulator, twice each: 70-90 s
    "test_vllm_side.py",
    "test_llamacpp.py",
    "test_ray.py",
    "test_current_sd_sweep.py",
    "test_controls.py",  # a virtual sweep, traces and a report; a sweep over HTTP: ~40 s
    "test_sweep.py",
    "test_network_faults.py",
)


# -- What a test uses: unit, servers, engines -------------------------------------------------
# Every test file says what its tests use, explicitly, with one of three marks in its
# `pytestmark` (`pytest -m unit` runs the tests that start nothing):
# `engines`: a real engine or tool from outside Python's own (vLLM's CPU build, llama.cpp,
# SGLang's parser, Ray, Prometheus, Chromium: the files that honour a LOADGEN_REQUIRE_* switch);
# `servers`: processes of their own (servers/ test servers and the emulator, loadgen in a
# subprocess, worker processes); `unit`: none, everything in the test's own process.
# Both ways are held while the tests run: a unit test that starts a process fails, and so does a
# test marked servers or engines that passed without starting one or using a fixture that did
# (it belongs in a unit file). Process starts are counted where every way of starting one
# passes: subprocess (asyncio's too), os.fork, os.posix_spawn and multiprocessing's spawn.
KINDS = ("unit", "servers", "engines")
_started = [0]  # processes started by this (worker) process so far
_refuse: list[str] = []  # the unit test running, which may start none
_starting_fixtures: set[str] = set()  # fixtures whose setup started a process
_STARTS_AT = pytest.StashKey[int]()  # _started when a test's setup began


def _counted(fn):
    def start(*args, **kwargs):
        if _refuse:
            raise AssertionError(f"{_refuse[0]} is marked unit but starts a process")
        _started[0] += 1
        return fn(*args, **kwargs)

    return start


def _count_process_starts() -> None:
    import multiprocessing.util

    setattr(subprocess.Popen, "_execute_child", _counted(getattr(subprocess.Popen, "_execute_child")))  # noqa: B009,B010
    os.fork = _counted(os.fork)
    os.posix_spawn = _counted(os.posix_spawn)
    os.posix_spawnp = _counted(os.posix_spawnp)
    multiprocessing.util.spawnv_passfds = _counted(multiprocessing.util.spawnv_passfds)


_count_process_starts()


def kind_of(item) -> str:
    """unit, servers or engines: the one its file's pytestmark says."""
    found = [k for k in KINDS if item.get_closest_marker(k) is not None]
    if len(found) != 1:
        raise pytest.UsageError(
            f"{item.path.name}: its pytestmark names {found or 'none'} of {', '.join(KINDS)}; "
            "name exactly one (tests/conftest.py, 'What a test uses')"
        )
    return found[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = _started[0]
    yield
    if _started[0] > before:
        _starting_fixtures.add(fixturedef.argname)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_STARTS_AT] = _started[0]
    if item.get_closest_marker("unit") is not None:
        _refuse[:] = [item.nodeid]
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    _refuse.clear()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call" or not rep.passed or item.get_closest_marker("unit") is not None:
        return
    started = _started[0] > item.stash.get(_STARTS_AT, _started[0])
    if not started and not set(item.fixturenames) & _starting_fixtures:
        rep.outcome = "failed"
        rep.longrepr = (
            f"{item.nodeid} is marked {kind_of(item)} but started no process and used no fixture that did: "
            "it belongs in a file marked unit (tests/conftest.py, 'What a test uses')"
        )


def pytest_collection_modifyitems(config, items):
    """Each test checked for its one kind (`kind_of`); files with a timing test first, the
    rest after (pyproject.toml keeps this order: --no-loadscope-reorder). While the timing
    files run, each worker waits for the other's test to end before a timing test starts:
    cheap while the other's tests are those files' own short ones, costly beside a minute-long
    one. After them, both workers run the rest in parallel with nothing to wait for."""
    for item in items:
        kind_of(item)
    timed = {item.path for item in items if item.get_closest_marker("timing") is not None}

    def order(item):
        if item.path in timed:
            return (0, 0)
        return (1, LONG.index(item.path.name)) if item.path.name in LONG else (2, 0)

    items.sort(key=order)  # stable: within a file, and among files, the collected order


class _Lock:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.turnstile = open(directory / "turnstile", "a+")
        self.lock = open(directory / "lock", "a+")
        self.held: str | None = None  # "shared" or "exclusive"

    def acquire(self, exclusive: bool) -> float:
        """Seconds waited."""
        import fcntl

        asked = time.monotonic()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.held = "exclusive" if exclusive else "shared"
        return time.monotonic() - asked

    def release(self) -> None:
        import fcntl

        if self.held == "exclusive":
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.held = None


_lock: _Lock | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _lock
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # not an xdist worker: one test at a time anyway
        yield
        return
    if _lock is None:
        import tempfile

        _lock = _Lock(Path(tempfile.gettempdir()) / f"loadgen-tests-{run}")
    exclusive = item.get_closest_marker("timing") is not None
    waited, start = 0.0, time.monotonic()
    if _lock.held != ("exclusive" if exclusive else "shared"):
        if _lock.held is not None:
            _lock.release()
        waited = _lock.acquire(exclusive)
    try:
        yield
    finally:
        if log := os.environ.get("LOADGEN_TEST_LOCK_LOG"):  # where the suite's wall time goes
            with open(log, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "test": item.nodeid,
                            "timing": exclusive,
                            "waited_s": round(waited, 2),
                            "start": round(start, 2),
                            "ran_s": round(time.monotonic() - start - waited, 2),
                        }
                    )
                    + "\n"
                )
        keep = (
            nextitem is not None
            and nextitem.module is item.module
            and (nextitem.get_closest_marker("timing") is not None) == exclusive
            and (exclusive or item.get_closest_marker("background") is not None)
        )
        if not keep:
            _lock.release()


@contextlib.contextmanager
def a_core_of_its_own():
    """A core of this process's that no other test's real engine holds, held until the block
    ends (a lock file per core, shared by the xdist workers of one run): a real engine's test
    pins its engine to it (tests/test_vllm_cpu.py, on_one_core). Two engines pinned to one core
    take twice as long each (127 s and 125 s for the tiny Llama's sweep and conformance, against
    65 and 78 on cores of their own); three such tests on two workers meet in every order, so
    the core is chosen when the test starts, not written in it. Waits for a core when both are
    held (never here: two workers)."""
    import fcntl
    import tempfile

    where = Path(tempfile.gettempdir()) / f"loadgen-cores-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"
    where.mkdir(parents=True, exist_ok=True)
    cores = sorted(os.sched_getaffinity(0), reverse=True)
    while True:
        for core in cores:
            f = open(where / f"core-{core}", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield core
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        time.sleep(0.5)


def reconciled(directory: Path, mutate=None, speculative_config: dict | None = None) -> dict:
    """A run's accepted drafts reconciled again from what it stored (requests.parquet, and the
    server's figures in summary.json), after `mutate(frame)` changed its stream if given: what
    loadgen.measures.reconcile makes of a stream that is not the one the server sent. With
    `speculative_config`, told the server's drafter (a `run --base-url` does not know it)."""
    import numpy as np
    import pandas as pd

    from loadgen.measures.summary import summarize

    frame = pd.read_parquet(directory / "requests.parquet")
    summary = json.loads((directory / "summary.json").read_text())
    if mutate is not None:
        mutate(frame)
    figures = {"spec_decode": summary["spec_decode"], "server": summary["server"]}
    empty = np.zeros(0, np.int64)
    config = summary["config"]
    if speculative_config is not None:
        config = {**config, "speculative_config": json.dumps(speculative_config)}
    out = summarize(frame, (empty, empty), config=config, server_figures=figures)
    return out["acceptance_client"]["reconciliation"]


def move_drafts(frame, n: int) -> tuple[int, int]:
    """Misattribute n accepted drafts: the first reported request's server count loses them, the
    second's gains them; the sum (and so the counter's agreement with it) is unchanged. With n =
    k + 1 a model drafter's first request always breaks the rule: its count then needs a step
    that drafted nothing or negative drafts past the end (tests/test_rule.py)."""
    rows = [i for i, v in enumerate(frame["server_accepted_tokens"]) if v == v and v is not None]
    a, b = rows[0], rows[1]
    frame.loc[a, "server_accepted_tokens"] -= n
    frame.loc[b, "server_accepted_tokens"] += n
    return a, b


def engine_record(path) -> dict[int, dict]:
    """The emulator's --step-log by loadgen's request index: what the engine did for each request,
    step by step (servers/emulator/api.py log_steps), the record loadgen's figures are held to.
    Per request: accepted (its steps' accepted drafts), streamed (those its chunks carried: each
    decode step's tokens beyond one), past_end (accepted but cut by max_tokens), verify steps,
    merged (decode steps that came inside another's chunk) and its chunks' tokens."""
    out = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        steps, decode = r["steps"], r["steps"][1:]
        out[int(r["id"].rsplit("-", 1)[1])] = {
            "accepted": sum(s[1] for s in steps),
            "streamed": sum(s[2] - 1 for s in decode),
            "past_end": sum(s[1] - (s[2] - 1) for s in decode),
            "verify": sum(1 for s in steps if s[0] > 0),
            "merged": len(decode) - len({s[3] for s in decode}),
            "steps": steps,
            "chunks": [sum(s[2] for s in steps if s[3] == c) for c in range(max(s[3] for s in steps) + 1)],
        }
    return out


def summed(record: dict, key: str) -> int:
    """One figure of the engine's record over every request."""
    return sum(r[key] for r in record.values())
