"""`loadgen fit` and predictions that never read their cell (issue 67), on a real-time sweep of
the emulator kept with --token-ids (the real engine here: its steps are what the chunk times
say, its acceptance what its streams show):

- `loadgen fit` writes a profile of this machine with a record of the fit (the cells, each term
  with its error or held at zero, each cell's residual) and each model drafter's acceptance
  fitted from its own traces; too few levels are refused in one line;
- `sweep --virtual --traces-from` predicts each cell from another cell: a predicted cell's own
  results removed from the sources changes nothing, where `--replay` (re-pricing the same cell)
  then has nothing to read;
- a profile fitted on another machine is refused in one line naming `loadgen fit`, and with
  --profile-anyway every output says so (sweep, simulate, whatif, the report's lead);
- the main job's EAGLE and EAGLE-3 differ where a source separates them, and say they share
  elsewhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servers.emulator.fingerprint import host, mismatch
from tests.conftest import REPO, cli, run_cli

pytestmark = pytest.mark.servers


def plan(variants: str = "baseline,ngram,eagle", levels: str = "1,2") -> list[str]:
    return [
        *("--servers", "llama-3.1-8b", "--engine", "emulator", "--variants", variants),
        *("--workloads", "chat,output=fixed:48", "--concurrency", levels, "--num-requests", "4", "--quiet"),
    ]


PLAN = plan()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A real-time sweep of the emulator with every request's token ids: the fit's input and the
    predictions' sources."""
    out = tmp_path_factory.mktemp("fitpredict") / "source"
    res = run_cli("sweep", *PLAN, "--token-ids", "--warmup", "1", "--output", str(out), timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _predict(tmp: Path, sources: Path, name: str, *extra: str) -> Path:
    out = tmp / name
    res = cli("sweep", *PLAN, "--virtual", "--traces-from", str(sources), "--output", str(out), *extra)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _cell(out: Path, key: str) -> tuple[dict, list]:
    import pandas as pd

    s = json.loads((out / "cells" / key / "summary.json").read_text())
    frame = pd.read_parquet(out / "cells" / key / "requests.parquet")
    return s, sorted(zip(frame["request_id"], frame["completion_tokens"], frame["e2e_ms"].round(6)))


def test_a_prediction_never_reads_the_cell_it_predicts(source, tmp_path):
    full = _predict(tmp_path, source, "full")
    for key in ("eagle/chat/c1", "ngram/chat/c2", "baseline/chat/c1"):
        s, rows = _cell(full, key)
        how = s["config"]["prediction"]
        assert how["source"] and not how["source"].endswith(key), how  # another cell
        pruned = tmp_path / f"pruned-{key.replace('/', '-')}"
        shutil.copytree(source, pruned)
        shutil.rmtree(pruned / "cells" / key)
        variant, _, level = key.split("/")
        out = tmp_path / f"alone-{key.replace('/', '-')}"
        res = cli(
            "sweep", *plan(variant, level[1:]),
            "--virtual", "--traces-from", str(pruned), "--output", str(out),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        s2, rows2 = _cell(out, key)
        assert rows2 == rows and s2["output_throughput_tok_s"] == s["output_throughput_tok_s"], key
        assert s2["config"]["prediction"]["source"] == how["source"].replace(str(source), str(pruned))
    # what re-prices the measured cell itself (--replay) finds nothing once the cell is gone
    res = cli(
        "sweep", *plan("eagle", "1"),
        "--virtual", "--replay", str(tmp_path / "pruned-eagle-chat-c1"), "--output", str(tmp_path / "replayed"),
    )  # fmt: skip
    summary = json.loads((tmp_path / "replayed" / "cells" / "eagle/chat/c1" / "summary.json").read_text())
    assert summary["cell"]["status"] == "failed" and "eagle/chat/c1" in summary["cell"]["error"]


def test_loadgen_fit_writes_a_profile_of_this_machine_with_its_record(source, tmp_path):
    out = tmp_path / "mine.toml"
    res = run_cli("fit", str(source), "--output", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    text = out.read_text()
    from servers.emulator import profile as profiles

    prof = profiles.load(str(out))
    here = host()
    assert prof.machine["cpu_model"] == here["cpu_model"] and prof.machine["cores"] == here["cores"]
    assert prof.machine["engine"] == "emulator" and mismatch(str(out), prof.machine) is None
    for key in ("baseline/chat/c1", "baseline/chat/c2", "eagle/chat/c2", "ngram/chat/c1"):
        assert f"  {key} (source):" in res.stdout  # every cell used, with its residual
    assert "forward.per_batched_token = " in res.stdout and "±" in res.stdout
    assert "[acceptance_fitted.eagle.chat]" in text and prof.acceptance_note("eagle", "chat") is None
    assert "from its own traces at k 3" in text and text.startswith("# loadgen fit: ")
    # predicted on it, from the same sweep's other cells
    predicted = _predict(tmp_path, source, "on-mine", "--profile", str(out))
    s, _ = _cell(predicted, "eagle/chat/c2")
    assert s["output_throughput_tok_s"] > 0 and s["config"]["prediction"]["source"]
    again = run_cli("fit", str(source), "--output", str(out))
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_loadgen_fit_refuses_sweeps_that_cannot_place_its_terms(source, tmp_path):
    one = tmp_path / "one-level"
    shutil.copytree(source, one)
    for d in (one / "cells").glob("*/*/c2"):
        shutil.rmtree(d)
    res = cli("fit", str(one), "--output", str(tmp_path / "p.toml"))
    assert res.returncode == 2 and "two or more levels" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "p.toml").exists()


def _elsewhere(tmp_path: Path) -> Path:
    """The catalog's H100 profile as if fitted on a CPU this machine is not."""
    path = tmp_path / "elsewhere.toml"
    text = (REPO / "servers/emulator/profiles/h100-llama-3.1-8b.toml").read_text()
    path.write_text(text + '\n[machine]\naccelerator = "cpu"\ncpu_model = "Imaginary CPU 9000"\ncpu_kind = "avx2"\n')
    return path


def test_a_profile_of_another_machine_is_refused_then_marked_everywhere(tmp_path):
    prof = _elsewhere(tmp_path)
    args = [*plan("baseline,eagle"), "--virtual", "--profile", str(prof)]
    res = cli("sweep", *args, "--output", str(tmp_path / "no"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "Imaginary CPU 9000" in res.stderr and "`loadgen fit`" in res.stderr and "--profile-anyway" in res.stderr
    out = tmp_path / "anyway"
    res = cli("sweep", *args, "--profile-anyway", "--output", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    first = (res.stderr + res.stdout).strip().splitlines()[0]
    assert first.startswith("PROFILE MISMATCH (--profile-anyway)") and "Imaginary CPU 9000" in first
    for f in (out / "cells").glob("*/*/*/summary.json"):
        assert "Imaginary CPU 9000" in json.loads(f.read_text())["cell"]["profile_mismatch"][0]
    assert "Imaginary CPU 9000" in json.loads((out / "manifest.json").read_text())["plan"]["profile_mismatch"][0]
    rep = cli("report", str(out), "--output", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr[-2000:]
    lead = (tmp_path / "report" / "report.md").read_text().split("## Summary", 1)[1][:1500]
    assert "another machine" in lead and "Imaginary CPU 9000" in lead
    # simulate and whatif alike
    sim = [
        "simulate",
        "--profile",
        str(prof),
        "--num-requests",
        "4",
        "--workload",
        "synthetic:chat",
        "--concurrency",
        "1",
    ]
    res = cli(*sim, "--output", str(tmp_path / "s1"))
    assert res.returncode == 2 and "`loadgen fit`" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli(*sim, "--profile-anyway", "--output", str(tmp_path / "s2"))
    assert res.returncode == 0 and res.stderr.startswith("PROFILE MISMATCH"), res.stderr[-2000:]
    assert (
        "Imaginary CPU 9000" in json.loads((tmp_path / "s2" / "summary.json").read_text())["config"]["profile_mismatch"]
    )
    traces = tmp_path / "t.jsonl"
    traces.write_text(json.dumps({"id": "r0", "prompt_token_ids": [1, 2, 3], "generated_token_ids": [4, 5, 6, 7],
                                  "acc_eagle": {"acc_len": [2, 1, 2, 1]}}) + "\n")  # fmt: skip
    wi = ["whatif", str(traces), "--profile", str(prof), "--batch", "1", "--k", "1"]
    res = cli(*wi)
    assert res.returncode == 2 and "`loadgen fit`" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli(*wi, "--profile-anyway", "--output", str(tmp_path / "w"))
    assert res.returncode == 0 and res.stderr.startswith("PROFILE MISMATCH"), res.stderr[-2000:]
    assert res.stdout.startswith("PROFILE MISMATCH")
    assert "Imaginary CPU 9000" in json.loads((tmp_path / "w" / "whatif.json").read_text())["profile_mismatch"]


def test_the_main_jobs_eagle_and_eagle3_rows_differ_on_chat_and_say_they_share_on_code(tmp_path):
    res = run_cli("sweep", "--virtual", "--concurrency", "1", "--output", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "note: eagle: eagle acceptance on code_edit: shares eagle3's" in res.stderr + res.stdout
    rows = {}
    for table in res.stdout.split("workload ")[1:]:
        name = table.split(":", 1)[0]
        line = next(ln for ln in table.splitlines() if ln.split()[:1] == ["1"])
        eagle, eagle3 = (float(x.rstrip("x")) for x in line.split()[-2:])
        rows[name] = (eagle, eagle3)
    assert rows["chat"][1] > rows["chat"][0] * 1.1  # EAGLE-3 ahead on chat (vLLM's MT-Bench figures)
    assert rows["code-edit"][0] == rows["code-edit"][1]  # no source separates them on code
