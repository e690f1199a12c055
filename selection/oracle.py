"""``oracle``: read exactly down to the first relevant result (the fewest passages with full answer recall; needs
the gold).  Not an upper bound on EM: the reader may miss in that passage where a larger n finds the answer in a
later one."""

from __future__ import annotations

import numpy as np

from data.errors import UserError
from selection.base import Selector, check_ranks, check_scores


class Oracle(Selector):
    """n = 1-based rank of the first relevant result, K when none is in the top K.

    The smallest n that still contains a relevant passage: what an ideal
    selector would read, the reference the adaptive selectors are compared to.
    ``predict`` needs ``first_relevant_rank``.
    """

    method = "oracle"
    needs_gold = True

    def __init__(self):
        pass

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        scores = check_scores(scores)
        if first_relevant_rank is None:
            raise UserError("selector oracle: predict needs first_relevant_rank (the gold rank of the first relevant result)")
        ranks = check_ranks(first_relevant_rank, scores.shape[0])
        return np.clip(ranks, 1, scores.shape[1]).astype(np.int64)
