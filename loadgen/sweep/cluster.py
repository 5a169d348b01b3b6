"""A sweep across a Ray cluster (`loadgen sweep --ray [ADDRESS]`).

Each variant's pending cells become one Ray task that asks for what that deployment's server
runs on (tensor-parallel-size of it: `GPU` for vLLM, `CPU` for the emulator and llama.cpp, or a
custom resource named by --ray-resource), so Ray places it on a node that has them. The task starts the
variant's server there, on a free port, and drives
every cell's load from the same node: no measured byte crosses the network between nodes.
It is a streaming generator: it yields each cell as the cell ends (its requests and summary,
plain data), and the driver writes it into the one result store on its own disk, as a local
sweep does, so `--resume` works the same. A task that dies (its node lost, its worker killed)
leaves the cell it was measuring failed with cause "worker" (which `--resume` runs again: it
says nothing about the server) and the variant's later cells pending.

The plan travels as data; the deployment (a catalog name, or a TOML path) and data sets are
opened on the node, so a TOML file or a --data-dir must exist at the same path there.
"""

from __future__ import annotations

import os
import queue
import socket
import tempfile
import threading
from pathlib import Path

from loadgen.backends.raycluster import ClusterError, resource_request
from loadgen.planning.plan import Cell, Plan
from loadgen.results import cells
from loadgen.sweep.slots import Reporter, failed_event, variant_events, write_result


def _variant_task(plan_dict: dict, variant: str, keys: list[str], resource: str, api_key: str | None):
    """In a Ray worker: one variant's cells, yielded as events (see the module docstring)."""
    import ray

    from loadgen.sweep.cell import workloads_for
    from servers.deployments import render
    from servers.launcher import Server, free_port

    plan = Plan.from_dict(plan_dict)
    dep = plan.deployment_object()
    workloads = workloads_for(plan)
    cells = [c for c in plan.cells() if c.key in set(keys)]
    gpus = tuple(int(g) for g in ray.get_gpu_ids()) if resource == "GPU" else None
    where = {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}
    with tempfile.TemporaryDirectory(prefix="loadgen-") as tmp:
        log = Path(tmp) / f"{variant}.log"
        launch = render(dep, variant, port=free_port(), gpus=gpus or None, executable=plan.executable)
        server = Server(launch, log, api_key)
        try:
            for event in variant_events(plan, server, cells, workloads, Reporter()):
                if event[0] == "started":
                    yield "started", event[1].key, where
                elif event[0] == "done":
                    _, cell, frame, summary = event
                    summary["cell"]["ray"] = where
                    yield "done", cell.key, frame, summary
                else:
                    yield event
        finally:
            server.stop()
            text = log.read_text(errors="replace") if log.exists() else ""
        yield "log", variant, text


def run_on_ray(
    ray,
    root: Path,
    plan: Plan,
    dep,
    todo: list[Cell],
    reporter: Reporter,
    order: list[str],
    resource: str,
    api_key: str | None,
) -> bool:
    """Every pending cell on the cluster, variant by variant as tasks; True when interrupted."""
    per_server = dep.tensor_parallel_size
    need = resource_request(resource, per_server)
    task = ray.remote(_variant_task)
    by_key = {c.key: c for c in todo}
    events: queue.Queue = queue.Queue()
    gens = {}
    for variant in plan.variants:
        keys = [c.key for c in todo if c.variant == variant]
        if keys:
            try:
                gens[variant] = task.options(
                    num_returns="streaming", max_retries=0, name=f"loadgen sweep {variant}", **need
                ).remote(plan.to_dict(), variant, keys, resource, api_key)
            except (ValueError, TypeError) as e:  # a resource Ray will not take: nothing has started
                for gen in gens.values():
                    try:
                        ray.cancel(gen, force=True)
                    except Exception:  # noqa: BLE001 - best effort: the sweep stops anyway
                        pass
                first = (str(e).strip().splitlines() or [""])[0]
                raise ClusterError(
                    f"--ray-resource {resource}: Ray refuses it ({first}); name a resource the cluster's nodes have"
                ) from None

    def drain(variant: str, gen) -> None:
        try:
            for ref in gen:
                events.put((variant, ray.get(ref)))
        except Exception as e:  # the task died, or raised: its variant's events end here
            first = (str(e).strip().splitlines() or [""])[0]
            events.put((variant, ("lost", f"{type(e).__name__}: {first}")))
        events.put((variant, None))

    threads = [threading.Thread(target=drain, args=item, daemon=True) for item in gens.items()]
    for t in threads:
        t.start()
    running: dict[str, str] = {}  # variant -> the cell key it is measuring
    open_tasks = len(threads)
    interrupted = False
    try:
        while open_tasks:
            variant, event = events.get()
            if event is None:
                open_tasks -= 1
            elif event[0] == "started":
                running[variant] = event[1]
                reporter.cell_started(by_key[event[1]])
                w = event[2]
                reporter.note(f"{event[1]}: started on {w['host']} (Ray node {w['node_id'][:12]}, pid {w['pid']})")
            elif event[0] == "done":
                _, key, frame, summary = event
                running.pop(variant, None)
                write_result(root, by_key[key], frame, summary, order)
                reporter.cell_done(by_key[key], summary["cell"]["status"])
            elif event[0] == "note":
                reporter.note(event[1])
            elif event[0] == "log":
                (root / "servers").mkdir(parents=True, exist_ok=True)
                (root / "servers" / f"{event[1]}.log").write_text(event[2])
            elif event[0] == "lost":
                _lost(root, plan, variant, running.pop(variant, None), event[1], by_key, reporter, order)
    except KeyboardInterrupt:
        interrupted = True
        for gen in gens.values():
            ray.cancel(gen)
        for t in threads:
            t.join(timeout=30)
    return interrupted


def _lost(
    root: Path, plan: Plan, variant: str, key: str | None, why: str, by_key: dict, reporter: Reporter, order: list[str]
) -> None:
    """A variant's task ended without finishing: the cell it was measuring is failed (cause
    "worker": --resume runs it again); cells it had not begun stay pending."""
    if key is not None:
        cell = by_key[key]
        _, _, frame, summary = failed_event(plan, cell, f"the Ray task measuring it died ({why})", None)
        summary["cell"]["cause"] = "worker"
        write_result(root, cell, frame, summary, order)
        reporter.cell_done(cell, "failed")
        reporter.note(f"{key}: failed, its Ray task died ({why}); --resume runs it again")
    left = [k for k, c in by_key.items() if c.variant == variant and not cells.cell_dir(root, c).exists()]
    if left:
        reporter.note(f"{variant}: {len(left)} cell(s) not run; loadgen sweep --resume --output {root} runs them")
