"""test_hotpath.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadgen.client import compiled
from loadgen.client.record import RequestRecord
from tests.conftest import REPO
from tests.test_hotpath import _NEVER_ENDS, COMPILED_SKIP, _raw_server, _record

pytestmark = [pytest.mark.engines, *COMPILED_SKIP]


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_an_event_that_never_ends_fails_its_request_in_bounded_memory(path):
    """A server that streams 64 MiB of one SSE event that never ends: the request fails as
    malformed once the event passes the bound (sse.MAX_EVENT, 8 MiB; the C path's own), and the
    client's peak memory grows by a few times that, not by what the server sent (its own process:
    the server here is this one)."""
    from loadgen.client import sse

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: "
    url = _raw_server([head + b"x" * (64 << 20)])
    res = subprocess.run(
        [sys.executable, "-c", _NEVER_ENDS, url, path], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    kind, grew_mib, message = res.stdout.split(" ", 2)
    assert kind == "malformed_sse" and f"over {sse.MAX_EVENT >> 20} MiB" in message, res.stdout + res.stderr
    assert int(grew_mib) < 4 * (sse.MAX_EVENT >> 20), res.stdout  # not the 64 MiB sent


def test_connections_leave_nothing_behind():
    """300 requests, each on a connection of its own (Connection: close, as llama.cpp's server
    wants): no connection object outlives its close (a reader holds its owner's callback, a cycle
    the garbage collector must be able to see)."""
    import asyncio
    import gc

    from servers.embedded import canned_server

    body = json.dumps(
        {
            "model": "canned",
            "prompt": "hi",
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()

    async def run(url: str) -> list[RequestRecord]:
        client = compiled.CompiledClient(url + "/v1", "completions", {"Connection": "close"}, 10.0)
        try:
            return [await client.send(_record(index=i), body) for i in range(300)]
        finally:
            await client.close()

    with canned_server("--pacing-ms", "0") as srv:
        recs = asyncio.run(run(srv.url))
    assert all(r.ok for r in recs)
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, compiled._Connection)]
