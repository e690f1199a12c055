"""BEIR/MTEB retrieval metrics: nDCG@k, MRR@k, Recall@k over graded qrels.

Thakur et al. 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation
of Information Retrieval Models" (and MTEB, Muennighoff et al. 2023) score
rankings with ``pytrec_eval`` (Van Gysel & de Rijke 2018), i.e. trec_eval, and
so do we: every value here is computed by pytrec_eval itself (this module only
turns a :class:`Ranking` and :class:`Queries` into its run and qrels dicts):

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

Public functions: :func:`per_query`, :func:`ndcg_at_k`, :func:`recall_at_k`,
:func:`mrr_at_k` (per-query arrays) and :func:`beir_metrics` (the means
BEIR/MTEB report).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from data.types import Queries
from data.types import Ranking

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


def _doc_ids(ranking: Ranking, q: int, corpus_ids: Sequence[str] | None):
    """Document id of each corpus row for query ``q``.

    With ``corpus_ids`` these are the corpus ids.  Without, ids are made per
    query so that trec_eval's tie order (document id descending) is the
    ranking's own order: the j-th result gets a larger id than the (j+1)-th.
    """
    if corpus_ids is not None:
        return lambda row: str(corpus_ids[row])
    position = {int(r): j for j, r in enumerate(ranking.ids[q]) if r >= 0}
    return lambda row: f"r{10**9 - position[row]:010d}" if row in position else f"u{row}"


def per_query(
    ranking: Ranking,
    queries: Queries,
    metrics: Sequence[tuple[str, int]] = DEFAULT_METRICS,
    corpus_ids: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Per-query ``{"nDCG@10": [Q], ...}`` computed by pytrec_eval (trec_eval 9).

    ``nDCG@k`` is trec_eval's ``ndcg_cut.k``, ``R@k`` its ``recall.k``; ``MRR@k``
    is its ``recip_rank`` on each query's top k (in trec_eval's own order), which
    is BEIR's ``mrr@k`` up to tie order.  Queries without a relevant document
    score 0 on every metric.
    """
    import pytrec_eval

    if len(ranking) != len(queries):
        raise ValueError(f"ranking has {len(ranking)} rows but there are {len(queries)} queries")
    for name, _ in metrics:
        if name not in _MEASURES:
            raise ValueError(f"unknown metric {name!r}; expected one of {sorted(_MEASURES)}")
    ordered = trec_order(ranking, corpus_ids)
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(len(queries)):
        doc = _doc_ids(ordered, q, corpus_ids)
        key = str(q)
        valid = ordered.ids[q] >= 0
        run[key] = {doc(int(r)): float(s) for r, s in zip(ordered.ids[q][valid], ordered.scores[q][valid])}
        grades = None if queries.gold_grades is None else queries.gold_grades[q]
        gold = np.asarray(queries.gold[q]).tolist()
        if grades is not None and len(grades) != len(gold):
            raise ValueError(f"query {queries.ids[q]}: {len(gold)} gold rows but {len(grades)} grades")
        rels = {doc(int(r)): int(grades[j]) if grades is not None else 1 for j, r in enumerate(gold)}
        qrels[key] = {d: g for d, g in rels.items() if g > 0}
    judged = {k: v for k, v in qrels.items() if v}
    out: dict[str, np.ndarray] = {}
    plain = sorted({f"{_MEASURES[n]}.{k}" for n, k in metrics if n != "MRR"})
    results = pytrec_eval.RelevanceEvaluator(judged, set(plain)).evaluate(run) if plain and judged else {}
    for name, k in metrics:
        label = f"{name}@{k}"
        if name == "MRR":
            top = {q: dict(list(d.items())[:k]) for q, d in run.items()}  # run rows are in trec_eval order
            rr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(top) if judged else {}
            out[label] = np.array([rr.get(str(q), {}).get("recip_rank", 0.0) for q in range(len(queries))])
        else:
            field = f"{_MEASURES[name]}_{k}"
            out[label] = np.array([results.get(str(q), {}).get(field, 0.0) for q in range(len(queries))])
    return out


_MEASURES = {"nDCG": "ndcg_cut", "R": "recall", "MRR": "recip_rank"}


def ndcg_at_k(ranking: Ranking, queries: Queries, k: int = 10, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query nDCG@k with linear graded gains (trec_eval ``ndcg_cut.k``, via pytrec_eval)."""
    return per_query(ranking, queries, [("nDCG", k)], corpus_ids)[f"nDCG@{k}"]


def recall_at_k(ranking: Ranking, queries: Queries, k: int = 100, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query Recall@k: relevant (grade >= 1) in the top k / all relevant (trec_eval ``recall.k``)."""
    return per_query(ranking, queries, [("R", k)], corpus_ids)[f"R@{k}"]


def mrr_at_k(ranking: Ranking, queries: Queries, k: int = 10, corpus_ids: Sequence[str] | None = None) -> np.ndarray:
    """Per-query reciprocal rank of the first relevant result within the top k (trec_eval ``recip_rank`` on the top k)."""
    return per_query(ranking, queries, [("MRR", k)], corpus_ids)[f"MRR@{k}"]


def complete_metrics(ranking: Ranking, metrics: Sequence[tuple[str, int]], n_docs: int | None) -> list[tuple[str, int]]:
    """The cutoffs a ranking can give without underestimating (the others warn and are left out)."""
    kept = []
    for name, k in metrics:
        if name not in _MEASURES:
            raise ValueError(f"unknown metric {name!r}; expected one of {sorted(_MEASURES)}")
        if ranking.depth >= k or (n_docs is not None and ranking.depth >= n_docs):
            kept.append((name, k))
        else:
            warnings.warn(f"{name}@{k} left out: the ranking holds only {ranking.depth} results per query", stacklevel=3)
    return kept


def beir_metrics(
    ranking: Ranking,
    queries: Queries,
    *,
    corpus_ids: Sequence[str] | None = None,
    metrics: Sequence[tuple[str, int]] = DEFAULT_METRICS,
    ignore_identical_ids: bool = False,
    per_query_out: dict | None = None,
) -> dict[str, float]:
    """Mean nDCG@10, MRR@10, R@100, R@1000 over queries, as BEIR/MTEB report them (pytrec_eval).

    ``corpus_ids`` (the corpus ids, indexed by row) gives trec_eval's tie order
    and lets a cutoff deeper than the ranking count as complete when the ranking
    holds the whole corpus.  A cutoff k deeper than the ranking (and than the
    corpus) is left out with a warning, since it would underestimate.

    ``ignore_identical_ids`` drops results whose document id equals the query
    id before scoring (BEIR's and MTEB's default for sets whose queries are also
    documents); it is off by default, as in trec_eval and Pyserini's BEIR
    regressions.  ``per_query_out``, if given, receives the per-query arrays.
    """
    if ignore_identical_ids:
        if corpus_ids is None:
            raise ValueError("ignore_identical_ids needs corpus_ids")
        ranking = _drop_identical(ranking, queries, corpus_ids)
    n_docs = None if corpus_ids is None else len(corpus_ids)
    kept = complete_metrics(ranking, metrics, n_docs)
    values = per_query(ranking, queries, kept, corpus_ids) if kept else {}
    if per_query_out is not None:
        per_query_out.update(values)
    return {label: float(v.mean()) if len(v) else 0.0 for label, v in values.items()}


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
