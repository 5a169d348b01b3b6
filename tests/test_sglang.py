"""SGLang as an engine (servers/engines/sglang.py; docs/sweep.md, "SGLang"): its rendered
commands are SGLang's (every flag named here as SGLang 0.5.23 declares it, and each command
through SGLang's own parser where its source is beside loadgen: LOADGEN_SGLANG_SOURCE, as
.ci/run makes it; LOADGEN_REQUIRE_SGLANG=1 makes a missing one a failure), the emulator
answers as SGLang does (`--flavor sglang`: its metric names, /v1/models owner, and the
per-request details in `sglext` only when asked), and a sweep of the SGLang deployment on the
emulator runs end to end, its per-request SD counts read into the same figures as vLLM's and
reconciled with the stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from servers.deployments import load, render
from servers.embedded import emulator_server
from tests.conftest import run_cli

pytestmark = pytest.mark.engines

DEPLOYMENT = "llama-3.1-8b-sglang"
SOURCE = os.environ.get("LOADGEN_SGLANG_SOURCE", str(Path.home() / ".cache" / "loadgen" / "sglang-0.5.23"))
REQUIRED = os.environ.get("LOADGEN_REQUIRE_SGLANG") == "1"
# every flag loadgen renders, and where SGLang 0.5.23 declares it (python/sglang/srt/arg_groups/fields/)
FLAGS = {
    "--model-path": "model.py model_path",
    "--served-model-name": "serving.py served_model_name",
    "--host": "serving.py host",
    "--port": "serving.py port",
    "--tp-size": "parallel.py tp_size",
    "--enable-metrics": "observability.py enable_metrics",
    "--max-running-requests": "schedule.py max_running_requests",
    "--disable-radix-cache": "memory.py disable_radix_cache",
    "--speculative-algorithm": "spec.py speculative_algorithm",
    "--speculative-draft-model-path": "spec.py speculative_draft_model_path",
    "--speculative-num-steps": "spec.py speculative_num_steps",
    "--speculative-eagle-topk": "spec.py speculative_eagle_topk",
    "--speculative-num-draft-tokens": "spec.py speculative_num_draft_tokens",
    "--speculative-adaptive": "spec.py speculative_adaptive",
}
PARSE = r"""
import json, sys
from sglang.srt.server_args import prepare_server_args
out = {}
for name, argv in json.loads(sys.stdin.read()).items():
    try:
        a = prepare_server_args(argv + ["--device", "cpu"])  # no GPU here; the flags are what is checked
        out[name] = [a.speculative_algorithm, a.speculative_num_draft_tokens, a.speculative_num_steps]
    except BaseException as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def _commands() -> dict[str, list[str]]:
    dep = load(DEPLOYMENT)
    return {v: list(render(dep, v).argv[3:]) for v in dep.variants}  # after python -m sglang.launch_server


