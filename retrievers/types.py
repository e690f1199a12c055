"""The ranking type every retriever returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Ranking:
    """Top-K results for Q queries.

    ``ids[q, j]`` is the corpus row of the j-th result of query q (``-1`` pads
    rows that have fewer than K results) and ``scores[q, j]`` its score; rows
    are sorted by descending score.
    """

    ids: np.ndarray  # int64 [Q, K]
    scores: np.ndarray  # float32 [Q, K]

    def __post_init__(self) -> None:
        self.ids = np.asarray(self.ids, dtype=np.int64)
        self.scores = np.asarray(self.scores, dtype=np.float32)
        if self.ids.shape != self.scores.shape or self.ids.ndim != 2:
            raise ValueError(f"ids {self.ids.shape} and scores {self.scores.shape} must be equal [Q, K] shapes")

    @property
    def depth(self) -> int:
        return self.ids.shape[1]

    def __len__(self) -> int:
        return self.ids.shape[0]

    def top(self, k: int) -> "Ranking":
        return Ranking(self.ids[:, :k], self.scores[:, :k])

    def subset(self, rows) -> "Ranking":
        rows = np.asarray(list(rows), dtype=np.int64)
        return Ranking(self.ids[rows], self.scores[rows])
