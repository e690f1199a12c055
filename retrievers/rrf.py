"""Reciprocal rank fusion (RRF).

Cormack, Clarke & Buettcher (2009), "Reciprocal Rank Fusion outperforms
Condorcet and individual Rank Learning Methods", SIGIR '09:

    RRF(d) = sum_m  w_m / (rank_constant + rank_m(d))

with ``rank_m(d)`` the 1-based rank of d in member m's top-``depth`` list (a
candidate missing from a list contributes nothing) and the paper's constant
``k = 60`` (``rank_constant`` here, so it is never mistaken for the search
depth ``k``; ``--fusion-opt rank_constant=60``).  The weights ``w_m`` default
to 1 (the paper's unweighted form).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus
from retrievers.base import Retriever, RetrieverBase
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
    rankings: Sequence[Ranking], k: int = 10, rank_constant: float = 60.0, weights: Sequence[float] | None = None
) -> Ranking:
    """Fuse rankings of the same queries with RRF; returns the top ``k``.

    ``rank_constant`` is the constant ``k`` of Cormack et al. (2009), added to
    every 1-based rank; ``weights`` one non-negative weight per ranking
    (default all 1).
    """
    if not rankings:
        raise UserError("rrf: needs at least one ranking")
    if not np.isfinite(rank_constant) or rank_constant < 0:
        raise UserError(f"rrf: rank_constant must be a finite non-negative number, got {rank_constant!r}")
    w = check_weights(weights, len(rankings), "rrf")
    pool = pool_rankings(rankings)
    contrib = np.where(pool.present, 1.0 / (rank_constant + pool.ranks.astype(np.float64) + 1.0), 0.0)
    fused = np.tensordot(w, contrib, axes=(0, 0))
    return rank_pool(pool.ids, fused, k)


class RRFRetriever(RetrieverBase):
    """RRF over any number of member retrievers (Cormack et al., 2009).

    Parameters
    ----------
    members: already-constructed retrievers; ``index``/``search`` are forwarded.
    rank_constant: the constant added to every 1-based rank (Cormack et al.'s
        ``k``, 60 in the paper); not the search depth ``k``.
    depth: how many results of each member are fused (``max(depth, k)`` when a
        search asks for more than ``depth`` results).
    weights: optional per-member weights.
    """

    method = "rrf"

    def __init__(self, members: Sequence[Retriever], rank_constant: float = 60.0, depth: int = 100, weights=None):
        self.members = check_members(members, "rrf")
        self.rank_constant = float(rank_constant)
        self.depth = check_positive_int(depth, "rrf depth")
        self.weights = None if weights is None else check_weights(weights, len(self.members), "rrf").tolist()
        if not np.isfinite(self.rank_constant) or self.rank_constant < 0:
            raise UserError(f"rrf: rank_constant must be a finite non-negative number, got {rank_constant!r}")
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
        return reciprocal_rank_fusion(rankings, k=k, rank_constant=self.rank_constant, weights=self.weights)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "name": self.name,
            "rank_constant": self.rank_constant,
            "depth": self.depth,
            "weights": self.weights,
            "members": [member_config(m) for m in self.members],
        }
