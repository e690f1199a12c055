"""Built datasets cached on disk under a content key (``<cache>/datasets/<key>.pkl``).

Loaders wrap their build in :func:`cached_build` with a key made of everything
the result depends on (the dataset name, split, the input files' sha256, the
options); :data:`BUILD_VERSION` is part of every key.

Each entry is written atomically behind a header recording its size and CRC-32
(:func:`data.io.checked_writer`) and checked before it is unpickled: a truncated
or flipped entry is never loaded (a flipped byte inside a string unpickles
without complaint), it is removed with one ``warning:`` line and rebuilt.
"""

from __future__ import annotations

import pickle
from typing import Callable, TypeVar

from data.errors import UserError

T = TypeVar("T")

# Bump when a builder changes what it produces: it invalidates cached datasets.
BUILD_VERSION = "2"  # 2: sentence-level contexts are a RowParagraphs view
FORMAT = "crc32-header"  # how an entry is stored (entries of an earlier format are not looked for)


def cached_build(key_parts: list, build: Callable[[], T]) -> T:
    """Return ``build()``, cached on disk under a content key (pickled Dataset, checksummed)."""
    from data.io import Damaged, cache_dir, checked_writer, open_checked, os_reason, sha256_text, warn

    key = sha256_text(BUILD_VERSION, FORMAT, *key_parts)[:24]
    path = cache_dir("datasets") / f"{key}.pkl"
    if path.is_file():
        problem = None
        try:
            with open_checked(path) as f:
                return pickle.load(f)
        except Damaged as e:
            problem = str(e)
        except FileNotFoundError:  # removed meanwhile by another run that found it damaged
            pass
        except OSError as e:
            problem = os_reason(e)
        except Exception as e:  # sound bytes that do not unpickle (a class since renamed): rebuilt, never served
            problem = f"cannot be loaded: {type(e).__name__}"
        if problem is not None:
            warn(f"{path}: cached dataset is damaged ({problem}); removed and rebuilt")
            path.unlink(missing_ok=True)
    ds = build()
    try:
        with checked_writer(path) as f:
            pickle.dump(ds, f, protocol=pickle.HIGHEST_PROTOCOL)
    except UserError:
        pass  # an unwritable cache only costs time
    return ds
