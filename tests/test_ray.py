"""`loadgen sweep --ray` on a local Ray cluster: two nodes started here on 127.0.0.1, each
with two of a custom resource standing in for GPUs, serving the emulator.

One sweep (three variants, one task each, so both nodes get work) has the task measuring
`eagle`'s first cell killed mid-cell: that cell is failed with cause "worker", its next cell
is not run, everything else is written; `--resume --ray` runs those two and the sweep is
complete. The cells match a local sweep's in form. And one `loadgen run --workers 2 --ray`
sends its load from an actor on each node. Needs the `ray` extra (in `test`);
LOADGEN_REQUIRE_RAY=1 (as in .ci/run) makes its absence a failure instead of a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from servers.launcher import free_port
from tests.conftest import REPO, run_cli

# a Ray cluster up for the whole module, beside the other worker's tests but no timing test
# (tests/conftest.py); what is timed here is timed on a server running 2x slower than its script
pytestmark = [pytest.mark.engines, pytest.mark.background]

RESOURCE = "fake_gpu"
PLAN = [
    "--workloads",
    "chat,output=fixed:48",
    "--concurrency",
    "1,2",
    "--num-requests",
    "6",
    "--warmup",
    "0",
    "--quiet",
]
ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _ray_bin() -> str:
    try:
        import ray  # noqa: F401
    except ImportError:
        message = "Ray is not installed (pip install -e '.[test]' brings it)"
        pytest.fail(message) if os.environ.get("LOADGEN_REQUIRE_RAY") == "1" else pytest.skip(message)
    # the `ray` command of this Python: beside it (a plain install), else on PATH (a venv made
    # with --system-site-packages has Ray's scripts outside its own bin)
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or str(beside))


def _in_sessions(sids: set[int]) -> dict[int, str]:
    """Processes alive in the given sessions (pid -> command line): all started by this module."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] not in "ZX" and int(fields[3]) in sids:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except (OSError, IndexError, ValueError):
            pass
    return out


