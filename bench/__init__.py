"""Benchmarks and validations: the scripts that print the figures in docs/ (each figure names
its script). Run one from the repository root as `python3 -m bench.NAME [options]`; none edits
sys.path (the library code they share lives in loadgen/ and servers/: the engine's step
timeline in loadgen/measures/enginesteps.py, the cost fits in servers/emulator/costfit.py), and
tests import the few pieces they check from here as `bench.NAME`.

Two kinds, listed by `python3 -m bench`:

- PERFORMANCE: speed and memory targets of loadgen itself (the client, the emulator, the
  scrape, the end of a run, the suite), each printing a table against its target;
- VALIDATION: figures checked against something independent (real vLLM on CPU or GPU, the
  study's own figures, llama.cpp, the emulator's known truth in virtual time) or measured to
  say what a feature gives.
"""

from __future__ import annotations

PERFORMANCE = (
    "client_capacity",  # the client's own ceiling: chunks/s, requests, connections
    "emulator_capacity",  # the emulator's ceiling in real time
    "emulator_hotpath",  # the emulator's step cost per request
    "rule_cost",  # the accepted-draft rule's cost per request, model drafter against n-gram
    "end_phases",  # where the end of a run takes its memory
    "scrape_cost",  # what a /metrics scrape costs the client
    "slower_machine",  # the figures on a slower machine, emulated with CPU quotas
    "soak",  # a long run's memory
    "suite_times",  # the test suite's time per file
    "timeline_size",  # the timeline's size over a day
    "whatif_speed",  # what-if over many traces
)
VALIDATION = (
    "aa_calibration",  # the A/A test's false-mark rates
    "calibrate",  # the emulator against the study's Fig. 1
    "cpu_profile",  # cost profiles fitted to real vLLM on this CPU
    "cpu_whatif",  # what-if on real traces, checked against real vLLM
    "fit_acceptance",  # acceptance fitted to data sets
    "gpu_vllm",  # real vLLM on a GPU host: the step fit and the SD cells
    "qwen_cpu",  # the Qwen2.5-Coder pair on vLLM's CPU build
    "qwen_predict",  # loadgen fit on a few real cells, predictions of cells never read, then measured
    "ramp",  # a ramp in real time beside the same in virtual time
    "reconcile_corpus",  # real streams (emulator, vLLM with the Qwen pair) for the rule's mutation test
    "sd_controls",  # vLLM's SD controls against fixed k and the oracle
    "self_draft",  # vLLM's draft-model path with the target as its own drafter
    "suffix_acceptance",  # suffix decoding's acceptance on real data
    "sweep_default",  # the README's main job: its time and its figures against the model
    "trace_replay",  # a production trace replayed against the emulator and the simulator
    "vllm_cpu",  # each CPU deployment swept on real vLLM
    "vllm_dtype",  # which dtype each local model serves fastest in on this CPU, with the same tokens
    "whatif_schedule",  # a what-if k schedule against fixed k
)


def run_args(base_url: str, **options: object) -> list[str]:
    """`loadgen run` against `base_url`, quiet, with `options` as its flags (num_requests=12 ->
    --num-requests 12; True: the bare flag): the one argument list the client benchmarks and
    the tests that run the client against a test server build."""
    out = ["run", "--base-url", base_url, "--quiet"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out
