"""The Grafana dashboards (dashboards/grafana/dashboards/*.json): sound structure, and every
query of every panel answered by a real Prometheus that scrapes the emulator and loadgen's own
live metrics during a sweep (Prometheus from Debian; .ci/run installs it).

Grafana itself cannot be installed here: its variables are substituted as Grafana would
($__rate_interval: at least 4 scrape intervals)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib.image
import pytest

from servers.launcher import free_port, spawn, stop_group
from tests.conftest import server_pids

pytestmark = pytest.mark.engines

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((REPO / "dashboards" / "grafana" / "dashboards").glob("*.json"))
ARTIFACTS = Path(os.environ.get("LOADGEN_TEST_ARTIFACTS", REPO / "tests" / "artifacts"))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SCRAPE_S = 1
ACCEPTANCE = (
    "sum(rate(vllm:spec_decode_num_accepted_tokens_total[30s])) / "
    "sum(rate(vllm:spec_decode_num_draft_tokens_total[30s]))"
)


def panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out += [p, *p.get("panels", [])]
    return out


def queries() -> list[tuple[str, str, str, str]]:
    """(dashboard, panel title, refId, expr) of every target."""
    return [
        (path.name, p["title"], t["refId"], t["expr"])
        for path in DASHBOARDS
        for p in panels(json.loads(path.read_text()))
        for t in p.get("targets", [])
    ]


def substitute(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", f"{5 * SCRAPE_S}s")
        .replace("$__interval", f"{SCRAPE_S}s")
        .replace("$model_name", MODEL)
    )


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _query(port: int, expr: str) -> dict:
    return _get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def prometheus_and_sweep(tmp_path):
    exe = shutil.which("prometheus")
    if exe is None:
        if os.environ.get("LOADGEN_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("prometheus is not installed (apt-get install -y prometheus)")
        pytest.skip("prometheus is not installed (apt-get install -y prometheus)")
    before = server_pids()
    emu, live, prom = free_port(), free_port(), free_port()
    config = (REPO / "dashboards" / "prometheus" / "prometheus.yml").read_text()
    assert "127.0.0.1:8000" in config and "127.0.0.1:9400" in config
    (tmp_path / "prometheus.yml").write_text(
        config.replace("127.0.0.1:8000", f"127.0.0.1:{emu}").replace("127.0.0.1:9400", f"127.0.0.1:{live}")
    )
    procs = []
    with open(tmp_path / "prometheus.log", "wb") as log:
        procs.append(
            spawn(
                [
                    exe,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom}",
                ],
                stdout=log,
                stderr=log,
            )
        )
    with open(tmp_path / "sweep.log", "wb") as log:
        procs.append(
            spawn(
                [
                    sys.executable,
                    "-m",
                    "loadgen",
                    "sweep",
                    "--servers",
                    "llama-3.1-8b",
                    "--engine",
                    "emulator",
                    "--variants",
                    "eagle",
                    "--workloads",
                    "code-edit,output=fixed:128",
                    "--concurrency",
                    "8",
                    "--duration",
                    "30",
                    "--warmup",
                    "1",
                    "--port",
                    str(emu),
                    "--metrics-port",
                    str(live),
                    "--quiet",
                    "--output",
                    str(tmp_path / "sweep"),
                ],
                stdout=log,
                stderr=log,
                cwd=REPO,
            )
        )
    try:
        yield prom, procs[1], tmp_path
    finally:
        for p in reversed(procs):
            stop_group(p, grace_s=10)
        assert server_pids() <= before


def test_every_panel_query_answers_from_a_real_prometheus(prometheus_and_sweep):
    prom, sweep, tmp = prometheus_and_sweep

    def scraped() -> bool:
        up = _query(prom, "up")["data"]["result"]
        drafts = _query(prom, "sum(rate(vllm:spec_decode_num_drafts_total[5s])) > 0")["data"]["result"]
        live = _query(prom, "sum(rate(loadgen_output_tokens_total[5s])) > 0")["data"]["result"]
        return len(up) == 2 and all(r["value"][1] == "1" for r in up) and drafts and live

    _wait(scraped, 60, f"both targets scraped with traffic (see {tmp / 'sweep.log'})")
    time.sleep(6 * SCRAPE_S)  # a full $__rate_interval of samples under load
    assert sweep.poll() is None, "the sweep ended before the queries ran"
    problems = []
    for dash, title, ref, expr in queries():
        res = _query(prom, substitute(expr))
        if res.get("status") != "success":
            problems.append(f"{dash} / {title} / {ref}: {res.get('error')}")
        elif not res["data"]["result"]:
            problems.append(f"{dash} / {title} / {ref}: empty result for {substitute(expr)}")
    assert not problems, "\n".join(problems)
    assert len(queries()) >= 25
    # loadgen's names and vLLM's colon names arrive unescaped (the Prometheus 2.x trap)
    names = _get(f"http://127.0.0.1:{prom}/api/v1/label/__name__/values")["data"]
    assert "vllm:spec_decode_num_drafts_total" in names and "loadgen_ttft_seconds_bucket" in names
    assert not any(n.startswith("vllm_") for n in names)
    _screenshot(prom, tmp)


def _screenshot(prom: int, tmp: Path) -> None:
    """Prometheus' own graph page for the headline acceptance query, kept as a test artifact."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("LOADGEN_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "prometheus-acceptance-rate.png"
    url = f"http://127.0.0.1:{prom}/graph?" + urllib.parse.urlencode(
        {"g0.expr": ACCEPTANCE, "g0.tab": "0", "g0.range_input": "1m"}
    )
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp / 'chromium'}",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--virtual-time-budget=15000",
            f"--screenshot={shot}",
            url,
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05 and (pixels.mean(axis=-1) < 0.9).mean() > 0.01
