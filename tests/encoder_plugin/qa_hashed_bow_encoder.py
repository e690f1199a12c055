"""A third-party encoder plugin for qa-retrieval-eval (the example the docs point to).

A hashed bag of words (the "hashing trick", Weinberger et al. 2009, "Feature
Hashing for Large Scale Multitask Learning"): every lower-cased word adds
``1 + log(tf)`` to bucket ``crc32(word) % dim``, rows L2-normalised.  It is
registered in ``qa_hashed_bow_encoder-0.1.dist-info/entry_points.txt`` under
the group ``qa_retrieval_eval.encoders`` as ``hashed-bow``; a real package
declares the same in its ``pyproject.toml``::

    [project.entry-points."qa_retrieval_eval.encoders"]
    hashed-bow = "qa_hashed_bow_encoder:HashedBowEncoder"

Nothing here imports qa-retrieval-eval: a plugin only needs the interface.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class HashedBowEncoder:
    name = "hashed-bow"

    def __init__(self, dim: int = 1024, model: str = "hashed-bow"):
        self.dimension = int(dim)

    def identity(self) -> str:
        return f"hashed-bow-v1:dim={self.dimension}"

    def info(self) -> dict:
        return {"plugin": "qa_hashed_bow_encoder", "dim": self.dimension}

    def _encode(self, texts) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word, tf in Counter(_WORD.findall(text.lower())).items():
                out[i, zlib.crc32(word.encode("utf-8")) % self.dimension] += 1.0 + math.log(tf)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    def encode_queries(self, texts, *, show_progress: bool = True) -> np.ndarray:
        return self._encode(list(texts))

    def encode_passages(self, texts, *, show_progress: bool = True) -> np.ndarray:
        return self._encode(list(texts))
