"""Shared helpers for retrievers that combine several member retrievers.

A fused retriever searches each member to a fixed *pool depth*, takes the
union of their candidates per query (the *pool*), scores every pooled
candidate and returns the top-k.  The pool is kept as dense numpy arrays so
every fusion method (RRF, normalized score fusion, routing, the MrRank
re-ranker) works on the same vectorized representation:

- ``Pool.ids[q, p]``: corpus row of pooled candidate p of query q, ascending by
  row within a query, ``-1`` pads rows with fewer candidates;
- ``Pool.ranks[m, q, p]``: 0-based rank member m gave that candidate, ``-1``
  where the candidate is not in member m's top-``depth``;
- ``Pool.scores[m, q, p]``: member m's raw score, NaN where absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus, Dataset, Queries
from retrievers.base import Retriever, constructor_params
from retrievers.types import Ranking

EVAL_SPLITS = frozenset({"dev", "test", "valid", "validation", "eval"})


@dataclass
class Pool:
    """The union of the members' top-``depth`` candidates, per query."""

    ids: np.ndarray  # int64 [Q, P]
    ranks: np.ndarray  # int64 [M, Q, P]
    scores: np.ndarray  # float32 [M, Q, P]

    @property
    def present(self) -> np.ndarray:
        """bool [M, Q, P]: member m retrieved candidate p of query q."""
        return self.ranks >= 0

    @property
    def valid(self) -> np.ndarray:
        """bool [Q, P]: the slot holds a candidate (not padding)."""
        return self.ids >= 0

    def __len__(self) -> int:
        return self.ids.shape[0]


def check_members(members: Sequence[Any], owner: str, minimum: int = 1) -> list[Retriever]:
    """Validate a list of member retrievers (constructor argument of fused retrievers)."""
    members = list(members) if members is not None else []
    if len(members) < minimum:
        raise UserError(f"{owner}: needs at least {minimum} member retriever(s), got {len(members)}")
    for i, m in enumerate(members):
        if not isinstance(m, Retriever):
            raise UserError(f"{owner}: member {i} ({type(m).__name__}) is not a retriever (needs name, index, search)")
    return members


def check_positive_int(value: Any, field: str) -> int:
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{field}: expected a positive integer, got {value!r}") from None
    if as_int != float(value) or as_int < 1:
        raise UserError(f"{field}: expected a positive integer, got {value!r}")
    return as_int


def check_weights(weights: Any, n_members: int, owner: str) -> np.ndarray:
    """``None`` → all ones; else one finite non-negative weight per member, not all zero."""
    if weights is None:
        return np.ones(n_members, dtype=np.float64)
    if isinstance(weights, str):
        weights = [w for w in weights.replace(",", " ").split() if w]
    elif isinstance(weights, (int, float)) and not isinstance(weights, bool):
        weights = [weights]  # one number (weights=0.5 parsed as a number): one weight, counted below
    try:
        w = np.asarray([float(x) for x in weights], dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"{owner}: weights must be numbers, got {weights!r}") from None
    if w.shape != (n_members,):
        raise UserError(f"{owner}: {len(w)} weights given for {n_members} member retrievers")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise UserError(f"{owner}: weights must be finite, non-negative and not all zero, got {w.tolist()}")
    return w


def search_members(members: Sequence[Retriever], query_texts: Sequence[str], depth: int) -> list[Ranking]:
    """Each member's top-``depth`` ranking for the queries."""
    rankings = [m.search(query_texts, depth) for m in members]
    for m, r in zip(members, rankings):
        if len(r) != len(query_texts):
            raise ValueError(f"{m.name}: returned {len(r)} rankings for {len(query_texts)} queries")
    return rankings


FUSE_BLOCK = 1024  # queries searched and fused at a time by every fused retriever


def search_fused(members: Sequence[Retriever], query_texts: Sequence[str], depth: int, k: int, fuse,
                 block: int | None = None) -> Ranking:
    """Search the members to ``depth`` and fuse, ``block`` queries at a time; the top ``k`` of every query.

    ``fuse(texts, rankings, k)`` fuses one block's member rankings.  Every
    fusion method here scores each query on its own (its pool, its
    normalizations, its features), so fusing block by block returns exactly
    what fusing all queries at once would; but only one block's member
    rankings and pool (``[M, block, P]`` arrays, several times the size of the
    rankings) are alive at a time, and each member searches one block (BM25's
    hits, dense query embeddings), so memory no longer grows with
    queries x depth x members (default ``FUSE_BLOCK`` queries).
    """
    texts = list(query_texts)
    n, size = len(texts), int(block or FUSE_BLOCK)
    if n <= size:
        return fuse(texts, search_members(members, texts, depth), k)
    ids = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    for lo in range(0, n, size):
        part = fuse(texts[lo : lo + size], search_members(members, texts[lo : lo + size], depth), k)
        width = min(k, part.depth)
        ids[lo : lo + len(part), :width] = part.ids[:, :width]
        scores[lo : lo + len(part), :width] = part.scores[:, :width]
    return Ranking(ids, scores)