def test_sglangs_own_parser_accepts_every_rendered_command(tmp_path):
    if not (Path(SOURCE) / "sglang" / "srt" / "server_args.py").is_file():
        message = f"no SGLang source at {SOURCE} (.ci/run unpacks `pip download sglang==0.5.23 --no-deps` there)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "PYTHONPATH": SOURCE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    probe = subprocess.run(
        [sys.executable, "-c", "import sglang.srt.server_args"], capture_output=True, text=True, env=env, timeout=300
    )
    if probe.returncode != 0 and not REQUIRED:  # a source left by an earlier .ci/run, without what it imports
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"SGLang's parser at {SOURCE} does not import here ({last}); .ci/run installs what it needs")
    models = Path.home() / ".cache" / "loadgen" / "models" / "tiny-llama"
    if not (models / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "servers.localmodels", "tiny-llama"], check=True, timeout=300)
    # SGLang reads each model's config: the study's models as the local tiny Llama's
    local = {
        name: [str(models) if a.startswith(("meta-llama/", "yuhuili/")) else a for a in argv]
        for name, argv in _commands().items()
    }
    p = subprocess.run(
        [sys.executable, "-c", PARSE], input=json.dumps(local), capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    parsed = json.loads(p.stdout.strip().splitlines()[-1])
    dep = load(DEPLOYMENT)
    for name, got in parsed.items():
        assert isinstance(got, list), f"SGLang refused variant {name}: {got}"
        spec = dep.variants[name].own.get("speculative") or {}
        assert got[:2] == [spec.get("algorithm"), spec.get("num_draft_tokens")], name


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def _stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    return [json.loads(e) for e in events if e != "[DONE]"]


def test_the_emulator_answers_as_sglang():
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    with emulator_server("meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", spec, "--flavor", "sglang") as s:
        models = json.loads(_get(s.url + "/v1/models"))
        assert models["data"][0]["owned_by"] == "sglang"
        body = {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "prompt": "a b c a b c a b c",
            "max_tokens": 40,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        plain = _stream(s.url, body)
        assert not any("sglext" in e or "metrics" in e for e in plain)  # not asked: not sent
        asked = _stream(s.url, {**body, "return_spec_tokens_details": True})
        ext = [e for e in asked if "sglext" in e]
        assert (
            len(ext) == 1 and ext[0]["choices"] == [] and asked[-1]["usage"] and asked.index(ext[0]) == len(asked) - 2
        )
        d = ext[0]["sglext"]["spec_tokens_details"]
        completion = asked[-1]["usage"]["completion_tokens"]
        assert d["spec_num_proposed_drafts"] == 3 * d["spec_verify_ct"]
        assert d["spec_accept_length"] == pytest.approx(completion / d["spec_verify_ct"])
        # every token but the prefill's is a verify step's: one, plus its accepted drafts (some
        # accepted past max_tokens may be cut)
        assert d["spec_verify_ct"] + 1 <= completion <= d["spec_verify_ct"] + d["spec_num_correct_drafts"] + 1
        assert d["spec_num_correct_drafts"] > 0
        metrics = _get(s.url + "/metrics").decode()
    for name in ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:spec_accept_length"):
        assert name in metrics
    assert "vllm:" not in metrics


def test_an_sglang_deployment_sweeps_on_the_emulator(tmp_path):
    out = tmp_path / "sweep"
    p = run_cli(
        "sweep",
        "--servers",
        DEPLOYMENT,
        "--engine",
        "emulator",
        "--concurrency",
        "1,4",
        "--variants",
        "baseline,ngram",
        "--workloads",
        "code-edit,output=fixed:64",  # 64 tokens an answer: n-gram drafts in every cell, in seconds
        "--num-requests",
        "8",
        "--warmup",
        "0",
        "--output",
        str(out),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    cells = pd.read_parquet(out / "cells.parquet")
    assert len(cells) == 4 and (cells["status"] == "ok").all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert "--flavor sglang" in manifest["servers"]["ngram"]["command"]
    for variant in ("ngram",):
        for level in ("c1", "c4"):
            summary = json.loads((out / "cells" / variant / "code-edit" / level / "summary.json").read_text())
            acc = summary["acceptance_client"]
            reported = acc["server_reported"]
            assert reported["requests"] == 8 and reported["spec_steps"] > 0, (variant, level)
            assert reported["mean_acceptance_length"] > 1
            # the server's per-request counts and the stream's own count of accepted drafts agree by
            # the rule: answers cut at 64 tokens leave some last steps' drafts accepted past the end
            rec = acc["reconciliation"]
            assert rec["unexplained"]["requests"] == 0 == rec["stream_unmatched"]["tokens"], (variant, level, rec)
            assert rec["requests_checked"] >= 8, (variant, level, rec)
            # the window's figures from SGLang's own counters (verify calls, tokens, requests)
            window = summary["spec_decode"]
            assert window["drafts"] == reported["spec_steps"], (variant, level, window)
            # less the drafts accepted past an answer's end: counted per request, never generated
            past_end = rec["past_end"]["tokens"]
            assert window["accepted_tokens"] == reported["accepted_tokens"] - past_end, (variant, level, window)
            assert not any("not explained" in d for d in rec["differences"]), rec["differences"]
            assert window["acceptance_rate"] is None  # SGLang counts no draft tokens
    assert "speedup" in p.stdout.lower()
