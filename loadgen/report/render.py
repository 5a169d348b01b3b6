"""The report as Markdown (images beside it) and as one self-contained HTML file (images
embedded). Both hold the same sections; the tables are the CSV files' contents."""
from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass
class Section:
    title: str
    text: str                                    # plain prose, one paragraph per line
    tables: list[tuple[str, pd.DataFrame]]       # (caption, frame)
    figures: list[Path]


def _fmt(v) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def markdown(title: str, sections: list[Section], root: Path) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        out += [p for line in s.text.splitlines() for p in (line, "")]
        for caption, frame in s.tables:
            out += [f"**{caption}**", ""]
            if frame.empty:
                out += ["(nothing to show)", ""]
                continue
            out.append("| " + " | ".join(map(str, frame.columns)) + " |")
            out.append("|" + "---|" * len(frame.columns))
            out += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
            out.append("")
        out += [f"![{p.stem}]({p.relative_to(root)})\n" for p in s.figures]
    return "\n".join(out)


_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}img{max-width:100%;display:block;margin:1em 0}
caption{caption-side:top;text-align:left;font-weight:bold;padding:.3em 0}"""
# Marks on <html> how many of the report's images the browser decoded (read by the tests).
_SCRIPT = ("window.addEventListener('load',function(){var i=[].slice.call(document.images);"
           "document.documentElement.setAttribute('data-images-loaded',"
           "i.filter(function(x){return x.complete&&x.naturalWidth>0}).length+'/'+i.length)});")


def page(title: str, sections: list[Section]) -> str:
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [f"<p>{html.escape(line)}</p>" for line in s.text.splitlines() if line]
        for caption, frame in s.tables:
            if frame.empty:
                parts.append(f"<p><b>{html.escape(caption)}</b>: nothing to show</p>")
                continue
            body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                           for row in frame.itertuples(index=False))
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
            parts.append(f"<table><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>")
        for p in s.figures:
            data = base64.b64encode(p.read_bytes()).decode()
            parts.append(f"<img alt=\"{html.escape(p.stem)}\" src=\"data:image/png;base64,{data}\">")
    parts.append("</body></html>")
    return "\n".join(parts)