def _end_sessions(sids: set[int]) -> dict[int, str]:
    """SIGTERM to every process of the sessions, SIGKILL to what is left after 3 s (some of
    Ray's take 20 s over a SIGTERM); what is still there after 10 s more."""
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        for pid in _in_sessions(sids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while _in_sessions(sids) and time.monotonic() < deadline:
            time.sleep(0.2)
    return _in_sessions(sids)


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node on 127.0.0.1 (`ray start --block`, each in a session of its
    own); ended by their process groups, and checked that nothing of them is left."""
    ray_bin = _ray_bin()
    tmp = tempfile.mkdtemp(prefix="lgray-", dir="/tmp")  # short: Ray's socket paths must fit
    port = free_port()
    env = {**os.environ, **ENV}
    common = [
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        f"--resources={json.dumps({RESOURCE: 2})}",
        "--object-store-memory=80000000",
        "--block",
    ]
    procs = []
    log = open(Path(tmp) / "ray-start.log", "wb")
    try:
        procs.append(
            subprocess.Popen(
                [
                    ray_bin,
                    "start",
                    "--head",
                    f"--port={port}",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                    f"--temp-dir={tmp}",
                    *common,
                ],
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        )
        address = f"127.0.0.1:{port}"
        procs.append(
            subprocess.Popen(
                [ray_bin, "start", f"--address={address}", *common],
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        )
        wait = (
            "import ray, time, sys\nray.init(address=sys.argv[1], logging_level='ERROR')\n"
            "t = time.monotonic() + 90\nwhile len([n for n in ray.nodes() if n['Alive']]) < 2:\n"
            "    assert time.monotonic() < t, 'the second node did not join'\n    time.sleep(0.2)\n"
        )
        res = subprocess.run(
            [sys.executable, "-c", wait, address], env=env, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr[-2000:] + (Path(tmp) / "ray-start.log").read_text()[-2000:]
        yield address, env, {p.pid for p in procs}
    finally:
        leftover = _end_sessions({p.pid for p in procs})
        for p in procs:
            p.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        assert not leftover, leftover


class _Sweep:
    """`loadgen sweep --ray` running, its stdout and stderr each read by a thread of their own
    (one reader per pipe: a second one racing it loses lines)."""

    def __init__(self, out: Path, address: str, env: dict, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen",
                "sweep",
                "--output",
                str(out),
                "--ray",
                address,
                "--ray-resource",
                RESOURCE,
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **env},
        )
        self.lines: list[str] = []  # stderr, line by line
        self.stdout: list[str] = []
        self.seen = threading.Event()  # the eagle c1 cell has started
        self._readers = [
            threading.Thread(target=self._read_stderr, daemon=True),
            threading.Thread(target=lambda: self.stdout.extend(self.proc.stdout or ()), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr or ():
            self.lines.append(line)
            if "eagle/chat/c1: started on" in line:
                self.seen.set()

    def wait(self, timeout: float) -> int:
        """The exit code, once both pipes are read to their end."""
        self.proc.wait(timeout=timeout)
        for t in self._readers:
            t.join(10)
        return self.proc.returncode

    def __enter__(self) -> _Sweep:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _cells(out: Path) -> dict[str, dict]:
    return {
        json.loads(p.read_text())["cell"]["key"]: json.loads(p.read_text())
        for p in (out / "cells").glob("*/*/*/summary.json")
    }


def test_a_sweep_on_ray_spreads_its_cells_and_a_killed_task_is_redone(cluster, tmp_path):
    address, env, sids = cluster
    out = tmp_path / "sweep"
    with _Sweep(out, address, env, "--variants", "baseline,ngram,eagle", *PLAN) as sweep:
        lines = sweep.lines
        assert sweep.seen.wait(120), "".join(lines)
        pid = int(next(x for x in lines if "eagle/chat/c1: started on" in x).rsplit("pid ", 1)[1].rstrip(")\n"))
        time.sleep(0.3)  # mid-cell: six requests of 48 tokens take about a second
        os.kill(pid, signal.SIGKILL)
        returncode = sweep.wait(timeout=180)
    err = "".join(lines)
    assert returncode == 1, err
    assert "Traceback" not in err
    cells = _cells(out)
    assert {k for k, s in cells.items() if s["cell"]["status"] == "ok"} == {
        f"{v}/chat/c{c}" for v in ("baseline", "ngram") for c in (1, 2)
    }
    lost = cells["eagle/chat/c1"]["cell"]
    assert lost["status"] == "failed" and lost["cause"] == "worker" and "died" in lost["error"]
    assert "eagle/chat/c2" not in cells
    assert "eagle: 1 cell(s) not run" in err
    # the three tasks ran on both nodes (two slots of the resource per node)
    nodes = {x.split("Ray node ")[1].split(",")[0] for x in lines if ": started on " in x}
    assert len(nodes) == 2, err
    # the killed worker's emulator went with it (servers die with the process that started
    # them), and the finished tasks stopped theirs
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _servers(sids):
        time.sleep(0.2)
    assert not _servers(sids)

    with _Sweep(out, address, env, "--resume") as sweep:
        returncode = sweep.wait(timeout=180)
    out_text, err = "".join(sweep.stdout), "".join(sweep.lines)
    assert returncode == 0, err
    cells = _cells(out)
    assert len(cells) == 6 and all(s["cell"]["status"] == "ok" for s in cells.values())
    assert cells["eagle/chat/c1"]["completed"] == 6 and "cause" not in cells["eagle/chat/c1"]["cell"]
    assert "eagle" in out_text and (out / "servers" / "eagle.log").exists()
    table = pd.read_parquet(out / "cells.parquet")
    assert len(table) == 6 and (table["status"] == "ok").all()

    # equal in form to a local sweep's cells
    local = tmp_path / "local"
    res = run_cli(
        "sweep",
        "--output",
        str(local),
        "--variants",
        "eagle",
        *PLAN[:2],
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--warmup",
        "0",
        "--quiet",
    )
    assert res.returncode == 0, res.stderr
    here, there = _cells(local)["eagle/chat/c1"], cells["eagle/chat/c1"]
    assert set(here) == set(there)
    assert set(there["cell"]) - set(here["cell"]) == {"ray"}
    assert set(there["cell"]["ray"]) == {"node_id", "host", "pid"}
    a = pd.read_parquet(local / "cells" / "eagle" / "chat" / "c1" / "requests.parquet")
    b = pd.read_parquet(out / "cells" / "eagle" / "chat" / "c1" / "requests.parquet")
    assert list(a.columns) == list(b.columns) and (a.dtypes == b.dtypes).all()
    assert list(pd.read_parquet(local / "cells.parquet").columns) == list(table.columns)


def _servers(sids: set[int]) -> list[str]:
    return [cmd for cmd in _in_sessions(sids).values() if "servers.emulator" in cmd]


def test_without_a_cluster_or_the_resource_it_says_so_in_one_line(cluster, tmp_path):
    address, env, _ = cluster
    res = run_cli("sweep", "--output", str(tmp_path / "a"), "--ray", address, "--ray-resource", "h100", *PLAN, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("loadgen: error: --ray") and "'h100'" in last and "--ray-resource" in last
    assert not (tmp_path / "a" / "manifest.json").exists()  # nothing half-made: checked before the plan is written
    res = run_cli("sweep", "--output", str(tmp_path / "b"), "--ray", f"127.0.0.1:{free_port()}", *PLAN, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("loadgen: error: --ray 127.0.0.1:") and "no Ray cluster answers there" in last


def test_one_runs_load_from_actors_on_two_nodes(cluster, server, tmp_path):
    """`loadgen run --workers 2 --ray`: one actor per node, the one schedule split, the records
    merged onto this process's clock and measured as a local run's."""
    address, env, _ = cluster
    url = server(
        "--ttft-ms", "40", "--prefill-us-per-token", "0", "--step-ms", "10", "--chunk-tokens", "1", "--time-scale", "2"
    )
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--workers",
        "2",
        "--ray",
        address,
        "--concurrency",
        "4",
        "--num-requests",
        "40",
        "--output-len",
        "8",
        "--quiet",
        "--output",
        str(tmp_path),
        env=env,
    )
    assert res.returncode == 0, res.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    f = pd.read_parquet(tmp_path / "requests.parquet")
    assert s["completed"] == 40 and sorted(f["index"]) == list(range(40))
    assert (f["worker"] == f["index"] % 2).all() and (f["completion_tokens"] == 8).all()
    nodes = s["sending"]["worker_nodes"]
    assert len({n["node_id"] for n in nodes.values()}) == 2  # spread over both nodes
    assert s["time_scale"] == 2.0  # the server's script in its own time: 40 ms to the first token, 10 between
    assert abs(s["ttft_ms"]["p50"] - 40) < 3 and abs(s["tpot_ms"]["p50"] - 10) < 2
    t0 = s["config"]["clock"]["t0_ns"]
    assert (f["t_send_ns"] >= t0 - 1_000_000).all() and (f["t_end_ns"] > f["t_send_ns"]).all()
    assert set(s["self_check"]["workers"]) == {"0", "1"} and s["config"]["workers_on_ray"]


def test_max_error_rate_is_one_judgement_over_all_actors(cluster, server, tmp_path):
    """--max-error-rate with `--workers 2 --ray` against a server failing every request: the
    driver judges the actors' finished requests together and halts both, once."""
    from tests.test_workers import FAILING, assert_stopped_once

    address, env, _ = cluster
    url = server(*FAILING)
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--workers",
        "2",
        "--ray",
        address,
        "--concurrency",
        "4",
        "--num-requests",
        "2000",
        "--output-len",
        "4",
        "--max-error-rate",
        "0.5",
        "--quiet",
        "--output",
        str(tmp_path),
        env=env,
    )
    assert_stopped_once(res, tmp_path, 2000)


