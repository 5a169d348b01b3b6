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


def imported_packages(path: Path) -> dict[str, int]:
    """Each of our top-level packages the file imports, with the first line that does."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PACKAGES:
                found.setdefault(top, node.lineno)
    return found


@pytest.mark.parametrize("package", sorted(MAY_NOT_IMPORT))
def test_servers_and_workloads_import_neither_loadgen_nor_each_other(package):
    broken = [f"{path.relative_to(REPO)}:{line} imports {top}"
              for path in sorted((REPO / package).rglob("*.py"))
              for top, line in imported_packages(path).items() if top in MAY_NOT_IMPORT[package]]
    assert not broken, "; ".join(broken)


def test_the_rule_would_see_a_broken_import(tmp_path):
    """The check itself: a function-level import of loadgen in a servers-like file is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ndef f():\n    from loadgen.summary import summarize\n    import workloads.spec\n")
    assert imported_packages(bad) == {"loadgen": 4, "workloads": 5}
