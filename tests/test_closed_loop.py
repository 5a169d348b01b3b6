"""The load asked is the load run: `loadgen sweep` on the embedded default, in real time and in
virtual time, has as many requests in flight as a cell has users when it has that many
requests (each user dealt its first before any takes a second), and a cell or run with fewer
says so: `short_of_users` in its summary, the console, the sweep's table and the report."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from loadgen.results import cells as stored
from tests.conftest import cli, run_cli

pytestmark = pytest.mark.servers


@pytest.mark.parametrize("virtual", [False, True], ids=["real-time", "virtual"])
def test_8_users_with_8_requests_have_8_in_flight_and_12_users_are_flagged_short(tmp_path, virtual):
    out = tmp_path / "sweep"
    args = [
        "--variants",
        "baseline",
        "--concurrency",
        "8,12",
        "--num-requests",
        "8",
        "--workloads",
        "chat,output=fixed:32",
    ]
    res = run_cli("sweep", *args, *(["--virtual"] if virtual else []), "--quiet", "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "fewer requests were ever in flight than the users in 1 cell(s) (short_of_users" in res.stdout
    eight = json.loads((out / stored.CELLS / "baseline/chat/c8/summary.json").read_text())["sending"]
    assert eight["in_flight_max"] == 8 and not eight["short"], eight
    twelve = json.loads((out / stored.CELLS / "baseline/chat/c12/summary.json").read_text())["sending"]
    assert twelve["in_flight_max"] == 8 and twelve["in_flight_bound"] == 12 and twelve["short"], twelve
    table = pd.read_parquet(out / stored.TABLE).set_index("level")
    assert table.loc[12, "short_of_users"] and not table.loc[8, "short_of_users"]
    assert table.loc[8, "in_flight_max"] == 8
    rep = cli("report", str(out))
    assert rep.returncode == 0, rep.stderr
    text = (out / "report" / "report.md").read_text()
    assert "In 1 cell(s) fewer requests were ever in flight than the cell's users (short_of_users)" in text
    assert "| chat | closed | 12 | baseline |" in text and text.count("| short_of_users |") >= 1


def test_a_run_with_fewer_requests_than_users_says_so(tmp_path):
    res = run_cli("run", "--concurrency", "8", "--num-requests", "4", "--workload", "chat", "--output", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "note: short_of_users: 8 users asked, at most 4 requests were in flight" in res.stdout + res.stderr
    sending = json.loads((tmp_path / "summary.json").read_text())["sending"]
    assert sending["short"] and sending["in_flight_max"] == 4
