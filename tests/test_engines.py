"""Serving engines are a family (docs/architecture.md, "The families"): one module each in
servers/engines/, registered by name, and every list of engines in loadgen read from the
registry. Proved with a throwaway engine written into a copy of the source tree as one module
(and a deployment file of it): the CLI offers it, a deployment of it loads and renders its
command, the sweep's install check, Ray placement, the metric catalog, the client's
per-request reader and the export all take what its module says."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from servers import engines
from tests.conftest import REPO

pytestmark = pytest.mark.servers

TOY = '''"""A toy engine: `toyserve MODEL --port P -t T [--spec-file FILE]`, on CPU. Its servers speak
the toy dialect: metrics at /stats, SD counted as verify rounds, proposed and rejected tokens
(no accepted counter), a request's SD counts under `toy_ext` (proposed, kept, rounds) in a
chunk of their own when the request asks (`toy_details`), owned_by "toy-org", no keep-alive."""
from __future__ import annotations

import json
import shutil

from servers.deploy import schema
from servers.deploy.model import FILES, Launch
from servers.engines.base import Base, register
from servers.engines.dialect import Dialect, Metrics, RequestSD, sd_figures, speak


def window_sd(c):
    if not c.present("spec_verify_calls"):
        return None
    proposed = c.total("spec_draft_tokens")
    return sd_figures(c.seconds, c.total("spec_verify_calls"), proposed, proposed - c.total("spec_rejected_tokens"))


DIALECT = speak(
    Dialect(
        "toy",
        owned_by="toy-org",
        keep_alive=False,
        request_fields={"toy_details": True},
        metrics_path="/stats",
        metrics=Metrics(
            counters={
                "generation_tokens": ("toy:tokens_out_total",),
                "spec_verify_calls": ("toy:rounds_total",),
                "spec_draft_tokens": ("toy:proposed_total",),
                "spec_rejected_tokens": ("toy:rejected_total",),
            },
            gauges={"running": ("toy:busy",)},
        ),
        request_sd=RequestSD("proposed", "kept", "rounds", path=("toy_ext",), alone=True),
        window_sd=window_sd,
    )
)


@register
class Toy(Base):
    name = "toy"
    flags = "toy"
    resource = "TOYCHIP"
    tool = "toy-serve"
    dialect = DIALECT.name
    variant_keys = {"lookahead": schema.Key(int, least=1)}
    deployment_keys = {"toy_threads": schema.Key(int, least=1)}

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None):
        exe = executable or dep.executable or "toyserve"
        argv = [exe, dep.model, "--port", str(port), "-t", str(dep.own.get("toy_threads", 1))]
        files = ()
        if "lookahead" in v.own:  # its speculative config is a file
            spec = {"method": "ngram", "num_speculative_tokens": v.own["lookahead"], "prompt_lookup_max": 3}
            files = (("spec.json", json.dumps(spec)),)
            argv += ["--spec-file", f"{FILES}/spec.json"]
        return Launch(dep.name, v.name, self.name, tuple(argv), {}, f"http://{host}:{port}",
                      dep.served_model_name, dep.startup_timeout_s, files=files)

    def install_problem(self, dep, executable):
        exe = executable or dep.executable or "toyserve"
        return None if shutil.which(exe) else "toyserve is not installed here; pip install toyserve"
'''
# The toy's server for the test: the emulator answering in the toy's dialect, its speculative
# config read from the file the launcher wrote, its engine's own record of every request's steps
# (--step-log) beside it.
TOYSERVE = """#!{python}
import json, os, sys
args = sys.argv[1:]
model, port = args[0], args[args.index("--port") + 1]
argv = [sys.executable, "-m", "servers.emulator", "serve", model, "--host", "127.0.0.1", "--port", port,
        "--profile", "h100-llama-3.1-8b", "--flavor", "toy", "--step-log", {step_log!r}]
if "--spec-file" in args:
    with open(args[args.index("--spec-file") + 1]) as f:
        argv += ["--speculative-config", json.dumps(json.load(f))]
os.execv(sys.executable, argv)
"""
TOY_DEPLOYMENT = """description = "a toy"
model = "toy/model"
engine = "toy"
toy_threads = 3
executable = "{executable}"
startup_timeout_s = 60

[variants.baseline]

[variants.look]
lookahead = 4
"""
PROBE = r"""
import dataclasses, json, sys
from click.testing import CliRunner
from servers import engines
from servers.deployments import load, on_engine, render
from loadgen.cli.app import main
from loadgen.backends.raycluster import default_resource
from loadgen.load import metric_names
from loadgen.client import events, endpoint
from loadgen.client.record import RequestRecord
from loadgen.sweep.job import check_engine
from loadgen.errors import LoadgenError

