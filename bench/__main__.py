"""`python3 -m bench`: the benchmarks and validations there are, by kind (bench/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from bench import PERFORMANCE, VALIDATION

HERE = Path(__file__).resolve().parent


def _first_line(name: str) -> str:
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    return doc.split("\n\n")[0].replace("\n", " ")[:110]


def main() -> None:
    for title, names in (("Performance (loadgen's own speed and memory)", PERFORMANCE), ("Validation", VALIDATION)):
        print(title)
        for name in names:
            print(f"  python3 -m bench.{name:<18} {_first_line(name)}")
        print()


if __name__ == "__main__":
    main()
