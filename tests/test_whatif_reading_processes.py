"""test_whatif_reading.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from tests.conftest import cli
from tests.test_whatif_reading import GOOD, PROFILE, SKIPPED, _write

pytestmark = [pytest.mark.servers]


def test_no_broken_file_makes_the_cli_print_a_traceback(tmp_path):
    """Every broken file through `loadgen whatif`: a result with the skips noted, or one line."""
    files = {name: _write(tmp_path / f"{i}.jsonl", GOOD, line) for i, (name, (line, _)) in enumerate(SKIPPED.items())}
    files["empty"] = str(tmp_path / "empty.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    files["binary"] = str(tmp_path / "binary.jsonl")
    (tmp_path / "binary.jsonl").write_bytes(b"\x80\x81\xfe\xff")
    files["all bad"] = _write(tmp_path / "bad.jsonl", "{", "[]")
    repaired = {
        "no id": {k: v for k, v in GOOD.items() if k != "id"},
        "huge values": {**GOOD, "acc_eagle": {"acc_len": [10**30, 1e300, 2, 1]}},
        "bare acc": {**{k: v for k, v in GOOD.items() if k != "acc_eagle"}, "acc": [2, 2, 2, 1]},
    }
    for name, record in repaired.items():
        files[name] = _write(tmp_path / f"{name.replace(' ', '-')}.jsonl", GOOD, record)
    for name, path in files.items():
        res = cli("whatif", path, "--profile", PROFILE, "--batch", "1", "--k", "1")
        assert "Traceback" not in res.stderr, (name, res.stderr)
        if name in SKIPPED:
            assert res.returncode == 0 and "skipped 1 line(s)" in res.stderr, (name, res.stderr)
        elif name in repaired:
            assert res.returncode == 0 and "skipped" not in res.stderr and f"{path}: " in res.stderr, (name, res.stderr)
        else:
            assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (name, res.stderr)
