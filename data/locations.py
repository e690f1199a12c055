"""Where local data files are found: the one place that reads ``QA_DATA_DIR``.

The data dir is laid out like ``../shared/data`` (``squad/dev-v1.1.json.zip``,
``scifact/``, ``iapp_wiki_qa_squad/data.zip``, ``nq/``...).  It is, first match
wins:

1. an explicit directory: ``--data-dir DIR``, a loader's or API call's ``data_dir``
   (used as given, even when it does not exist: its files are then "not found");
2. ``$QA_DATA_DIR`` when set and not empty (used as given, as 1.);
3. ``../shared/data`` beside the project checkout (``<checkout>/../shared/data``,
   where ``<checkout>`` holds this package), when that directory exists;
4. ``../shared/data`` relative to the current directory, when it exists.

So with the shared data beside the checkout nothing needs setting; 3. and 4. are
the same directory when a command runs from the checkout root.  With none of them
a loader tries the Hugging Face hub, else says in one line which file to put where.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "QA_DATA_DIR"
CHECKOUT = Path(__file__).resolve().parent.parent
SHARED = Path("..") / "shared" / "data"

# how the search order reads in help texts and messages
SEARCH_ORDER = (f"--data-dir, else ${ENV}, else ../shared/data beside the checkout, "
                "else ../shared/data from the current directory")


def default_dirs() -> list[Path]:
    """The directories looked at when neither an explicit dir nor ``$QA_DATA_DIR`` is given, in order (3., 4.)."""
    return [(CHECKOUT / SHARED).resolve(), (Path.cwd() / SHARED).resolve()]


def data_dir(explicit: str | Path | None = None) -> Path | None:
    """The data dir: ``explicit`` if given, else ``$QA_DATA_DIR`` if set (and not empty), else the first of
    :func:`default_dirs` that exists, else None (see the module doc)."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    for candidate in default_dirs():
        if candidate.is_dir():
            return candidate
    return None


def shown_dir(explicit: str | Path | None = None) -> Path:
    """The data dir for messages: the directory itself, or ``$QA_DATA_DIR`` when none is found."""
    return data_dir(explicit) or Path("$" + ENV)


def find_local(directory: str | Path | None, candidates: list[str]) -> Path | None:
    """The first of ``candidates`` (paths relative to the data dir) that is a file.

    ``directory`` None means the search order of :func:`data_dir`; no data dir at all finds nothing.
    """
    root = data_dir(directory)
    if root is None:
        return None
    for rel in candidates:
        p = root / rel
        if p.is_file():
            return p
    return None
