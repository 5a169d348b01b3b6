"""The canned-chunk server (client benchmarks) and the client's per-read time stamps."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from servers.embedded import canned_server
from tests.conftest import run_cli
from loadgen.client.stream import StreamClient, _StampingHandler, make_session
from loadgen.record import RequestRecord


def test_canned_server_streams_what_its_trace_says(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with canned_server("--pacing-ms", "2", "--ttft-ms", "5", "--events-per-write", "4",
                       "--trace", str(trace)) as srv:
        res = run_cli("run", "--base-url", srv.url, "--concurrency", "4", "--num-requests", "12",
                      "--warmup", "0", "--input-len", "8", "--output-len", "22", "--quiet",
                      "--output", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["completed"] == 12 and s["failed"] == 0
    assert s["token_count_source"] == "continuous_usage"
    assert s["self_check"]["chunk_times"] == "socket_read"  # the protocol hook is in place
    written = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(written) == 12
    for w in written:
        assert w["events"] == [4, 4, 4, 4, 4, 2]  # 22 one-token events, 4 per write
        due = np.diff(w["due_ns"]) / 1e6
        assert due[:-1] == pytest.approx([8.0] * 4) and due[-1] == pytest.approx(4.0)
        assert (w["due_ns"][0] - w["t_recv_ns"]) / 1e6 == pytest.approx(5 + 3 * 2)
        assert all(wr >= d for wr, d in zip(w["write_ns"], w["due_ns"]))


def test_bad_options_are_one_line(tmp_path):
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "servers.canned", "--events-per-write", "0"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0
    assert "--events-per-write must be at least 1" in res.stderr


@pytest.mark.parametrize("pacing_ms", ["5", "0"])
def test_chunk_times_are_taken_as_the_socket_read_arrives(monkeypatch, pacing_ms):
    """Every chunk's time is taken while its socket read is handed to the connection's
    protocol (inside data_received): not later, when a task gets to it. Unpaced, the whole
    body arrives before the request's task runs again (aiohttp has released the connection by
    then): its stamps are still found."""
    import time
    calls = []
    orig = _StampingHandler.data_received

    def spy(self, data):
        before = time.monotonic_ns()
        orig(self, data)
        calls.append((before, time.monotonic_ns()))

    monkeypatch.setattr(_StampingHandler, "data_received", spy)
    with canned_server("--pacing-ms", pacing_ms, "--ttft-ms", "5") as srv:
        async def go():
            session = make_session(1)
            client = StreamClient(session, srv.url + "/v1", "completions", {}, 30.0)
            rec = RequestRecord(index=0, request_id="r", warmup=False, t_scheduled_ns=0)
            body = json.dumps({"model": "canned", "prompt": "hi", "max_tokens": 10, "stream": True,
                               "stream_options": {"include_usage": True,
                                                  "continuous_usage_stats": True}}).encode()
            await client.send(rec, body)
            await session.close()
            return rec
        rec = asyncio.run(go())
    assert rec.ok and list(rec.chunk_usage) == list(range(1, 11))
    for t in rec.chunk_t_ns:
        assert any(a <= t <= b for a, b in calls), "a chunk time taken outside a socket read"