def pool_rankings(rankings: Sequence[Ranking]) -> Pool:
    """Union the candidates of several rankings of the same queries (vectorized)."""
    if not rankings:
        raise ValueError("pool_rankings needs at least one ranking")
    n_queries = len(rankings[0])
    for r in rankings:
        if len(r) != n_queries:
            raise ValueError(f"rankings cover different numbers of queries ({len(r)} vs {n_queries})")
    big = np.iinfo(np.int64).max
    cat = np.concatenate([r.ids for r in rankings], axis=1) if n_queries else np.zeros((0, 1), np.int64)
    srt = np.sort(np.where(cat >= 0, cat, big), axis=1)
    first = np.ones_like(srt, dtype=bool)
    if srt.shape[1] > 1:
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    keep = first & (srt != big)
    width = max(1, int(keep.sum(axis=1).max())) if n_queries else 1
    ids = np.full((n_queries, width), -1, dtype=np.int64)
    rows, _ = np.nonzero(keep)
    cols = (np.cumsum(keep, axis=1) - 1)[keep]
    ids[rows, cols] = srt[keep]

    n_members = len(rankings)
    ranks = np.full((n_members, n_queries, width), -1, dtype=np.int64)
    scores = np.full((n_members, n_queries, width), np.nan, dtype=np.float32)
    if n_queries and keep.any():
        stride = int(ids.max()) + 2
        # keys sorted globally: row-major, ascending within a row, pads last in their row
        pool_keys = np.arange(n_queries, dtype=np.int64)[:, None] * stride + np.where(ids >= 0, ids, stride - 1)
        flat_keys = pool_keys.ravel()
        for m, r in enumerate(rankings):
            q_idx, j_idx = np.nonzero(r.ids >= 0)
            keys = q_idx * stride + r.ids[q_idx, j_idx]
            pos = np.searchsorted(flat_keys, keys)
            cols = pos - q_idx * width
            ranks[m, q_idx, cols] = j_idx
            scores[m, q_idx, cols] = r.scores[q_idx, j_idx]
    return Pool(ids=ids, ranks=ranks, scores=scores)


def rank_pool(pool_ids: np.ndarray, fused_scores: np.ndarray, k: int) -> Ranking:
    """Sort each query's pooled candidates by descending fused score; top ``k``.

    Ties keep the pool order (ascending corpus row), so results are
    deterministic.  Rows with fewer than ``k`` candidates are padded with id
    ``-1`` and score ``-inf``.
    """
    fused = np.where(pool_ids >= 0, fused_scores.astype(np.float64), -np.inf)
    order = np.argsort(-fused, axis=1, kind="stable")[:, :k]
    ids = np.take_along_axis(pool_ids, order, axis=1)
    scores = np.take_along_axis(fused, order, axis=1)
    scores[ids < 0] = -np.inf
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return Ranking(ids, scores.astype(np.float32))


def gold_mask(pool_ids: np.ndarray, gold: Sequence[np.ndarray]) -> np.ndarray:
    """bool [Q, P]: the pooled candidate is one of the query's gold rows."""
    mask = np.zeros(pool_ids.shape, dtype=bool)
    for q, g in enumerate(gold):
        if len(g):
            mask[q] = np.isin(pool_ids[q], np.asarray(g, dtype=np.int64)) & (pool_ids[q] >= 0)
    return mask


def reciprocal_rank_of_gold(ranking: Ranking, gold: Sequence[np.ndarray]) -> np.ndarray:
    """float [Q]: 1/(1+rank) of the best-ranked gold row, 0 when none is in the ranking."""
    out = np.zeros(len(ranking), dtype=np.float64)
    for q, g in enumerate(gold):
        hit = np.nonzero(np.isin(ranking.ids[q], np.asarray(g, dtype=np.int64)) & (ranking.ids[q] >= 0))[0]
        if len(hit):
            out[q] = 1.0 / (1.0 + hit[0])
    return out


def check_training_split(dataset: Dataset, owner: str) -> None:
    """Learned fusers fit on a training split only; dev/test queries must never reach fit."""
    if not isinstance(dataset, Dataset):
        raise UserError(f"{owner}: fit needs a data.types.Dataset, got {type(dataset).__name__}")
    if str(dataset.split).lower() in EVAL_SPLITS:
        raise UserError(
            f"{owner}: fit got the {dataset.name!r} split {dataset.split!r}; fit on a training split "
            "(evaluation queries must never be used for fitting)"
        )
    if len(dataset.queries) == 0 or len(dataset.corpus) == 0:
        raise UserError(f"{owner}: training split {dataset.name!r}/{dataset.split!r} has no queries or no corpus")


