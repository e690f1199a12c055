"""Regret over corpus sizes and bootstrap confidence intervals over questions.

Regret follows Kratzwald & Feuerriegel (2018), "Adaptive Document Retrieval
for Deep Question Answering", EMNLP, §6 (robustness to the corpus size): a
system's regret at one corpus size is the gap between the best system's exact
match at that size and its own,

    gap_m(s) = max_{m' in reference} EM_{m'}(s) - EM_m(s)      (>= 0 for reference systems),

and its regret is the average gap over the evaluated sizes.  Sizes are
weighted by the span of corpus sizes each one stands for (trapezoid rule):
with sizes ``s_1 < ... < s_K``

    w_1 = (s_2 - s_1) / 2,  w_k = (s_{k+1} - s_{k-1}) / 2,  w_K = (s_K - s_{K-1}) / 2,
    regret_m = sum_k w_k gap_m(s_k) / (s_K - s_1),

which is the area between the piecewise-linear curves of the best system and
of system m, divided by the size range: the mean gap over a corpus size drawn
uniformly from ``[s_1, s_K]``.  Evenly spaced sizes give the plain mean with
half weight at both ends; a single size gives its gap.  ``weighting="uniform"``
gives the unweighted mean over the evaluated sizes.  ``weighting="log-trapezoid"``
applies the same rule to ``log s``: the mean gap over a size drawn log-uniformly
from the range, which gives every decade the same weight (sizes from 10k to 21M
on a log axis; plain trapezoid weights would give the last decade 90% of it).

The reference set (whose per-size maximum is "the best") is every system
given unless ``reference`` says otherwise; an oracle that reads the gold is
normally left out of it (it is not a system one could run).

Bootstrap: questions are resampled with replacement (``n_boot`` seeded
multinomial weight vectors); one weight vector is shared by every size, system
and n, so the replicates are paired and the regret's interval accounts for
the correlation between sizes (the same questions are asked at every size).
Intervals are percentile intervals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.errors import UserError

WEIGHTINGS = ("trapezoid", "log-trapezoid", "uniform")


def size_weights(sizes: Sequence[float], weighting: str = "trapezoid") -> np.ndarray:
    """Weights of the corpus sizes (summing to 1); ``sizes`` strictly increasing."""
    s = np.asarray(sizes, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise UserError("regret: need at least one corpus size")
    if np.any(np.diff(s) <= 0):
        raise UserError(f"regret: corpus sizes must be strictly increasing, got {s.tolist()}")
    if weighting not in WEIGHTINGS:
        raise UserError(f"regret weighting {weighting!r}: use one of {', '.join(WEIGHTINGS)}")
    if weighting == "uniform" or s.size == 1:
        return np.full(s.size, 1.0 / s.size)
    if weighting == "log-trapezoid":
        if s[0] <= 0:
            raise UserError(f"regret: log-trapezoid weights need positive corpus sizes, got {s.tolist()}")
        s = np.log(s)
    left = np.concatenate([[s[0]], s[:-1]])
    right = np.concatenate([s[1:], [s[-1]]])
    w = (right - left) / 2.0
    return w / (s[-1] - s[0])


def gaps(table, reference=None) -> np.ndarray:
    """Per size, best reference score minus each system's score: ``[..., K, M]`` -> same shape.

    ``table[..., k, m]`` is system m's score at size k; ``reference`` is a bool
    mask ``[M]`` of the systems the best is taken over (default: all).
    """
    t = np.asarray(table, dtype=np.float64)
    if t.ndim < 2:
        raise UserError(f"regret: table must be [sizes, systems], got shape {t.shape}")
    ref = np.ones(t.shape[-1], dtype=bool) if reference is None else np.asarray(reference, dtype=bool)
    if ref.shape != (t.shape[-1],) or not ref.any():
        raise UserError("regret: the reference mask must name at least one of the systems")
    best = t[..., ref].max(axis=-1, keepdims=True)
    return best - t


def regret(table, sizes, reference=None, weighting: str = "trapezoid") -> np.ndarray:
    """Regret of every system: ``table [..., K, M]`` (score per size and system) -> ``[..., M]``."""
    t = np.asarray(table, dtype=np.float64)
    w = size_weights(sizes, weighting)
    if t.shape[-2] != w.size:
        raise UserError(f"regret: table has {t.shape[-2]} sizes but {w.size} sizes were given")
    return np.einsum("...km,k->...m", gaps(t, reference), w)


def bootstrap_weights(n_questions: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, Q]`` float32 resampling weights (multinomial counts / Q): replicate mean = weights @ x."""
    if n_questions < 1:
        raise UserError("bootstrap: no questions")
    if n_boot < 1:
        raise UserError(f"bootstrap: n_boot must be >= 1 (got {n_boot})")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 11]))
    counts = rng.multinomial(n_questions, np.full(n_questions, 1.0 / n_questions), size=n_boot)
    return (counts / n_questions).astype(np.float32)


def bootstrap_means(per_question, weights: np.ndarray) -> np.ndarray:
    """Replicate means ``[B, ...]`` of ``per_question [Q, ...]`` under ``weights [B, Q]``."""
    x = np.asarray(per_question, dtype=np.float64)
    if x.shape[0] != weights.shape[1]:
        raise UserError(f"bootstrap: {x.shape[0]} questions but weights for {weights.shape[1]}")
    flat = x.reshape(x.shape[0], -1)
    return (weights.astype(np.float64) @ flat).reshape((weights.shape[0],) + x.shape[1:])


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) percentile interval over the first axis of ``replicates``."""
    if not 0 < level < 1:
        raise UserError(f"confidence level {level}: must be in (0, 1)")
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(np.asarray(replicates, dtype=np.float64), [alpha, 1.0 - alpha], axis=0)
    return low, high
