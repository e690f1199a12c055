"""``rlt[:τ[,λ]]``: supervised ranked-list truncation that maximizes expected utility.

The ranked-list truncation (RLT) line cuts a ranking where a learned model
expects the best trade-off between what is kept and what it costs: BiCut
(Lien, Cohen & Croft 2019, ICTIR) classifies every position as "cut here or
go on"; Choppy (Bahri et al. 2020, SIGIR) and AttnCut (Wu et al. 2021, AAAI)
predict a distribution over cut positions and train it to maximize the
expected metric of the cut.  Meng et al. (2024), "Ranked List Truncation: From
Retrieval to Re-ranking", SIGIR (code: ChuanMeng/RLT4Reranking), compare these
against fixed depths in a retrieve-then-re-rank pipeline and find a fixed depth
hard to beat; this selector lets that finding be checked for reading.

The neural encoders of those methods need thousands of training lists to beat
a linear model on a handful of score features; we keep their objective and
replace the encoder by a per-position logistic model (the "simple model"
baseline: fitted in seconds on a few thousand training questions):

* label of position k of a query: the first answer-bearing passage lies within
  the top k (``first_relevant_rank <= k``), i.e. reading k passages can find the
  answer;
* features of position k: its score, its softmax confidence and the cumulative
  confidence of the top k, the score drops from the top and to the next result,
  the largest drop between neighbours within the top k (all over the query's
  top τ), log k and k / τ;
* ``P(first relevant <= k)`` from a logistic regression (scikit-learn,
  standardized features, L2, unweighted so the probabilities stay calibrated),
  made monotone in k by a running maximum (a first relevant rank within k is
  within k + 1);
* the cut maximizes the expected utility ``P(first relevant <= k) - λ·k``: λ is
  what one more passage read costs, in units of the probability of having read
  an answer-bearing passage (λ = 0.01: read on while the next passage adds at
  least one point of answer recall).

Non-finite scores (padding) are never read past; a query with one result reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from data.errors import UserError
from selection.base import Selector, check_integer, check_number, check_ranks, check_scores, normalize_scores, valid_counts

DEFAULT_TAU = 25
DEFAULT_COST = 0.01
FEATURES = ("score", "confidence", "cumulative_confidence", "drop_from_top", "drop_to_next", "largest_drop_above",
            "log_rank", "relative_rank")


def position_features(scores: np.ndarray, tau: int) -> tuple[np.ndarray, np.ndarray]:
    """``[Q, τ, F]`` features of every position of the top τ (see the module docstring) and the ``[Q]`` real counts."""
    top = scores[:, :tau]
    q, width = top.shape
    m = np.minimum(valid_counts(top), width)
    if width:
        m = np.where(np.isfinite(top[:, 0]), m, 0)  # a query that retrieved nothing has no positions
    real = np.arange(width)[None, :] < m[:, None]
    filled = np.where(real, top, 0.0)
    last = filled[np.arange(q), np.maximum(m - 1, 0)][:, None]
    filled = np.where(real, filled, last)  # padding repeats the last real score: drops beyond it are 0
    confidence = np.zeros((q, tau))
    confidence[:, :width] = normalize_scores(top, width, "softmax")[:, :width]
    confidence[m == 0] = 0.0
    out = np.zeros((q, tau, len(FEATURES)))
    out[:, :width, 0] = filled
    out[:, :, 1] = confidence
    out[:, :, 2] = np.cumsum(confidence, axis=1)
    out[:, :width, 3] = filled[:, :1] - filled
    out[:, : width - 1, 4] = filled[:, :-1] - filled[:, 1:]
    # the largest drop between two results both within the top k (0 at k = 1)
    out[:, 1:width, 5] = np.maximum.accumulate(filled[:, :-1] - filled[:, 1:], axis=1)
    out[:, width:, 5] = out[:, width - 1 : width, 5]
    ranks = np.arange(1, tau + 1, dtype=np.float64)
    out[:, :, 6] = np.log(ranks)[None, :]
    out[:, :, 7] = (ranks / tau)[None, :]
    return out, m


class Truncation(Selector):
    """Adaptive n at the cut of highest expected utility under a learned per-position model (RLT)."""

    method = "rlt"
    usage = "rlt[:τ[,λ]]"
    learned = True

    def __init__(self, tau: int = DEFAULT_TAU, cost: float = DEFAULT_COST, C: float = 1.0):
        self.tau = tau
        self.cost = cost
        self.C = C

    @property
    def max_depth(self) -> int:
        return self._check()

    def _check(self) -> int:
        check_number(self, self.cost, "the cost λ of a passage", 0.0, 1.0, high_open=True)
        check_number(self, self.C, "C (inverse L2 strength)", 0.0, float("inf"), low_open=True, high_open=True)
        return check_integer(self, self.tau, "τ")

    def fit(self, scores, first_relevant_rank) -> "Truncation":
        from sklearn.linear_model import LogisticRegression

        tau = self._check()
        scores = check_scores(scores)
        ranks = check_ranks(first_relevant_rank, scores.shape[0])
        if scores.shape[0] < 2:
            raise UserError(f"selector {self.spec}: fitting needs at least 2 queries, got {scores.shape[0]}")
        feats, m = position_features(scores, tau)
        inside = np.arange(tau)[None, :] < m[:, None]
        x = feats[inside]
        y = (ranks[:, None] <= np.arange(1, tau + 1)[None, :])[inside]
        self.mean_ = x.mean(axis=0)
        self.scale_ = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
        if y.all() or not y.any():  # one class only: the probability is that constant
            self.coef_ = np.zeros(x.shape[1])
            self.intercept_ = 40.0 if y.all() else -40.0
        else:
            model = LogisticRegression(C=float(self.C), max_iter=1000)  # unweighted: the utility needs calibrated probabilities
            model.fit((x - self.mean_) / self.scale_, y)
            self.coef_ = model.coef_.reshape(-1).astype(np.float64)
            self.intercept_ = float(model.intercept_[0])
        self.n_train_ = int(scores.shape[0])
        return self

    def probabilities(self, scores) -> np.ndarray:
        """``[Q, τ]`` P(first answer-bearing passage within the top k), monotone in k; 0 beyond a query's results."""
        if not hasattr(self, "coef_"):
            raise UserError(f"selector {self.spec}: not fitted (fit it on training queries or load a fitted one)")
        tau = self._check()
        feats, m = position_features(check_scores(scores), tau)
        logits = ((feats - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        p = np.maximum.accumulate(1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60))), axis=1)
        return np.where(np.arange(tau)[None, :] < m[:, None], p, -np.inf)

    def predict(self, scores, first_relevant_rank=None) -> np.ndarray:
        tau = self._check()
        scores = check_scores(scores)
        utility = self.probabilities(scores) - float(self.cost) * np.arange(1, tau + 1)[None, :]
        n = utility.argmax(axis=1) + 1  # the first (shortest) cut among equal utilities
        return np.clip(n, 1, min(tau, scores.shape[1])).astype(np.int64)

    def fitted_state(self) -> dict[str, Any]:
        if not hasattr(self, "coef_"):
            return {}
        return {"features": list(FEATURES), "mean": self.mean_.tolist(), "scale": self.scale_.tolist(),
                "coef": self.coef_.tolist(), "intercept": float(self.intercept_), "n_train": self.n_train_}

    def set_fitted_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        try:
            arrays = [np.asarray(state[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
            intercept = float(state["intercept"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"selector {self.spec}: bad fitted state ({e})") from None
        if any(a.shape != (len(FEATURES),) for a in arrays) or list(state.get("features", FEATURES)) != list(FEATURES):
            raise UserError(f"selector {self.spec}: fitted state has other features than {', '.join(FEATURES)}")
        self.mean_, self.scale_, self.coef_ = arrays
        self.intercept_ = intercept
        self.n_train_ = int(state.get("n_train", 0))
