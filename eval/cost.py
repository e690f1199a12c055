"""What reading costs: the Pareto front of EM against passages read, and the saving of an adaptive
selector over the fixed n that reaches its EM.

A selector that reads 14 passages per question and one that reads 3 may reach
the same EM; the second is the better choice when reading is what the time goes
to (it is, for an extractive reader: its time grows with the passages read).
Two views make that visible:

* :func:`pareto_front`: the systems no other system beats on both axes (at most
  as many passages read on average *and* at least the same EM, one of them
  strictly);
* :func:`saving_at_equal_em`: for an adaptive selector with EM e reading m
  passages on average, the smallest fixed n whose EM reaches e, and
  ``passages(top:n) - m``, the passages per question the selector saves at equal
  EM (negative: it reads more than the fixed n that matches it).  Its 95%
  interval comes from the question bootstrap (:mod:`eval.tradeoff`): each
  replicate resamples the questions, recomputes both EMs and both means, and
  finds its own n; replicates where no fixed n reaches the selector's EM are
  counted, not guessed.
"""

from __future__ import annotations

import numpy as np

from data.errors import UserError


def pareto_front(passages, em) -> np.ndarray:
    """bool ``[M]``: system m is on the front (no other reads at most as many passages with at least its EM,
    one of the two strictly better)."""
    cost = np.asarray(passages, dtype=np.float64)
    value = np.asarray(em, dtype=np.float64)
    if cost.shape != value.shape or cost.ndim != 1:
        raise UserError(f"pareto_front: passages {cost.shape} and em {value.shape} must be two [M] vectors")
    no_worse = (cost[None, :] <= cost[:, None]) & (value[None, :] >= value[:, None])
    better = (cost[None, :] < cost[:, None]) | (value[None, :] > value[:, None])
    dominated = (no_worse & better).any(axis=1)
    return ~dominated


def fixed_n_reaching(em_target, fixed_em, tolerance: float = 1e-9) -> np.ndarray:
    """Smallest 1-based n whose fixed-n EM (``fixed_em[..., n-1]``) reaches ``em_target`` (``[...]``); 0 when none does."""
    fixed = np.asarray(fixed_em, dtype=np.float64)
    target = np.asarray(em_target, dtype=np.float64)
    reaches = fixed >= target[..., None] - tolerance
    return np.where(reaches.any(axis=-1), reaches.argmax(axis=-1) + 1, 0).astype(np.int64)


def saving_at_equal_em(em_fixed, n_fixed, em_system, n_system, boot_em_fixed=None, boot_n_fixed=None,
                       boot_em_system=None, boot_n_system=None, level: float = 0.95) -> dict:
    """The fixed n that reaches a selector's EM and the passages per question the selector saves against it.

    ``em_fixed`` / ``n_fixed``: ``[N]`` mean EM and mean passages read of top:1..N; ``em_system`` /
    ``n_system``: the selector's.  The ``boot_*`` arguments are the same quantities per bootstrap replicate
    (``[B, N]`` and ``[B]``); without them no interval is given.
    """
    from eval.tradeoff import percentile_interval

    em_fixed = np.asarray(em_fixed, dtype=np.float64)
    n_fixed = np.asarray(n_fixed, dtype=np.float64)
    n_star = int(fixed_n_reaching(em_system, em_fixed))
    out = {
        "fixed_n": n_star or None,
        "fixed_n_passages": round(float(n_fixed[n_star - 1]), 6) if n_star else None,
        "saving": round(float(n_fixed[n_star - 1] - n_system), 6) if n_star else None,
    }
    if boot_em_fixed is not None:
        b_star = fixed_n_reaching(boot_em_system, boot_em_fixed)
        found = b_star > 0
        rows = np.flatnonzero(found)
        savings = np.asarray(boot_n_fixed)[rows, b_star[rows] - 1] - np.asarray(boot_n_system)[rows]
        out["replicates_without_fixed_n"] = int((~found).sum())
        if savings.size:
            lo, hi = percentile_interval(savings[:, None], level)
            out["saving_ci95"] = [round(float(lo[0]), 6), round(float(hi[0]), 6)]
        else:
            out["saving_ci95"] = None
    return out
