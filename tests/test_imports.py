"""The dependency rules of docs/architecture.md, read from the source: `loadgen/` uses `servers/`
and `workloads/`; neither of those imports `loadgen/`, nor each other. Every import statement
counts, also one inside a function (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "servers", "workloads")
MAY_NOT_IMPORT = {"servers": {"loadgen", "workloads"}, "workloads": {"loadgen", "servers"}}


def imported_modules(path: Path, runtime: bool = False) -> dict[str, int]:
    """Every module the file imports (`from a import b` counts as a and a.b), with its line;
    `runtime`: less what is imported for the type checker only (`if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if runtime and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
    broken = [
        f"{path.relative_to(REPO)}:{line} imports {top}"
        for path in sorted((REPO / package).rglob("*.py"))
        for top, line in imported_packages(path).items()
        if top in MAY_NOT_IMPORT[package]
    ]
    assert not broken, "; ".join(broken)


def test_the_rule_would_see_a_broken_import(tmp_path):
    """The checks themselves: function-level imports are found, by package and by module."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\n\ndef f():\n    from loadgen.measures.summary import summarize\n    import workloads.spec\n"
        "    from loadgen.results import store\n"
    )
    assert imported_packages(bad) == {"loadgen": 4, "workloads": 5}
    assert {"loadgen.measures.summary", "workloads.spec", "loadgen.results.store"} <= set(imported_modules(bad))


# the CLI turns options into specs and results into output; the work is the library's (loadgen.api)
CLI_MAY_NOT_IMPORT = (
    "loadgen.executors",
    "loadgen.client",
    "loadgen.run",
    "loadgen.load",
    "loadgen.backends",
    "loadgen.results.store",
    "loadgen.sweep.cell",
    "loadgen.sweep.slots",
    "loadgen.sweep.job",
    "loadgen.sweep.parallel",
    "loadgen.sweep.cluster",
)


def test_the_cli_goes_through_the_library():
    broken = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in sorted((REPO / "loadgen" / "cli").rglob("*.py"))
        for name, line in imported_modules(path).items()
        if any(name == bad or name.startswith(bad + ".") for bad in CLI_MAY_NOT_IMPORT)
    ]
    assert not broken, "; ".join(broken)


def test_the_sweeps_worker_processes_start_the_library():
    """--parallel's workers run loadgen.sweep.worker, not `loadgen sweep`."""
    text = (REPO / "loadgen" / "sweep" / "parallel.py").read_text()
    assert '"-m", "loadgen.sweep.worker"' in text and '"sweep", "--worker"' not in text


def _modules_after(code: str) -> set[str]:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    return {m.split(".")[0] for m in out.split()}


def package_graph(root: Path) -> dict[str, dict[str, str]]:
    """loadgen's package graph, read from the source: for each package (a folder, or a module at
    the top such as api.py), the other packages it imports, each with one file:line that does."""
    nodes = {
        p.stem if p.is_file() else p.name
        for p in root.iterdir()
        if (p.is_dir() and any(p.glob("*.py"))) or (p.suffix == ".py" and p.stem != "__init__")
    }
    graph: dict[str, dict[str, str]] = {node: {} for node in nodes}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        node = parts[0] if len(parts) > 1 else path.stem
        if node not in nodes:
            continue
        for name, line in imported_modules(path).items():
            bits = name.split(".")
            if bits[0] == root.name and len(bits) > 1 and bits[1] in nodes and bits[1] != node:
                graph[node].setdefault(bits[1], f"{path.relative_to(root.parent)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Every strongly connected group of more than one package (Tarjan), each as a closed path
    through it, so a failure names the imports to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(_path(graph, set(group), min(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def described(graph: dict[str, dict[str, str]], found: list[list[str]]) -> str:
    """Each cycle as the imports that make it (file:line of each edge)."""
    return "; ".join(" -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}" for c in found)


def _path(graph: dict[str, dict[str, str]], group: set[str], start: str) -> list[str]:
    """A cycle through `start` inside `group` (breadth first: the shortest)."""
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in group or w in prev:
                    continue
                prev[w] = v
                if w == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(prev[path[-1]])
                    return path[::-1]
                nxt.append(w)
        frontier = nxt
    return [start]


def test_loadgens_packages_import_one_way():
    """docs/architecture.md: data flows one way, so the packages' imports do too: any cycle
    between two of loadgen's packages (lazy imports included) fails, with the imports that make it."""
    graph = package_graph(REPO / "loadgen")
    found = cycles(graph)
    assert not found, described(graph, found)


def test_the_cycle_rule_would_see_a_cycle(tmp_path):
    root = tmp_path / "loadgen"
    for pkg, body in {
        "run": "from loadgen.backends import base\n",
        "backends": "def f():\n    from loadgen.load.execute import x\n",
        "load": "import loadgen.run.target\n",
        "measures": "from loadgen.load import scrape\n",
    }.items():
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
        (root / pkg / "m.py").write_text(body)
    (root / "api.py").write_text("from loadgen.run import m\n")
    graph = package_graph(root)
    assert graph["backends"] == {"load": "loadgen/backends/m.py:2"} and graph["api"] == {"run": "loadgen/api.py:1"}
    assert cycles(graph) == [["backends", "load", "run", "backends"]]
    (root / "load" / "m.py").write_text("")
    assert cycles(package_graph(root)) == []


def test_every_folder_of_code_is_a_package():
    """A folder of modules without __init__.py is a namespace package, which
    `packages.find` leaves out of an installed loadgen: every such folder must have one."""
    missing = [
        str(d.relative_to(REPO))
        for top in PACKAGES
        for d in [REPO / top, *(REPO / top).rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py")) and not (d / "__init__.py").exists()
    ]
    assert not missing, f"no __init__.py in {', '.join(missing)}"


def documented_layers() -> dict[str, int]:
    """docs/architecture.md's table of loadgen's packages by layer (`| N | \\`pkg/\\`, ... |`)."""
    import re

    layers: dict[str, int] = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        m = re.match(r"\| (\d+) \| ([^|]+) \|", line)
        if m:
            for name in re.findall(r"`([\w]+)(?:/|\.py)`", m.group(2)):
                layers[name] = int(m.group(1))
    return layers


def test_the_map_is_true():
    """Every package is on the map, and imports only packages of lower layers than its own."""
    graph = package_graph(REPO / "loadgen")
    layers = documented_layers()
    missing = sorted(set(graph) - set(layers) - {"__main__"})
    assert not missing, f"docs/architecture.md's layer table lacks {', '.join(missing)}"
    upward = [
        f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]}) at {where}"
        for a, imports in graph.items()
        if a in layers
        for b, where in imports.items()
        if b in layers and layers[b] >= layers[a]
    ]
    assert not upward, "; ".join(upward)


def test_no_module_outside_the_cli_reads_options_by_flag_name():
    """The library takes typed options (loadgen/options.py); only the CLI holds click's dict.
    Indexing, or .get() on, a parameter named as such a dict fails this outside cli/."""
    named = {"o", "opts", "options", "params"}
    broken = []
    for path in sorted((REPO / "loadgen").rglob("*.py")):
        if "cli" in path.relative_to(REPO / "loadgen").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                target = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                target = node.func.value
            if isinstance(target, ast.Name) and target.id in named and isinstance(node, ast.expr):
                broken.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not broken, "options read by name at " + ", ".join(broken)


def test_no_room_is_over_80_lines():
    """A function over 80 lines is a room that wants splitting (DEVELOPERS.md): none in loadgen/,
    servers/, workloads/ or bench/."""
    long = []
    for path in sorted(p for root in ("loadgen", "servers", "workloads", "bench") for p in (REPO / root).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)


def test_bench_is_a_package_of_two_kinds_without_path_edits():
    """bench/ runs as `python3 -m bench.NAME`: every script listed as performance or validation
    (bench/__init__.py), and no script or test edits sys.path to reach another."""
    from bench import PERFORMANCE, VALIDATION

    scripts = {p.stem for p in (REPO / "bench").glob("*.py")} - {"__init__", "__main__"}
    assert scripts == set(PERFORMANCE) | set(VALIDATION) and not set(PERFORMANCE) & set(VALIDATION)
    edits = [
        f"{p.relative_to(REPO)}"
        for root in ("bench", "tests")
        for p in sorted((REPO / root).glob("*.py"))
        if "sys.path.insert" in p.read_text() and p.name != "test_imports.py"
    ]
    assert not edits, edits


def module_graph(root: Path) -> dict[str, dict[str, str]]:
    """The package `root`'s modules (a package as its __init__), each with the modules it
    imports at run time (lazy imports included), each with one file:line. Importing a.b.c runs
    a and a.b first: those count too, except the importer's own packages (a package's modules
    importing their package is how a package works); a package that imports every module of its
    folder (pkgutil.iter_modules) imports each."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules[".".join(parts)] = path
    graph: dict[str, dict[str, str]] = {m: {} for m in modules}
    for mod, path in modules.items():
        own = {".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 2)}
        rel = path.relative_to(root.parent)
        for name, line in imported_modules(path, runtime=True).items():
            bits = name.split(".")
            for i in range(1, len(bits) + 1):
                target = ".".join(bits[:i])
                if target in modules and target not in own and target != mod:
                    graph[mod].setdefault(target, f"{rel}:{line}")
        if path.name == "__init__.py" and "pkgutil.iter_modules(__path__)" in path.read_text():
            for child in modules:
                if child.rsplit(".", 1)[0] == mod and child != mod:
                    graph[mod].setdefault(child, f"{rel}: pkgutil")
    return graph


def test_servers_modules_import_one_way():
    """No import circle among servers/' modules (lazy imports and the packages an import runs
    included): the catalog reads the engines, the engines read the deployment types
    (servers/deploy, a leaf), and nothing reads back."""
    graph = module_graph(REPO / "servers")
    found = cycles(graph)
    assert not found, described(graph, found)


def test_the_module_cycle_rule_would_see_a_circle(tmp_path):
    root = tmp_path / "servers"
    (root / "deployments").mkdir(parents=True)
    (root / "engines").mkdir()
    (root / "__init__.py").write_text("")
    (root / "deployments" / "__init__.py").write_text("from servers.deployments.catalog import load\n")
    (root / "deployments" / "catalog.py").write_text("from servers import engines\n")
    (root / "deployments" / "model.py").write_text("")
    (root / "engines" / "__init__.py").write_text(
        "import pkgutil\nfor m in pkgutil.iter_modules(__path__):\n    pass\n"
    )
    (root / "engines" / "vllm.py").write_text("from servers.deployments.model import Launch\n")
    assert cycles(module_graph(root)) == [
        [
            "servers.deployments",
            "servers.deployments.catalog",
            "servers.engines",
            "servers.engines.vllm",
            "servers.deployments",
        ]
    ]
    (root / "engines" / "vllm.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from servers.deployments.model import Launch\n"
    )
    assert cycles(module_graph(root)) == []
