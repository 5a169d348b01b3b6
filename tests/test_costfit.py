"""servers/emulator/costfit.py fits a real engine's cost model (`loadgen fit`: Qwen2.5-Coder on
vLLM's CPU build). Against a server whose true costs are known: the emulator in virtual time on
a profile written here (a roofline forward, SD mode's per-step and per-token costs, an n-gram
priced per draft, a draft model priced by its own forward); its steps read off the chunk times as
a real engine's are (loadgen/measures/enginesteps.py), never its own step records. Also what the fitted
profile's new terms do in the engine: a step reads the weights whatever it computes, and an
n-gram miss costs no drafting (the engine's own per-request counts of drafting steps say which
steps drafted)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen import api
from loadgen.shapes import ClosedLoop
from loadgen.simulate.virtual import SimSpec
from servers.emulator import costfit, profile
from servers.emulator.engine import EngineConfig
from servers.emulator.spec import parse
from workloads import open_workload

ROOT = Path(__file__).resolve().parents[1]
from loadgen.measures import enginesteps  # noqa: E402

pytestmark = pytest.mark.unit

HEAD = """description = "a roofline engine for the fit's test"
models = ["roofline"]
acceptance = "llama-3.1-8b"
max_model_len = 8192
kv_capacity_tokens = 1000000
source = "tests/test_costfit.py"

[forward]
constant = 0.0
per_kv_token = 2.0e-6
per_batched_token = 1.0e-3
weights = 2.0e-2

[step]
overhead = 0.0
"""
NGRAM = """
[drafters.ngram]
mode_per_step = 5.0e-3
mode_per_token = 4.0e-4
per_draft_token = 3.0e-3
acceptance = "eagle"
"""
DRAFT = """
[drafters.draft_model]
mode_per_step = 8.0e-3
acceptance = "eagle"

[drafters.draft_model.forward]
constant = 0.0
per_kv_token = 5.0e-7
per_batched_token = 3.0e-4
weights = 6.0e-3
"""


def _profile(tmp_path, text: str) -> str:
    path = tmp_path / "roofline.toml"
    path.write_text(HEAD + text)
    return str(path)


def _steps(prof: str, spec, users: int, k: int = 0, workload: str = "chat,output=fixed:48", per_user: int = 3):
    cfg = EngineConfig(per_request_spec_decode_metrics="summary" if spec else "none")
    sim = SimSpec(prof, spec, ClosedLoop(users), cfg, num_requests=per_user * users, client_rtt_s=0.0)
    done = api.simulate(api.SimJob(sim, open_workload(workload)))
    return enginesteps.engine_steps(done.frame, k), done


def test_the_roofline_forward_and_the_ngram_terms_come_back_from_the_chunk_times(tmp_path):
    prof = _profile(tmp_path, NGRAM)
    spec = parse('{"method": "ngram", "num_speculative_tokens": 3}')
    base = np.concatenate([_steps(prof, None, u)[0] for u in (1, 4, 16)])
    fw, fit = costfit.fit_forward(base)
    assert fw.weights == pytest.approx(2.0e-2, rel=0.03)
    assert fw.per_batched_token == pytest.approx(1.0e-3, rel=0.03)
    assert fw.per_kv_token == pytest.approx(2.0e-6, rel=0.1)
    assert fit.rms < 1e-3
    sd = np.concatenate([_steps(prof, spec, u, k=3, workload="code-edit,output=fixed:48")[0] for u in (1, 4, 16)])
    d, f = costfit.fit_drafter("ngram", 3, sd, fw)
    assert f.terms["mode_per_step"] == pytest.approx(5.0e-3, rel=0.1)
    assert f.terms["mode_per_token"] == pytest.approx(4.0e-4, rel=0.1)
    assert f.terms["per_draft_token"] == pytest.approx(3.0e-3, rel=0.1)
    assert costfit.negative_terms(fit, {"ngram": f}) == []


def test_a_draft_model_is_priced_by_its_own_forward_served_alone(tmp_path):
    """The draft model's forward fitted from serving it alone (its own baseline cells), k of them
    a drafting step, leaves SD mode's per step to the SD cells' residuals: it comes back."""
    prof = _profile(tmp_path, DRAFT)
    spec = parse('{"method": "draft_model", "model": "draft", "num_speculative_tokens": 3}')
    base = np.concatenate([_steps(prof, None, u)[0] for u in (1, 4, 16)])
    fw, _ = costfit.fit_forward(base)
    own = tmp_path / "alone.toml"  # the draft model served as a model of its own
    own.write_text(HEAD.replace("2.0e-6", "5.0e-7").replace("1.0e-3", "3.0e-4").replace("2.0e-2", "6.0e-3"))
    alone, _ = costfit.fit_forward(np.concatenate([_steps(str(own), None, u)[0] for u in (1, 4, 16)]))
    assert alone.weights == pytest.approx(6.0e-3, rel=0.03)
    sd = np.concatenate([_steps(prof, spec, u, k=3)[0] for u in (1, 4, 16)])
    d, f = costfit.fit_drafter("draft_model", 3, sd, fw, alone)
    assert f.terms["mode_per_step"] == pytest.approx(8.0e-3, rel=0.05)
    assert f.terms["mode_per_token"] < 1e-5
    text = costfit.profile_text(
        description="refit",
        models=["refit"],
        max_model_len=8192,
        forward=(fw, _),
        drafters={"draft_model": (d, f)},
        source="test",
    )
    (tmp_path / "refit.toml").write_text(text)
    back = profile.load(str(tmp_path / "refit.toml"))
    assert back.drafters["draft_model"].draft_forward.weights == pytest.approx(6.0e-3, rel=0.1)
    assert back.forward.weights == pytest.approx(fw.weights)


def test_a_step_reads_the_weights_whatever_it_computes():
    fw = profile.Forward(0.0, 0.0, 1.0e-3, weights=2.0e-2)
    assert fw.time(0, 1) == fw.time(0, 20) == pytest.approx(2.0e-2)
    assert fw.time(0, 40) == pytest.approx(4.0e-2)
    assert fw.time(0, 0) == 0.0


def test_an_ngram_miss_costs_no_drafting_in_the_live_engine(tmp_path):
    """At one user every gap between a request's chunks is one engine step: its forward over
    1 + the drafts it verifies, SD mode's cost, and the drafting price only where the request
    held drafts. A drafting price far above the rest makes a charged miss show: the request's
    decode time is its steps' forwards plus the price times the drafting steps the engine counted
    (num_spec_steps), not times every step."""
    prof = _profile(tmp_path, '\n[drafters.ngram]\nper_step = 0.5\nacceptance = "eagle"\n')
    spec = parse('{"method": "ngram", "num_speculative_tokens": 3}')
    steps, done = _steps(prof, spec, 1, k=3, workload="code-edit,output=fixed:48", per_user=4)
    for r in done.frame.itertuples():
        decode = (r.chunk_t_ns[-1] - r.chunk_t_ns[0]) / 1e9
        spec_steps = int(r.server_spec_steps)
        assert 0 < spec_steps < len(r.chunk_t_ns) - 1  # some steps drafted, some missed
        forwards = decode - 0.5 * spec_steps  # what is left: one forward a step, 20 to 30 ms here
        assert 0.02 * (len(r.chunk_t_ns) - 1) - 1e-6 <= forwards <= 0.03 * (len(r.chunk_t_ns) - 1)
