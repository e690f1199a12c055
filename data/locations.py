"""Where local data files are found: the one place that reads ``QA_DATA_DIR``.

The data dir is laid out like ``../shared/data`` (``squad/dev-v1.1.json.zip``,
``scifact/``, ``iapp_wiki_qa_squad/data.zip``, ``nq/``...).  An explicit
directory (``--data-dir``, a loader's ``data_dir``) wins over the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "QA_DATA_DIR"


def data_dir(explicit: str | Path | None = None) -> Path | None:
    """``explicit`` if given, else ``$QA_DATA_DIR`` if set (and not empty), else None."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV)
    return Path(env) if env else None


def shown_dir(explicit: str | Path | None = None) -> Path:
    """The data dir for messages: the directory itself, or ``$QA_DATA_DIR`` when none is set."""
    return data_dir(explicit) or Path("$" + ENV)


def find_local(directory: str | Path | None, candidates: list[str]) -> Path | None:
    """The first of ``candidates`` (paths relative to the data dir) that is a file.

    ``directory`` None means ``$QA_DATA_DIR`` (see :func:`data_dir`); no data dir at all finds nothing.
    """
    root = data_dir(directory)
    if root is None:
        return None
    for rel in candidates:
        p = root / rel
        if p.is_file():
            return p
    return None
