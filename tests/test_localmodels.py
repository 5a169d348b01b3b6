"""What real vLLM is started with, checked without vLLM: loadgen's own model directories (made
once, remade when stale, never half-made), the machine placeholders of a deployment's env, the
vllm-cpu engine's rendered command and environment, the launcher's start stages, the vllm shim
wheel, and the one-line refusals of what cannot work (tests/test_vllm_cpu.py serves them)."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import zipfile
from pathlib import Path

import pytest

from servers import localmodels
from servers.deploy import machine
from servers.deployments import DeploymentError, load, render
from servers.launcher import Server
from servers.localmodels.store import STAMP, ModelError, make
from servers.vllm_cpu.__main__ import shim_wheel
from tests.conftest import cli
from tests.test_deployments import refused_in_one_line

pytestmark = pytest.mark.unit


@pytest.fixture
def models(tmp_path, monkeypatch):
    root = tmp_path / "models"
    monkeypatch.setenv("LOADGEN_MODELS", str(root))
    return root


def test_a_local_model_is_made_once_and_remade_when_stale(models):
    tiny = localmodels.PREFIX + "tiny-llama"
    assert not localmodels.made(tiny)
    where = localmodels.ensure(tiny)
    assert where == models / "tiny-llama" and localmodels.made(tiny)
    stamp = json.loads((where / STAMP).read_text())
    assert stamp["key"] == localmodels.MODELS["tiny-llama"].key
    assert set(stamp["files"]) == {p.name for p in where.iterdir()} - {STAMP}
    config = json.loads((where / "config.json").read_text())
    assert config["head_dim"] == 64 and config["architectures"] == ["LlamaForCausalLM"]
    first = (where / "config.json").stat().st_mtime_ns
    localmodels.ensure(tiny)  # fresh: not made again
    assert (where / "config.json").stat().st_mtime_ns == first

    with open(where / "tokenizer.json", "r+b") as f:  # a file cut short: stale, made again
        f.truncate(10)
    assert not localmodels.made(tiny)
    localmodels.ensure(tiny)
    assert (
        localmodels.made(tiny)
        and (where / "tokenizer.json").stat().st_size == stamp["files"]["tokenizer.json"]["bytes"]
    )

    stamp["key"]["version"] -= 1  # made by an older recipe: stale
    (where / STAMP).write_text(json.dumps(stamp))
    assert not localmodels.made(tiny)
    localmodels.ensure(tiny)
    assert localmodels.made(tiny)
    assert not [p for p in models.iterdir() if p.name.endswith((".part", ".old"))]


def test_a_model_that_fails_its_check_replaces_nothing(tmp_path):
    where = tmp_path / "m"
    make(where, {"v": 1}, lambda d: (d / "a").write_text("good"), lambda d, files: None)

    def bad_check(d: Path, files: dict) -> None:
        raise ModelError("wrong shapes")

    with pytest.raises(ModelError, match="wrong shapes"):
        make(where, {"v": 2}, lambda d: (d / "a").write_text("bad"), bad_check)
    assert (where / "a").read_text() == "good"  # the old one stays, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m"]  # no half-made .part left


def test_machine_placeholders():
    cores = sorted(os.sched_getaffinity(0))
    ranges = machine.cpus()
    listed = []
    for part in ranges.split(","):
        a, _, b = part.partition("-")
        listed += range(int(a), int(b or a) + 1)
    assert listed == cores
    assert re.fullmatch(r"(avx512|avx2|other)-[0-9a-f]{12}", machine.cpu())
    # the widest vector instructions as numpy's runtime dispatch found them (the CPUID
    # instruction, not /proc/cpuinfo's text that machine.cpu() reads)
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    isa = "avx512" if features.get("AVX512F") else "avx2" if features.get("AVX2") else "other"
    assert machine.cpu().startswith(isa + "-"), (machine.cpu(), isa)
    assert machine.expand("X", "~/c/{cpu}") == str(Path.home() / "c" / machine.cpu())
    assert machine.expand("X", "{cpus}") == ranges
    with pytest.raises(DeploymentError, match=r"the placeholders are \{cpus\}, \{cpu\}"):
        machine.check("X", "~/c/{cores}")


def test_the_vllm_cpu_engine_renders_its_environment_and_local_models(models):
    dep = load("tiny-llama-vllm-cpu")
    la = render(dep, "draft-model", port=8123)
    assert la.engine == "vllm-cpu" and la.argv[1:3] == ("serve", str(models / "tiny-llama"))
    spec = json.loads(la.argv[la.argv.index("--speculative-config") + 1])
    assert spec["model"] == str(models / "tiny-llama-draft")
    assert "--served-model-name" in la.argv and la.served_model_name == "tiny-llama"
    assert la.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert la.env["VLLM_CPU_OMP_THREADS_BIND"] == machine.cpus()
    assert la.env["VLLM_CACHE_ROOT"] == str(Path.home() / ".cache/loadgen/vllm" / machine.cpu())
    assert [name for name, _ in la.prepare] == ["local:tiny-llama", "local:tiny-llama-draft"]
    assert la.url == "http://127.0.0.1:8123"


def test_bad_vllm_cpu_deployments_are_one_clear_line(tmp_path):
    head = 'model = "local:tiny-llama"\nengine = "vllm-cpu"\n'
    cases = {
        head + "[env]\nVLLM_CPU_KVCACHE_SPACE = 2\n[variants.a]\n": "env values are strings",
        head + '[env]\nVLLM_CACHE_ROOT = "~/c/{core}"\n[variants.a]\n': "the placeholders are",
        'model = "local:tiny-lama"\nengine = "vllm-cpu"\n[variants.a]\n': "no local model 'local:tiny-lama'",
        head + '[variants.a]\nspeculative_config = { method = "draft_model", model = "local:nope", '
        "num_speculative_tokens = 3 }\n": "no local model 'local:nope'",
        head + "tensor_parallel_size = 2\n[variants.a]\n": "tensor_parallel_size must be 1",
    }
    refused_in_one_line(tmp_path, cases)


def test_an_output_that_cannot_fit_the_served_context_is_refused_before_the_sweep(tmp_path):
    r = cli(
        "sweep",
        "--servers",
        "tiny-llama-vllm-cpu",
        "--workloads",
        "code-edit,output=fixed:4096",
        "--output",
        str(tmp_path / "o"),
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--max-model-len 2048" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_a_starting_servers_stage_is_the_furthest_its_log_reached(tmp_path):
    dep = load("tiny-llama-vllm-cpu")
    log = tmp_path / "server.log"
    server = Server(render(dep, "baseline", port=8124), log_path=log)
    assert server.stage() is None
    lines = [
        "INFO [utils.py:253] non-default args: {'model': '/m'}",
        "INFO [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: model='/m'",
        "INFO [parallel_state.py:1208] world_size=1 rank=0 distributed_init_method=tcp://127.0.0.1:1",
        "INFO [cpu_model_runner.py:71] Starting to load model /m...",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert server.stage() == "loading the model"
    with open(log, "a") as f:  # a child repeats its config later: the stage does not go back
        f.write("INFO [utils.py:253] non-default args: {'model': '/m'}\n")
    assert server.stage() == "loading the model"
    with open(log, "a") as f:
        f.write("INFO [api_server.py:1] Starting vLLM server on http://127.0.0.1:8124\n")
    assert server.stage() == "serving"


def test_the_vllm_shim_is_a_metadata_only_wheel(tmp_path):
    wheel = shim_wheel("0.32.0+cpu", tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert all(n.startswith("vllm-0.32.0+cpu.dist-info/") for n in names)
        z.extractall(tmp_path / "x")
        record = z.read("vllm-0.32.0+cpu.dist-info/RECORD").decode().splitlines()
    assert len(record) == len(names)
    (dist,) = md.distributions(path=[str(tmp_path / "x")])
    assert dist.metadata["Name"] == "vllm" and dist.version == "0.32.0+cpu"
