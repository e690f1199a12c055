"""``confidence[:τ]``: the reader in the loop: read in rank order, stop once the reader is confident.

Every other selector decides n from the retrieval scores before anything is
read.  This one decides it from the reader's evidence: passages are read in
rank order, and reading stops at the first n where

* ``signal="score"`` (default): the best answer score among the n passages read
  (the reader's span score, or its mix with the retriever's score when the run
  sets ``--mu``: the score the answer is chosen by) reaches the threshold t; or
* ``signal="margin"``: that best score leads the runner-up passage's by at
  least t (needs two passages read, so it never stops at n = 1);

and never beyond τ (nor beyond a question's real passages).  The passages not
read are reader time saved: :func:`pipeline.stages.read_until` reads one rank
at a time for every question still reading (a batch across questions, so the
reader stays efficient) and never reads past a question's stop.

The threshold is learned (``fit``) on the training split's reads, never the
evaluated split's: for each candidate t (quantiles of the signal on the
training reads) the stop n of every training question gives an EM (of the
answer chosen among its first n passages) and a mean n; the fitted t maximizes
``EM - cost * mean n`` (``cost`` in EM per passage; 0 maximizes EM, ties going
to the fewer passages read).  ``fit_metric`` fits on another answer metric
instead of EM (``fit_metric=has_answer`` for a generative reader whose answers
are sentences, where EM is near 0 at every n and every threshold ties).  A fixed threshold can be given instead
(``confidence:20,threshold=6.5``): then nothing is fitted.

This is the early-stopping idea of adaptive computation for open-domain QA
(e.g. Wu, Riedel, Minervini, Stenetorp 2020, "Don't Read Too Much Into It:
Adaptive Computation for Open-Domain Question Answering", EMNLP) with an
extractive reader's own span score as the stopping signal and a threshold
fitted for EM per passage read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from data.errors import UserError
from selection.base import Selector, check_integer, check_number, check_scores, valid_counts

DEFAULT_TAU = 20
SIGNALS = ("score", "margin")
CANDIDATES = 512  # thresholds tried when fitting (quantiles of the training signal)


def running_signal(answer_scores: np.ndarray, signal: str) -> np.ndarray:
    """``[Q, N]``: the stop signal after reading the first n passages (column n - 1); NaN where it is undefined."""
    scores = np.where(np.isfinite(answer_scores), answer_scores, -np.inf)
    best = np.maximum.accumulate(scores, axis=1)
    if signal == "score":
        return np.where(np.isfinite(best), best, np.nan)
    # runner-up: the second largest of the prefix (running top-2)
    second = np.full_like(best, -np.inf)
    top1 = np.full(scores.shape[0], -np.inf)
    top2 = np.full(scores.shape[0], -np.inf)
    for j in range(scores.shape[1]):
        s = scores[:, j]
        top2 = np.where(s > top1, top1, np.maximum(top2, s))
        top1 = np.maximum(top1, s)
        second[:, j] = top2
    margin = best - second
    return np.where(np.isfinite(margin), margin, np.nan)


class Confidence(Selector):
    """Adaptive n from the reader's own confidence, read in rank order (reader in the loop)."""

    method = "confidence"
    usage = "confidence[:τ]"
    learned = True
    reads_answers = True

    def __init__(self, tau: int = DEFAULT_TAU, signal: str = "score", cost: float = 0.0,
                 threshold: float | None = None, fit_questions: int = 500, fit_metric: str = "em"):
        self.tau = tau
        self.signal = signal
        self.cost = cost
        self.threshold = threshold
        self.fit_questions = fit_questions
        self.fit_metric = fit_metric

    @property
    def max_depth(self) -> int:
        return self._check()

    def _check(self) -> int:
        if self.signal not in SIGNALS:
            raise UserError(f"selector {self.spec}: signal must be one of {', '.join(SIGNALS)}")
        check_number(self, self.cost, "cost (EM per passage read)", 0.0, float("inf"), high_open=True)
        if self.threshold is not None:
            check_number(self, self.threshold, "threshold", -float("inf"), float("inf"), low_open=True, high_open=True)
        check_integer(self, self.fit_questions, "fit_questions", minimum=2)
        from eval.registry import ANSWER_METRICS, answer_metric_names

        fittable = [n for n in answer_metric_names(sweep=True) if ANSWER_METRICS.get(n).sweep == "cell"]
        if self.fit_metric not in fittable:
            raise UserError(f"selector {self.spec}: fit_metric must be an answer metric scored per n ({', '.join(fittable)})")
        return check_integer(self, self.tau, "τ")

    def needs_fit(self) -> bool:
        return self.threshold is None

    @property
    def threshold_(self) -> float:
        """The threshold in use: the fitted one, else the one given."""
        if hasattr(self, "fitted_threshold_"):
            return self.fitted_threshold_
        if self.threshold is not None:
            return float(self.threshold)
        raise UserError(f"selector {self.spec}: not fitted (fit it on the training split's reads, or give threshold=)")

    # -- the rule -------------------------------------------------------------
    def stop_points(self, retrieval_scores, answer_scores, n_read=None, threshold: float | None = None) -> np.ndarray:
        """Per question the n at which reading stops, given the passages read so far; 0 while undecided.

        ``answer_scores[q, j]`` is the score of passage j's answer (NaN or -inf where not read);
        ``n_read[q]`` how many leading passages of question q were read (default: all of the top τ).
        A question stops at the first n <= n_read where the rule holds, or once it has read
        ``min(τ, real passages)``.
        """
        tau = self._check()
        t = self.threshold_ if threshold is None else threshold
        retrieval = check_scores(retrieval_scores)
        answer = np.asarray(answer_scores, dtype=np.float64)[:, :tau]
        cap = np.minimum(valid_counts(retrieval[:, :tau]), min(tau, retrieval.shape[1]))
        n_read = cap if n_read is None else np.minimum(np.asarray(n_read, dtype=np.int64), cap)
        width = answer.shape[1]
        read = np.arange(width)[None, :] < n_read[:, None]
        sig = running_signal(np.where(read, answer, -np.inf), self.signal)
        holds = read & (np.nan_to_num(sig, nan=-np.inf) >= t)
        first = np.where(holds.any(axis=1), holds.argmax(axis=1) + 1, 0)
        return np.where(first > 0, first, np.where(n_read >= cap, cap, 0)).astype(np.int64)

    def predict(self, scores, first_relevant_rank=None, answer_scores=None) -> np.ndarray:
        """The stop n of every question when its top τ have been read (``answer_scores`` ``[Q, >=τ]``)."""
        if answer_scores is None:
            raise UserError(f"selector {self.spec} reads in the loop: predict needs the answer scores of the passages read")
        n = self.stop_points(scores, answer_scores)
        return np.maximum(n, 1)

    # -- fitting --------------------------------------------------------------
    def fit(self, scores, first_relevant_rank=None, answer_scores=None, correct=None) -> "Confidence":
        """Fit the threshold on training reads: ``answer_scores`` ``[Q, >=τ]`` and ``correct[q, n-1]``, the EM (or the
        ``fit_metric``: any score in [0, 1]) of the answer chosen among the first n passages.  A given ``threshold``
        is kept as is."""
        tau = self._check()
        if self.threshold is not None:
            return self
        if answer_scores is None or correct is None:
            raise UserError(f"selector {self.spec}: fitting needs the training split's reads (answer scores and EM per n)")
        scores = check_scores(scores)
        answer = np.asarray(answer_scores, dtype=np.float64)[:, :tau]
        correct = np.asarray(correct, dtype=np.float64)[:, :tau]
        if len(scores) < 2:
            raise UserError(f"selector {self.spec}: fitting needs at least 2 training questions, got {len(scores)}")
        sig = running_signal(answer, self.signal)
        values = sig[np.isfinite(sig)]
        if values.size == 0:
            raise UserError(f"selector {self.spec}: no training read gave a {self.signal} signal")
        candidates = np.unique(np.quantile(values, np.linspace(0, 1, CANDIDATES)))
        candidates = np.append(candidates, np.inf)  # "never stop early": read min(τ, real passages)
        rows = np.arange(len(scores))
        best = None
        for t in candidates:
            n = self.stop_points(scores, answer, threshold=float(t))
            em = float(np.nanmean(correct[rows, n - 1]))
            mean_n = float(n.mean())
            key = (em - float(self.cost) * mean_n, -mean_n)
            if best is None or key > best[0]:
                best = (key, float(t), em, mean_n)
        _, self.fitted_threshold_, self.train_em_, self.train_mean_n_ = best
        self.n_train_ = int(len(scores))
        return self

    def fitted_state(self) -> dict[str, Any]:
        if not hasattr(self, "fitted_threshold_"):
            return {}
        t = self.fitted_threshold_
        return {"threshold": t if np.isfinite(t) else "inf", "train_em": self.train_em_, "train_mean_n": self.train_mean_n_,
                "n_train": self.n_train_}

    def set_fitted_state(self, state: dict[str, Any]) -> None:
        if not state:
            return
        try:
            self.fitted_threshold_ = float(state["threshold"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"selector {self.spec}: bad fitted state ({e})") from None
        self.train_em_ = float(state.get("train_em", np.nan))
        self.train_mean_n_ = float(state.get("train_mean_n", np.nan))
        self.n_train_ = int(state.get("n_train", 0))
