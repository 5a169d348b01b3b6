"""test_timeline.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.unit


def test_a_long_runs_timeline_is_coarsened_in_the_summary_and_kept_whole_beside_it(tmp_path):
    """Over an hour of samples, summary.json keeps at most 3600 intervals, consecutive ones merged
    with every sum unchanged and gauges as time-weighted means; timeline.parquet has them all."""

    from bench.timeline_size import day
    from loadgen.measures import timeline
    from loadgen.results import store

    n = 3 * timeline.MOST + 5  # 4 intervals merged a bin; the last bin is short
    tl = day(n)
    store.write_summary(tmp_path, {"timeline": tl})
    kept = json.loads((tmp_path / "summary.json").read_text())["timeline"]
    assert len(kept["t_s"]) == -(-n // 4) and kept["coarsened"] == {
        "intervals": n,
        "merged": 4,
        "full": "timeline.parquet",
    }
    assert kept["t_s"][-1] == tl["t_s"][-1] and kept["t_s"][0] == tl["t_s"][3]
    for key in ("dt_s", "generation_tokens", "prompt_tokens", "drafts", "draft_tokens", "accepted_tokens"):
        assert np.isclose(sum(kept[key]), sum(tl[key]), rtol=1e-12), key
    assert (np.sum(kept["accepted_per_position"], axis=0) == np.sum(tl["accepted_per_position"], axis=0)).all()
    assert sum(kept["client"]["sends"]) == sum(tl["client"]["sends"])
    dt, run = np.asarray(tl["dt_s"][:4]), np.asarray(tl["running"][:4])
    assert np.isclose(kept["running"][0], (dt * run).sum() / dt.sum())
    assert np.isclose(kept["acceptance_length"][0], 1 + sum(tl["accepted_tokens"][:4]) / sum(tl["drafts"][:4]))
    whole = pd.read_parquet(tmp_path / "timeline.parquet")
    assert len(whole) == n and whole["generation_tokens"].tolist() == tl["generation_tokens"]
    assert whole["client_in_flight"].tolist() == tl["client"]["in_flight"]
    # an hour or less is written as it is
    (tmp_path / "short").mkdir()
    store.write_summary(tmp_path / "short", {"timeline": day(60)})
    assert "coarsened" not in json.loads((tmp_path / "short" / "summary.json").read_text())["timeline"]
    assert not (tmp_path / "short" / "timeline.parquet").exists()
