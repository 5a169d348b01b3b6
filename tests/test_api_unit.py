"""test_api.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from loadgen import api
from loadgen.shapes import ClosedLoop
from workloads import open_workload

pytestmark = pytest.mark.unit


def test_errors_are_exceptions_with_one_line(tmp_path):
    job = api.RunJob(
        api.RunSpec(api_base="", model="", load=ClosedLoop(1), num_requests=1),
        open_workload("synthetic:random"),
        api.Target(base_url="http://127.0.0.1:9"),
        handle_signals=False,
    )
    with pytest.raises(api.LoadgenError) as e:
        api.run(job, tmp_path / "x")
    assert "cannot reach" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(api.LoadgenError, match="drop --time-scale"):
        api.Target(base_url="http://127.0.0.1:9", time_scale=2.0)
    job = api.RunJob(
        api.RunSpec(api_base="", model="", load=ClosedLoop(1), num_requests=1),
        open_workload("synthetic:random"),
        api.Target(base_url="http://127.0.0.1:9"),
        workers=0,
        handle_signals=False,
    )
    with pytest.raises(api.LoadgenError, match="--workers must be >= 1"):
        api.run(job)
