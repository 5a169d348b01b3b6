"""What the emulator's own Python work costs per sequence per engine step, by part.

The real-time emulator must do a step's work (apply it, render and write every sequence's
chunk, plan the next step) inside the step's modeled time; what it costs decides how many
streams a machine emulates in real time, and so the time scale `loadgen sweep` needs. This
drives the engine and the API's streaming sinks in one process, without sleeping or sockets
(chunks go to a sink that only counts bytes), under a closed loop of N users: every finished
request is replaced at once by the next of the workload. Per variant, it prints the CPU time
per chunk (one sequence in one step) of each part:

- submit: tokenizing the prompt, generating the emulated output, acceptance draws (per request,
  shown per chunk);
- plan: scheduling a step and costing it;
- commit: applying a step: verification, emitting tokens, the n-gram lookup for the next drafts,
  the statistics;
- render: the SSE chunk of each emission (JSON, chunked framing) handed to the connection.

With --server, the same work through the real server: the emulator pinned to CPU 0 at time
scale 4 (so that it keeps up), `loadgen run` pinned to CPU 1, and each process's CPU time over
the run (from /proc) per chunk it wrote or read: sockets, HTTP and the event loop included.

    python -m bench.emulator_hotpath                 # 64 users, 1,024 requests per variant
    python -m bench.emulator_hotpath --users 128 --requests 512
    python -m bench.emulator_hotpath --server        # through HTTP: 64 users, 256 requests per variant
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from servers.embedded import emulator_server  # noqa: E402
from servers.emulator import profile as profiles  # noqa: E402
from servers.emulator.api import EmulatorAPI  # noqa: E402
from servers.emulator.content import chat_prompt  # noqa: E402
from servers.emulator.engine import Engine  # noqa: E402
from servers.emulator.spec import parse  # noqa: E402
from workloads import open_workload  # noqa: E402

VARIANTS = {
    "baseline": None,
    "ngram": '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, "prompt_lookup_max": 7}',
    "eagle": '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}',
}


class NullConnection:
    """What the streaming sink writes to: counts bytes, as a socket would take them."""

    def __init__(self) -> None:
        self.bytes = 0

    def write_chunk(self, data: bytes) -> None:
        self.bytes += len(data)

    def start_stream(self) -> None:
        pass

    def end_stream(self) -> None:
        self.bytes += 5


def measure(variant: str, workload: str, users: int, requests: int) -> dict:
    prof = profiles.load("h100-llama-3.1-8b")
    engine = Engine(prof, parse(VARIANTS[variant]))
    wl = open_workload(workload)
    source = wl.requests(None, 0)
    loop = asyncio.new_event_loop()
    conn = NullConnection()
    parts = {"submit": 0.0, "plan": 0.0, "commit": 0.0, "render": 0.0}
    clock = time.process_time
    submitted = chunks = steps = 0
    now = 0.0

    def submit() -> None:
        nonlocal submitted
        req = next(source)
        opts = {"include_usage": True, "continuous_usage_stats": True}
        p = {"model": "m", "opts": opts, "return_token_ids": False, "logprobs": None}  # as _parse gives it
        done = loop.create_future()
        sink = EmulatorAPI._stream_sink(conn, False, f"cmpl-{submitted}", p, {}, done)  # type: ignore[arg-type]
        text = req.prompt if req.prompt is not None else chat_prompt(req.as_messages())
        t = clock()
        engine.submit(str(submitted), text, req.max_tokens, arrival=now, ignore_eos=req.ignore_eos, sink=sink)
        parts["submit"] += clock() - t
        submitted += 1

    for _ in range(users):
        submit()
    while engine.has_work:
        t = clock()
        step = engine.plan(now)
        assert step is not None  # it has work
        parts["plan"] += clock() - t
        now += step.duration
        t = clock()
        emissions = engine.commit(step, now)
        parts["commit"] += clock() - t
        t = clock()
        for em in emissions:
            em.seq.sink(em)  # type: ignore[misc]  # every request here has its stream sink
        parts["render"] += clock() - t
        steps += 1
        chunks += len(emissions)
        for em in emissions:
            if em.finished and submitted < requests:
                submit()
    loop.close()
    return {
        "chunks": chunks,
        "steps": steps,
        "modeled_s": now,
        **{k: v / chunks * 1e6 for k, v in parts.items()},
        "total": sum(parts.values()) / chunks * 1e6,
        "cpu_per_modeled_s": sum(parts.values()) / now,
    }


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(variant: str, workload: str, users: int, requests: int) -> dict:
    """CPU per chunk of the emulator and of loadgen, through HTTP."""
    spec = VARIANTS[variant]
    args = ["--time-scale", "4"] + (["--speculative-config", spec] if spec else [])
    pinned = (os.cpu_count() or 1) >= 2
    with (
        emulator_server("meta-llama/Llama-3.1-8B-Instruct", *args, cpu=0 if pinned else None) as srv,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before = _cpu_s(srv.pid)
        cmd = ([("taskset"), "-c", "1"] if pinned else []) + [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--base-url",
            srv.url,
            "--workload",
            workload,
            "--concurrency",
            str(users),
            "--num-requests",
            str(requests),
            "--quiet",
            "--output",
            tmp,
        ]
        usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, capture_output=True, check=True, cwd=Path(__file__).resolve().parents[1])
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        emulator = _cpu_s(srv.pid) - before
        client = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
        frame = pd.read_parquet(Path(tmp) / "requests.parquet")
    chunks = int(frame["n_chunks"].sum())
    return {"chunks": chunks, "emulator": emulator / chunks * 1e6, "client": client / chunks * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--requests", type=int, default=None, help="[default: 1,024; --server: 256]")
    ap.add_argument("--server", action="store_true", help="through the real server and client (HTTP)")
    args = ap.parse_args()
    if args.server:
        n = args.requests or 256
        print(
            f"{args.users} users, {n} requests of 128 tokens per variant through HTTP; CPU microseconds per "
            "chunk (client: its whole process, start-up included)"
        )
        print(f"{'variant':>9} {'workload':>10} {'chunks':>7} {'emulator':>9} {'client':>7}")
        for workload in ("chat", "code-edit"):
            for variant in VARIANTS:
                r = serve(variant, f"{workload},output=fixed:128", args.users, n)
                print(f"{variant:>9} {workload:>10} {r['chunks']:>7} {r['emulator']:>9.1f} {r['client']:>7.1f}")
        return
    args.requests = args.requests or 1024
    print(
        f"{args.users} users, {args.requests} requests of 128 tokens per variant; CPU microseconds per chunk "
        "(one sequence in one step)"
    )
    print(
        f"{'variant':>9} {'workload':>10} {'chunks':>7} {'submit':>7} {'plan':>6} {'commit':>7} "
        f"{'render':>7} {'total':>7} {'CPU s per modeled s':>20}"
    )
    for workload in ("chat", "code-edit"):
        for variant in VARIANTS:
            r = measure(variant, f"{workload},output=fixed:128", args.users, args.requests)
            print(
                f"{variant:>9} {workload:>10} {r['chunks']:>7} {r['submit']:>7.1f} {r['plan']:>6.1f} "
                f"{r['commit']:>7.1f} {r['render']:>7.1f} {r['total']:>7.1f} {r['cpu_per_modeled_s']:>20.3f}"
            )


if __name__ == "__main__":
    main()
