"""``gap[:τ[,b]]``: cut the ranked list at its largest score gap, plus a buffer (Adaptive-k).

Taguchi, Maekawa & Bhutani (2025), "Efficient Context Selection for
Long-Context QA: No Tuning, No Iteration, Just Adaptive-k", EMNLP
(arXiv 2506.08479).  No training and one pass over the scores:

1. take the real (finite) scores of the top τ, best first: ``s_1 >= ... >= s_m``;
2. the gaps between neighbours are ``g_i = s_i - s_{i+1}`` for ``i = 1..m-1``;
   the last ``floor((m - 1) * tail)`` gaps are not considered (the flat tail of
   a long list holds many tiny, noisy gaps);
3. ``i*`` is the position of the largest considered gap; when several gaps are
   equally large the first (best-ranked) one wins, so a flat list (all gaps 0)
   cuts after the first result;
4. read ``n = i* + b`` passages (the results above the gap plus a buffer of
   ``b``), at most ``m``.

The defaults are those of the authors' QA experiments (their
``run_qa.sh``: largest-gap strategy, the last 10% of gaps ignored, a buffer
of 5).  There the list is every chunk of a long context; here it is the head
of a retrieval ranking, so τ bounds how far down a gap is looked for (and, with
the buffer, the most passages read: ``τ + b`` is never exceeded because n is
clipped to the m real results).  A query with a single result reads it.
Gaps are taken on the raw retrieval scores (cosine similarity in the paper;
BM25, dot products or fused scores here): the rule only compares gaps within
one list, so the score scale does not matter.
"""

from __future__ import annotations

import numpy as np

from selection.base import Selector, check_integer, check_number, check_scores, valid_counts

DEFAULT_TAU = 25
DEFAULT_BUFFER = 5
DEFAULT_TAIL = 0.1


class Gap(Selector):
    """Adaptive n at the largest gap between consecutive retrieval scores (Adaptive-k)."""

    method = "gap"
    usage = "gap[:τ[,b]]"

    def __init__(self, tau: int = DEFAULT_TAU, buffer: int = DEFAULT_BUFFER, tail: float = DEFAULT_TAIL):
        self.tau = tau
        self.buffer = buffer
        self.tail = tail

    @property
    def max_depth(self) -> int:
        return self._check()[0]

    def _check(self) -> tuple[int, int, float]:
        return (check_integer(self, self.tau, "τ"), check_integer(self, self.buffer, "the buffer b", minimum=0),
                check_number(self, self.tail, "tail", 0.0, 1.0, high_open=True))

    def cut_points(self, scores) -> np.ndarray:
        """Per query the number of results above the largest considered gap (``i*``), before the buffer."""
        tau, _, tail = self._check()
        top = check_scores(scores)[:, :tau]
        m = np.minimum(valid_counts(top), top.shape[1])
        if top.shape[1] < 2:
            return np.ones(len(top), dtype=np.int64)
        with np.errstate(invalid="ignore"):  # -inf - -inf in the padding: masked below
            gaps = top[:, :-1] - top[:, 1:]  # [Q, τ-1]; gap i lies between results i+1 and i+2 (1-based)
        # gaps considered: the first (m - 1) - floor((m - 1) * tail) of each row (at least one when m >= 2)
        considered = (m - 1) - np.floor((m - 1) * tail).astype(np.int64)
        considered = np.where(m >= 2, np.maximum(considered, 1), 0)
        inside = np.arange(gaps.shape[1])[None, :] < considered[:, None]
        masked = np.where(inside & np.isfinite(gaps), gaps, -np.inf)
        first_largest = masked.argmax(axis=1)  # argmax returns the first of equal maxima
        return np.where(considered > 0, first_largest + 1, 1).astype(np.int64)

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        tau, buffer, _ = self._check()
        scores = check_scores(scores)
        m = np.minimum(valid_counts(scores[:, :tau]), min(tau, scores.shape[1]))
        return np.clip(self.cut_points(scores) + buffer, 1, m).astype(np.int64)
