"""The sweep's progress bar: cells done of all, the cell running, its live output throughput,
and the ETA; notes (servers starting, failures) printed above it."""

from __future__ import annotations

import sys
import time

from loadgen.planning.plan import Cell
from loadgen.sweep.slots import Reporter


class BarReporter(Reporter):
    def __init__(self, total: int, quiet: bool) -> None:
        from tqdm import tqdm

        tqdm.monitor_interval = 0  # no monitor thread in a process that measures latency
        self._tqdm = tqdm
        self.bar = tqdm(
            total=total,
            unit="cell",
            disable=quiet or None,
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} cells [{elapsed}<{remaining}{postfix}]",
        )
        self.quiet = quiet
        self.failed = 0
        self._tokens = 0
        self._t0 = time.monotonic()
        self._shown = 0.0

    def note(self, message: str) -> None:
        self._tqdm.write(message, file=sys.stderr)

    def cell_started(self, cell: Cell) -> None:
        self._tokens, self._t0 = 0, time.monotonic()
        self.bar.set_description_str(cell.key, refresh=False)
        self.bar.refresh()

    def record(self, rec) -> None:
        if rec.warmup:
            return
        if rec.ok:
            self._tokens += rec.usage_completion_tokens or 0
        now = time.monotonic()
        if now - self._shown >= 0.5 and not self.quiet:
            self._shown = now
            rate = self._tokens / (now - self._t0) if now > self._t0 else 0.0
            self.bar.set_postfix_str(f"{rate:,.0f} tok/s" + (f", {self.failed} failed" if self.failed else ""))

    def cell_done(self, cell: Cell, status: str) -> None:
        self.failed += status == "failed"
        self.bar.update(1)

    def advance_to(self, n: int) -> None:
        """Parallel sweeps: cells finished by the workers."""
        if n > self.bar.n:
            self.bar.update(n - self.bar.n)

    def close(self) -> None:
        self.bar.close()


class LiveReporter(Reporter):
    """Another reporter, plus the client's live metrics (loadgen.outputs.live) labelled by cell."""

    def __init__(self, inner: Reporter, live, model_name: str, planned: int) -> None:
        self.inner, self.live, self.model_name = inner, live, model_name
        live.sweep_planned(planned)

    def note(self, message: str) -> None:
        self.inner.note(message)

    def cell_started(self, cell: Cell) -> None:
        self.live.context(self.model_name, cell.variant, cell.workload, cell.level_label)
        self.live.cell_started(cell.variant, cell.workload, cell.level_label)
        self.inner.cell_started(cell)

    def request_started(self, rec) -> None:
        self.live.started(rec)

    def record(self, rec) -> None:
        self.live.finished(rec)
        self.inner.record(rec)

    def cell_done(self, cell: Cell, status: str) -> None:
        self.live.cell_done(status)
        self.inner.cell_done(cell, status)

    def close(self) -> None:
        self.inner.close()
