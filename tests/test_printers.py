"""Every dialect printed: a run against a server of each dialect the emulator speaks (vLLM's,
SGLang's, which counts no draft tokens) and against an external server with no /metrics at
all goes through every printer (tests/printers.py) without a traceback, what the server did not
report printed as "n/a". llama.cpp's dialect (the emulator does not speak it) goes through the
same printers in tests/test_llamacpp.py."""

from __future__ import annotations

import pytest

from servers.embedded import emulator_server, scripted_server
from tests.conftest import run_cli
from tests.printers import every_printer

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
SERVERS = {
    "vllm": lambda: emulator_server(LLAMA, "--speculative-config", EAGLE3),
    "sglang": lambda: emulator_server(LLAMA, "--flavor", "sglang", "--speculative-config", EAGLE3),
    "no-metrics": lambda: scripted_server("--model", LLAMA, "--step-ms", "2"),
}
# what each console says of the server's SD figures
SAYS = {
    "vllm": "Speculative decoding (server): acceptance rate 0.",
    "sglang": "Speculative decoding (server): acceptance rate n/a, mean acceptance length 2.",
    "no-metrics": None,
}


@pytest.mark.parametrize("dialect", list(SERVERS))
def test_a_run_of_every_dialect_goes_through_every_printer(dialect, tmp_path):
    with SERVERS[dialect]() as srv:
        args = ["--concurrency", "4", "--num-requests", "12", "--workload", "chat,output=fixed:64"]
        args += ["--output", str(tmp_path)]
        res = run_cli("run", "--base-url", srv.url, *args)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    printed = res.stdout + res.stderr
    text = every_printer(tmp_path)
    if SAYS[dialect] is None:
        assert "Speculative decoding (server" not in printed and "Speculative decoding (server" not in text
    else:
        assert SAYS[dialect] in printed and SAYS[dialect] in text, printed
    if dialect == "sglang":
        assert "draft tokens accepted" in text and "per position n/a" in text
