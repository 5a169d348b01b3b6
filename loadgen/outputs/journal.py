"""The run's journal: every finished request appended to the results directory as the run
goes, so a run killed outright (SIGKILL, the OOM killer, a lost session) keeps what finished,
and finished requests need not stay in memory.

Format (docs/metrics.md, "Long runs"): `records-W.jsonl` per load-generating process W (0 for
one process), UTF-8 JSON lines, each an object with one key:
- `{"start": {...}}` first: the process's clock origin (`t0_ns`, `t0_unix`), `worker`,
  `time_scale`;
- `{"r": {...}}` a finished request's record (loadgen.client.record.RequestRecord's fields,
  raw times on CLOCK_MONOTONIC, arrays as lists), written once, when it ends (a request cut off
  by a stopped run, when the run ends);
- `{"lag": [[at_ns, lag_ns], ...]}` the event loop's lag ticks since the last flush;
- `{"end": {...}}` last, when the process's share of the run ended normally.
Lines are buffered and written with the buffer flushed to the OS every `FLUSH_S`: a process
killed outright loses at most what finished in the last quarter second. A line cut short by the
kill is skipped when read (and counted). `config.json` beside them is the run's configuration
as known before the load started.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from dataclasses import dataclass, field, fields
from pathlib import Path

from loadgen.client.record import RequestRecord

FLUSH_S = 0.25
CONFIG = "config.json"
PATTERN = "records-*.jsonl"
_ARRAYS = ("chunk_t_ns", "chunk_usage", "chunk_chars")
_FIELDS = [f.name for f in fields(RequestRecord)]


def path_for(directory: str | Path, worker: int) -> Path:
    return Path(directory) / f"records-{worker}.jsonl"


def encode(rec: RequestRecord, text: bool = False) -> dict:
    """The record as JSON-able data; its streamed text only with `text` (a run counting tokens
    with --tokenizer needs it; otherwise the journal holds no text, as requests.parquet)."""
    out = {}
    for name in _FIELDS:
        v = getattr(rec, name)
        out[name] = v.tolist() if isinstance(v, array) else v
    if not text:
        out["chunk_text"] = None
    return out


def decode(obj: dict) -> RequestRecord:
    kw = {k: v for k, v in obj.items() if k in _FIELDS}
    for name in _ARRAYS:
        kw[name] = array("q", kw.get(name) or ())
    return RequestRecord(**kw)


class Journal:
    """One process's journal file, written from its event loop: `add` a finished record,
    `start` the flushing timer (and what it reads the loop's lag from), `close` at the end."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self._f = open(path, "w", encoding="utf-8")
        self._lines = [json.dumps({"start": header})]
        self._lag = None
        self._lag_done = 0
        self._timer: asyncio.TimerHandle | None = None

    def add(self, rec: RequestRecord, text: bool = False) -> None:
        self._lines.append(json.dumps({"r": encode(rec, text)}, separators=(",", ":")))

    def start(self, lag_monitor=None) -> None:
        self._lag = lag_monitor
        self._tick()

    def _tick(self) -> None:
        self.flush()
        self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self._tick)

    def _take_lag(self) -> None:
        mon = self._lag
        if mon is not None and len(mon.lag_ns) > self._lag_done:
            n = len(mon.lag_ns)
            ticks = list(zip(mon.at_ns[self._lag_done : n], mon.lag_ns[self._lag_done : n]))
            self._lines.append(json.dumps({"lag": ticks}, separators=(",", ":")))
            self._lag_done = n

    def flush(self) -> None:
        self._take_lag()
        if self._lines:
            self._f.write("\n".join(self._lines) + "\n")
            self._f.flush()
            self._lines.clear()

    def close(self, end: dict | None = None) -> None:
        """Flush what is left; `end` (the process's share ended normally) marks it whole."""
        if self._timer is not None:
            self._timer.cancel()
        self._take_lag()
        if end is not None:
            self._lines.append(json.dumps({"end": end}))
        self.flush()
        self._f.close()


@dataclass
class Journaled:
    """What a results directory's journal holds."""

    records: list[RequestRecord] = field(default_factory=list)
    lag_at_ns: list[int] = field(default_factory=list)
    lag_ns: list[int] = field(default_factory=list)
    lag_worker: list[int] = field(default_factory=list)
    starts: dict[int, dict] = field(default_factory=dict)  # worker -> its start line
    ended: dict[int, dict] = field(default_factory=dict)  # worker -> its end line (absent: cut)
    unreadable: int = 0  # lines cut short or not JSON (a kill mid-write), skipped
    files: int = 0

    @property
    def cut(self) -> bool:
        """The run did not end as planned: a process's journal has no end (killed outright), or
        a process was stopped (an interrupt, or its parent gone)."""
        return set(self.ended) != set(self.starts) or any(e.get("interrupted") for e in self.ended.values())


def clear(directory: str | Path) -> None:
    """Remove an earlier run's journal from a directory about to hold a new one."""
    for path in [*Path(directory).glob(PATTERN), Path(directory) / CONFIG]:
        path.unlink(missing_ok=True)


def _take(out: Journaled, key: str, value, worker: int | None) -> int | None:
    """One line's content into `out`; the worker whose file it is."""
    if key == "r":
        out.records.append(decode(value))
    elif key == "lag":
        ticks = [(int(a), int(v)) for a, v in value]
        out.lag_at_ns.extend(a for a, _ in ticks)
        out.lag_ns.extend(v for _, v in ticks)
        out.lag_worker.extend([worker or 0] * len(ticks))
    elif key == "start":
        worker = int(value.get("worker", 0))
        int(value["t0_ns"])
        out.starts[worker] = value
    elif key == "end":
        out.ended[worker or 0] = value
    return worker


def exists(directory: str | Path) -> bool:
    return any(Path(directory).glob(PATTERN))


def read(directory: str | Path) -> Journaled:
    """Every journal file of the directory, records in numbering order (within a conversation,
    turn order)."""
    out = Journaled()
    for path in sorted(Path(directory).glob(PATTERN)):
        out.files += 1
        worker = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                    ((key, value),) = obj.items()
                except (ValueError, AttributeError):
                    out.unreadable += 1
                    continue
                try:
                    worker = _take(out, key, value, worker)
                except (ValueError, TypeError, AttributeError):
                    out.unreadable += 1
    out.records.sort(key=lambda r: (r.index, r.turn))
    return out
