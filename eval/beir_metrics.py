"""BEIR/MTEB retrieval metrics: nDCG@k, MRR@k, Recall@k over graded qrels.

Thakur et al. 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation
of Information Retrieval Models" (and MTEB, Muennighoff et al. 2023) score
rankings with ``pytrec_eval`` (Van Gysel & de Rijke 2018), i.e. trec_eval:

* ``nDCG@k`` (trec_eval ``ndcg_cut.k``, Järvelin & Kekäläinen 2002): gain = the
  qrels grade itself (linear, not ``2**g - 1``), discount ``1 / log2(rank + 1)``,
  ideal DCG from *all* judged documents of the query sorted by grade;
* ``R@k`` (``recall.k``): relevant documents (grade >= 1) in the top k over all
  relevant documents of the query (0 when it has none);
* ``MRR@k`` (BEIR's ``mrr``): 1 / rank of the first relevant document within
  the top k, 0 if none.

Ties: trec_eval ignores the run's ranks and sorts each query's results by score
descending, then by document id descending (string order).  Pass
``corpus_ids`` to get exactly that order; without it the ranking's own order
is kept (equal unless scores tie).  BEIR's own MRR sorts with Python's stable
sort, so its tie order is the run's insertion order; here MRR uses the same
trec_eval order as the other metrics.

Relevance comes from ``Queries.gold`` (corpus rows with grade > 0) and
``Queries.gold_grades`` (their grades; all 1 when absent).  Judged documents
with grade 0 add nothing to any of these metrics, so dropping them is exact.
A query with no relevant document scores 0 on every metric and counts in the
mean, as in pytrec_eval.

Public functions: :func:`ndcg_at_k`, :func:`recall_at_k`, :func:`mrr_at_k`
(per-query arrays) and :func:`beir_metrics` (the means BEIR/MTEB report).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from data.types import Queries
from retrievers.types import Ranking

DEFAULT_METRICS = (("nDCG", 10), ("MRR", 10), ("R", 100), ("R", 1000))


def trec_order(ranking: Ranking, corpus_ids: Sequence[str] | None = None) -> Ranking:
    """Re-sort each row by score descending, then document id descending (trec_eval).

    Padding (``-1`` rows) stays at the end.  Without ``corpus_ids`` ties keep
    the ranking's own order.
    """
    ids, scores = ranking.ids, ranking.scores
    pad = ids < 0
    neg_score = np.where(pad, np.inf, -scores.astype(np.float64))
    if corpus_ids is None:
        order = np.argsort(neg_score, axis=1, kind="stable")
    else:
        id_array = np.asarray(list(corpus_ids), dtype=object)
        # rank of every corpus row in string order of its id
        id_rank = np.empty(len(id_array), dtype=np.int64)
        id_rank[np.argsort(id_array.astype(str), kind="stable")] = np.arange(len(id_array))
        rows = np.where(pad, 0, ids)
        if rows.size and rows.max() >= len(id_array):
            raise ValueError(f"ranking refers to corpus row {int(rows.max())} but corpus_ids has {len(id_array)} ids")
        neg_id_rank = -id_rank[rows]
        # lexsort: last key is primary
        order = np.lexsort((neg_id_rank, neg_score), axis=-1)
    take = np.take_along_axis
    return Ranking(take(ids, order, axis=1), take(scores, order, axis=1))


def _grade_matrix(ranking: Ranking, queries: Queries) -> tuple[np.ndarray, list[np.ndarray]]:
    """``G[q, j]`` = grade of ranked row ``ranking.ids[q, j]`` for query q (0 if unjudged)."""
    if len(ranking) != len(queries):
        raise ValueError(f"ranking has {len(ranking)} rows but there are {len(queries)} queries")
    grades = []
    for q, rows in enumerate(queries.gold):
        g = None if queries.gold_grades is None else queries.gold_grades[q]
        g = np.ones(len(rows), dtype=np.float64) if g is None else np.asarray(g, dtype=np.float64)
        if len(g) != len(rows):
            raise ValueError(f"query {queries.ids[q]}: {len(rows)} gold rows but {len(g)} grades")
        grades.append(g)
    ids = ranking.ids
    n_rows = int(max([ids.max(initial=-1)] + [int(np.max(r, initial=-1)) for r in queries.gold])) + 1
    lengths = np.fromiter((len(r) for r in queries.gold), dtype=np.int64, count=len(queries.gold))
    q_of = np.repeat(np.arange(len(queries.gold), dtype=np.int64), lengths)
    rows = np.concatenate([np.asarray(r, dtype=np.int64) for r in queries.gold]) if lengths.sum() else np.zeros(0, np.int64)
    vals = np.concatenate(grades) if lengths.sum() else np.zeros(0)
    keys = q_of * n_rows + rows
    order = np.argsort(keys, kind="stable")
    keys, vals = keys[order], vals[order]
    G = np.zeros(ids.shape, dtype=np.float64)
    if len(keys):
        probe = np.arange(len(ranking), dtype=np.int64)[:, None] * n_rows + ids
        pos = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
        hit = (ids >= 0) & (keys[pos] == probe)
        G[hit] = vals[pos[hit]]
    return G, grades


def ndcg_at_k(ranking: Ranking, queries: Queries, k: int = 10, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query nDCG@k with linear graded gains (trec_eval ``ndcg_cut.k``)."""
    ranking = trec_order(ranking, corpus_ids)
    G, grades = _grade_matrix(ranking.top(k), queries)
    discount = 1.0 / np.log2(np.arange(2, G.shape[1] + 2))
    dcg = (np.maximum(G, 0.0) * discount).sum(axis=1)
    ideal_discount = 1.0 / np.log2(np.arange(2, k + 2))
    idcg = np.array(
        [(np.sort(g[g > 0])[::-1][:k] * ideal_discount[: min(k, int((g > 0).sum()))]).sum() for g in grades]
    )
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)


