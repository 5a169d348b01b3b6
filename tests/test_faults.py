"""Bad server behaviour is recorded per request and the run completes: every error type
counted, no exception escapes, no completed request lost."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time

import pandas as pd
import pytest

from loadgen.load.execute import LoadShape, RunSpec, execute
from loadgen.measures.frame import request_frame
from servers.embedded import scripted_server
from tests.conftest import run_cli
from workloads import random_lengths

pytestmark = pytest.mark.servers

# server fault -> the error type the client must record
EXPECTED = {
    "http400_json": "http_400",
    "http500_html": "http_500",
    "http429": "http_429",
    "disconnect": "disconnected",
    "reset": "reset",
    "malformed_sse": "malformed_sse",
    "invalid_json": "invalid_json",
    "missing_done": "missing_done",
    "stall": "timeout",
    "stream_error": "stream_error",
    "empty": "empty_completion",
}


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_every_fault_is_recorded_and_counted(server, tmp_path, endpoint):
    faults = ["ok", *EXPECTED]
    url = server("--faults", ",".join(faults), "--ttft-ms", "5", "--step-ms", "5", "--stall-s", "60")
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--endpoint",
        endpoint,
        "--concurrency",
        "4",
        "--num-requests",
        str(2 * len(faults)),
        "--output-len",
        "12",
        "--request-timeout",
        "1.5",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] == 2
    assert summary["failed"] == 2 * len(EXPECTED)
    assert summary["errors"] == {err: 2 for err in EXPECTED.values()}
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(frame) == 2 * len(faults)
    msgs = frame.set_index("error_type")["error_message"]
    assert "bad request" in msgs["http_400"].iloc[0]  # from the JSON body
    assert "Internal Server Error" in msgs["http_500"].iloc[0]  # HTML tags stripped
    assert "<" not in msgs["http_500"].iloc[0]
    assert "Errors:" in res.stdout and "timeout 2" in res.stdout
    # partial data of failed streams is kept: a reset came after some chunks
    assert (frame.loc[frame["error_type"] == "reset", "n_chunks"] > 0).all()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_dying_mid_run_loses_no_completed_request():
    """Kill the server while requests stream: the run ends normally, every request is
    recorded, the ones that finished before the kill stay complete."""
    with scripted_server("--ttft-ms", "5", "--step-ms", "10") as srv:
        spec = RunSpec(
            api_base=srv.url + "/v1",
            model="scripted",
            load=LoadShape(concurrency=8),
            num_requests=400,
            request_timeout_s=5,
        )
        timer = threading.Timer(1.5, os.kill, (srv.pid, signal.SIGKILL))
        timer.start()
        t0 = time.monotonic()
        result = asyncio.run(execute(spec, random_lengths(None, input_len=8, output_len=16)))
        timer.cancel()
    frame = request_frame(result.records)
    assert time.monotonic() - t0 < 30
    assert len(frame) == 400  # every request recorded, none dropped
    done = frame[frame["ok"]]
    assert len(done) >= 8  # some finished before the kill ...
    assert (done["completion_tokens"] == 16).all()  # ... and are complete
    failed = set(frame.loc[~frame["ok"], "error_type"])
    assert failed and failed <= {"connection_refused", "reset", "disconnected", "connection_error"}
