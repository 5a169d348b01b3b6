"""The report as Markdown (images beside it) and as one self-contained HTML file (images and
the interactive chart's library embedded: nothing is fetched when it is viewed). Both hold the
same sections, each: its lead text, its figures, then its tables collapsed (`<details>`), each
linked to its CSV file. Numbers are formatted for people (loadgen.report.numbers)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from loadgen.report.numbers import num


@dataclass
class Section:
    title: str
    text: str  # plain prose, one paragraph per line
    tables: list[tuple]  # (caption, frame[, csv file name])
    figures: list[Path]
    after: str = ""  # prose after the figures (notes)
    chart: str = ""  # an interactive chart (HTML only; the PNGs stand in for it in Markdown)
    anchor: str = ""
    lead: list[str] = field(default_factory=list)  # sentences shown first, on their own (the decision)


def _fmt(v) -> str:
    return num(v)


def _table_parts(t: tuple) -> tuple[str, pd.DataFrame, str | None]:
    return (t[0], t[1], t[2] if len(t) > 2 else None)


def markdown(title: str, sections: list[Section], root: Path) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        out += [p for line in s.lead for p in (f"**{line}**", "")]
        out += [p for line in s.text.splitlines() for p in (line, "")]
        out += [f"![{p.stem}]({p.relative_to(root)})\n" for p in s.figures]
        out += [p for line in s.after.splitlines() for p in (line, "")]
        for t in s.tables:
            caption, frame, csv = _table_parts(t)
            link = f" ([CSV]({csv}))" if csv else ""
            out += [f"<details><summary>{caption} ({len(frame)} rows){link}</summary>", ""]
            if frame.empty:
                out += ["(nothing to show)", "", "</details>", ""]
                continue
            out.append("| " + " | ".join(map(str, frame.columns)) + " |")
            out.append("|" + "---|" * len(frame.columns))
            out += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
            out += ["", "</details>", ""]
    return "\n".join(out)


_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
h1{font-size:1.4em;margin:.3em 0}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.5em}
#decision p{margin:.25em 0;font-size:1.02em}#decision{margin-bottom:.5em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%;display:block;margin:1em 0}
details{margin:.4em 0}summary{cursor:pointer;font-weight:bold}td.flag{color:#b00}"""
# Marks on <html> what the tests read: how many images the browser decoded, where the decision
# and the chart sit, and the chart's own data (each point's workload, variant, load, speedup).
_SCRIPT = """window.addEventListener('load',function(){var d=document.documentElement;
var i=[].slice.call(document.images);
d.setAttribute('data-images-loaded',i.filter(function(x){return x.complete&&x.naturalWidth>0}).length+'/'+i.length);
function box(id){var e=document.getElementById(id);if(!e)return null;var r=e.getBoundingClientRect();
return [Math.round(r.top),Math.round(r.bottom),Math.round(r.height)];}
d.setAttribute('data-decision-box',JSON.stringify(box('decision')));
d.setAttribute('data-chart-box',JSON.stringify(box('speedup-chart')));
var c=document.getElementById('speedup-chart'),pts=[];
if(c&&c.data){c.data.forEach(function(t){(t.customdata||[]).forEach(function(p){pts.push(p)})});}
d.setAttribute('data-chart-points',JSON.stringify(pts));});"""


def page(title: str, sections: list[Section]) -> str:
    parts = [
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>",
    ]
    for s in sections:
        if s.lead:
            parts.append('<div id="decision">' + "".join(f"<p>{html.escape(line)}</p>" for line in s.lead) + "</div>")
        if s.chart and s.lead:  # the answer's chart, right under it
            parts.append(s.chart)
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [f"<p>{html.escape(line)}</p>" for line in s.text.splitlines() if line]
        if s.chart and not s.lead:
            parts.append(s.chart)
        elif not s.chart:
            for p in s.figures:
                data = base64.b64encode(p.read_bytes()).decode()
                parts.append(f'<img alt="{html.escape(p.stem)}" src="data:image/png;base64,{data}">')
        parts += [f"<p>{html.escape(line)}</p>" for line in s.after.splitlines() if line]
        for t in s.tables:
            caption, frame, csv = _table_parts(t)
            link = f' (<a href="{html.escape(csv)}">CSV</a>)' if csv else ""
            if frame.empty:
                parts.append(f"<p><b>{html.escape(caption)}</b>: nothing to show</p>")
                continue
            flag_col = list(frame.columns).index("flags") if "flags" in frame.columns else -1
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td class="flag">{html.escape(_fmt(v))}</td>'
                    if j == flag_col and v
                    else f"<td>{html.escape(_fmt(v))}</td>"
                    for j, v in enumerate(row)
                )
                + "</tr>"
                for row in frame.itertuples(index=False)
            )
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
            parts.append(
                f"<details><summary>{html.escape(caption)} ({len(frame)} rows){link}</summary>"
                f"<table><tr>{head}</tr>{body}</table></details>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)
