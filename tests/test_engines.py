"""Serving engines are a family (docs/architecture.md, "The families"): one module each in
servers/engines/, a launcher and the dialect its servers speak, registered by name, and every
list of engines or dialects in loadgen read from the registries. Proved with a throwaway engine
written into a copy of the source tree as one module (and a deployment file of it), of a
dialect unlike vLLM's (metrics at /stats, SD counters of another shape, per-request keys of its
own, a speculative config in a file): the CLI offers it, a deployment of it loads and renders
its command, the sweep's install check, Ray placement, the metric catalog and the client's
per-request reader take what its module says, and a sweep of it on the emulator speaking its
dialect measures it end to end (tests/test_engines_unit.py: the registries read in place)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
