"""``ordinal[:τ]``: predict the rank of the first relevant passage by ordinal ridge regression.

Kratzwald & Feuerriegel (2018), "Adaptive Document Retrieval for Deep Question
Answering", EMNLP, §4.2 (ordinal regression): features are the normalized
retrieval scores of the top-τ results, the label is the 1-based rank of the
first relevant result (τ when none is in the top τ), the model is ordinal
ridge regression with alpha = 1, and the number of passages read is the
predicted rank plus a linear offset b (paper: b = 1, τ = 25 for documents;
their notebook suggests τ = 250 for paragraphs):

    n = clip(round(w·x + w0) clipped to [0, max label] + b, 1, min(τ, K)).

The authors' notebook fits ``mord.OrdinalRidge(alpha=1.0)``.  mord's
OrdinalRidge is scikit-learn ridge regression on the integer labels whose
prediction is rounded and clipped to ``[0, max training label]``; we fit with
mord when it is installed (else with scikit-learn's ``Ridge``, the same
estimator), keep the coefficients, and predict with that rounding and clipping
in numpy, so the fitted model is saved as plain numbers in the run.

Features are zero-padded beyond K or beyond a query's real results, as in the
notebook.  Normalization is softmax by default, ``normalization="sum"``
reproduces the notebook's division by the sum (see ``selection.threshold``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from data.errors import UserError
from selection.base import NORMALIZATIONS, Selector, check_ranks, check_scores, normalize_scores

DEFAULT_TAU = 25
DEFAULT_OFFSET = 1
DEFAULT_ALPHA = 1.0


def _fit_ridge(features: np.ndarray, labels: np.ndarray, alpha: float) -> tuple[np.ndarray, float, str]:
    """(coefficients, intercept, backend) of ordinal ridge regression."""
    try:
        import mord

        model = mord.OrdinalRidge(alpha=alpha, fit_intercept=True)
        model.fit(features, labels)
        backend = f"mord {getattr(mord, '__version__', '')}".strip()
    except ImportError:
        from sklearn.linear_model import Ridge

        model = Ridge(alpha=alpha, fit_intercept=True).fit(features, labels)
        backend = "sklearn Ridge"
    coef = np.asarray(model.coef_, dtype=np.float64).reshape(-1)
    return coef, float(np.asarray(model.intercept_).reshape(())), backend


class Ordinal(Selector):
    """Adaptive n from a learned first-relevant-rank predictor (paper §4.2)."""

    method = "ordinal"
    usage = "ordinal[:τ]"
    learned = True

    def __init__(
        self,
        tau: int = DEFAULT_TAU,
        offset: int = DEFAULT_OFFSET,
        alpha: float = DEFAULT_ALPHA,
        normalization: str = "softmax",
    ):
        self.tau = tau
        self.offset = offset
        self.alpha = alpha
        self.normalization = normalization

    @property
    def max_depth(self) -> int:
        return self._check()

    def _check(self) -> int:
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, np.integer)) or self.tau < 1:
            raise UserError(f"selector {self.spec}: τ must be an integer >= 1")
        if isinstance(self.offset, bool) or not isinstance(self.offset, (int, np.integer)):
            raise UserError(f"selector {self.spec}: offset b must be an integer, got {self.offset!r}")
        if not isinstance(self.alpha, (int, float, np.integer, np.floating)) or not self.alpha > 0:
            raise UserError(f"selector {self.spec}: alpha must be > 0, got {self.alpha!r}")
        if self.normalization not in NORMALIZATIONS:
            raise UserError(f"selector {self.spec}: normalization must be one of {', '.join(NORMALIZATIONS)}")
        return int(self.tau)

    def features(self, scores) -> np.ndarray:
        """The model input: normalized top-τ scores, zero-padded, float64 [Q, τ]."""
        tau = self._check()
        return normalize_scores(check_scores(scores), tau, self.normalization)

    def fit(self, scores, first_relevant_rank) -> "Ordinal":
        tau = self._check()
        scores = check_scores(scores)
        ranks = check_ranks(first_relevant_rank, scores.shape[0])
        if scores.shape[0] < 2:
            raise UserError(f"selector {self.spec}: fitting needs at least 2 queries, got {scores.shape[0]}")
        labels = np.minimum(ranks, tau)
        coef, intercept, backend = _fit_ridge(self.features(scores), labels, float(self.alpha))
        self.coef_ = coef
        self.intercept_ = intercept
        self.label_max_ = int(labels.max())
        self.n_train_ = int(scores.shape[0])
        self.backend_ = backend
        return self

    def predict_rank(self, scores) -> np.ndarray:
        """Predicted first-relevant rank (mord's rounding and clipping to [0, max label])."""
        if not hasattr(self, "coef_"):
            raise UserError(f"selector {self.spec}: not fitted (fit it on training queries or load a fitted one)")
        raw = self.features(scores) @ self.coef_ + self.intercept_
        return np.clip(np.round(raw), 0, self.label_max_).astype(np.int64)

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        tau = self._check()
        scores = check_scores(scores)
        n = self.predict_rank(scores) + int(self.offset)
        return np.clip(n, 1, min(tau, scores.shape[1])).astype(np.int64)

    def fitted_state(self) -> dict[str, Any]:
        if not hasattr(self, "coef_"):
            return {}
        return {
            "coef": [float(c) for c in self.coef_],
            "intercept": float(self.intercept_),
            "label_max": self.label_max_,
            "n_train": self.n_train_,
            "backend": self.backend_,
        }

    def set_fitted_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        try:
            coef = np.asarray(state["coef"], dtype=np.float64)
            intercept = float(state["intercept"])
            label_max = int(state["label_max"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"selector {self.spec}: bad fitted state ({e})") from None
        if coef.shape != (self._check(),):
            raise UserError(f"selector {self.spec}: fitted coefficients have shape {coef.shape}, expected ({self.tau},)")
        self.coef_ = coef
        self.intercept_ = intercept
        self.label_max_ = label_max
        self.n_train_ = int(state.get("n_train", 0))
        self.backend_ = str(state.get("backend", ""))
