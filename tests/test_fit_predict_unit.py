"""test_fit_predict.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from servers.emulator.fingerprint import host, mismatch
from tests.conftest import REPO, cli

pytestmark = pytest.mark.unit


def test_the_mismatch_names_what_differs_and_spares_an_emulated_gpu():
    here = {"cpu_model": "AMD EPYC", "cpu_kind": "avx512_bf16", "cores": 2}
    fitted = {"accelerator": "cpu", "cpu_model": "AMD EPYC", "cpu_kind": "avx512_bf16", "cores": 2, "dtype": "bfloat16"}
    assert mismatch("p", fitted, here=here) is None
    said = mismatch("p", fitted, here={**here, "cpu_kind": "avx2"}, deployment={"dtype": "float32"})
    assert (
        "cpu kind avx512_bf16 there, avx2 here" in said and "dtype bfloat16 there, float32 in this deployment" in said
    )
    assert mismatch("p", {**fitted, "accelerator": "NVIDIA H100 80GB HBM3"}, here={**here, "cores": 64}) is None
    assert mismatch("p", {}, here=here) is None


def test_the_catalogs_cpu_profile_on_a_cpu_of_another_kind_is_refused_in_one_line(tmp_path):
    """cpu-qwen2.5-coder-1.5b (fitted by `loadgen fit` on an AVX-512 BF16 CPU) as if this CPU were
    of another kind: its fingerprint made to differ in the CPU kind alone."""
    text = (REPO / "servers/emulator/profiles/cpu-qwen2.5-coder-1.5b.toml").read_text()
    fitted = {"engine": "vllm-cpu", "model": "qwen2.5-coder-1.5b"}
    from servers.emulator import profile as profiles

    machine = profiles.load("cpu-qwen2.5-coder-1.5b").machine
    assert machine["accelerator"] == "cpu" and {k: machine[k] for k in fitted} == fitted
    here = host()["cpu_kind"]
    other = "avx2" if here != "avx2" else "avx512_bf16"
    line = next(ln for ln in text.splitlines() if ln.startswith("cpu_kind = "))
    copy = tmp_path / "cpu-qwen-elsewhere.toml"
    copy.write_text(text.replace(line, f'cpu_kind = "{other}"'))
    args = [
        *("sweep", "--servers", "qwen2.5-coder-1.5b-vllm-cpu", "--engine", "emulator", "--virtual"),
        *("--profile", str(copy), "--variants", "baseline", "--concurrency", "1", "--dry-run"),
    ]
    res = cli(*args)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"cpu kind {other} there, {here} here" in res.stderr and "`loadgen fit`" in res.stderr
    res = cli(*args, "--profile-anyway")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[0].startswith("PROFILE MISMATCH (--profile-anyway): profile ")