def test_an_emulator_sweep_asks_for_cpus_by_default(cluster, tmp_path):
    """Tried as a new user would on a CPU-only cluster: the emulator needs no GPU, so the sweep
    runs without --ray-resource (it used to refuse: "the cluster has 0 'GPU'"), and with
    `--ray-resource CPU` too (it used to end in Ray's traceback)."""
    address, env, _ = cluster
    for extra in ([], ["--ray-resource", "CPU"]):
        out = tmp_path / ("default" if not extra else "cpu")
        res = run_cli(
            "sweep",
            "--output",
            str(out),
            "--ray",
            address,
            "--variants",
            "baseline",
            "--workloads",
            "chat,output=fixed:16",
            "--concurrency",
            "1",
            "--num-requests",
            "2",
            "--warmup",
            "0",
            "--quiet",
            *extra,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
        summary = json.loads(next((out / "cells").glob("*/*/*/summary.json")).read_text())
        assert summary["completed"] == 2 and summary["cell"]["ray"]["node_id"]


def test_a_ray_run_killed_midway_keeps_what_its_actors_finished(cluster, server, tmp_path):
    """`loadgen run --workers 2 --ray --output DIR`: the actors' finished requests are fetched
    twice a second and journaled on the driver's host as they go, so a run killed outright
    keeps them: `loadgen summarize` measures every request journaled, each once, from both
    actors. Without it (before) the actors sent their records only at the end, and a kill lost all."""
    from loadgen.outputs import journal
    from tests.conftest import REPO

    address, env, _ = cluster
    url = server("--ttft-ms", "5", "--prefill-us-per-token", "0", "--step-ms", "4", "--chunk-tokens", "1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--base-url",
            url,
            "--workers",
            "2",
            "--ray",
            address,
            "--concurrency",
            "4",
            "--num-requests",
            "100000",
            "--output-len",
            "8",
            "--quiet",
            "--output",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists(tmp_path) and journal.read(tmp_path).rows >= 80:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        kept = journal.read(tmp_path)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert kept.rows >= 80 and {r.worker for r in kept.records} == {0, 1}
    res = run_cli("summarize", str(tmp_path), env=env)
    assert res.returncode == 0, res.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    f = pd.read_parquet(tmp_path / "requests.parquet")
    assert s["journal"]["cut"] and f["index"].is_unique and len(f) >= kept.rows
    assert set(r.index for r in kept.records) <= set(f["index"])  # what was journaled before the kill
    assert (f["worker"] == f["index"] % 2).all() and f["ok"].all() and (f["completion_tokens"] == 8).all()
    assert s["completed"] == len(f)
