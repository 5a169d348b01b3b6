"""A k schedule by batch size (vLLM's num_speculative_tokens_per_batch_size): parsed and looked
up as vLLM does, run by the emulator's engine, derived by `whatif --schedule` and rendered into
a deployment's `vllm serve` line."""

from __future__ import annotations

import json

import pytest

from loadgen.whatif import schedule
from servers.deployments import load, on_engine, render
from servers.emulator.spec import SpecError, parse

pytestmark = pytest.mark.unit


def _spec(sched, k=5, method="eagle"):
    return parse(
        json.dumps(
            {
                "method": method,
                "model": "m",
                "num_speculative_tokens": k,
                "num_speculative_tokens_per_batch_size": sched,
            }
        )
    )


def test_the_lookup_is_vllms():
    # vLLM's own example (build_dynamic_sd_schedule_lookup): [(1, 16, 3), (32, 128, 2)] maps
    # 17-31 to the previous k, 3, and past 128 the last k holds; never above num_speculative_tokens
    dense = _spec([[32, 128, 2], [1, 16, 3]]).k_by_batch(200)
    assert [dense[b] for b in (1, 16, 17, 31, 32, 128, 129, 200)] == [3, 3, 3, 3, 2, 2, 2, 2]
    assert _spec([[1, 4, 6], [5, 8, 0]], k=4).k_by_batch(8)[1:] == [4, 4, 4, 4, 0, 0, 0, 0]


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "non-empty list"),
        ([[1, 2]], "3 integers"),
        ([[0, 4, 3]], "must be positive"),
        ([[4, 1, 3]], "start must be <= end"),
        ([[1, 4, -1]], "must be >= 0"),
        ([[1, 8, 3], [8, 16, 2]], "non-overlapping"),
        ([[2, 8, 3]], "must start at 1"),
    ],
)
def test_a_bad_schedule_is_refused_as_vllm_refuses_it(bad, message):
    with pytest.raises(SpecError, match=message):
        _spec(bad)


def test_the_engine_drafts_the_k_of_the_batch_it_scheduled():
    """One request alone drafts 3 a step; eight together draft 1 (k by batch size 1-4: 3, 5+: 1)."""
    from servers.emulator import profile as profiles
    from servers.emulator.engine import Engine

    spec = _spec([[1, 4, 3], [5, 256, 1]], k=3, method="eagle3")
    for users, per_step in ((1, 3.0), (8, 1.0)):
        engine = Engine(profiles.load("h100-llama-3.1-8b"), spec)
        for i in range(users):
            engine.submit(str(i), f"Tell me about the number {i}.", 64, arrival=0.0, ignore_eos=True)
        engine.run_to_end()
        stats = engine.stats
        # every verification step but the last ones of a request proposes the batch's k
        assert stats.spec_draft_tokens / stats.spec_drafts == pytest.approx(per_step, rel=0.1), users


def test_ranges_switch_at_the_geometric_mean():
    # best k 5 at 1 and 4, 3 at 16, 1 at 64: 4..16 switch at 8, 16..64 at 32; merged where equal
    assert schedule.ranges({1: 5, 4: 5, 16: 3, 64: 1}, 256) == [[1, 8, 5], [9, 32, 3], [33, 256, 1]]
    assert schedule.ranges({1: 2, 8: 2}, 100) == [[1, 100, 2]]
    results = [
        {"policy": "none", "kind": "none", "batch": 1, "output_tok_s": 100.0},
        {"policy": "eagle k=1", "kind": "fixed", "batch": 1, "output_tok_s": 150.0},
        {"policy": "eagle k=3", "kind": "fixed", "batch": 1, "output_tok_s": 180.0},
        {"policy": "eagle oracle", "kind": "oracle", "batch": 1, "output_tok_s": 999.0},
        {"policy": "none", "kind": "none", "batch": 64, "output_tok_s": 5000.0},
        {"policy": "eagle k=1", "kind": "fixed", "batch": 64, "output_tok_s": 4900.0},
        {"policy": "eagle k=3", "kind": "fixed", "batch": 64, "output_tok_s": 4000.0},
    ]
    assert schedule.best_k(results, "eagle") == {1: 3, 64: 0}  # no speculation pays at 64: k = 0


def test_the_deployment_file_loads_and_renders_the_schedule(tmp_path):
    config = schedule.speculative_config(
        schedule.drafter_config("eagle", "meta-llama/Llama-3.1-8B-Instruct"), [[1, 8, 5], [9, 256, 2]]
    )
    assert config["model"] == "yuhuili/EAGLE-LLaMA3.1-Instruct-8B" and config["num_speculative_tokens"] == 5
    path = tmp_path / "schedule-eagle.toml"
    path.write_text(
        schedule.deployment_toml("meta-llama/Llama-3.1-8B-Instruct", "eagle", config, [1, 3, 5], description="test")
    )
    dep = load(str(path))
    assert list(dep.variants) == ["baseline", "eagle-k1", "eagle-k3", "eagle-k5", "eagle-schedule", "eagle-adaptive"]
    assert dep.variants["eagle-adaptive"].speculative_config == {
        "method": "eagle",
        "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 5,
        "enable_adaptive_verification": True,
    }
    line = " ".join(render(dep, "eagle-schedule").argv)
    assert '"num_speculative_tokens_per_batch_size":[[1,8,5],[9,256,2]]' in line
    emulated = render(on_engine(dep, "emulator"), "eagle-schedule")
    assert parse(emulated.argv[emulated.argv.index("--speculative-config") + 1]).schedule == ((1, 8, 5), (9, 256, 2))
