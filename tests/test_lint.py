"""The tree is checked whole, every time the suite runs: ruff's lint and format and mypy, as
configured in pyproject.toml (docs/architecture.md, "Tests"). Each check is shown to fail on a
file that breaks it, so a configuration that checks nothing cannot pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("check", [("ruff", "check", "."), ("ruff", "format", "--check", ".")])
def test_ruff_is_clean(check):
    res = _run(*check)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_the_type_checker_is_clean():
    res = _run("mypy")  # its files and settings: pyproject.toml's [tool.mypy]
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_the_checks_would_see_a_broken_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom pathlib import Path\n\n\ndef f(x: int) -> str:\n    return x  # wrong\n")
    config = str(REPO / "pyproject.toml")
    assert "F401" in _run("ruff", "check", "--config", config, str(bad), cwd=tmp_path).stdout
    assert _run("ruff", "format", "--check", "--config", config, str(bad), cwd=tmp_path).returncode == 0
    bad.write_text("x = {  'a':1 }\n")
    assert _run("ruff", "format", "--check", "--config", config, str(bad), cwd=tmp_path).returncode == 1
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    res = _run("mypy", "--config-file", config, str(bad), cwd=tmp_path)
    assert res.returncode == 1 and "Incompatible return value type" in res.stdout, res.stdout
