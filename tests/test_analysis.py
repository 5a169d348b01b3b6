"""The speedup table: ratios of measured cells, laid out so long variant names stay readable."""

import pandas as pd
import pytest

from loadgen.report import speedup

pytestmark = pytest.mark.unit


def _table() -> pd.DataFrame:
    rows = []
    for level, base in ((1, 40.0), (2, 60.0)):
        for variant, ratio in (("baseline", 1.0), ("ngram-simple-k3", 1.25), ("draft-qwen3-0.6b", 0.5)):
            rows.append(
                {
                    "variant": variant,
                    "workload": "chat",
                    "mode": "closed",
                    "level": level,
                    "status": "ok",
                    "output_throughput_tok_s": base * ratio,
                    "path": f"{variant}/chat/c{level}",
                    "client_bound": variant == "draft-qwen3-0.6b" and level == 2,
                    "server_behind": False,
                }
            )
    return pd.DataFrame(rows)


def test_speedups_are_ratios_and_columns_line_up():
    text = speedup.render(_table())
    lines = text.splitlines()
    head, rows = lines[1], lines[2:4]
    assert head.split() == ["concurrency", "baseline", "tok/s", "ngram-simple-k3", "draft-qwen3-0.6b"]
    assert rows[0].split() == ["1", "40.0", "1.25x", "0.50x"] and rows[1].split() == ["2", "60.0", "1.25x", "0.50!"]
    # each figure ends where its column's name ends
    for name, cell in (("ngram-simple-k3", "1.25x"), ("draft-qwen3-0.6b", "0.50x")):
        assert head.index(name) + len(name) == rows[0].index(cell) + len(cell)
    assert "client was the bottleneck in 1 cell(s)" in text


def test_break_even_interpolates_the_crossing_and_ignores_noise_around_one():
    from loadgen.report.tables import break_even

    sp = pd.DataFrame(
        {
            "workload": "w",
            "mode": "closed",
            "variant": ["a"] * 4 + ["b"] * 3 + ["c"] * 2,
            "level": [1, 2, 4, 8, 1, 2, 4, 1, 4],
            "speedup": [1.5, 1.3, 1.1, 0.9, 1.004, 0.995, 1.01, 0.7, 0.8],
        }
    )
    be = break_even(sp).set_index("variant")
    assert be.loc["a", "break_even_level"] == pytest.approx(2**2.5)  # halfway 1.1 -> 0.9, in log load
    assert be.loc["a", "verdict"].startswith("stops paying at about 5.66 (between 4 and 8)")
    assert pd.isna(be.loc["b", "break_even_level"]) and be.loc["b", "verdict"].startswith("pays or is even")
    assert be.loc["c", "verdict"].startswith("never pays")


def test_the_decision_says_where_each_variant_stops_when_one_never_does():
    """The real-vLLM sweep of issue 32 (n-gram 3.42x, 1.68x, 1.26x at 1, 4, 16 users; self-draft
    1.62x, 0.94x, 0.75x): n-gram still pays at 16 users, so the summary must not say that
    speculative decoding stops paying there; it says where each variant stops."""
    from loadgen.report import decision
    from loadgen.report.numbers import short
    from loadgen.report.tables import break_even

    speedups = {"ngram": (3.42, 1.68, 1.26), "selfdraft": (1.62, 0.94, 0.75)}
    sp = pd.DataFrame(
        [
            {"workload": "chat", "mode": "closed", "variant": v, "level": lv, "speedup": s}
            for v, ss in speedups.items()
            for lv, s in zip((1, 4, 16), ss)
        ]
    )
    best = pd.DataFrame(
        [
            {"workload": "chat", "mode": "closed", "level": lv, "best_variant": "ngram", "speedup": s}
            for lv, s in zip((1, 4, 16), speedups["ngram"])
        ]
    )
    ok = pd.DataFrame({"client_bound": [False] * 9, "server_behind": [False] * 9})
    be = break_even(sp)
    (sentence, _) = decision.sentences(best, sp, be, ok, "baseline")
    assert sentence.startswith("On chat: from 1 to 16 users, ngram (3.42x at 1, 1.26x at 16).")
    stop = be.set_index("variant").loc["selfdraft", "break_even_level"]
    assert 1 < stop < 4
    assert sentence.endswith(
        f"Where speculative decoding stops paying: selfdraft at about {short(round(stop, 1))} users; ngram does "
        "not within the loads measured (it pays or is even up to 16 users)."
    )
    assert "last to stop" not in sentence
    # all of one kind: one sentence, as before
    for kinds, end in (
        ({"ngram": (1.5, 1.3, 1.1)}, "pays (or is even) at every load measured (up to 16 users)."),
        ({"ngram": (0.9, 0.8, 0.7)}, "No speculative-decoding variant pays at any load measured."),
    ):
        sp1 = sp[sp["variant"] == "ngram"].assign(speedup=kinds["ngram"])
        assert decision.sentences(best, sp1, break_even(sp1), ok, "baseline")[0].endswith(end)


def test_a_repeated_sweep_of_the_baseline_alone_renders_its_throughputs():
    """`sweep --repeats` of a deployment with no SD variant (a draft model served alone, for
    `loadgen fit --alone`): the table has no speedups to spread, and still renders."""
    t = _table()
    t = t[t["variant"] == "baseline"]
    t = pd.concat([t.assign(repeat=r, cell=t["path"], path=t["path"] + f".r{r}") for r in (1, 2, 3)], ignore_index=True)
    assert speedup.spread(t).empty
    text = speedup.render(t)
    assert text.splitlines()[2].split()[:2] == ["1", "40.0"]
