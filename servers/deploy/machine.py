"""What a deployment's environment may say of the machine it starts on, filled in when a server
is rendered: `{cpus}` (the cores this process may run on, as vLLM's VLLM_CPU_OMP_THREADS_BIND
takes them: `0-1`, `0-3,8-11`) and `{cpu}` (a short name of this CPU: its model and instruction
set flags, hashed), so a compile cache keyed by it is never shared between CPUs (vLLM's key has no
CPU in it: a cache made on an AVX-512 CPU dies with SIGILL on an AVX2 one). `~` is the home."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from servers.deploy.schema import DeploymentError

PLACEHOLDERS = ("{cpus}", "{cpu}")


def cpus() -> str:
    """The cores this process may use, as ranges: [0, 1, 2, 5] -> "0-2,5"."""
    runs: list[list[int]] = []
    for i in sorted(os.sched_getaffinity(0)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


KINDS = ("avx512_bf16", "avx512", "avx2", "other")


def _cpuinfo() -> tuple[str, list[str]]:
    """This CPU's model name and flags (/proc/cpuinfo's first processor)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return model, flags


def model_name() -> str:
    """This CPU's model name, as /proc/cpuinfo gives it ("" where it says none)."""
    return _cpuinfo()[0]


def kind() -> str:
    """This CPU's kind as vLLM's CPU build tells them apart when it picks its kernels (`_C` for
    AVX-512 with BF16, `_C_AVX512`, `_C_AVX2`): avx512_bf16, avx512, avx2 or other. A
    deployment's dtype may differ by kind (engine vllm-cpu's `dtype_by_cpu`): bf16 is native
    arithmetic on the first and converted on the others."""
    flags = set(_cpuinfo()[1])
    if "avx512f" in flags:
        return "avx512_bf16" if "avx512_bf16" in flags else "avx512"
    return "avx2" if "avx2" in flags else "other"


def cpu() -> str:
    """This CPU's model name and flags, hashed to 12 characters, prefixed by its widest vector
    instructions (avx512, avx2 or other), so a person reading a cache path can tell them apart."""
    model, flags = _cpuinfo()
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    digest = hashlib.sha256(f"{model}|{' '.join(sorted(flags))}".encode()).hexdigest()[:12]
    return f"{isa}-{digest}"


def check(name: str, value: str) -> None:
    """Refuse a value with a brace that is none of the placeholders (a typo would reach vLLM)."""
    rest = value
    for p in PLACEHOLDERS:
        rest = rest.replace(p, "")
    if "{" in rest or "}" in rest:
        raise DeploymentError(f"env {name} = {value!r}: the placeholders are {', '.join(PLACEHOLDERS)}")


def expand(name: str, value: str) -> str:
    """An environment value with the placeholders filled in and `~` expanded."""
    check(name, value)
    out = value.replace("{cpus}", cpus()).replace("{cpu}", cpu())
    return os.path.expanduser(out) if out.startswith("~") else out
