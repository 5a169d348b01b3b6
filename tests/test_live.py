"""loadgen's live metrics (--metrics-port): exact counts, and always the plain text format."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client.record import RequestRecord
from loadgen.outputs.live import LiveMetrics

pytestmark = pytest.mark.servers

MS = 1_000_000
OPENMETRICS = "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def _rec(i: int, chunks_ms: list[float] | None, error: str | None = None) -> RequestRecord:
    r = RequestRecord(i, f"r{i}", False, 0)
    r.t_call_ns = r.t_send_ns = r.t_scheduled_ns = 1000 * MS
    if chunks_ms:
        r.chunk_t_ns.extend(int(1000 * MS + c * MS) for c in chunks_ms)
        r.usage_completion_tokens = len(chunks_ms)
        r.done, r.status = True, 200
    r.error_type = error
    return r


def _scrape(port: int) -> tuple[str, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": OPENMETRICS})
    with urllib.request.urlopen(req, timeout=5) as resp:
        ctype, text = resp.headers["Content-Type"], resp.read().decode()
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return ctype, samples


def test_a_busy_metrics_port_is_one_line():
    from tests.conftest import run_cli

    live = LiveMetrics(0)
    try:
        res = run_cli(
            "run",
            "--base-url",
            "http://127.0.0.1:9",
            "--metrics-port",
            str(live.port),
            "--concurrency",
            "1",
            "--num-requests",
            "1",
            "--quiet",
        )
    finally:
        live.close()
    assert res.returncode == 2 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert f"--metrics-port {live.port}" in line and "choose a free port" in line
