"""Running a sweep's cells: one server per variant, started, checked between cells,
restarted when it dies, and always stopped; each cell written as soon as it ends."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.measures.frame import request_frame
from loadgen.measures.rows import Rows
from loadgen.outputs import journal as journals
from loadgen.planning.plan import Cell, Plan
from loadgen.results import cells
from loadgen.results.cells import progress_dir
from loadgen.run.measurement import NotMeasured
from loadgen.sweep import cell as cellrun
from loadgen.sweep.cell import run_cell
from servers import engines
from servers.deployments import Deployment, default_port, render
from servers.launcher import LaunchError, Server, free_port

_CONNECTION_ERRORS = {"reset", "disconnected", "connection_refused", "connection_error"}


class Interrupted(Exception):
    """SIGINT or SIGTERM during a cell: the sweep stops, keeping every finished cell."""


@dataclass(frozen=True)
class Slot:
    """What one runner serves with: its variants, in order, on these GPUs and this port (None:
    a free port, chosen when each server starts)."""

    variants: tuple[str, ...]
    gpus: tuple[int, ...]
    port: int | None = None


class Reporter:
    """What the runner tells the user; the CLI gives it a progress bar."""

    def note(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def cell_started(self, cell: Cell) -> None:
        pass

    def request_started(self, rec) -> None:
        pass

    def record(self, rec) -> None:
        pass

    def cell_done(self, cell: Cell, status: str) -> None:
        pass

    def close(self) -> None:
        pass


def _port(slot: Slot) -> int:
    return slot.port if slot.port is not None else free_port()


def _cell_info(cell: Cell, plan: Plan, status: str, error: str | None, server: Server | None) -> dict:
    la = server.launch if server else None
    return {
        "key": cell.key,
        "variant": cell.variant,
        "workload": cell.workload,
        "repeat": cell.repeat,
        "workload_spec": plan.workload_spec(cell.workload),
        "mode": cell.mode,
        "level": cell.level,
        "status": status,
        "error": error,
        "finished_unix": time.time(),
        **({"profile_mismatch": plan.profile_mismatch} if plan.profile_mismatch else {}),
        "server": None
        if la is None or server is None
        else {"engine": la.engine, "command": la.shell(), "url": la.url, "pid": server.pid, "starts": server.starts},
    }


def failed_event(plan: Plan, cell: Cell, error: str, server: Server | None) -> tuple:
    """The "done" event of a cell that failed before measuring anything."""
    return (
        "done",
        cell,
        request_frame([]),
        {"cell": _cell_info(cell, plan, "failed", error, server), "completed": 0, "failed": 0},
    )


def write_result(root: Path, cell: Cell, frame, summary: dict, order: list[str]) -> None:
    """A finished cell into the store (and the cells table rebuilt)."""
    cells.write_cell(root, cell, frame, summary)
    cells.rebuild_table(root, order)


def _continued(plan: Plan, cell: Cell, journal: Path) -> str | None:
    """What a person should know of a cell a kill left in progress: continued (bounded by a
    request count: its journaled requests are kept and the rest sent), or restarted (bounded
    by time: a second full duration would not be the cell planned)."""
    done = journals.parts(journal)
    if not done:
        return None
    if plan.duration_s is not None:
        journals.clear(journal)
        return f"{cell.key}: restarted from the start (a cell bounded by --duration is not continued)"
    return f"{cell.key}: continued from its journal (part {done + 1}): its requests finished before are kept"


def _died(server: Server, rows: Rows) -> int | None:
    """The server's exit code if it died (waiting briefly when the cell saw broken
    connections, which can arrive a moment before the exit is visible), else None."""
    if not engines.starts(server.launch.engine):
        return None if server.alive() else -1
    broke = rows.n and rows.col("error_type").isin(_CONNECTION_ERRORS).any()
    if broke and server.proc is not None:
        try:
            server.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
    return server.exit_code()


def run_slot(
    root: Path,
    plan: Plan,
    dep: Deployment,
    slot: Slot,
    todo: list[Cell],
    workloads: dict,
    reporter: Reporter,
    order: list[str],
    api_key: str | None = None,
) -> None:
    """Every cell of `todo` whose variant is in the slot, round by round (--repeats), variant by
    variant: each round starts each variant's server afresh, so the repeats' spread holds what
    changes from one server start to the next too. Raises Interrupted when a cell was
    interrupted (after writing what it measured)."""
    for rnd, variant in ((r, v) for r in range(1, plan.repeats + 1) for v in slot.variants):
        cells = [c for c in todo if c.variant == variant and c.repeat == rnd]
        if not cells:
            continue
        launch = render(dep, variant, port=_port(slot), gpus=slot.gpus, executable=plan.executable)
        log = f"{variant}.log" if rnd == 1 else f"{variant}.r{rnd}.log"
        server = Server(launch, root / "servers" / log, api_key)
        try:
            for event in variant_events(plan, server, cells, workloads, reporter, journal_root=root):
                if event[0] == "note":
                    reporter.note(event[1])
                elif event[0] == "started":
                    reporter.cell_started(event[1])
                else:
                    _, cell, frame, summary = event
                    write_result(root, cell, frame, summary, order)
                    reporter.cell_done(cell, summary["cell"]["status"])
        finally:
            server.stop()


def variant_events(
    plan: Plan,
    server: Server,
    cells: list[Cell],
    workloads: dict,
    reporter: Reporter,
    journal_root: Path | None = None,
) -> Iterator[tuple]:
    """One variant's cells on its server (started here; stopping it is the caller's), as
    events: ("note", text), ("started", cell), ("done", cell, rows, summary). `reporter` sees
    each request. Raises Interrupted after the "done" of an interrupted cell. In a virtual sweep
    (plan.virtual) the server is not started: each cell is simulated on the engine its command
    line configures (loadgen.sweep.simulated). With `journal_root` (the sweep's results, on
    this host) each cell journals its requests as they end into its directory in progress
    (results.cells.progress_dir), and one a kill left there is continued, not restarted."""
    la = server.launch
    if plan.virtual:
        yield from _simulated(plan, la, cells, workloads)
        return
    yield "note", f"starting {la.variant}: {la.shell()}"
    try:
        server.start(progress=reporter.note)
    except LaunchError as e:
        yield "note", f"{la.variant}: {e}; its {len(cells)} cell(s) are recorded as failed"
        for cell in cells:
            yield failed_event(plan, cell, str(e), server)
        return
    for i, cell in enumerate(cells):
        if not server.alive():
            yield "note", f"{la.variant} server is gone (exit code {server.exit_code()}); restarting it"
            try:
                server.restart(progress=reporter.note)
            except LaunchError as e:
                for rest in cells[i:]:
                    yield failed_event(plan, rest, f"restart failed: {e}", server)
                return
        yield "started", cell
        journal = None if journal_root is None else progress_dir(journal_root, cell)
        if journal is not None and (note := _continued(plan, cell, journal)):
            yield "note", note
        try:
            at = cellrun.Server(
                la.url,
                la.served_model_name,
                api_key=server.api_key,
                on_record=reporter.record,
                on_start=reporter.request_started,
                goodput=plan.goodput,
                time_scale=plan.scale_for(cell) if engines.emulates(la.engine) else None,
            )
            res = run_cell(plan, cell, workloads[cell.workload], at, journal=journal)
        except NotMeasured as e:
            yield "note", f"{cell.key}: {e}"
            yield failed_event(plan, cell, str(e), server)
            continue
        if res is None:
            raise Interrupted
        status, error, died = _status(server, res)
        if died:
            yield "note", f"{cell.key}: {error}"
        res.summary["cell"] = _cell_info(cell, plan, status, error, server)
        yield "done", cell, res.rows, res.summary
        if res.interrupted:
            raise Interrupted


def _status(server: Server, res) -> tuple[str, str | None, bool]:
    """A measured cell's status, error and whether its server died: failed where its server
    died during it (or an external one stopped serving), where its time scale could not be set,
    or where no request succeeded; interrupted where the run was; else ok."""
    la = server.launch
    code = _died(server, res.rows)
    if code is not None:
        if not engines.starts(la.engine):
            return "failed", f"external server {la.url} stopped serving during the cell", True
        log = f"log {server.log_path}: {server.log_tail()}"
        return "failed", f"server exited with code {code} during the cell; {log}", True
    if res.interrupted:
        return "interrupted", None, False
    if res.summary.get("time_scale_error"):
        return "failed", res.summary["time_scale_error"], False
    if res.summary["completed"] == 0:
        errors = ", ".join(f"{k} {v}" for k, v in res.summary["errors"].items())
        return "failed", f"no request succeeded: {errors}", False
    return "ok", None, False


def _simulated(plan: Plan, la, cells: list[Cell], workloads: dict) -> Iterator[tuple]:
    from loadgen.sweep.simulated import simulate_cell

    yield "note", f"simulating {la.variant} in virtual time: {la.shell()}"
    for cell in cells:
        yield "started", cell
        try:
            res = simulate_cell(plan, cell, workloads[cell.workload], la.argv)
        except ValueError as e:
            yield failed_event(plan, cell, str(e), None)
            continue
        res.summary["cell"] = _cell_info(cell, plan, "ok", None, None)
        yield "done", cell, res.rows, res.summary


def pending(root: Path, plan: Plan, retry_failed: bool) -> list[Cell]:
    """The plan's cells not yet done (failed ones too with `retry_failed`; a cell whose load
    generator died, `cause` "worker", always: that failure says nothing about the server)."""
    done = cells.finished(root)
    keep = ("ok",) if retry_failed else cells.DONE
    return [
        c for c in plan.cells() if done.get(c.key, {}).get("status") not in keep or done[c.key].get("cause") == "worker"
    ]


def slots(plan: Plan, dep: Deployment) -> list[Slot]:
    """One slot (sequential) or, with `parallel`, as many as the GPUs hold servers, variants
    dealt round-robin, ports counting up from the plan's (vLLM's default: 8000; the emulator's:
    a free port each)."""
    port = plan.port if plan.port is not None else default_port(dep.engine)
    tp = dep.tensor_parallel_size
    gpus = list(plan.gpus)
    n = max(1, len(gpus) // tp) if plan.parallel else 1
    n = min(n, len(plan.variants))
    groups: list[list[str]] = [[] for _ in range(n)]
    for i, v in enumerate(plan.variants):
        groups[i % n].append(v)
    return [
        Slot(tuple(g), tuple(gpus[i * tp : (i + 1) * tp]), None if port is None else port + i)
        for i, g in enumerate(groups)
    ]