PARAGRAPHS_PER_GROUP = 40


def training_subset(
    dataset: Dataset, max_queries: int | None, corpus_size: int | None, seed: int
) -> tuple[Corpus, Queries]:
    """A seeded sample of a training split for fitting fusers.

    ``corpus_size``: keep whole groups of candidates in a seeded random order
    until at least that many candidates are kept, and only the queries whose
    gold rows all lie in them (gold rows are re-indexed into the smaller
    corpus).  A group is an article (same title) when the corpus has titles,
    else a run of ``PARAGRAPHS_PER_GROUP`` consecutive paragraph ids (SQuAD
    keeps an article's paragraphs together; dev has ~43 per article), so the
    sample keeps the confusable same-topic neighbours an evaluation index has.  This makes the
    training index the size of an evaluation index (ReQA SQuAD dev: 10,250
    sentences), so rank/score statistics seen in training match the ones seen
    at evaluation, and cuts encoding time.  ``max_queries``: then keep at most
    that many queries (seeded).
    """
    rng = np.random.default_rng(seed)
    corpus, queries = dataset.corpus, dataset.queries
    if corpus_size is not None and corpus_size < len(corpus):
        if corpus.titles is not None:
            _, group = np.unique(np.asarray(corpus.titles, dtype=object).astype(str), return_inverse=True)
        else:
            _, group = np.unique(np.asarray(corpus.paragraph_ids) // PARAGRAPHS_PER_GROUP, return_inverse=True)
        n_groups = int(group.max()) + 1
        sizes = np.bincount(group, minlength=n_groups)
        order = rng.permutation(n_groups)
        n_take = int(np.searchsorted(np.cumsum(sizes[order]), corpus_size) + 1)
        chosen = np.zeros(n_groups, dtype=bool)
        chosen[order[:n_take]] = True
        rows = np.nonzero(chosen[group])[0]
        new_row = np.full(len(corpus), -1, dtype=np.int64)
        new_row[rows] = np.arange(len(rows))
        keep_q, new_gold = [], []
        open_domain = queries.answer_match is not None  # gold found by answer matching later: every query stays
        for q, g in enumerate(queries.gold):
            g = np.asarray(g, dtype=np.int64)
            if open_domain:
                keep_q.append(q)
                new_gold.append(new_row[g][new_row[g] >= 0])
            elif len(g) and np.all(new_row[g] >= 0):
                keep_q.append(q)
                new_gold.append(new_row[g])
        corpus = corpus.subset(rows)
        queries = queries.subset(keep_q)
        queries.gold = new_gold
    if max_queries is not None and max_queries < len(queries):
        pick = np.sort(rng.choice(len(queries), size=max_queries, replace=False))
        queries = queries.subset(pick.tolist())
    if len(queries) == 0:
        raise UserError(f"{dataset.name}/{dataset.split}: no training queries left after sampling")
    return corpus, queries


def training_gold(queries: Queries, corpus: Corpus, rankings: Sequence[Ranking]) -> list[np.ndarray]:
    """The gold rows learned fusers train on: the split's own; for open-domain questions (``answer_match`` set)
    also every pooled row that holds an answer (DPR's has-answer test over what the members retrieved), as the
    evaluated split's gold is resolved after retrieval (``pipeline.stages.resolve_open_gold``)."""
    if queries.answer_match is None:
        return list(queries.gold)
    from eval.dpr_accuracy import has_answer_matrix

    pooled = np.concatenate([np.asarray(r.ids) for r in rankings], axis=1)
    mask = has_answer_matrix(pooled, corpus.answer_texts, queries.answers, queries.answer_match)
    return [np.union1d(np.asarray(g, dtype=np.int64), pooled[q][mask[q]]) for q, g in enumerate(queries.gold)]


def fuse_name(method: str, members: Sequence[Retriever]) -> str:
    return f"{method}({'+'.join(str(getattr(m, 'name', type(m).__name__)) for m in members)})"


def member_config(member: Any) -> Any:
    """A member's JSON config: its ``to_dict()`` when it has one, else its name and its constructor parameters
    (scikit-learn style: stored under their own names), so a saved fuser says which members it was fitted with
    (``dense`` with which encoder, ``bm25`` with which k1 and b)."""
    import json

    to_dict = getattr(member, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    config: dict = {"name": getattr(member, "name", type(member).__name__)}
    params = constructor_params(member)
    if params:
        config["params"] = json.loads(json.dumps(params, default=str))
    return config