def recall_at_k(ranking: Ranking, queries: Queries, k: int = 100, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query Recall@k: relevant (grade >= 1) in the top k / all relevant (trec_eval ``recall.k``)."""
    ranking = trec_order(ranking, corpus_ids)
    G, grades = _grade_matrix(ranking.top(k), queries)
    found = (G >= 1).sum(axis=1).astype(np.float64)
    n_rel = np.array([float((g >= 1).sum()) for g in grades])
    return np.divide(found, n_rel, out=np.zeros_like(found), where=n_rel > 0)


def mrr_at_k(ranking: Ranking, queries: Queries, k: int = 10, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query reciprocal rank of the first relevant (grade >= 1) result within the top k."""
    ranking = trec_order(ranking, corpus_ids)
    G, _ = _grade_matrix(ranking.top(k), queries)
    rel = G >= 1
    first = rel.argmax(axis=1)
    return np.where(rel.any(axis=1), 1.0 / (first + 1.0), 0.0)


_KERNELS = {"nDCG": ndcg_at_k, "MRR": mrr_at_k, "R": recall_at_k}


def beir_metrics(
    ranking: Ranking,
    queries: Queries,
    *,
    corpus_ids: Sequence[str] | None = None,
    metrics: Sequence[tuple[str, int]] = DEFAULT_METRICS,
    ignore_identical_ids: bool = False,
) -> dict[str, float]:
    """Mean nDCG@10, MRR@10, R@100, R@1000 over queries, as BEIR/MTEB report them.

    ``corpus_ids`` (the corpus ids, indexed by row) gives trec_eval's tie order
    and lets a cutoff deeper than the ranking count as complete when the ranking
    holds the whole corpus.  A cutoff k deeper than the ranking (and than the
    corpus) is left out with a warning, since it would underestimate.

    ``ignore_identical_ids`` drops results whose document id equals the query
    id before scoring (BEIR's and MTEB's default for sets whose queries are also
    documents); it is off by default, as in trec_eval and Pyserini's BEIR
    regressions.
    """
    if ignore_identical_ids:
        if corpus_ids is None:
            raise ValueError("ignore_identical_ids needs corpus_ids")
        ranking = _drop_identical(ranking, queries, corpus_ids)
    n_docs = None if corpus_ids is None else len(corpus_ids)
    ranking = trec_order(ranking, corpus_ids)  # once; the kernels below keep this order
    out: dict[str, float] = {}
    for name, k in metrics:
        if name not in _KERNELS:
            raise ValueError(f"unknown metric {name!r}; expected one of {sorted(_KERNELS)}")
        complete = ranking.depth >= k or (n_docs is not None and ranking.depth >= n_docs)
        if not complete:
            warnings.warn(f"{name}@{k} left out: the ranking holds only {ranking.depth} results per query", stacklevel=2)
            continue
        values = _KERNELS[name](ranking, queries, k)
        out[f"{name}@{k}"] = float(values.mean()) if len(values) else 0.0
    return out


def _drop_identical(ranking: Ranking, queries: Queries, corpus_ids: Sequence[str]) -> Ranking:
    row_of = {doc_id: row for row, doc_id in enumerate(corpus_ids)}
    ids, scores = ranking.ids.copy(), ranking.scores.copy()
    for q, qid in enumerate(queries.ids):
        row = row_of.get(qid)
        if row is None:
            continue
        hit = ids[q] == row
        if hit.any():
            keep = ~hit
            n = int(keep.sum())
            ids[q, :n], scores[q, :n] = ids[q][keep], scores[q][keep]
            ids[q, n:], scores[q, n:] = -1, -np.inf
    return Ranking(ids, scores)
