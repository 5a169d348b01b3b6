"""test_faults.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.load.execute import LoadShape, RunSpec, execute
from loadgen.measures.frame import request_frame
from tests.test_faults import _free_port
from workloads import random_lengths

pytestmark = pytest.mark.unit


def test_connection_refused_is_recorded_per_request():
    spec = RunSpec(
        api_base=f"http://127.0.0.1:{_free_port()}/v1", model="m", load=LoadShape(concurrency=2), num_requests=6
    )
    result = asyncio.run(execute(spec, random_lengths(None, input_len=8, output_len=4)))
    frame = request_frame(result.records)
    assert len(frame) == 6
    assert set(frame["error_type"]) == {"connection_refused"}
