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

from servers.deployments import DeploymentError, available, load, render
from servers.emulator.__main__ import _parser, build

GOLDEN = Path(__file__).parent / "golden" / "vllm_commands.txt"
# Flags as `vllm serve --help` names them, and the speculative-config fields vLLM documents
# (../shared/reference/vllm.md).
VLLM_FLAGS = {"--host", "--port", "--tensor-parallel-size", "--served-model-name", "--max-num-seqs",
              "--no-enable-prefix-caching", "--speculative-config"}
SPEC_FIELDS = {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
               "prompt_lookup_min", "prompt_lookup_max"}
# The study's matrix (paper.md): variants per target model.
STUDY = {
    "llama-3.1-8b": {"baseline", "ngram", "ngram-k5", "eagle", "eagle3"},
    "llama-3-70b": {"baseline", "ngram", "ngram-k5", "eagle", "draft_model"},
    "qwen3-8b": {"baseline", "ngram", "ngram-k5", "eagle3", "draft_model"},
    "glm-4.5-air": {"baseline", "ngram", "ngram-k5", "mtp"},
}


def rendered() -> list[str]:
    return [f"{name}/{v}: {render(load(name), v).shell()}" for name in available()
            for v in load(name).variants]


def test_rendered_commands_match_the_golden_file():
    lines = rendered()
    if os.environ.get("LOADGEN_UPDATE_GOLDEN"):
        head = [line for line in GOLDEN.read_text().splitlines() if line.startswith("#")]
        GOLDEN.write_text("\n".join(head + lines) + "\n")
    golden = [line for line in GOLDEN.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == golden


def test_the_catalog_is_the_studys_matrix_with_documented_flags():
    assert {name: set(load(name).variants) for name in available()} == STUDY
    for name in available():
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
            assert set(cfg) <= SPEC_FIELDS and cfg["num_speculative_tokens"] == (5 if v == "ngram-k5" else 3)
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
    dep = load(name).with_engine("emulator")
    for v in dep.variants:
        la = render(dep, v)
        assert la.argv[:5] == (sys.executable, "-m", "servers.emulator", "serve", dep.model)
        args, unknown = _parser().parse_known_args(list(la.argv[3:]))
        assert unknown == ["--no-enable-prefix-caching"]  # prefix caching is not modelled
        engine, served = build(args)
        assert served == [dep.served_model_name]
        assert (engine.spec is None) == (v == "baseline")


def test_bad_deployment_files_are_one_clear_line(tmp_path):
    cases = {
        'model = "m"\n': "at least one [variants",
        'model = "m"\nengine = "docker"\n[variants.a]\n': "engine 'docker'",
        'model = "m"\n[variants.a]\nspeculative_config = { method = "magic", num_speculative_tokens = 3 }\n': "method 'magic'",
        'model = "m"\n[variants.a]\nspeculative_config = { method = "ngram" }\n': "num_speculative_tokens",
        'model = "m"\ncolour = 1\n[variants.a]\n': "unknown keys colour",
        'model = "m"\nengine = "external"\n[variants.a]\n': "needs url",
        'model = \n': "cannot read",
    }
    for i, (text, expect) in enumerate(cases.items()):
        path = tmp_path / f"d{i}.toml"
        path.write_text(text)
        with pytest.raises(DeploymentError, match=expect.replace("[", r"\[")) as e:
            load(str(path))
        assert "\n" not in str(e.value)
    with pytest.raises(DeploymentError, match="unknown deployment 'nope'"):
        load("nope")