dep = load("toy-deployment")
out = {"names": list(engines.names()), "command": render(dep, "look", port=9).shell()}
out["files"] = list(render(dep, "look", port=9).files)
out["help"] = {c: CliRunner().invoke(main, [c, "--help"]).output for c in ("sweep", "check", "capacity")}
out["resource"] = default_resource("toy")
out["counters"] = metric_names.COUNTERS["generation_tokens"]
rec = RequestRecord(0, "r", False, 0)
events.on_event(rec, b'{"choices":[],"toy_ext":{"proposed":9,"kept":5,"rounds":3}}', 1)
out["per_request"] = [rec.server_draft_tokens, rec.server_accepted_tokens, rec.server_spec_steps]
served = endpoint.Served("toy/model", "toy-org")
out["keep_alive"], out["fields"], out["path"] = served.keep_alive, served.request_fields, served.metrics_path
out["flavors"] = list(engines.flavors())
class Plan:
    executable = None
try:
    check_engine(dataclasses.replace(dep, executable="/nowhere/toyserve"), Plan())
except LoadgenError as e:
    out["install"] = str(e)
try:
    on_engine(dep, "vllm")
except Exception as e:
    out["cross"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The source tree copied, with the toy engine as one module and its deployment file (and,
    standing in for the toy's own server binary, the emulator answering in its dialect)."""
    root = tmp_path_factory.mktemp("engine-tree")
    for part in ("loadgen", "servers", "workloads"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "servers" / "engines" / "toy.py").write_text(TOY)
    exe = root / "toyserve"
    exe.write_text(TOYSERVE.format(python=sys.executable, step_log=str(root / "steps.jsonl")))
    exe.chmod(0o755)
    (root / "servers" / "deployments" / "toy-deployment.toml").write_text(TOY_DEPLOYMENT.format(executable=exe))
    return root


def test_a_new_engine_is_one_module_and_one_catalog_file(tree):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "toy" in out["names"] and "toy" in out["flavors"]
    assert out["command"] == f"{tree / 'toyserve'} toy/model --port 9 -t 3 --spec-file '{{files}}/spec.json'"
    assert [name for name, _ in out["files"]] == ["spec.json"]
    for command, text in out["help"].items():
        assert "toy" in re.sub(r"\s+", " ", text), f"loadgen {command} --engine does not offer the new engine"
    assert out["resource"] == "TOYCHIP"
    assert "toy:tokens_out_total" in out["counters"]
    assert out["per_request"] == [9, 5, 3]
    assert out["keep_alive"] is False and out["fields"] == {"toy_details": True} and out["path"] == "/stats"
    assert out["install"] == "toyserve is not installed here; pip install toyserve"
    assert "toy's flags and vllm's differ" in out["cross"]
    # and the repository itself is untouched
    assert not (REPO / "servers" / "engines" / "toy.py").exists()


def test_a_new_engine_sweeps_end_to_end_in_its_own_dialect(tree):
    """The toy deployment swept as a user sweeps it: its server started from the command its
    module renders (the speculative config in a file the launcher wrote), the emulator answering
    in the toy's dialect. The per-request SD counts are read from the toy's keys on every
    request and agree with the stream's own count by the rule; the window's SD figures come
    from the toy's counters at /stats; and both equal the engine's own record of its steps."""
    out = tree / "sweep"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = ["sweep", "--servers", "toy-deployment", "--concurrency", "2", "--workloads", "code-edit,output=fixed:48"]
    argv += ["--num-requests", "6", "--warmup", "0", "--output", str(out)]
    p = subprocess.run(
        [sys.executable, "-m", "loadgen", *argv], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert "--spec-file" in manifest["servers"]["look"]["command"]
    summary = json.loads((out / "cells" / "look" / "code-edit" / "c2" / "summary.json").read_text())
    reported = summary["acceptance_client"]["server_reported"]
    assert reported["requests"] == 6 and reported["spec_steps"] > 0
    rec = summary["acceptance_client"]["reconciliation"]
    assert rec["unexplained"]["requests"] == 0 and rec["requests_checked"] == 6, rec
    window = summary["spec_decode"]
    steps = [json.loads(line)["steps"] for line in (tree / "steps.jsonl").read_text().splitlines()]
    sd_steps = [s for r in steps if any(st[0] for st in r) for s in r[1:]]  # the look server's decode steps
    truth = {
        "drafts": len(sd_steps),
        "draft_tokens": sum(s[0] for s in sd_steps),
        "accepted": sum(s[1] for s in sd_steps),
    }
    assert truth["accepted"] > 0
    assert (window["drafts"], window["draft_tokens"], window["accepted_tokens"]) == tuple(truth.values())
    assert (reported["spec_steps"], reported["draft_tokens"], reported["accepted_tokens"]) == tuple(truth.values())


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
