"""test_traces.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.shapes.trace import TraceReplay
from servers.emulator.content import tokenize
from tests.conftest import cli
from tests.test_traces import CODE, CONV
from workloads import open_workload
from workloads.fitting import BLOCK, trace_requests
from workloads.traces import TraceError, read_trace

pytestmark = pytest.mark.unit


def test_the_azure_samples_read_whole():
    conv, code = read_trace(f"azure:{CONV}"), read_trace(f"azure:{CODE}")
    assert len(conv) == 19366 and len(code) == 8819  # every line of both, none skipped or repaired
    assert conv.skipped == code.skipped == 0 and conv.t_s[0] == 0 and np.all(np.diff(conv.t_s) >= 0)
    assert conv.t_s[-1] == pytest.approx(3501.722, abs=1e-3)  # 18:15:46.68 to 19:14:08.40
    assert (conv.input_len[:3].tolist(), conv.output_len[:3].tolist()) == ([374, 396, 879], [44, 109, 55])
    first10 = conv.window(0, 600)
    assert len(first10) == 2867 and first10.t_s[-1] < 600


def test_other_formats_and_a_field_mapping(tmp_path):
    moon = tmp_path / "moon.jsonl"
    moon.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
                {"timestamp": 250, "input_length": 1300, "output_length": 7, "hash_ids": [1, 2, 9]},
                {"timestamp": 1250, "input_length": 40, "output_length": 3},
            )
        )
        + "\n"
    )
    t = read_trace(f"mooncake:{moon}")
    assert t.t_s.tolist() == [0, 0.25, 1.25] and t.hash_ids == [[1, 2, 3], [1, 2, 9], []]
    burst = tmp_path / "burst.csv"
    burst.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,100,20,120,Conversation log\n7.5,ChatGPT,0,1,1,Conversation log\n"
    )
    b = read_trace(f"burstgpt:{burst}")
    assert (
        b.t_s.tolist() == [0, 2.5] and b.input_len.tolist() == [100, 1] and b.repairs == {"input length 0 read as 1": 1}
    )
    gen = tmp_path / "mine.csv"
    gen.write_text("at_ms,prompt,completion\n1000,10,2\n1500,12,3\n")
    g = read_trace(f"csv:{gen},time=at_ms,input=prompt,output=completion,unit=ms")
    assert g.t_s.tolist() == [0, 0.5] and g.output_len.tolist() == [2, 3]
    # hash_ids from a CSV: a JSON list or separated integers per cell (empty: none); named but absent: refused
    blocks = tmp_path / "blocks.csv"
    blocks.write_text('t,in,out,blocks\n0,1100,5,"[1, 2, 3]"\n1,1300,7,1 2 9\n2,40,3,\n3,600,2,4;5\n')
    h = read_trace(f"csv:{blocks},time=t,input=in,output=out,hash_ids=blocks")
    assert h.hash_ids == [[1, 2, 3], [1, 2, 9], [], [4, 5]]
    with pytest.raises(TraceError, match=r"blocks.csv:1: no column 'hashes'"):
        read_trace(f"csv:{blocks},time=t,input=in,output=out,hash_ids=hashes")
    blocks.write_text("t,in,out,blocks\n0,1100,5,one two\n")
    with pytest.raises(TraceError, match=r"blocks.csv:2: blocks must be a list of integers, like \[1, 2, 3\] or 1 2 3"):
        read_trace(f"csv:{blocks},time=t,input=in,output=out,hash_ids=blocks")


@pytest.mark.parametrize(
    "content,expect",
    [
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n2023-11-16 18:15:45.00,10,2\n",
            ":3: TIMESTAMP goes back in time (-1.680 s after the line before); sort the trace by time",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-4,2\n",
            ":2: ContextTokens is '-4': lengths are whole numbers of tokens >= 0",
        ),
        (
            "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.68,4,2\n",
            ":1: no column 'ContextTokens' (it has TIMESTAMP, Context, GeneratedTokens); is it a azure trace?",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,many,2\n",
            ":2: ContextTokens is 'many', not a whole number of tokens",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,2\n", ":2: TIMESTAMP is 'yesterday', not a date-time"),
    ],
)
def test_bad_trace_lines_are_one_line_naming_file_line_and_fix(tmp_path, content, expect):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(TraceError) as e:
        read_trace(f"azure:{path}")
    assert str(e.value).startswith(str(path)) and expect in str(e.value) and "\n" not in str(e.value)
    res = cli("simulate", "--profile", "h100-llama-3.1-8b", "--trace", f"azure:{path}", "--output", str(tmp_path / "o"))
    assert res.returncode == 2 and expect in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("command", ["run", "simulate"])
@pytest.mark.parametrize(
    "flag,value", [("--trace-speed", "0"), ("--trace-speed", "2"), ("--trace-start", "-5"), ("--trace-window", "60")]
)
def test_trace_options_without_a_trace_are_refused(tmp_path, command, flag, value):
    """--trace-speed, --trace-start and --trace-window shape a trace replay: without --trace they
    would do nothing (even with a value that is wrong for a trace), so each is one line, exit 2."""
    where = ["--base-url", "http://127.0.0.1:9"] if command == "run" else ["--profile", "h100-llama-3.1-8b"]
    res = cli(
        command, *where, "--concurrency", "1", "--num-requests", "2", flag, value, "--output", str(tmp_path / "x")
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert f"{flag} applies to a trace replay: give --trace FORMAT:PATH, or drop {flag}" in line
    assert not (tmp_path / "x").exists()


def test_skip_bad_counts_and_skips(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n2023-11-16 18:15:45,10,2\n"
        "2023-11-16 18:15:47,x,2\n2023-11-16 18:15:48,12,3\n"
    )
    t = read_trace(f"azure:{path}", skip_bad=True)
    assert len(t) == 2 and t.skipped == 2 and t.t_s.tolist() == [0, 2]


def test_hash_blocks_share_exactly_their_prompt_tokens(tmp_path):
    moon = tmp_path / "moon.jsonl"
    moon.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
                {"timestamp": 9, "input_length": 1300, "output_length": 7, "hash_ids": [1, 2, 9]},
            )
        )
        + "\n"
    )
    a, b = trace_requests(read_trace(f"mooncake:{moon}"), None)
    ta, tb = tokenize(a.prompt)[1], tokenize(b.prompt)[1]
    assert (len(ta), len(tb)) == (1100, 1300) and (a.max_tokens, b.max_tokens) == (5, 7) and a.ignore_eos
    shared = next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)
    assert shared == 2 * BLOCK  # two common hash blocks: exactly 1,024 common prompt tokens


def test_text_is_fitted_to_the_trace_lengths_from_a_content_workload():
    trace = read_trace(f"azure:{CODE}").window(0, 60)
    content = open_workload("synthetic:code_edit")
    reqs = list(trace_requests(trace, content, seed=1))
    assert [len(tokenize(r.prompt)[1]) for r in reqs] == trace.input_len.tolist()
    assert [r.max_tokens for r in reqs] == trace.output_len.tolist()
    assert sum("def func_" in r.prompt for r in reqs) > len(reqs) // 2  # the content's, not filler
    assert [r.prompt for r in trace_requests(trace, content, seed=1)] == [r.prompt for r in reqs]


def test_the_shape_keeps_the_traces_gaps_divided_by_speed():
    shape = TraceReplay((10.0, 10.5, 12.0, 20.0), speed=10, source="x", start_s=10)
    assert shape.arrivals_s(num=None, duration_s=None, seed=0).tolist() == pytest.approx([0, 0.05, 0.2, 1.0])
    assert shape.arrivals_s(num=2, duration_s=None, seed=0).tolist() == pytest.approx([0, 0.05])
    with pytest.raises(ValueError, match="trace_speed must be > 0"):
        TraceReplay((0.0,), speed=0)
