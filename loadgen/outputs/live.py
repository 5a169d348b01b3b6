"""The client's live metrics for Prometheus (`--metrics-port`): what the load generator is
doing while it runs, labelled by model, variant, workload and load level (docs/dashboards.md).

Requests are observed when they start and when they end, never per chunk: a finished
request's chunk gaps go into numpy bucket counts in one step, so the exporter costs the event
loop microseconds per request. Scrapes are answered from a thread, always in the plain text
format (never OpenMetrics, whatever the Accept header: no escaping trap, ../shared/reference/vllm.md)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from loadgen.errors import LoadgenError
from servers.emulator.counters import TTFT_BUCKETS  # vLLM's, defined once

LABELS = ("model_name", "variant", "workload", "level")
# vLLM's TTFT buckets, and its inter-token buckets with 1, 2.5 and 5 ms added below vLLM's first
# (10 ms) for fast decoding (vllm.md): where both have a bound, client and server quantiles compare
TOKEN_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
)
LATENESS_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Hist:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = np.asarray(bounds)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # the last: above every bound
        self.sum = 0.0

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self.counts += np.bincount(np.searchsorted(self.bounds, values, side="left"), minlength=len(self.counts))
            self.sum += float(values.sum())

    def buckets(self) -> list[tuple[str, float]]:
        cum = np.cumsum(self.counts)
        return [(f"{b:g}", float(c)) for b, c in zip(self.bounds, cum)] + [("+Inf", float(cum[-1]))]


class _Series:
    def __init__(self) -> None:
        self.started = self.completed = self.in_flight = self.tokens = 0
        self.failed: dict[str, int] = {}
        self.hists = {
            "ttft": _Hist(TTFT_BUCKETS),
            "tpot": _Hist(TOKEN_BUCKETS),
            "inter_chunk": _Hist(TOKEN_BUCKETS),
            "send_lateness": _Hist(LATENESS_BUCKETS),
        }


class LiveMetrics:
    """Counters, gauges and histograms of the client, served on `port` until close()."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple, _Series] = {}
        self._labels = ("", "", "", "")
        self._cells = {"planned": 0, "ok": 0, "failed": 0}
        self._current: tuple | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="loadgen-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- what is running --------------------------------------------------------------
    def context(self, model_name: str, variant: str, workload: str, level: str) -> None:
        """The labels of the requests that follow."""
        with self._lock:
            self._labels = (model_name, variant, workload, level)

    def sweep_planned(self, n: int) -> None:
        with self._lock:
            self._cells["planned"] = n

    def cell_started(self, variant: str, workload: str, level: str) -> None:
        with self._lock:
            self._current = (variant, workload, level)

    def cell_done(self, status: str) -> None:
        with self._lock:
            self._cells[status if status in ("ok", "failed") else "failed"] += 1
            self._current = None

    # --- requests (called on the event loop) --------------------------------------------
    def _get(self) -> _Series:
        s = self._series.get(self._labels)
        if s is None:
            s = self._series[self._labels] = _Series()
        return s

    def started(self, rec) -> None:
        with self._lock:
            s = self._get()
            s.started += 1
            s.in_flight += 1

    def finished(self, rec) -> None:
        t = np.frombuffer(rec.chunk_t_ns, dtype=np.int64) if rec.chunk_t_ns else np.zeros(0, np.int64)
        with self._lock:
            s = self._get()
            s.in_flight -= 1
            if rec.warmup and rec.error_type == "cancelled":
                return
            s.hists["send_lateness"].add(np.asarray([max(rec.lateness_ns, 0) / 1e9]))
            if not rec.ok:
                s.failed[rec.error_type or "unknown"] = s.failed.get(rec.error_type or "unknown", 0) + 1
                return
            s.completed += 1
            tokens = rec.usage_completion_tokens or len(t)
            s.tokens += tokens
            if len(t):
                s.hists["ttft"].add(np.asarray([(t[0] - rec.t_send_ns) / 1e9]))
                s.hists["inter_chunk"].add(np.diff(t) / 1e9)
                if tokens > 1:
                    s.hists["tpot"].add(np.asarray([(t[-1] - t[0]) / 1e9 / (tokens - 1)]))

    # --- the collector (called by the scrape thread) -------------------------------------
    def collect(self):
        with self._lock:
            series = {
                k: (
                    v.started,
                    v.completed,
                    v.in_flight,
                    v.tokens,
                    dict(v.failed),
                    {n: (h.buckets(), h.sum) for n, h in v.hists.items()},
                )
                for k, v in self._series.items()
            }
            cells, current = dict(self._cells), self._current
        fams = {
            "started": CounterMetricFamily("loadgen_requests_started", "Requests sent", labels=LABELS),
            "completed": CounterMetricFamily("loadgen_requests_completed", "Requests completed", labels=LABELS),
            "failed": CounterMetricFamily(
                "loadgen_requests_failed", "Requests failed, by error type", labels=(*LABELS, "error_type")
            ),
            "in_flight": GaugeMetricFamily(
                "loadgen_requests_in_flight", "Requests sent and not finished", labels=LABELS
            ),
            "tokens": CounterMetricFamily("loadgen_output_tokens", "Output tokens received", labels=LABELS),
        }
        hists = {
            n: HistogramMetricFamily(f"loadgen_{n}_seconds", doc, labels=LABELS)
            for n, doc in (
                ("ttft", "Time to first token as the client measured it"),
                ("tpot", "Time per output token after the first, per request"),
                ("inter_chunk", "Gaps between streamed chunks"),
                ("send_lateness", "How late requests were sent against their schedule"),
            )
        }
        for labels, (started, completed, in_flight, tokens, failed, hs) in series.items():
            fams["started"].add_metric(labels, started)
            fams["completed"].add_metric(labels, completed)
            fams["in_flight"].add_metric(labels, in_flight)
            fams["tokens"].add_metric(labels, tokens)
            for kind, n in failed.items():
                fams["failed"].add_metric((*labels, kind), n)
            for name, (buckets, total) in hs.items():
                hists[name].add_metric(labels, buckets, total)
        yield from fams.values()
        yield from hists.values()
        g = GaugeMetricFamily("loadgen_sweep_cells", "Sweep cells: planned, finished ok, failed", labels=("status",))
        for status, n in cells.items():
            g.add_metric((status,), n)
        yield g
        cur = GaugeMetricFamily(
            "loadgen_sweep_current_cell", "1 for the sweep cell running now", labels=("variant", "workload", "level")
        )
        if current is not None:
            cur.add_metric(current, 1)
        yield cur


def serve(port: int | None) -> LiveMetrics | None:
    """The live metrics on 127.0.0.1:`port` (--metrics-port), or None without a port; a port
    that cannot be listened on is a LoadgenError."""
    if port is None:
        return None
    try:
        return LiveMetrics(port)
    except OSError as e:
        raise LoadgenError(
            f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e}); choose a free port"
        ) from None
