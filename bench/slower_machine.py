"""A slower 2-core machine, emulated on this one with CPU quotas (cgroup v1 `cpu` controller),
for the figures docs/performance.md gives "on a slower machine": no slower machine was at hand.

Each process that matters gets a cgroup of its own with `cpu.cfs_quota_us` QUOTA per PERIOD
(default 1,050 per 2,500 us: 0.42 of a core, as if each had its own core 2.4x slower), with
the scheduler's bandwidth slice at 0.5 ms: the command given (the client: loadgen, or a bench
script) and every emulator it starts (`servers.emulator`, found as they appear and moved into
a cgroup each). `--shared` puts them all in one cgroup instead (the harsher emulation: one
process's burst stalls the others). Before the command it prints how long a pure-Python loop of
10M additions takes inside such a cgroup and outside it (the figure that says how much slower
the emulated machine is).

    sudo python3 -m bench.slower_machine -- python3 -m bench.sweep_default      # the recorded figures
    sudo python3 -m bench.slower_machine --shared --quota-cpus 0.4 -- python3 -m bench.sweep_default
    sudo python3 -m bench.slower_machine --loop-only                            # the loop figure

Needs root and cgroup v1's cpu controller at /sys/fs/cgroup/cpu (says so in one line when not).
The cgroups are removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpu")
SLICE = Path("/proc/sys/kernel/sched_cfs_bandwidth_slice_us")
LOOP = (
    "import time\nt = time.perf_counter()\nx = 0\nfor i in range(10_000_000):\n    x += i\n"
    "print(time.perf_counter() - t)"
)


class Group:
    """One cgroup with a CPU quota, removed by `close`."""

    def __init__(self, name: str, quota_us: int, period_us: int) -> None:
        self.path = ROOT / name
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.cfs_period_us").write_text(str(period_us))
        (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))

    def add(self, pid: int) -> None:
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            pass  # gone already

    def close(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():  # back to the root group
            try:
                (ROOT / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        self.path.rmdir()


def _loop_s(group: Group | None) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: group.add(os.getpid())) if group else None,
    )
    return float(proc.communicate()[0])


def _emulators() -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"servers.emulator" in cmd:
                out.add(int(entry.name))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quota-cpus", type=float, default=0.42, help="each cgroup's share of one core")
    ap.add_argument("--period-us", type=int, default=2500)
    ap.add_argument("--slice-us", type=int, default=500, help="the scheduler's bandwidth slice")
    ap.add_argument("--shared", action="store_true", help="one cgroup for the command and every emulator")
    ap.add_argument("--loop-only", action="store_true", help="print the loop figure and stop")
    ap.add_argument("command", nargs="*", help="the command to run slowed (after --)")
    args = ap.parse_args()
    if not (ROOT / "cgroup.procs").exists() or os.geteuid() != 0:
        sys.exit("slower_machine: needs root and cgroup v1's cpu controller at /sys/fs/cgroup/cpu")
    if not args.loop_only and not args.command:
        sys.exit("slower_machine: give the command to run after --, or --loop-only")
    quota = int(args.quota_cpus * args.period_us)
    old_slice = SLICE.read_text().strip() if SLICE.exists() else None
    groups: list[Group] = []
    try:
        if SLICE.exists():
            SLICE.write_text(str(args.slice_us))

        def group(name: str) -> Group:
            g = Group(f"loadgen-slow-{os.getpid()}-{name}", quota, args.period_us)
            groups.append(g)
            return g

        here = _loop_s(None)
        slowed = _loop_s(group("loop"))
        print(
            f"slower_machine: each cgroup {quota} us per {args.period_us} us ({args.quota_cpus:g} of a core), "
            f"slice {args.slice_us} us; a pure-Python loop of 10M additions: {slowed:.2f} s in one, "
            f"{here:.2f} s outside ({slowed / here:.1f}x slower)",
            flush=True,
        )
        if args.loop_only:
            return
        main_group = group("client")
        proc = subprocess.Popen(args.command, preexec_fn=lambda: main_group.add(os.getpid()))
        placed: set[int] = set()
        done = threading.Event()

        def place() -> None:  # every emulator into a cgroup of its own (or the shared one)
            while not done.wait(0.05):
                for pid in _emulators() - placed:
                    placed.add(pid)
                    (main_group if args.shared else group(f"emulator-{pid}")).add(pid)

        watcher = threading.Thread(target=place, daemon=True)
        watcher.start()
        code = proc.wait()
        done.set()
        watcher.join()
        print(f"slower_machine: {len(placed)} emulator process(es) slowed; the command exited {code}")
        sys.exit(code)
    finally:
        if old_slice is not None:
            SLICE.write_text(old_slice)
        for g in groups:
            try:
                g.close()
            except OSError:
                pass


if __name__ == "__main__":
    main()
