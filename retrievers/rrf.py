"""Reciprocal rank fusion (RRF).

Cormack, Clarke & Buettcher (2009), "Reciprocal Rank Fusion outperforms
Condorcet and individual Rank Learning Methods", SIGIR '09:

    RRF(d) = sum_m  w_m / (k + rank_m(d))

with ``rank_m(d)`` the 1-based rank of d in member m's top-``depth`` list (a
candidate missing from a list contributes nothing) and ``k = 60``.  The
weights ``w_m`` default to 1 (the paper's unweighted form).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus
from retrievers.base import Retriever
from retrievers.pooling import (
    check_members,
    check_positive_int,
    check_weights,
    fuse_name,
    member_config,
    pool_rankings,
    rank_pool,
    search_fused,
)
from retrievers.types import Ranking


def reciprocal_rank_fusion(
    rankings: Sequence[Ranking], k: int = 10, rrf_k: float = 60.0, weights: Sequence[float] | None = None
) -> Ranking:
    """Fuse rankings of the same queries with RRF; returns the top ``k``.

    ``rrf_k`` is the constant of Cormack et al. (2009); ``weights`` one
    non-negative weight per ranking (default all 1).
    """
    if not rankings:
        raise UserError("rrf: needs at least one ranking")
    if not np.isfinite(rrf_k) or rrf_k < 0:
        raise UserError(f"rrf: k must be a finite non-negative number, got {rrf_k!r}")
    w = check_weights(weights, len(rankings), "rrf")
    pool = pool_rankings(rankings)
    contrib = np.where(pool.present, 1.0 / (rrf_k + pool.ranks.astype(np.float64) + 1.0), 0.0)
    fused = np.tensordot(w, contrib, axes=(0, 0))
    return rank_pool(pool.ids, fused, k)


class RRFRetriever:
    """RRF over any number of member retrievers (Cormack et al., 2009).

    Parameters
    ----------
    members: already-constructed retrievers; ``index``/``search`` are forwarded.
    k: the RRF constant (60 in the paper).
    depth: how many results of each member are fused (``max(depth, k)`` when a
        search asks for more than ``depth`` results).
    weights: optional per-member weights.
    """

    method = "rrf"

    def __init__(self, members: Sequence[Retriever], k: float = 60.0, depth: int = 100, weights=None):
        self.members = check_members(members, "rrf")
        self.k = float(k)
        self.depth = check_positive_int(depth, "rrf depth")
        self.weights = None if weights is None else check_weights(weights, len(self.members), "rrf").tolist()
        if not np.isfinite(self.k) or self.k < 0:
            raise UserError(f"rrf: k must be a finite non-negative number, got {k!r}")
        self.name = fuse_name("rrf", self.members)

    def index(self, corpus: Corpus) -> "RRFRetriever":
        for m in self.members:
            m.index(corpus)
        return self

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        k = check_positive_int(k, "rrf search k")
        return search_fused(self.members, query_texts, max(self.depth, k), k, lambda _, rankings, kk: self.fuse(rankings, kk))

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking:
        """Fuse precomputed member rankings (one per member, same queries)."""
        rankings = [r.top(max(self.depth, k)) for r in rankings]
        return reciprocal_rank_fusion(rankings, k=k, rrf_k=self.k, weights=self.weights)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "name": self.name,
            "k": self.k,
            "depth": self.depth,
            "weights": self.weights,
            "members": [member_config(m) for m in self.members],
        }
