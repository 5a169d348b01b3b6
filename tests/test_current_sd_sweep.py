"""A sweep of current vLLM's SD on the emulator (the catalog's llama-3.1-8b-current): suffix
decoding against n-gram and EAGLE-3 on repeated agentic tasks and on chat, with per-request SD
metrics from the server, recorded per request and shown as a distribution in the report."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, server_pids

pytestmark = pytest.mark.timing  # its sweep's speedups compared: runs alone (tests/conftest.py)


N = 24  # requests per cell: 4 users, at a fixed 1.5x (suffix drafting costs the emulator real CPU: at 1x
# its cells fell behind here; the time-scale probe tries baseline and n-gram only, and is not needed)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    before = server_pids()
    out = tmp_path_factory.mktemp("current") / "sweep"
    res = run_cli("sweep", "--servers", "llama-3.1-8b-current", "--engine", "emulator",
                  "--variants", "baseline,ngram,eagle3,suffix", "--workloads", "agentic,output=fixed:96,chat,output=fixed:96",
                  "--concurrency", "4", "--num-requests", str(N), "--time-scale", "1.5", "--quiet", "--output", str(out),
                  timeout=600)
    assert res.returncode == 0, res.stderr
    assert server_pids() <= before
    res = run_cli("report", str(out))
    assert res.returncode == 0, res.stderr
    return out


def test_per_request_sd_metrics_are_recorded_and_reported(sweep):
    per = pd.read_csv(sweep / "report" / "per_request.csv").set_index(["workload", "variant"])
    for variant in ("ngram", "eagle3", "suffix"):
        for workload in ("agentic", "chat"):
            frame = pd.read_parquet(sweep / "cells" / variant / workload / "c4" / "requests.parquet")
            m = frame[frame["ok"] & ~frame["warmup"]]
            al = m["server_acceptance_length"].dropna()
            assert len(al) == len(m) == N  # every request carried its metrics
            assert (m["server_accepted_tokens"] == [sum(n - 1 for n in list(t)[1:]) for t in m["chunk_tokens"]]).all()
            row = per.loc[(workload, variant)]
            assert row["server_al_requests"] == N
            assert row["server_al_mean_of_requests"] == pytest.approx(al.mean())
            assert row["server_al_p50"] == pytest.approx(np.percentile(al, 50))
    base = pd.read_parquet(sweep / "cells" / "baseline" / "chat" / "c4" / "requests.parquet")
    assert base["server_acceptance_length"].isna().all()  # no SD: the server sends none
    assert (sweep / "report" / "per_request_server.png").stat().st_size > 10_000
    assert "server_al_mean_of_requests" in (sweep / "report" / "report.md").read_text()


def test_suffix_decoding_wins_acceptance_on_agentic_work_not_on_chat(sweep):
    acc = pd.read_csv(sweep / "report" / "acceptance.csv").set_index(["workload", "variant"])["mean_acceptance_length"]
    assert acc["agentic", "suffix"] > max(acc["agentic", "ngram"], acc["agentic", "eagle3"])
    assert acc["chat", "suffix"] <= 1.02 * max(acc["chat", "ngram"], acc["chat", "eagle3"])  # no better on chat
    sp = pd.read_csv(sweep / "report" / "speedup.csv").set_index(["workload", "variant"])["speedup"]
    assert sp["agentic", "suffix"] > max(sp["agentic", "ngram"], sp["agentic", "eagle3"])
