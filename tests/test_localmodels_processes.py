"""test_localmodels.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from servers import localmodels
from tests.conftest import REPO
from tests.test_localmodels import models  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.servers]


def test_local_models_command(models):  # noqa: F811
    run = [sys.executable, "-m", "servers.localmodels"]
    env = {**os.environ, "LOADGEN_MODELS": str(models)}
    bad = subprocess.run([*run, "bogus"], capture_output=True, text=True, env=env, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no local model 'bogus'" in bad.stderr
    listed = subprocess.run([*run, "--list"], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert listed.stdout.count("not made") == len(localmodels.MODELS) and not models.exists()
    made = subprocess.run(
        [*run, "local:tiny-llama", "tiny-llama-draft"], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert made.returncode == 0, made.stderr
    assert re.search(r"^tiny-llama: made in .*tiny-llama in \d+ s", made.stdout, re.M)
    again = subprocess.run([*run, "tiny-llama"], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert again.stdout.startswith("tiny-llama: fresh in ")
