"""``threshold:θ[,τ]``: read passages until their cumulative confidence reaches θ.

Kratzwald & Feuerriegel (2018), "Adaptive Document Retrieval for Deep Question
Answering", EMNLP, §4.1 (threshold-based retrieval): the retrieval scores of
the top-τ results are normalized into confidences, and the results are taken
in rank order until the sum of their confidences reaches the threshold θ:

    n = min { m : c_1 + ... + c_m >= θ },   1 <= n <= min(τ, K).

Normalization: softmax over the top-τ scores by default (defined for scores of
any sign and scale: BM25, dot products, cosine, fused scores).  The authors'
public notebook (HowTo.ipynb of bernhard2202/adaptive-ir-for-qa) shows only
the ordinal model, whose optional score normalization divides the non-negative
TF-IDF scores by their sum; that is available here as ``normalization="sum"``.
Softmax confidences depend on the score scale (BM25 scores in the tens give a
peaked distribution, cosine similarities in [0, 1] a flat one), so θ is tuned
per retriever.  Non-finite scores (padding) get confidence 0 and n never goes
past a query's real results.
"""

from __future__ import annotations

import numpy as np

from data.errors import UserError
from selection.base import NORMALIZATIONS, Selector, check_scores, normalize_scores, valid_counts

DEFAULT_TAU = 25
# cumulative sums of float confidences may land a hair under θ (0.1 + 0.2 < 0.3)
_TOLERANCE = 1e-9


class Threshold(Selector):
    """Adaptive n from cumulative normalized retrieval confidence (paper §4.1)."""

    method = "threshold"
    usage = "threshold:θ[,τ]"

    def __init__(self, theta: float = 0.8, tau: int = DEFAULT_TAU, normalization: str = "softmax"):
        self.theta = theta
        self.tau = tau
        self.normalization = normalization

    @property
    def max_depth(self) -> int:
        return self._check()[1]

    def _check(self) -> tuple[float, int]:
        theta, tau = self.theta, self.tau
        if isinstance(theta, bool) or not isinstance(theta, (int, float, np.floating, np.integer)) or not 0 <= theta <= 1:
            raise UserError(f"selector {self.spec}: θ must be a number in [0, 1]")
        if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
            raise UserError(f"selector {self.spec}: τ must be an integer >= 1")
        if self.normalization not in NORMALIZATIONS:
            raise UserError(f"selector {self.spec}: normalization must be one of {', '.join(NORMALIZATIONS)}")
        return float(theta), int(tau)

    def confidences(self, scores) -> np.ndarray:
        """The normalized top-τ confidences [Q, τ] that the cut-off is taken on."""
        _, tau = self._check()
        return normalize_scores(check_scores(scores), tau, self.normalization)

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        theta, tau = self._check()
        scores = check_scores(scores)
        cap = np.minimum(valid_counts(scores[:, :tau]), min(tau, scores.shape[1]))
        cumulative = np.cumsum(normalize_scores(scores, tau, self.normalization), axis=1)
        # n = 1 + number of leading prefixes still short of θ
        short = cumulative < theta - _TOLERANCE
        n = 1 + short.sum(axis=1)
        return np.clip(n, 1, cap).astype(np.int64)
