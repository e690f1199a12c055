"""Built datasets cached on disk under a content key (``<cache>/datasets/<key>.pkl``).

Loaders wrap their build in :func:`cached_build` with a key made of everything
the result depends on (the dataset name, split, the input files' sha256, the
options); :data:`BUILD_VERSION` is part of every key.
"""

from __future__ import annotations

import pickle
from typing import Callable, TypeVar

from data.errors import UserError

T = TypeVar("T")

# Bump when a builder changes what it produces: it invalidates cached datasets.
BUILD_VERSION = "2"  # 2: sentence-level contexts are a RowParagraphs view


def cached_build(key_parts: list, build: Callable[[], T]) -> T:
    """Return ``build()``, cached on disk under a content key (pickled Dataset)."""
    from data.io import atomic_path, cache_dir, sha256_text

    key = sha256_text(BUILD_VERSION, *key_parts)[:24]
    path = cache_dir("datasets") / f"{key}.pkl"
    if path.is_file():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception:  # a partial or corrupt entry is rebuilt, never served
            path.unlink(missing_ok=True)
    ds = build()
    try:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                pickle.dump(ds, f, protocol=pickle.HIGHEST_PROTOCOL)
    except UserError:
        pass  # an unwritable cache only costs time
    return ds
