"""Multi-turn conversations against the emulator, checked on the server's side: turn n+1's
prompt, as the server logged it (--enable-log-requests), holds turn n's reply exactly as the
client received it; the emulator's prefix cache finds exactly the blocks a conversation's
earlier turns computed (and nothing with --no-enable-prefix-caching); think times are exact;
a failed turn ends its conversation; `loadgen simulate` sends the same turns with the same
prompts in virtual time. And the loaders' `turns=session` on the real MT-Bench and ShareGPT
samples."""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from loadgen.executors.conversation import Think
from loadgen.load.execute import LoadShape, RunSpec, execute
from servers.embedded import emulator_server
from tests.conftest import run_cli
from tests.test_emulator_server import LLAMA, scrape
from workloads import open_workload

pytestmark = pytest.mark.servers

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
SESSIONS = "synthetic:session,turns=3,input_len=40,output_len=24"
_LOGGED = re.compile(r"Request (\S+) details: prompt: (.*), prompt_token_ids: ")


def _logged_prompts(log_path: str) -> list[str]:
    out = []
    for line in Path(log_path).read_text().splitlines():
        if m := _LOGGED.search(line):
            out.append(ast.literal_eval(m.group(2)))
    return out


def _converse(url: str, endpoint: str, think: Think = Think(), concurrency: int = 2, n: int = 4):
    spec = RunSpec(
        api_base=url + "/v1",
        model=LLAMA,
        load=LoadShape(concurrency=concurrency),
        endpoint=endpoint,
        num_requests=n,
        keep_text=True,
        think=think,
    )
    wl = open_workload(SESSIONS)
    return asyncio.run(execute(spec, wl.requests(None, 0))).records


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_turn_two_carries_turn_one_reply_verbatim_on_the_server(endpoint):
    with emulator_server(LLAMA, "--enable-log-requests", "--time-scale", "0.25") as srv:
        records = _converse(srv.url, endpoint)
        logged = _logged_prompts(srv.log)
    assert len(records) == 12 and all(r.ok for r in records)
    assert len(logged) == 12
    by_session: dict[str, list] = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    assert len(by_session) == 4
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == [1, 2, 3]
        for prev, nxt in zip(turns, turns[1:]):
            reply = "".join(prev.chunk_text)
            assert len(reply.split()) == 24  # the whole reply, as streamed
            holding = [p for p in logged if reply in p]
            # exactly the later turns of this conversation carry it (turn 3 repeats turn 2's history)
            assert len(holding) == 3 - prev.turn, (prev.request_id, len(holding))
            # and the server counted the next turn's prompt over it
            assert nxt.prompt_tokens > prev.prompt_tokens + len(reply.split())


def _expected_hits(frame: pd.DataFrame, block: int = 16) -> int:
    """Turn n+1 repeats turn n's prompt and reply: the full blocks of those are cached."""
    hits = 0
    for _, g in frame.sort_values("turn").groupby("session"):
        rows = g.to_dict("records")
        for prev, nxt in zip(rows, rows[1:]):
            common = min(prev["prompt_tokens"] + prev["completion_tokens"], nxt["prompt_tokens"] - 1)
            hits += common // block * block
    return hits


@pytest.mark.parametrize("caching", [True, False])
def test_the_prefix_cache_finds_exactly_the_earlier_turns_blocks(caching, tmp_path):
    flag = "--enable-prefix-caching" if caching else "--no-enable-prefix-caching"
    with emulator_server(LLAMA, flag, "--time-scale", "0.25") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--endpoint",
            "chat",
            "--workload",
            SESSIONS,
            "--concurrency",
            "3",
            "--num-requests",
            "6",
            "--quiet",
            "--output",
            str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        m = scrape(srv.url)
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(frame) == 18 and frame["ok"].all()
    assert m["vllm:prefix_cache_queries_total"] == (frame["prompt_tokens"].sum() if caching else 0)
    assert m["vllm:prefix_cache_hits_total"] == (_expected_hits(frame) if caching else 0)
    summary = json.loads((tmp_path / "summary.json").read_text())
    conv = summary["conversations"]
    assert conv["sessions"] == 6 and conv["turns"] == 18 and conv["all_turns_ok"] == 6
    assert sorted(conv["by_turn"]) == ["1", "2", "3"]
    if caching:
        assert summary["server"]["prefix_cache_hit_rate"] == pytest.approx(
            _expected_hits(frame) / frame["prompt_tokens"].sum()
        )


