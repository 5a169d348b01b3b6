"""The engines' registries, read without starting anything: every engine registered with a
dialect whose per-request keys the client's hot path knows; no code outside servers/engines/
deciding by an engine's name; the map naming every engine module. (tests/test_engines.py
sweeps a throwaway engine end to end.)"""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import pytest

from servers import engines
from tests.conftest import REPO

pytestmark = pytest.mark.unit


def _decisions_naming(path: Path, pattern: re.Pattern) -> list[str]:
    """Code in `path` that names an engine by `pattern`: an identifier, or a string that is the
    name alone (a key, a comparison, an import). Comments, docstrings and longer text (help,
    errors) are for people."""
    out = []
    with open(path, "rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type == tokenize.NAME and pattern.search(tok.string):
                out.append(f"{path.relative_to(REPO)}:{tok.start[0]}: {tok.line.strip()}")
            elif tok.type == tokenize.STRING:
                try:
                    value = ast.literal_eval(tok.string)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(value, str) and pattern.fullmatch(value.strip()):
                    out.append(f"{path.relative_to(REPO)}:{tok.start[0]}: {tok.line.strip()}")
    return out


def test_every_engine_is_registered_and_declares_what_the_client_reads():
    assert set(engines.names()) >= {"vllm", "vllm-cpu", "emulator", "external", "llama.cpp", "sglang"}
    for name in engines.names():
        e = engines.get(name)
        assert isinstance(e, engines.Engine) and e.name == name
        assert e.dialect is None or e.dialect in engines.DIALECTS, name
        assert e.resource in ("GPU", "CPU")
    for d in engines.dialects():  # the hot path reads an event in full when it holds a drafted key
        if d.request_sd is not None:
            assert d.request_sd.drafted in engines.marks(), d.name
    with pytest.raises(engines.UnknownEngine, match="use one of vllm, vllm-cpu, emulator"):
        engines.get("docker")


def test_engine_names_live_in_their_modules_only():
    """`llama.cpp` is named in loadgen/ and servers/ only by its engine module, its local-model
    recipe and text for people (docstrings, comments, help and error messages): no code
    elsewhere decides anything by that engine's name."""
    pattern = re.compile(r"llama[._]?cpp", re.IGNORECASE)
    allowed = {"servers/engines/llamacpp.py", "servers/localmodels/gemma.py"}
    offenders = [
        hit
        for root in ("loadgen", "servers")
        for path in sorted((REPO / root).rglob("*.py"))
        if path.relative_to(REPO).as_posix() not in allowed
        for hit in _decisions_naming(path, pattern)
    ]
    assert not offenders, "\n".join(offenders)


def decisions_by_engine_name(path: Path, names: set[str]) -> list[str]:
    """Where code in `path` decides by an engine's or a dialect's name: the name as a string
    compared with (==, !=, in), given as a keyword's value (engine=..., flavor=..., default=,
    choices=) or as a parameter's default. A name in text for people, a dict key, or a call's
    positional argument (a package's version by its distribution name) decides nothing."""
    tree = ast.parse(path.read_text())
    hits: list[int] = []

    def named(node) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value in names
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(named(e) for e in node.elts)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(named(x) for x in (node.left, *node.comparators)):
            hits.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg in ("engine", "flavor", "default", "choices"):
            if named(node.value):
                hits.append(node.value.lineno)
        elif isinstance(node, ast.arguments) and any(named(d) for d in (*node.defaults, *node.kw_defaults) if d):
            hits.append(node.defaults[0].lineno if node.defaults else 0)
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    return [f"{where}:{line}" for line in sorted(hits)]


def test_no_code_outside_the_engines_decides_by_an_engines_name(tmp_path):
    """What loadgen asks of an engine it asks by a property (embedded, emulates, starts, its
    dialect's fields), never by a name: no decision by any engine's or dialect's name in
    loadgen/, servers/ or workloads/ outside servers/engines/ ("emulator" and "external"
    included). The check itself sees one."""
    names = set(engines.names()) | set(engines.DIALECTS)
    offenders = [
        hit
        for root in ("loadgen", "servers", "workloads")
        for path in sorted((REPO / root).rglob("*.py"))
        if "engines" not in path.relative_to(REPO).parts
        for hit in decisions_by_engine_name(path, names)
    ]
    assert not offenders, "decided by an engine's name at " + ", ".join(offenders)
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(dep, flavor="sglang"):\n    if dep.engine == "emulator":\n        g(engine="external")\n'
        '    return {"emulator": 1}.get("vllm"), md.version("vllm")\n'
    )
    assert [h.split(":")[-1] for h in decisions_by_engine_name(bad, names)] == ["1", "2", "3"]


def test_the_map_names_every_engine_module():
    """docs/architecture.md's engines paragraph names each module of servers/engines/."""
    text = (REPO / "docs" / "architecture.md").read_text()
    family = text[text.index("**Engines** decide") : text.index("Beyond one machine")]
    modules = {p.name for p in (REPO / "servers" / "engines").glob("*.py")} - {"__init__.py"}
    missing = sorted(m for m in modules if f"`{m}`" not in family)
    assert not missing, f"docs/architecture.md's engines paragraph does not name {missing}"
