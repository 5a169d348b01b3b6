"""test_ray.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_each_engine_asks_ray_for_what_it_runs_on():
    """vLLM asks for GPUs, the emulator and llama.cpp for CPUs; CPU and GPU go to Ray's own
    keywords (Ray refuses them as custom resources), anything else as a custom resource."""
    from loadgen.backends.raycluster import default_resource, resource_request

    assert [default_resource(e) for e in ("vllm", "emulator", "llama.cpp")] == ["GPU", "CPU", "CPU"]
    assert resource_request("GPU", 2) == {"num_cpus": 1, "num_gpus": 2}
    assert resource_request("CPU", 2) == {"num_cpus": 2}
    assert resource_request("h100", 4) == {"num_cpus": 1, "resources": {"h100": 4}}
