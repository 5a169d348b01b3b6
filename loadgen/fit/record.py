"""The fit's account in words (printed by `loadgen fit`, and the profile file's opening comment):
the machine, the cells used, each term with its standard error, the terms the data did not place,
and each cell's residual (its modelled time over its measured, and the steps' rms)."""

from __future__ import annotations

import numpy as np

from loadgen.fit.cells import FitCell


def _ms(v: float) -> str:
    return f"{v * 1e3:.3f} ms" if abs(v) >= 1e-5 else f"{v * 1e6:.3f} us"


def terms(name: str, fit) -> list[str]:
    """One line per term: value ± standard error; held at zero, or not placed (± over it)."""
    out = []
    for key, v in fit.terms.items():
        se = fit.stderr.get(key)
        if se is None or v == 0:
            out.append(f"  {name}.{key} = 0 (held at zero: these cells do not place it)")
        elif se >= abs(v):
            out.append(f"  {name}.{key} = {_ms(v)} ± {_ms(se)} (not placed: its error is as large as it)")
        else:
            out.append(f"  {name}.{key} = {_ms(v)} ± {_ms(se)}")
    return out


def _residual(c: FitCell, model: np.ndarray) -> str:
    t = c.steps[:, 0]
    if not len(t):
        return f"  {c.key}: no steps"
    bias = float(model.sum() / t.sum() - 1)
    rms = float(np.sqrt(np.mean((t - model) ** 2)))
    tput = f"{c.tput:.2f} tok/s" if c.tput else "? tok/s"
    return f"  {c.key} ({c.sweep.name}): {len(t)} steps, {tput}; modelled time {bias:+.1%}, step rms {rms * 1e3:.1f} ms"


def record(
    cells: list[FitCell], alone_cells: list[FitCell], forward, drafters: dict, alone, machine: dict
) -> list[str]:
    from servers.emulator import costfit
    from servers.emulator.fingerprint import describe

    fw = forward[0]
    out = [f"loadgen fit: {describe(machine)}, model {machine.get('model', '?')}"]
    out.append(f"cells used ({len(cells)}), each with its residual:")
    for c in cells:
        model = fw.time(c.steps[:, costfit.KV], c.steps[:, costfit.BATCHED])
        if c.method is not None:
            d = drafters[c.method][0]
            model = model + d.mode_time(c.steps[:, costfit.BATCHED]) + costfit.drafting_time(d, c.k, c.steps, fw)
        out.append(_residual(c, model))
    out.append(
        f"target forward ({forward[1].samples} baseline steps, rms {forward[1].rms * 1e3:.1f} ms; "
        f"knee {fw.weights / fw.per_batched_token:.1f} tokens)"
        if fw.per_batched_token
        else "target forward:"
    )
    out += terms("forward", forward[1])
    if alone is not None:
        out.append(f"draft model served alone ({len(alone_cells)} cells, {alone[1].samples} steps):")
        out += terms("draft_forward", alone[1])
    for method, (_, f) in drafters.items():
        out.append(f"{method} ({f.samples} steps, rms {f.rms * 1e3:.1f} ms):")
        out += terms(method, f)
        if method == "draft_model" and alone is None:
            out.append(
                "  no sweep of the draft model alone (--alone): its forward's fixed cost cannot be told "
                "from SD mode's per step at one k; a prediction at another k misses it"
            )
    return out
