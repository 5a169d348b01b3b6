"""The speedup table: ratios of measured cells, laid out so long variant names stay readable."""
import pandas as pd

from loadgen import analysis


def _table() -> pd.DataFrame:
    rows = []
    for level, base in ((1, 40.0), (2, 60.0)):
        for variant, ratio in (("baseline", 1.0), ("ngram-simple-k3", 1.25), ("draft-qwen3-0.6b", 0.5)):
            rows.append({"variant": variant, "workload": "chat", "mode": "closed", "level": level,
                         "status": "ok", "output_throughput_tok_s": base * ratio, "path": f"{variant}/chat/c{level}",
                         "client_bound": variant == "draft-qwen3-0.6b" and level == 2, "server_behind": False})
    return pd.DataFrame(rows)


def test_speedups_are_ratios_and_columns_line_up():
    text = analysis.render(_table())
    lines = text.splitlines()
    head, rows = lines[1], lines[2:4]
    assert head.split() == ["concurrency", "baseline", "tok/s", "ngram-simple-k3", "draft-qwen3-0.6b"]
    assert rows[0].split() == ["1", "40.0", "1.25x", "0.50x"] and rows[1].split() == ["2", "60.0", "1.25x", "0.50!"]
    # each figure ends where its column's name ends
    for name, cell in (("ngram-simple-k3", "1.25x"), ("draft-qwen3-0.6b", "0.50x")):
        assert head.index(name) + len(name) == rows[0].index(cell) + len(cell)
    assert "client was the bottleneck in 1 cell(s)" in text
