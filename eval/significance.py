"""Confidence intervals and paired significance tests over per-query scores, all from scipy.stats.

* :func:`bootstrap_ci`: percentile bootstrap interval of a mean (Efron &
  Tibshirani 1993), ``scipy.stats.bootstrap(method="percentile")``; the BCa
  method needs a jackknife that is O(Q^2) memory on 10k questions.
* :func:`paired_test` on two systems' scores for the same queries:
  ``paired-t`` (Student's paired t-test, ``scipy.stats.ttest_rel``),
  ``randomization`` (Fisher's paired randomization test: random sign flips of
  the per-query differences, ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"``; Smucker, Allan & Carterette 2007, "A
  Comparison of Statistical Significance Tests for Information Retrieval
  Evaluation", recommend it for IR) and ``bootstrap`` (the paired bootstrap
  test of Efron & Tibshirani §16.4: resample the differences with
  ``scipy.stats.bootstrap``, p = share of centred resampled means at least as
  far from 0 as the observed mean).  All two-sided.
* :func:`correct` adjusts a family of p-values: Holm (1979) step-down or
  Bonferroni.

ranx (Bassani 2022) offers the same tests, but pulls in numba; scipy is
already a dependency and is the reference the tests compare with.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

TESTS = ("paired-t", "randomization", "bootstrap")
CORRECTIONS = ("holm", "bonferroni", "none")


def bootstrap_ci(values, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (NaNs dropped)."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1 or np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                          vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean_diff(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def paired_test(a, b, test: str = "paired-t", n_resamples: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value that systems ``a`` and ``b`` (scores of the same queries, aligned) have equal means."""
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores must be two 1-d arrays of one length, got {a.shape} and {b.shape}")
    d = a - b
    if a.size < 2 or np.all(d == 0):
        return 1.0
    if test == "paired-t":
        return float(stats.ttest_rel(a, b).pvalue)
    if test == "randomization":
        res = stats.permutation_test((a, b), _mean_diff, permutation_type="samples", n_resamples=n_resamples,
                                     alternative="two-sided", vectorized=True, rng=np.random.default_rng(seed))
        return float(res.pvalue)
    if test == "bootstrap":
        res = stats.bootstrap((d,), np.mean, n_resamples=n_resamples, method="percentile", vectorized=True,
                              rng=np.random.default_rng(seed))
        centred = res.bootstrap_distribution - d.mean()
        return float(np.mean(np.abs(centred) >= abs(d.mean())))
    raise ValueError(f"unknown test {test!r}; use one of {', '.join(TESTS)}")


def correct(pvalues: Sequence[float], method: str = "holm") -> list[float]:
    """Family-wise adjusted p-values: Holm's step-down, Bonferroni, or none."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if method == "none" or m == 0:
        return p.tolist()
    if method == "bonferroni":
        return np.minimum(p * m, 1.0).tolist()
    if method == "holm":
        order = np.argsort(p, kind="stable")
        adjusted = np.empty(m)
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p[i]))
            adjusted[i] = running
        return adjusted.tolist()
    raise ValueError(f"unknown correction {method!r}; use one of {', '.join(CORRECTIONS)}")
