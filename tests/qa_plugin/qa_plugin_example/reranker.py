"""A re-ranker kind from a plugin: scores a (question, passage) pair by the question words the passage holds."""

from __future__ import annotations

import re

import numpy as np


class SharedWordsScorer:
    """``--rerank shared-words:any[min_length=4]``: the count of distinct question words (at least ``min_length``
    letters, lower-cased) found in the passage.  ``model`` is only a name here."""

    def __init__(self, model: str, min_length: int = 3):
        self.model = model
        self.min_length = min_length

    def _words(self, text: str) -> set[str]:
        return {w for w in re.findall(r"\w+", text.lower()) if len(w) >= self.min_length}

    def identity(self) -> str:
        return f"shared-words-v1:{self.min_length}"

    def facts(self) -> dict:
        return {"model": self.model, "min_length": self.min_length}

    def load(self) -> "SharedWordsScorer":
        return self

    def score_pairs(self, questions, passages) -> np.ndarray:
        return np.array([len(self._words(q) & self._words(p)) for q, p in zip(questions, passages)], dtype=np.float32)
