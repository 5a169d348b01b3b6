"""The canned-chunk server (client benchmarks) and the client's per-read time stamps."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from bench import run_args
from loadgen.client import compiled
from loadgen.client.record import RequestRecord
from loadgen.client.stream import StreamClient, _StampingHandler, make_session
from servers.embedded import canned_server
from tests.conftest import run_cli

pytestmark = pytest.mark.servers


def test_canned_server_streams_what_its_trace_says(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with canned_server("--pacing-ms", "2", "--ttft-ms", "5", "--events-per-write", "4", "--trace", str(trace)) as srv:
        res = run_cli(
            *run_args(
                srv.url,
                concurrency="4",
                num_requests="12",
                warmup="0",
                input_len="8",
                output_len="22",
                output=str(tmp_path / "run"),
            )
        )
    assert res.returncode == 0, res.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["completed"] == 12 and s["failed"] == 0
    assert s["token_count_source"] == "continuous_usage"
    # the kernel's receive times on the compiled path, else the protocol hook (in place)
    assert s["self_check"]["chunk_times"] == ("kernel_receive" if compiled.available() else "socket_read")
    assert s["self_check"]["client_path"] == ("compiled" if compiled.available() else "python")
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

    res = subprocess.run(
        [sys.executable, "-m", "servers.canned", "--events-per-write", "0"], capture_output=True, text=True, timeout=30
    )
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0
    assert "--events-per-write must be at least 1" in res.stderr


async def _send_one(url: str, max_tokens: int, before=None) -> RequestRecord:
    """One streamed completion from the canned server at `url`, through loadgen's client
    (`before`: called just before it is sent)."""
    session = make_session(1)
    client = StreamClient(session, url + "/v1", "completions", {}, 30.0)
    rec = RequestRecord(index=0, request_id="r", warmup=False, t_scheduled_ns=0)
    body = json.dumps(
        {
            "model": "canned",
            "prompt": "hi",
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    if before is not None:
        before()
    await client.send(rec, body)
    await session.close()
    return rec


@pytest.mark.parametrize("pacing_ms", ["5", "0"])
def test_chunk_times_are_taken_as_the_socket_read_arrives(monkeypatch, pacing_ms):
    """Every chunk's time is when the event loop's select() returned with its socket readable,
    noted as the read is handed to the connection's protocol (inside data_received): never
    later, when a task gets to it, nor when the loop gets round to that socket in a burst.
    Unpaced, the whole body arrives before the request's task runs again (aiohttp has released
    the connection by then): its stamps are still found."""
    import time

    from loadgen.client.selectclock import SelectClock

    calls = []
    orig = _StampingHandler.data_received

    def spy(self, data):
        before = time.monotonic_ns()
        selector = self._loop._selector
        assert isinstance(selector, SelectClock)
        orig(self, data)
        calls.append((selector.returned_ns, before, time.monotonic_ns()))

    monkeypatch.setattr(_StampingHandler, "data_received", spy)
    with canned_server("--pacing-ms", pacing_ms, "--ttft-ms", "5") as srv:
        rec = asyncio.run(_send_one(srv.url, 10))
    assert rec.ok and list(rec.chunk_usage) == list(range(1, 11))
    assert all(selected <= before for selected, before, _ in calls)  # the select came first
    for t in rec.chunk_t_ns:
        assert any(t == selected for selected, _, _ in calls), "a chunk time that is no read's select"
    assert rec.t_send_ns < rec.chunk_t_ns[0]


@pytest.mark.timing  # a few milliseconds between the server's write and the client's read: runs alone
@pytest.mark.parametrize("busy", [False, True])
def test_the_first_chunks_read_delay_bounds_what_a_busy_loop_added(tmp_path, busy):
    """The first chunk arrives while the client's loop runs a blocking callback (80 ms): its
    time is the select() after it, late by the rest of the block, and its read_delay says how
    late it may be (at least that). With the loop idle, both are near zero."""
    import time

    trace = tmp_path / "trace.jsonl"
    block: list[int] = []

    def block_loop() -> None:
        block.append(time.monotonic_ns())
        time.sleep(0.08)
        block.append(time.monotonic_ns())

    with canned_server("--pacing-ms", "5", "--ttft-ms", "30", "--trace", str(trace)) as srv:
        rec = asyncio.run(
            _send_one(
                srv.url, 5, before=(lambda: asyncio.get_running_loop().call_later(0.01, block_loop)) if busy else None
            )
        )
    assert rec.ok and list(rec.chunk_usage) == list(range(1, 6))
    written = json.loads(trace.read_text().splitlines()[0])["write_ns"][0]
    late_ms = (rec.chunk_t_ns[0] - written) / 1e6
    delay_ms = rec.read_delay_ns / 1e6
    if busy:
        assert block[0] < written < block[1], "the first chunk was not written during the block"
        assert late_ms >= (block[1] - written) / 1e6 - 1
        assert delay_ms >= late_ms >= 20
    else:
        assert late_ms < 5 and delay_ms < 5
    assert late_ms <= delay_ms + 2  # the read delay bounds the client's part of the TTFT


def test_an_unknown_read_path_is_one_line(tmp_path):
    with canned_server() as srv:
        res = run_cli(
            *run_args(srv.url, concurrency="1", num_requests="2", output_len="4", output=tmp_path / "run"),
            env={"LOADGEN_CLIENT_PATH": "rust"},
        )
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "LOADGEN_CLIENT_PATH='rust': give compiled (the default) or python" in res.stderr
