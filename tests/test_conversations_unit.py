"""test_conversations.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli
from tests.test_conversations import SHARED
from workloads import open_workload

pytestmark = pytest.mark.unit


def test_session_workloads_from_the_real_samples():
    mt = open_workload(f"mt_bench:{SHARED / 'mt_bench' / 'question.jsonl'},turns=session")
    assert mt.records and all(len(r.followups) == 1 and r.session == r.id and r.turn == 1 for r in mt.records)
    rows = json.loads((SHARED / "sharegpt" / "ShareGPT_V3_filtered_500.json").read_text())
    sg = open_workload(
        f"sharegpt:{SHARED / 'sharegpt' / 'ShareGPT_V3_filtered_500.json'},turns=session,output=cap:64", skip_bad=True
    )
    humans = {
        f"sharegpt-{row['id']}": sum(
            1 for t in row["conversations"] if t.get("from") in ("human", "user") and str(t.get("value", "")).strip()
        )
        for row in rows
    }
    assert len(sg.records) > 100  # this sample keeps first turns only: one-turn conversations
    for r in sg.records:
        assert len(r.followups) + 1 == humans[r.id]
        assert r.messages[-1]["role"] == "user"
    assert all(r.max_tokens == 64 for r in sg.requests(10, 0))  # output=cap:64 on every turn's request


def test_sharegpt_sessions_take_the_human_turns_and_drop_the_recorded_replies(tmp_path):
    path = tmp_path / "conv.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "conversations": [
                        {"from": "system", "value": "Be brief."},
                        {"from": "human", "value": "First?"},
                        {"from": "gpt", "value": "recorded reply"},
                        {"from": "human", "value": "  "},
                        {"from": "gpt", "value": "another"},
                        {"from": "human", "value": "Third?"},
                    ],
                }
            ]
        )
    )
    (r,) = open_workload(f"sharegpt:{path},turns=session").records
    assert r.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "First?"})
    assert r.followups == ("Third?",) and r.session == "sharegpt-a" and r.reference == "recorded reply"


def test_a_bad_turns_value_is_one_line(tmp_path):
    res = cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--workload",
        f"mt_bench:{SHARED / 'mt_bench' / 'question.jsonl'},turns=sessions",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "turns='sessions'" in res.stderr and "session" in res.stderr.splitlines()[-1]
    res = cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--workload",
        "synthetic:session",
        "--think-time",
        "soon",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "--think-time" in res.stderr


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_think_time_with_single_requests_is_refused(tmp_path, command):
    """--think-time waits between a conversation's turns: with a workload of single requests it
    would do nothing, so it is refused in one line rather than ignored."""
    where = ["--base-url", "http://127.0.0.1:9"] if command == "run" else ["--profile", "h100-llama-3.1-8b"]
    for workload in ("synthetic:random", f"mt_bench:{SHARED / 'mt_bench' / 'question.jsonl'}"):
        res = cli(
            command,
            *where,
            "--concurrency",
            "1",
            "--num-requests",
            "2",
            "--workload",
            workload,
            "--think-time",
            "2",
            "--output",
            str(tmp_path / "x"),
        )
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        (line,) = res.stderr.strip().splitlines()
        assert "--think-time applies to conversations" in line and "sends single requests" in line
        assert not (tmp_path / "x").exists()


def test_prefix_cache_blocks_as_vllm_counts_them():
    """Whole blocks from the prompt's start, the last token always computed, LRU eviction with
    a chain's tail going first."""
    from servers.emulator.prefix import PrefixCache

    cache = PrefixCache(capacity_tokens=4 * 16)
    a = [f"a{i}" for i in range(40)]
    assert cache.lookup(a) == 0
    cache.insert(a)  # 2 full blocks (32 of 40 words)
    assert cache.lookup(a) == 32
    assert cache.lookup(a[:32]) == 16  # wholly cached: its last token is computed again
    assert cache.lookup(a[:20] + ["x"] * 20) == 16  # diverges inside block 2
    assert cache.lookup(["x"] + a[1:]) == 0  # a block's key is everything before it too
    cache.insert([f"b{i}" for i in range(48)])  # 3 more blocks: 5 > 4, one evicted: a's tail
    assert cache.lookup(a) == 16 and len(cache) == 4
