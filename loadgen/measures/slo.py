"""The one SLO language, `METRIC OP VALUE[UNIT]`, in its two uses.

Per-request objectives for goodput (`--goodput 'ttft<=500ms,tpot<=50ms'`): a request is good
when it succeeded and meets every objective. TTFT and E2E are taken from the request's
scheduled time (what its user waited, client-side queueing included); TPOT is per token after
the first.

SLO gates over a run's summary (`loadgen check --slo`, docs/check.md): `ttft_p99<=2s`,
`tpot_p50<=40ms`, `error_rate<=0.1%`, `goodput>=95%`. Each SLO gives a row: target, measured,
margin, verdict; a missing figure (no successful request) fails."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from xml.etree import ElementTree as ET

import pandas as pd

LATENCY = ("ttft", "tpot", "itl", "e2e", "ttfo")
STATS = ("mean", "min", "p50", "p90", "p95", "p99", "p99.9", "max")
RATIOS = ("error_rate", "goodput")  # fractions; % allowed
RATES = ("output_throughput", "request_throughput")  # tok/s, req/s
_EXPR = re.compile(r"^\s*([a-z0-9_.]+)\s*(<=|>=|<|>)\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")


# goodput objective -> the per-request column it is judged on
OBJECTIVES = {
    "ttft": "ttft_from_scheduled_ms",
    "tpot": "tpot_ms",
    "e2e": "e2e_from_scheduled_ms",
    # time to the first answer token (after a reasoning model's thinking; TTFT without it)
    "ttfo": "ttfo_from_scheduled_ms",
}


class SLOError(ValueError):
    pass


def objectives(specs: list[str]) -> dict[str, float]:
    """'ttft<=500ms,tpot<=50ms' (or several strings) -> {'ttft': 500.0, 'tpot': 50.0} in ms."""
    out: dict[str, float] = {}
    for spec in specs:
        for part in filter(None, (p.strip() for p in spec.split(","))):
            m = _EXPR.match(part)
            if not m or m.group(1) not in OBJECTIVES or m.group(2) != "<=" or m.group(4) not in ("ms", "s"):
                raise SLOError(
                    f"bad goodput objective {part!r}: write METRIC<=VALUE(ms|s) "
                    f"with METRIC one of {', '.join(OBJECTIVES)}, e.g. ttft<=500ms"
                )
            out[m.group(1)] = float(m.group(3)) * (1000.0 if m.group(4) == "s" else 1.0)
    return out


def good(frame: pd.DataFrame, objectives: dict[str, float]) -> pd.Series:
    """Which requests of `frame` are good (boolean, aligned with the frame)."""
    mask = frame["ok"].copy()
    for name, limit in objectives.items():
        # a request that never answered (thinking cut by max_tokens) did not meet a ttfo objective
        mask &= frame[OBJECTIVES[name]].fillna(math.inf if name == "ttfo" else 0.0) <= limit
    return mask


def metric_names() -> list[str]:
    return [f"{m}_{s}" for m in LATENCY for s in STATS] + list(RATIOS) + list(RATES)


@dataclass(frozen=True)
class SLO:
    text: str
    metric: str
    op: str
    target: float  # ms for latency, a fraction for ratios, per second for rates

    @property
    def unit(self) -> str:
        return "ms" if self.metric.split("_")[0] in LATENCY else ("" if self.metric in RATIOS else "/s")


def parse(text: str) -> SLO:
    m = _EXPR.match(text)
    valid = ", ".join(metric_names())
    if not m or m.group(1) not in metric_names():
        raise SLOError(
            f"bad --slo {text!r}: write METRIC OP VALUE, e.g. ttft_p99<=2s, error_rate<=0.1%, "
            f"goodput>=95%; METRIC is one of {valid}"
        )
    metric, op, value, unit = m.group(1), m.group(2), float(m.group(3)), m.group(4)
    if metric.split("_")[0] in LATENCY:
        if unit not in ("ms", "s"):
            raise SLOError(f"bad --slo {text!r}: a latency needs a unit, ms or s (e.g. {metric}<=500ms)")
        value *= 1000.0 if unit == "s" else 1.0
    elif metric in RATIOS:
        if unit in ("ms", "s"):
            raise SLOError(f"bad --slo {text!r}: {metric} is a share: write it as 0.1% or 0.001")
        value = value / 100.0 if unit == "%" else value
    elif unit is not None:
        raise SLOError(f"bad --slo {text!r}: {metric} is per second and takes no unit (e.g. {metric}>=1000)")
    return SLO(text.strip(), metric, op, value)


def parse_all(texts) -> list[SLO]:
    """The --slo options, at least one; a bad one is a LoadgenError."""
    from loadgen.errors import LoadgenError

    if not texts:
        raise LoadgenError("give at least one --slo, e.g. --slo 'ttft_p99<=2s' --slo 'error_rate<=0.1%'")
    try:
        return [parse(t) for t in texts]
    except SLOError as e:
        raise LoadgenError(str(e)) from None


def measured(summary: dict, metric: str) -> float | None:
    if metric in RATES:
        return summary.get(f"{metric}_tok_s" if metric == "output_throughput" else f"{metric}_req_s")
    if metric == "error_rate":
        n = summary.get("completed", 0) + summary.get("failed", 0)
        return summary.get("failed", 0) / n if n else None
    if metric == "goodput":
        return (summary.get("goodput") or {}).get("fraction")
    name, stat = metric.split("_", 1)
    if name == "ttfo":  # a run with phases has its own; without, the first output token is the first token
        value = ((summary.get("phases") or {}).get("ttfo_ms") or summary.get("ttft_ms") or {}).get(stat)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
    value = (summary.get(f"{name}_ms") or {}).get(stat)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass
class Verdict:
    slo: str
    metric: str
    target: float
    measured: float | None
    margin: float | None  # how far inside the target (negative: outside), in the metric's unit
    unit: str
    passed: bool


def judge(summary: dict, slos: list[SLO]) -> list[Verdict]:
    out = []
    for s in slos:
        v = measured(summary, s.metric)
        if v is None:
            out.append(Verdict(s.text, s.metric, s.target, None, None, s.unit, False))
            continue
        ok = {"<=": v <= s.target, "<": v < s.target, ">=": v >= s.target, ">": v > s.target}[s.op]
        margin = s.target - v if s.op in ("<=", "<") else v - s.target
        out.append(Verdict(s.text, s.metric, s.target, v, margin, s.unit, ok))
    return out


def _fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "":
        return f"{100 * x:.3g}%"
    return f"{x:.4g} {unit.strip('/') + '/s' if unit == '/s' else unit}".replace("/s/s", "/s")


def table(verdicts: list[Verdict], title: str = "") -> str:
    lines = [title] if title else []
    lines.append(f"{'SLO':<24} {'target':>12} {'measured':>12} {'margin':>12}  verdict")
    for v in verdicts:
        lines.append(
            f"{v.slo:<24} {_fmt(v.target, v.unit):>12} {_fmt(v.measured, v.unit):>12} "
            f"{_fmt(v.margin, v.unit):>12}  {'pass' if v.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def junit(suites: dict[str, list[Verdict]]) -> str:
    """JUnit XML: a test suite per run (or sweep cell), a test case per SLO."""
    root = ET.Element("testsuites", name="loadgen check")
    for name, verdicts in suites.items():
        failures = sum(not v.passed for v in verdicts)
        suite = ET.SubElement(
            root, "testsuite", name=name, tests=str(len(verdicts)), failures=str(failures), errors="0"
        )
        for v in verdicts:
            case = ET.SubElement(suite, "testcase", classname=f"loadgen.measures.objectives.{name}", name=v.slo)
            if not v.passed:
                what = (
                    "no figure (no successful request)"
                    if v.measured is None
                    else f"measured {_fmt(v.measured, v.unit)}, target {v.slo}"
                )
                ET.SubElement(case, "failure", message=what, type="SLO")
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def as_json(suites: dict[str, list[Verdict]]) -> str:
    return json.dumps(
        {
            "passed": all(v.passed for vs in suites.values() for v in vs),
            "checks": {name: [asdict(v) for v in vs] for name, vs in suites.items()},
        },
        indent=2,
    )
