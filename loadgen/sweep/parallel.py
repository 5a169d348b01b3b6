"""Variants side by side: one worker process per slot (its GPUs, its port), each running
`python -m loadgen.sweep.worker` (loadgen.sweep.job.run_worker) on the same results directory, where
every cell has a directory of its
own. The parent shows progress from the cells on disk and stops every worker on the way out."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from loadgen.results import cells
from loadgen.sweep.slots import Slot
from servers.launcher import spawn, stop_group


def worker_spec(slot: Slot, retry_failed: bool) -> str:
    return json.dumps(
        {"variants": list(slot.variants), "gpus": list(slot.gpus), "port": slot.port, "retry_failed": retry_failed}
    )


def worker_slot(spec: str) -> tuple[Slot, bool]:
    d = json.loads(spec)
    return Slot(tuple(d["variants"]), tuple(d["gpus"]), d["port"]), bool(d["retry_failed"])


def run_parallel(root: Path, the_slots: list[Slot], reporter, retry_failed: bool, api_key: str | None = None) -> bool:
    """Run the slots' workers to the end; True when interrupted (KeyboardInterrupt here, or a
    worker that exited interrupted)."""
    procs = []
    logs = root / "servers"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        for i, slot in enumerate(the_slots):
            log = open(logs / f"worker-{i}.log", "ab")
            argv = [sys.executable, "-m", "loadgen.sweep.worker", str(root), worker_spec(slot, retry_failed)]
            env = {"LOADGEN_API_KEY": api_key} if api_key else None  # not in argv: ps shows argv
            procs.append((slot, spawn(argv, stdout=log, stderr=log, env=env), log))
            reporter.note(
                f"worker {i}: variants {', '.join(slot.variants)} on GPUs "
                f"{','.join(map(str, slot.gpus))} (log {logs / f'worker-{i}.log'})"
            )
        start = len(cells.finished(root))
        while any(p.poll() is None for _, p, _ in procs):
            reporter.advance_to(len(cells.finished(root)) - start)
            time.sleep(1.0)
        reporter.advance_to(len(cells.finished(root)) - start)
        for i, (slot, p, _) in enumerate(procs):
            if p.returncode not in (0, 130):
                reporter.note(
                    f"worker {i} ({', '.join(slot.variants)}) exited with code {p.returncode}; "
                    f"see {logs / f'worker-{i}.log'}"
                )
        return any(p.returncode == 130 for _, p, _ in procs)
    finally:
        for _, p, log in procs:
            if p.poll() is None:
                stop_group(p, grace_s=60.0)
            log.close()
