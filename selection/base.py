"""What every passage-count selector shares: the estimator protocol and score kernels.

A selector decides, per query, how many of the top-K retrieved passages the
reader reads.  It is a small scikit-learn-style estimator:

* plain constructor parameters, no work in ``__init__``;
* ``fit(scores [Q, K], first_relevant_rank [Q]) -> self`` (a no-op for the
  unlearned ones); ``first_relevant_rank`` is the 1-based rank of the first
  relevant result, and K (or anything larger) when there is none;
* ``predict(scores [Q, K], first_relevant_rank=None) -> int64 [Q]`` with
  values in ``1..K`` (only the oracle reads ``first_relevant_rank``);
* ``to_dict()`` / ``selector_from_dict()``: JSON-able parameters *and* fitted
  state, saved with a run so it can be reloaded and re-applied exactly.

Scores are rows sorted by descending score, as in ``retrievers.types.Ranking``;
non-finite scores (NaN, -inf: padding where a query has fewer than K results)
count as "no result".
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from data.errors import UserError


class Selector:
    """Base class; subclasses set ``method`` and implement ``predict``."""

    method: ClassVar[str] = ""

    # -- estimator protocol ---------------------------------------------------
    def fit(self, scores: np.ndarray, first_relevant_rank: np.ndarray) -> "Selector":
        check_scores(scores)
        check_ranks(first_relevant_rank, len(scores))
        return self

    def predict(self, scores: np.ndarray, first_relevant_rank: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def _check(self):
        """Validate constructor parameters (UserError naming the spec); subclasses extend."""
        return None

    @property
    def spec(self) -> str:
        """The ``parse_selector`` string that builds this selector (unfitted)."""
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        raise NotImplementedError

    def fitted_state(self) -> dict[str, Any]:
        """JSON-able fitted parameters (empty for unlearned selectors)."""
        return {}

    def set_fitted_state(self, state: dict[str, Any]) -> None:
        if state:
            raise UserError(f"selector {self.spec}: unexpected fitted state {sorted(state)}")

    # -- persistence ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "spec": self.spec, "params": self.get_params(), "fitted": self.fitted_state()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Selector":
        from selection.parse import selector_from_dict

        selector = selector_from_dict(d)
        if cls is not Selector and not isinstance(selector, cls):
            raise UserError(f"selector dict has method {d.get('method')!r}, expected {cls.method!r}")
        return selector

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def check_scores(scores) -> np.ndarray:
    """``scores`` as a float64 [Q, K] array with K >= 1 (UserError otherwise)."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise UserError(f"retrieval scores must be a [queries, K>=1] array, got shape {arr.shape}")
    return arr


def check_ranks(first_relevant_rank, n_queries: int) -> np.ndarray:
    """1-based ranks of the first relevant result as int64 [Q] (UserError otherwise)."""
    ranks = np.asarray(first_relevant_rank)
    if ranks.shape != (n_queries,):
        raise UserError(f"first_relevant_rank must have shape ({n_queries},), got {ranks.shape}")
    if ranks.size and (not np.issubdtype(ranks.dtype, np.number) or np.any(ranks != np.round(ranks))):
        raise UserError("first_relevant_rank must hold integer ranks (1-based; K when none is relevant)")
    ranks = ranks.astype(np.int64)
    if ranks.size and ranks.min() < 1:
        raise UserError(
            f"first_relevant_rank {int(ranks.min())}: ranks are 1-based (use K when no result is relevant)"
        )
    return ranks


def valid_counts(scores: np.ndarray) -> np.ndarray:
    """Per row, how many leading scores are finite (real results), at least 1."""
    finite = np.isfinite(scores)
    # results are a prefix of the row: count until the first non-finite entry
    leading = np.where(finite.all(axis=1), scores.shape[1], np.argmin(finite, axis=1))
    return np.maximum(leading, 1).astype(np.int64)


NORMALIZATIONS = ("softmax", "sum")


def normalize_scores(scores: np.ndarray, tau: int, normalization: str = "softmax") -> np.ndarray:
    """Confidences of the top-``tau`` results: float64 [Q, tau], each row summing to 1.

    ``softmax``: ``exp(s_i - max s) / sum_j exp(s_j - max s)`` over the row's
    real (finite) results among the first ``tau``; ``sum``: ``s_i / sum_j s_j``
    (the normalization of Kratzwald & Feuerriegel's public notebook, for
    non-negative scores such as TF-IDF or BM25).  Columns beyond K or beyond a
    row's real results are 0, the zero padding of the paper's notebook.
    """
    if normalization not in NORMALIZATIONS:
        raise UserError(f"score normalization {normalization!r}: use one of {', '.join(NORMALIZATIONS)}")
    top = scores[:, :tau]
    q, k = top.shape
    n_valid = valid_counts(top)
    mask = np.arange(k)[None, :] < n_valid[:, None]
    mask &= np.isfinite(top)
    out = np.zeros((q, tau), dtype=np.float64)
    if q == 0:
        return out
    if normalization == "softmax":
        safe = np.where(mask, top, -np.inf)
        row_max = safe.max(axis=1, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        weights = np.where(mask, np.exp(np.where(mask, top, 0.0) - row_max), 0.0)
    else:
        if np.any(mask & (top < 0)):
            raise UserError("score normalization 'sum' needs non-negative retrieval scores; use 'softmax'")
        weights = np.where(mask, top, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    # a row of all-zero scores (sum normalization): spread evenly over its real results
    even = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    out[:, :k] = np.where(total > 0, weights / np.where(total > 0, total, 1.0), even)
    return out
