"""test_simulate.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from tests.conftest import cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--profile", "nope", "--concurrency", "1"], "unknown profile 'nope'"),
        (["--profile", "h100-llama-3.1-8b", "--concurrency", "1", "--speculative-config", "{x"], "not valid JSON"),
        (["--concurrency", "1"], "give --profile"),
        (["--profile", "h100-llama-3.1-8b", "--rate", "0"], "--rate must be > 0"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, expect):
    res = cli("simulate", *args, "--output", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and expect in res.stderr, res.stderr
