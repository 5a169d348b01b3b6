"""Every test says what it uses (tests/conftest.py, "What a test uses"): each test file's
`pytestmark` names exactly one of unit, servers, engines, and a unit test cannot start a
process by any of the ways one starts (subprocess, os.fork, os.posix_spawn, multiprocessing),
so `pytest -m unit` runs only tests that start none. (The other way, a servers or engines test
that passed without starting one, fails as the suite runs.)"""

from __future__ import annotations

import ast
import multiprocessing
import os
import subprocess
import sys

import pytest

from tests.conftest import KINDS, REPO

pytestmark = pytest.mark.unit


def kinds_named(path) -> list[str]:
    """The kinds a test file's module-level `pytestmark` names."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return [n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute) and n.attr in KINDS]
    return []


def test_every_test_file_names_one_kind():
    wrong = {p.name: k for p in sorted(REPO.glob("tests/test_*.py")) if len(k := kinds_named(p)) != 1}
    assert not wrong, f"each test file's pytestmark names one of {', '.join(KINDS)}: {wrong}"


def _child() -> None:
    pass


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
        lambda: os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ),
        os.fork,
        lambda: multiprocessing.get_context("spawn").Process(target=_child).start(),
    ],
    ids=["subprocess", "posix_spawn", "fork", "multiprocessing"],
)
def test_a_unit_test_cannot_start_a_process(start):
    with pytest.raises(AssertionError, match="is marked unit but starts a process"):
        start()
