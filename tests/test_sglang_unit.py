"""test_sglang.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from servers.deployments import load, render
from tests.test_sglang import DEPLOYMENT, FLAGS, _commands

pytestmark = pytest.mark.unit


def test_every_rendered_flag_is_one_sglang_declares():
    dep = load(DEPLOYMENT)
    assert set(dep.variants) >= {"baseline", "ngram", "eagle", "eagle3", "draft-model", "suffix"}
    for v, argv in _commands().items():
        flags = {a for a in argv if a.startswith("--")}
        assert flags <= set(FLAGS), f"{v}: {sorted(flags - set(FLAGS))} not named here from SGLang's source"
        assert render(dep, v).argv[1:3] == ("-m", "sglang.launch_server")
