"""Where locally made model directories live, and the rule for remaking one: each is made once
into the user's cache, beside a stamp naming its recipe's version and every file's size and
sha256; a directory whose stamp is missing, of another version, or whose files no longer have
their sizes is stale and made again. A directory is assembled under a temporary name, checked,
then renamed into place, under a lock, so a server (or a second sweep) never reads half a model.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

STAMP = "loadgen-model.json"


class ModelError(RuntimeError):
    pass


def root() -> Path:
    """The cache of made models: $LOADGEN_MODELS, else ~/.cache/loadgen/models."""
    given = os.environ.get("LOADGEN_MODELS")
    return Path(given).expanduser() if given else Path.home() / ".cache" / "loadgen" / "models"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def files_of(where: Path) -> dict[str, dict]:
    """Every file of a made directory (its stamp aside): size and sha256, by relative path."""
    out = {}
    for p in sorted(where.rglob("*")):
        if p.is_file() and p.name != STAMP:
            out[str(p.relative_to(where))] = {"bytes": p.stat().st_size, "sha256": sha256(p)}
    return out


def stamp(where: Path) -> dict | None:
    try:
        return json.loads((where / STAMP).read_text())
    except (OSError, ValueError):
        return None


def fresh(where: Path, key: dict) -> bool:
    """`where` holds a directory made by this recipe version, every file there at its size."""
    s = stamp(where)
    if s is None or s.get("key") != key:
        return False
    for rel, meta in s.get("files", {}).items():
        try:
            if (where / rel).stat().st_size != meta["bytes"]:
                return False
        except OSError:
            return False
    return True


def make(where: Path, key: dict, build: Callable[[Path], None], check: Callable[[Path, dict], None]) -> Path:
    """`where` made by `build` (into an empty directory) unless fresh; `check(dir, files)`
    raises ModelError when what was built is wrong (it is then removed, nothing replaced)."""
    if fresh(where, key):
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second maker waits, then finds it fresh
        if fresh(where, key):
            return where
        part = where.parent / f".{where.name}.{os.getpid()}.part"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
        try:
            build(part)
            files = files_of(part)
            check(part, files)
            (part / STAMP).write_text(json.dumps({"key": key, "files": files}, indent=1))
            old = where.parent / f".{where.name}.{os.getpid()}.old"
            if where.exists():
                os.replace(where, old)
            os.replace(part, where)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(part, ignore_errors=True)
    return where