def test_think_time_is_exact_and_simulate_sends_the_same_turns(tmp_path):
    """Each later turn is due exactly its think time after the reply ended (exponential,
    seeded per conversation); `loadgen simulate` draws the same think times and, the emulated
    model being deterministic, sends the same prompts turn by turn."""
    with emulator_server(LLAMA, "--time-scale", "0.25") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--endpoint",
            "chat",
            "--workload",
            SESSIONS,
            "--concurrency",
            "2",
            "--num-requests",
            "4",
            "--think-time",
            "exp:0.2",
            "--quiet",
            "--output",
            str(tmp_path / "real"),
        )
        assert res.returncode == 0, res.stderr
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--endpoint",
        "chat",
        "--workload",
        SESSIONS,
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--think-time",
        "exp:0.2",
        "--output",
        str(tmp_path / "sim"),
    )
    assert res.returncode == 0, res.stderr
    real, sim = (
        pd.read_parquet(tmp_path / d / "requests.parquet").sort_values(["session", "turn"]) for d in ("real", "sim")
    )
    assert list(real["request_id"]) == list(sim["request_id"])
    assert list(real["prompt_tokens"]) == list(sim["prompt_tokens"])

    def gaps(frame: pd.DataFrame) -> dict:
        out = {}
        for _, g in frame.groupby("session"):
            rows = g.to_dict("records")
            for prev, nxt in zip(rows, rows[1:]):
                out[nxt["request_id"]] = (nxt["t_scheduled_ns"] - prev["t_end_ns"]) / 1e9
        return out

    g_real, g_sim = gaps(real), gaps(sim)
    assert len(g_real) == 8
    assert len(set(round(v, 6) for v in g_real.values())) == 8  # drawn, not constant
    for rid, gap in g_real.items():  # simulate's turn also waits its round trip (0.3 ms)
        assert g_sim[rid] == pytest.approx(gap + 0.0003, abs=2e-6)
    later = real[real["turn"] > 1]
    assert (later["lateness_ms"] < 100).all()
    config = json.loads((tmp_path / "real" / "summary.json").read_text())["config"]
    assert config["load"]["think_time"] == {"mean_s": 0.2, "distribution": "exponential"}


def test_a_failed_turn_ends_its_conversation(tmp_path):
    """Context grows with every turn: past --max-model-len the server refuses the turn (400);
    the conversation stops there, the run completes, and the failure is a request row."""
    with emulator_server(LLAMA, "--max-model-len", "150", "--time-scale", "0.25") as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--endpoint",
            "chat",
            "--workload",
            "synthetic:session,turns=4,input_len=40,output_len=24",
            "--concurrency",
            "2",
            "--num-requests",
            "2",
            "--quiet",
            "--output",
            str(tmp_path),
        )
    assert res.returncode in (0, 1), res.stderr
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    for _, g in frame.groupby("session"):
        g = g.sort_values("turn")
        assert list(g["ok"]) == [True, True, False]  # turn 3 refused: no turn 4
        assert g["error_type"].iloc[-1] == "http_400"
    conv = json.loads((tmp_path / "summary.json").read_text())["conversations"]
    assert conv["sessions"] == 2 and conv["all_turns_ok"] == 0


def test_prefix_caching_makes_later_turns_prefill_cheaper_in_simulate(tmp_path):
    """Virtual time, so exact: later turns' TTFT is lower with the cache than without; the
    first turns, which find nothing cached, are not."""
    ttft = {}
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        out = tmp_path / flag
        res = run_cli(
            "simulate",
            "--profile",
            "h100-llama-3.1-8b",
            "--endpoint",
            "chat",
            flag,
            "--workload",
            "synthetic:session,turns=4,input_len=300,output_len=100",
            "--concurrency",
            "1",
            "--num-requests",
            "3",
            "--output",
            str(out),
        )
        assert res.returncode == 0, res.stderr
        ttft[flag] = pd.read_parquet(out / "requests.parquet").groupby("turn")["ttft_ms"].mean()
    on, off = ttft["--enable-prefix-caching"], ttft["--no-enable-prefix-caching"]
    assert on[1] == pytest.approx(off[1])
    for turn in (2, 3, 4):
        assert on[turn] < 0.8 * off[turn]


@pytest.mark.parametrize("load", [["--concurrency", "2"], ["--rate", "20", "--max-concurrency", "2"]])
def test_the_shape_schedules_conversations(load, tmp_path):
    """Closed loop: 2 users, each holding one conversation (think time included) at a time;
    open loop capped at 2: conversations arrive on schedule, at most 2 under way. Either way no
    more than 2 conversations overlap, and every conversation's turns follow one another."""
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--endpoint",
        "chat",
        "--workload",
        SESSIONS,
        *load,
        "--num-requests",
        "8",
        "--think-time",
        "0.5",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(frame) == 24 and frame["ok"].all()
    spans = frame.groupby("session").agg(start=("t_send_ns", "min"), end=("t_end_ns", "max"))
    events = sorted([(t, 1) for t in spans["start"]] + [(t, -1) for t in spans["end"]], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 2
    for _, g in frame.sort_values("turn").groupby("session"):
        assert (g["t_send_ns"].to_numpy()[1:] >= g["t_end_ns"].to_numpy()[:-1] + 0.5e9).all()
