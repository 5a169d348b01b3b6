"""test_imports.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from tests.test_imports import _modules_after

pytestmark = [pytest.mark.servers]


def test_the_command_line_loads_only_what_a_command_needs():
    """Every test and every user's command starts a `loadgen` process: the command group, its
    help and its option checks load neither the data libraries nor the HTTP client nor the
    report's plotting (2.3 s of imports when everything was loaded up front; docs/performance.md);
    a simulation loads no HTTP client. The library's names resolve when first used."""
    heavy = {"pandas", "pyarrow", "matplotlib", "plotly", "aiohttp", "ray", "scipy"}
    assert not _modules_after("import loadgen.cli") & heavy
    assert not _modules_after("import loadgen.simulate.virtual, loadgen.measures.summary") & {"aiohttp"}
    from loadgen import api
    from loadgen.results import store

    assert (api.SUMMARY, api.REQUESTS) == (store.SUMMARY, store.REQUESTS)
    assert all(getattr(api, name) is not None for name in api.__all__)
