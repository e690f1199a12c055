"""``top:N``: read a fixed number of passages, the usual static retrieve-then-read setting."""

from __future__ import annotations

import numpy as np

from data.errors import UserError
from selection.base import Selector, check_scores


class TopN(Selector):
    """n = N for every query, clipped to K (the number of results retrieved).  ``top:0`` reads nothing: the
    closed-book baseline of a generative reader (an extractive reader needs a passage: n >= 1)."""

    method = "top"
    usage = "top:N"

    def __init__(self, n: int = 1):
        self.n = n

    @property
    def max_depth(self) -> int:
        return self._check()

    def _check(self) -> int:
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 0:
            raise UserError(f"selector {self.spec}: n must be an integer >= 0 (0: closed book, generative readers only)")
        return int(self.n)

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        n = self._check()
        scores = check_scores(scores)
        return np.full(scores.shape[0], min(n, scores.shape[1]), dtype=np.int64)
