"""The sweep's manifest: what was run, with what, where; written before the first cell and
rewritten (atomically) when the sweep is resumed."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from loadgen import __version__
from loadgen.planning.plan import Plan, servers
from loadgen.results import store
from loadgen.results.cells import MANIFEST
from servers import engines
from servers.deployments import Deployment

_PACKAGES = ("aiohttp", "numpy", "pandas", "pyarrow", "prometheus-client", "click")


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version(), "loadgen": __version__}
    for name in (*_PACKAGES, *dict.fromkeys(p for n in engines.names() for p in engines.get(n).packages)):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision() -> str | None:
    """The commit of the loadgen source that runs, if it is a git checkout."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def write(
    root: Path, plan: Plan, dep: Deployment, argv: list[str], host: dict, time_scale_probe: dict | None = None
) -> dict:
    m = {
        "loadgen_version": __version__,
        "created_unix": time.time(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": argv,
        "python_executable": sys.executable,
        "git_revision": git_revision(),
        "versions": _versions(),
        "host": host,
        "plan": plan.to_dict(),
        "deployment": {
            "name": dep.name,
            "source": dep.source,
            "description": dep.description,
            "model": dep.model,
            "engine": dep.engine,
            "tensor_parallel_size": dep.tensor_parallel_size,
        },
        "servers": servers(dep, plan),
        "time_scale_probe": time_scale_probe,
        "resumed": [],
    }
    store.write_json(root / MANIFEST, m)
    return m


def read(root: Path) -> dict | None:
    try:
        with open(root / MANIFEST) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def note_resume(root: Path, m: dict, argv: list[str]) -> None:
    m.setdefault("resumed", []).append(
        {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": argv, "git_revision": git_revision()}
    )
    store.write_json(root / MANIFEST, m)
