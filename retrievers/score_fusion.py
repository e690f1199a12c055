"""Normalized score fusion (weighted CombSUM over per-query normalized scores).

Raw scores of different retrievers live on different scales (BM25 is an
unbounded sum of idf-weighted term scores, cosine similarity lies in
[-1, 1]), so averaging them directly lets one retriever dominate.  Each
member's scores are first normalized *per query over that member's own
top-``depth`` list*, then combined as a weighted sum (CombSUM, Fox & Shaw
1994; normalization schemes after Montague & Aslam 2001, "Relevance score
normalization for metasearch", CIKM '01):

``minmax``
    ``(s - min) / (max - min)`` over the list: top result 1, last 0.  When
    all listed scores are equal every listed candidate gets 1.
``zscore``
    ``(s - mean) / std`` over the list (population std; 0 for a constant
    list).  Montague & Aslam's ZMUV.
``sum``
    ``(s - min) / sum(s - min)``: shift the minimum to 0, scale the list to
    sum to one (Montague & Aslam's Sum).  A constant list gets ``1/n`` each.

A pooled candidate that a member did not return gets that member's
*normalized minimum* for the query (what the lowest listed candidate got):
0 for ``minmax`` and ``sum``, the lowest z-score for ``zscore``.  Its true
score is at most the member's last listed score, so this is the most
favourable value consistent with the list; a member that returned nothing for
a query contributes 0 to every candidate.
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

NORMALIZATIONS = ("minmax", "zscore", "sum")


def normalize_scores(scores: np.ndarray, valid: np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-row normalization of a [Q, K] score matrix over its ``valid`` entries.

    Returns ``(normalized [Q, K], floor [Q])``: invalid entries are 0 in
    ``normalized``; ``floor`` is the normalized minimum of each row (the value
    for candidates missing from the row; 0 for an empty row).
    """
    if method not in NORMALIZATIONS:
        raise UserError(f"score fusion: unknown normalization {method!r} (choose from {', '.join(NORMALIZATIONS)})")
    valid = np.asarray(valid, dtype=bool)
    s = np.where(valid, scores.astype(np.float64), 0.0)
    n = valid.sum(axis=1)
    has = n > 0
    lo = np.where(has, np.where(valid, s, np.inf).min(axis=1, initial=np.inf), 0.0)
    if method == "minmax":
        hi = np.where(has, np.where(valid, s, -np.inf).max(axis=1, initial=-np.inf), 0.0)
        span = hi - lo
        safe = np.where(span > 0, span, 1.0)
        out = np.where(span[:, None] > 0, (s - lo[:, None]) / safe[:, None], 1.0)
        floor = np.zeros(len(s))
    elif method == "zscore":
        mean = s.sum(axis=1) / np.maximum(n, 1)
        var = (np.where(valid, s - mean[:, None], 0.0) ** 2).sum(axis=1) / np.maximum(n, 1)
        std = np.sqrt(var)
        safe = np.where(std > 0, std, 1.0)
        out = np.where(std[:, None] > 0, (s - mean[:, None]) / safe[:, None], 0.0)
        floor = np.where(std > 0, (lo - mean) / safe, 0.0)
    else:  # sum
        shifted = np.where(valid, s - lo[:, None], 0.0)
        total = shifted.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        out = np.where(total[:, None] > 0, shifted / safe[:, None], 1.0 / np.maximum(n, 1)[:, None])
        floor = np.zeros(len(s))
    out = np.where(valid, out, 0.0)
    return out, np.where(has, floor, 0.0)


def normalized_pool_scores(rankings: Sequence[Ranking], method: str):
    """Pool the rankings; return ``(pool, normalized [M, Q, P])`` with the missing-candidate rule applied."""
    pool = pool_rankings(rankings)
    n_members, n_queries, width = pool.ranks.shape
    normalized = np.zeros((n_members, n_queries, width), dtype=np.float64)
    for m, r in enumerate(rankings):
        norm_list, floor = normalize_scores(r.scores, r.ids >= 0, method)
        present = pool.present[m]
        q_idx, p_idx = np.nonzero(present)
        values = np.broadcast_to(floor[:, None], (n_queries, width)).copy()
        values[q_idx, p_idx] = norm_list[q_idx, pool.ranks[m][q_idx, p_idx]]
        normalized[m] = values
    return pool, normalized


def score_fusion(
    rankings: Sequence[Ranking], method: str = "minmax", k: int = 10, weights: Sequence[float] | None = None
) -> Ranking:
    """Weighted CombSUM of per-query normalized scores; returns the top ``k``."""
    if not rankings:
        raise UserError("score fusion: needs at least one ranking")
    w = check_weights(weights, len(rankings), f"fuse-{method}")
    pool, normalized = normalized_pool_scores(rankings, method)
    fused = np.tensordot(w, normalized, axes=(0, 0))
    return rank_pool(pool.ids, fused, k)


class ScoreFusionRetriever(RetrieverBase):
    """Fuse member retrievers by weighted normalized scores (see module docstring).

    Parameters
    ----------
    members: already-constructed retrievers.
    method: ``"minmax"``, ``"zscore"`` or ``"sum"``.
    weights: one non-negative weight per member (default all 1).
    depth: how many results of each member are normalized and fused
        (``max(depth, k)`` when a search asks for more).
    """

    def __init__(self, members: Sequence[Retriever], method: str = "minmax", weights=None, depth: int = 100):
        self.members = check_members(members, "score fusion")
        if method not in NORMALIZATIONS:
            raise UserError(f"score fusion: unknown normalization {method!r} (choose from {', '.join(NORMALIZATIONS)})")
        self.method = method
        self.weights = None if weights is None else check_weights(weights, len(self.members), f"fuse-{method}").tolist()
        self.depth = check_positive_int(depth, f"fuse-{method} depth")
        self.name = fuse_name(f"fuse-{method}", self.members)

    def index(self, corpus: Corpus) -> "ScoreFusionRetriever":
        for m in self.members:
            m.index(corpus)
        return self

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        k = check_positive_int(k, f"fuse-{self.method} search k")
        return search_fused(self.members, query_texts, max(self.depth, k), k, lambda _, rankings, kk: self.fuse(rankings, kk))

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking:
        """Fuse precomputed member rankings (one per member, same queries)."""
        rankings = [r.top(max(self.depth, k)) for r in rankings]
        return score_fusion(rankings, method=self.method, k=k, weights=self.weights)

    def to_dict(self) -> dict:
        return {
            "method": f"fuse-{self.method}",
            "name": self.name,
            "normalization": self.method,
            "depth": self.depth,
            "weights": self.weights,
            "members": [member_config(m) for m in self.members],
        }


