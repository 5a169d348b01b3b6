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

TOY = '''"""A toy engine: `toyserve MODEL --port P --lookahead K`, on CPU."""
from __future__ import annotations

from servers.deployments import schema
from servers.deployments.model import Launch
from servers.engines.base import Base, Metrics, RequestSD, register


@register
class Toy(Base):
    name = "toy"
    flags = "toy"
    resource = "TOYCHIP"
    tool = "toy-serve"
    owned_by = "toy"
    keep_alive = False
    request_fields = {"toy_details": True}
    metrics = Metrics(counters={"generation_tokens": ("toy:tokens_out_total",)},
                      gauges={"running": ("toy:busy",)})
    request_sd = RequestSD("toy_drafted", "toy_kept", "toy_rounds")
    variant_keys = {"lookahead": schema.Key(int, least=1)}
    deployment_keys = {"toy_threads": schema.Key(int, least=1)}

    def render(self, dep, v, *, port, gpus=None, host="127.0.0.1", executable=None):
        argv = [executable or "toyserve", dep.model, "--port", str(port), "-t", str(dep.own.get("toy_threads", 1))]
        if "lookahead" in v.own:
            argv += ["--lookahead", str(v.own["lookahead"])]
        return Launch(dep.name, v.name, self.name, tuple(argv), {}, f"http://{host}:{port}",
                      dep.served_model_name, dep.startup_timeout_s)

    def install_problem(self, dep, executable):
        return "toyserve is not installed here; pip install toyserve"
'''
TOY_DEPLOYMENT = """description = "a toy"
model = "toy/model"
engine = "toy"
toy_threads = 3

[variants.baseline]

[variants.look]
lookahead = 4
"""
PROBE = r"""
import json, sys
from click.testing import CliRunner
from servers import engines
from servers.deployments import load, render
from loadgen.cli.app import main
from loadgen.backends.raycluster import default_resource
from loadgen.load import metric_names
from loadgen.client import events, endpoint
from loadgen.client.record import RequestRecord
from loadgen.sweep.job import check_engine
from loadgen.errors import LoadgenError

dep = load("toy-deployment")
out = {"names": list(engines.names()), "command": render(dep, "look", port=9).shell()}
out["help"] = {c: CliRunner().invoke(main, [c, "--help"]).output for c in ("sweep", "check", "capacity")}
out["resource"] = default_resource("toy")
out["counters"] = metric_names.COUNTERS["generation_tokens"]
rec = RequestRecord(0, "r", False, 0)
events.on_event(rec, b'{"choices":[],"toy_ext":{"toy_drafted":9,"toy_kept":5,"toy_rounds":3}}', 1)
out["per_request"] = [rec.server_draft_tokens, rec.server_accepted_tokens, rec.server_spec_steps]
served = endpoint.Served("toy/model", "toy")
out["keep_alive"], out["fields"] = served.keep_alive, served.request_fields
class Plan:
    executable = None
try:
    check_engine(dep, Plan())
except LoadgenError as e:
    out["install"] = str(e)
try:
    dep.with_engine("vllm")
except Exception as e:
    out["cross"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The source tree copied, with the toy engine as one module and its deployment file."""
    root = tmp_path_factory.mktemp("engine-tree")
    for part in ("loadgen", "servers", "workloads"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "servers" / "engines" / "toy.py").write_text(TOY)
    (root / "servers" / "deployments" / "toy-deployment.toml").write_text(TOY_DEPLOYMENT)
    return root


def test_a_new_engine_is_one_module_and_one_catalog_file(tree):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "toy" in out["names"]
    assert out["command"] == "toyserve toy/model --port 9 -t 3 --lookahead 4"
    for command, text in out["help"].items():
        assert "toy" in re.sub(r"\s+", " ", text), f"loadgen {command} --engine does not offer the new engine"
    assert out["resource"] == "TOYCHIP"
    assert "toy:tokens_out_total" in out["counters"]
    assert out["per_request"] == [9, 5, 3]
    assert out["keep_alive"] is False and out["fields"] == {"toy_details": True}
    assert out["install"] == "toyserve is not installed here; pip install toyserve"
    assert "toy's flags and vllm's differ" in out["cross"]
    # and the repository itself is untouched
    assert not (REPO / "servers" / "engines" / "toy.py").exists()


def test_every_engine_is_registered_and_declares_what_the_client_reads():
    assert set(engines.names()) >= {"vllm", "vllm-cpu", "emulator", "external", "llama.cpp", "sglang"}
    for name in engines.names():
        e = engines.get(name)
        assert isinstance(e, engines.Engine) and e.name == name
        if e.request_sd is not None:  # the hot path reads an event in full when it holds MARK
            assert engines.MARK in e.request_sd.drafted, name
        assert e.resource in ("GPU", "CPU")
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


def test_the_map_names_every_engine_module():
    """docs/architecture.md's engines paragraph names each module of servers/engines/."""
    text = (REPO / "docs" / "architecture.md").read_text()
    family = text[text.index("**Engines** decide") : text.index("Beyond one machine")]
    modules = {p.name for p in (REPO / "servers" / "engines").glob("*.py")} - {"__init__.py"}
    missing = sorted(m for m in modules if f"`{m}`" not in family)
    assert not missing, f"docs/architecture.md's engines paragraph does not name {missing}"
