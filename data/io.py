"""Small file utilities shared by every stage: atomic writes, checksums, cache dir."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from data.errors import UserError


def cache_dir(*parts: str) -> Path:
    """The project cache (``QA_CACHE_DIR`` or ``~/.cache/qa-retrieval-eval``)."""
    root = Path(os.environ.get("QA_CACHE_DIR") or Path.home() / ".cache" / "qa-retrieval-eval")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_text(*parts: Any) -> str:
    """Content hash of a sequence of strings/values (used for cache keys)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (list, tuple)):
            for x in p:
                b = str(x).encode("utf-8")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
        else:
            b = str(p).encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it is renamed onto ``path``.

    A crash or an exception leaves ``path`` untouched (no half-written output).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise UserError(f"{path.parent}: cannot write output ({e.strerror or e})") from None
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as e:
        tmp_path.unlink(missing_ok=True)
        raise UserError(f"{path}: write failed ({e.strerror or e})") from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def write_jsonl(path: str | os.PathLike, rows) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(o: Any):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
