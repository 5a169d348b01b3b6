"""test_controls.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pandas as pd
import pytest

from loadgen.report import controls
from tests.test_controls import _argv

pytestmark = pytest.mark.unit


def test_the_controls_table_and_its_verdicts_on_a_hand_worked_sweep():
    """Four EAGLE-3 servers at one level, their throughputs chosen by hand: k 3 at 100 tok/s and
    k 5 at 120 (the best fixed k: 120), k by batch size at 150 (150/120 = 1.25, pays), adaptive
    verification at 119 (0.99: within the 2% margin, even); an oracle of 200 tok/s at 4 users
    in the what-if makes the best (k by batch size) 75% of it. An n-gram server with no
    control and the baseline stay out."""
    eagle = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
    manifest = {
        "servers": {
            "baseline": _argv(None),
            "ngram": _argv({"method": "ngram", "num_speculative_tokens": 3}),
            "k3": _argv(eagle),
            "k5": _argv({**eagle, "num_speculative_tokens": 5}),
            "schedule": _argv({**eagle, "num_speculative_tokens_per_batch_size": [[1, 2, 5], [3, 256, 1]]}),
            "adaptive": _argv({**eagle, "enable_adaptive_verification": True}),
        }
    }
    tok_s = {"baseline": 90.0, "ngram": 95.0, "k3": 100.0, "k5": 120.0, "schedule": 150.0, "adaptive": 119.0}
    ok = pd.DataFrame(
        [
            {"workload": "code", "mode": "closed", "level": 4, "variant": v, "output_throughput_tok_s": t}
            for v, t in tok_s.items()
        ]
    )
    whatif = {"results": [{"kind": "oracle", "policy": "eagle3 oracle", "batch": 4, "output_tok_s": 200.0}]}
    t = controls.table(ok, manifest, whatif).set_index("variant")
    assert sorted(t.index) == ["adaptive", "k3", "k5", "schedule"]
    assert dict(t["control"]) == {
        "k3": "fixed",
        "k5": "fixed",
        "schedule": "k by batch size",
        "adaptive": "adaptive verification",
    }
    assert t.loc["schedule", "vs_best_fixed"] == pytest.approx(1.25)
    assert t.loc["adaptive", "vs_best_fixed"] == pytest.approx(119 / 120)
    assert t.loc["k3", "vs_best_fixed"] == pytest.approx(100 / 120)
    assert list(t.index[t["best"]]) == ["schedule"] and t.loc["schedule", "oracle_share"] == pytest.approx(0.75)
    (line, *_) = controls.sentences(t.reset_index())
    assert line == (
        "On code, eagle3's controls: at 4 users schedule is best (150 tok/s, 75% of eagle3's oracle); "
        "against the best fixed k: k by batch size 1.25x (pays); adaptive verification 0.99x (even)."
    )


def test_each_workload_is_held_to_its_own_oracle():
    """Two workloads, one with its own what-if (traces-code.jsonl's: an oracle of 200 tok/s at
    4 users) and a shared one (traces.jsonl's: 1,000 tok/s): code's best is 150/200 = 75% of its
    own oracle; chat has none of its own, and the shared file stands for neither workload (their
    acceptance differs), so chat's share is left out and the lead says what would give it."""
    eagle = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
    manifest = {
        "servers": {
            "k3": _argv(eagle),
            "schedule": _argv({**eagle, "num_speculative_tokens_per_batch_size": [[1, 2, 5], [3, 256, 1]]}),
        }
    }
    ok = pd.DataFrame(
        [
            {"workload": w, "mode": "closed", "level": 4, "variant": v, "output_throughput_tok_s": t}
            for w in ("code", "chat")
            for v, t in (("k3", 120.0), ("schedule", 150.0))
        ]
    )

    def oracle(tok_s: float) -> dict:
        return {"results": [{"kind": "oracle", "policy": "eagle3 oracle", "batch": 4, "output_tok_s": tok_s}]}

    t = controls.table(ok, manifest, oracle(1000.0), {"code": oracle(200.0)})
    best = t[t["best"]].set_index("workload")
    assert best.loc["code", "oracle_share"] == pytest.approx(0.75)
    assert pd.isna(best.loc["chat", "oracle_share"])
    lines = controls.sentences(t)
    assert any("75% of eagle3's oracle" in x and x.startswith("On code") for x in lines)
    assert lines[-1].startswith("The oracle's share needs each workload's") and "(chat has none)" in lines[-1]
    # a sweep of one workload: the directory's traces.jsonl is that workload's
    one = controls.table(ok[ok["workload"] == "chat"], manifest, oracle(1000.0))
    assert one[one["best"]]["oracle_share"].iloc[0] == pytest.approx(0.15)
