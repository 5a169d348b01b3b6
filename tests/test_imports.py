"""The dependency rules of docs/architecture.md, read from the source: `loadgen/` uses `servers/`
and `workloads/`; neither of those imports `loadgen/`, nor each other. Every import statement
counts, also one inside a function (a lazy import is still a dependency)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "servers", "workloads")
MAY_NOT_IMPORT = {"servers": {"loadgen", "workloads"}, "workloads": {"loadgen", "servers"}}


def imported_modules(path: Path) -> dict[str, int]:
    """Every module the file imports (`from a import b` counts as a and a.b), with its line."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            found.setdefault(name, node.lineno)
    return found


def imported_packages(path: Path) -> dict[str, int]:
    """Each of our top-level packages the file imports, with the first line that does."""
    found: dict[str, int] = {}
    for name, line in imported_modules(path).items():
        top = name.split(".")[0]
        if top in PACKAGES:
            found[top] = min(line, found.get(top, line))
    return found


@pytest.mark.parametrize("package", sorted(MAY_NOT_IMPORT))
def test_servers_and_workloads_import_neither_loadgen_nor_each_other(package):
    broken = [f"{path.relative_to(REPO)}:{line} imports {top}"
              for path in sorted((REPO / package).rglob("*.py"))
              for top, line in imported_packages(path).items() if top in MAY_NOT_IMPORT[package]]
    assert not broken, "; ".join(broken)


def test_the_rule_would_see_a_broken_import(tmp_path):
    """The checks themselves: function-level imports are found, by package and by module."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ndef f():\n    from loadgen.measures.summary import summarize\n    import workloads.spec\n"
                   "    from loadgen.outputs import store\n")
    assert imported_packages(bad) == {"loadgen": 4, "workloads": 5}
    assert {"loadgen.measures.summary", "workloads.spec", "loadgen.outputs.store"} <= set(imported_modules(bad))


# the CLI turns options into specs and results into output; the work is the library's (loadgen.api)
CLI_MAY_NOT_IMPORT = ("loadgen.executors", "loadgen.client", "loadgen.run", "loadgen.backends", "loadgen.outputs.store",
                      "loadgen.sweep.cell", "loadgen.sweep.runner", "loadgen.sweep.execute", "loadgen.sweep.parallel",
                      "loadgen.sweep.cluster")


def test_the_cli_goes_through_the_library():
    broken = [f"{path.relative_to(REPO)}:{line} imports {name}"
              for path in sorted((REPO / "loadgen" / "cli").rglob("*.py"))
              for name, line in imported_modules(path).items()
              if any(name == bad or name.startswith(bad + ".") for bad in CLI_MAY_NOT_IMPORT)]
    assert not broken, "; ".join(broken)


def test_the_sweeps_worker_processes_start_the_library():
    """--parallel's workers run loadgen.sweep.worker, not `loadgen sweep`."""
    text = (REPO / "loadgen" / "sweep" / "parallel.py").read_text()
    assert '"-m", "loadgen.sweep.worker"' in text and '"sweep", "--worker"' not in text


def _modules_after(code: str) -> set[str]:
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, cwd=REPO, check=True).stdout
    return {m.split(".")[0] for m in out.split()}


def test_the_command_line_loads_only_what_a_command_needs():
    """Every test and every user's command starts a `loadgen` process: the command group, its
    help and its option checks load neither the data libraries nor the HTTP client nor the
    report's plotting (2.3 s of imports when everything was loaded up front; docs/performance.md);
    a simulation loads no HTTP client. The library's names resolve when first used."""
    heavy = {"pandas", "pyarrow", "matplotlib", "plotly", "aiohttp", "ray", "scipy"}
    assert not _modules_after("import loadgen.cli") & heavy
    assert not _modules_after("import loadgen.simulate.virtual, loadgen.measures.summary") & {"aiohttp"}
    from loadgen import api
    from loadgen.outputs import store
    assert (api.SUMMARY, api.REQUESTS) == (store.SUMMARY, store.REQUESTS)
    assert all(getattr(api, name) is not None for name in api.__all__)
