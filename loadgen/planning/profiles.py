"""The cost profiles an emulated sweep prices with (engine emulator, --virtual): held to the
machine they were fitted on (servers/emulator/fingerprint.py), and said where a drafter's
acceptance is not the model's own (servers/emulator/profile.py, acceptance_note).

A profile fitted on another CPU, or for another dtype, is refused in one line naming `loadgen
fit`, unless the sweep was told --profile-anyway; then each mismatch is a sentence the sweep
prints first and keeps in its plan and in every cell's summary (summary["cell"]["profile_mismatch"]),
and the report's lead repeats it."""

from __future__ import annotations

import json

from loadgen.errors import LoadgenError
from servers import engines


def variant_profiles(dep, variants: list[str]) -> dict[str, str]:
    """variant -> the profile its emulator command line prices with (engine emulator only)."""
    from servers.deployments import render
    from servers.emulator.__main__ import profile_of_command

    out = {}
    for v in variants:
        name = profile_of_command(render(dep, v, port=1).argv)
        if name is not None:
            out[v] = name
    return out


def _deployment_facts(dep) -> dict:
    """What a profile's [machine] is held to besides the host: the dtype this deployment runs at
    on this CPU (engine vllm-cpu's dtype_by_cpu), where it says."""
    from servers.deploy import machine

    table = dep.own.get("dtype_by_cpu") or {}
    return {"dtype": table.get(machine.kind(), table.get("default"))} if table else {}


def mismatches(dep, variants: list[str]) -> list[str]:
    """One sentence per profile (used by these variants) fitted on another machine or deployment."""
    from servers.emulator import profile as profiles
    from servers.emulator.fingerprint import mismatch

    out: list[str] = []
    for name in dict.fromkeys(variant_profiles(dep, variants).values()):
        try:
            fitted = profiles.load(name).machine
        except (profiles.ProfileError, OSError, KeyError):
            continue  # the emulator names a bad profile itself, in the cell it fails
        said = mismatch(name, fitted, deployment=_deployment_facts(dep))
        if said and said not in out:
            out.append(said)
    return out


def checked(dep, variants: list[str], anyway: bool) -> list[str]:
    """The mismatches, refused (LoadgenError, one line) unless `anyway`; else returned to be said."""
    from servers.emulator.fingerprint import refusal

    found = mismatches(dep, variants) if engines.emulates(dep.engine) else []
    if found and not anyway:
        raise LoadgenError(refusal(found[0]))
    return found


def held(name: str, anyway: bool) -> str | None:
    """A profile (by name or file) held to this machine: the mismatch in one sentence, refused
    (LoadgenError) unless `anyway` (`loadgen simulate`, `loadgen whatif`)."""
    from servers.emulator import profile as profiles
    from servers.emulator.fingerprint import mismatch, refusal

    try:
        fitted = profiles.load(name).machine
    except (profiles.ProfileError, OSError, KeyError):
        return None  # the command names a bad profile itself
    said = mismatch(name, fitted)
    if said and not anyway:
        raise LoadgenError(refusal(said))
    return said


def prompt_texts(workload, seed: int, n: int = 8) -> list[str]:
    """The first `n` prompts of a workload, as the emulator reads one to tell its kind."""
    try:
        reqs = list(workload.requests(n, seed))
    except Exception:  # noqa: BLE001 - a workload that cannot be read fails where it is run, said there
        return []
    return [r.prompt or " ".join(str(m.get("content", "")) for m in r.messages or ()) for r in reqs]


def said_of(name: str, method: str | None, texts: list[str]) -> list[str]:
    """Profile `name`'s acceptance notes for `method` over the kinds of these prompts."""
    from servers.emulator import profile as profiles
    from servers.emulator.content import classify

    if method is None:
        return []
    try:
        prof = profiles.load(name)
    except (profiles.ProfileError, OSError, KeyError):
        return []
    notes = (prof.acceptance_note(method, kind) for kind in sorted({classify(t) for t in texts}))
    return [n for n in notes if n]


def acceptance_notes(dep, variants: list[str], prompts: dict[str, list[str]]) -> list[str]:
    """For each variant's drafter and each kind of request in the workloads (`prompts`: label ->
    some of its prompt texts), where the profile's acceptance for it is shared or borrowed."""
    from servers.emulator.spec import SpecError, parse

    if not engines.emulates(dep.engine):
        return []
    out: list[str] = []
    texts = [t for ts in prompts.values() for t in ts]
    for v, name in variant_profiles(dep, variants).items():
        spec = dep.variants[v].speculative_config
        try:
            parsed = parse(json.dumps(spec)) if spec else None
            method = parsed.method if parsed else None
        except SpecError:
            continue
        out += [f"{v}: {said}" for said in said_of(name, method, texts) if f"{v}: {said}" not in out]
    return out
