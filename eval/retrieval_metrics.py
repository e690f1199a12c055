"""ReQA retrieval metrics: MRR and recall@k, sentence- and paragraph-level.

Ahmad et al. 2019 ("ReQA: An Evaluation for End-to-End Answer Retrieval
Models"), as their reference evaluation computes them:

* ranks of tied scores are averaged (``scipy.stats.rankdata`` "average");
* a query input's rank is the best rank of any of its gold candidates;
* each unique question (keyed by its text) keeps its best rank over its query
  inputs; MRR is the mean of 1/rank over unique questions and R@k the fraction
  with rank <= k;
* paragraph level: a paragraph's score is the rank of its best sentence, the
  paragraphs are ranked by it (ties averaged), and the query's rank is the best
  rank of a paragraph holding a gold sentence.

Ranks are computed within the retrieved depth K.  A gold candidate that is
not in the top K counts as rank infinity (1/rank = 0), so a depth-K MRR is
below the full-ranking MRR by at most ``missed / (K + 1)`` per question; the
count of such questions is reported.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.types import Corpus, Queries
from data.types import Ranking

DEFAULT_CUTOFFS = (1, 5, 10)


def average_ranks(scores: np.ndarray) -> np.ndarray:
    """Tie-averaged 1-based ranks of ``scores`` (higher score = better rank)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s
    greater = np.searchsorted(np.sort(-s), -s, side="left")  # number strictly better
    equal = np.searchsorted(np.sort(-s), -s, side="right") - greater
    return greater + (equal + 1) / 2.0


def query_ranks(ranking: Ranking, queries: Queries, corpus: Corpus) -> tuple[np.ndarray, np.ndarray]:
    """Sentence- and paragraph-level rank of the best gold result per query input."""
    n = len(queries)
    if len(ranking) != n:
        raise ValueError(f"ranking has {len(ranking)} rows for {n} queries")
    sent = np.full(n, np.inf)
    para = np.full(n, np.inf)
    pids_all = corpus.paragraph_ids
    for q in range(n):
        row = ranking.ids[q]
        valid = row >= 0
        ids = row[valid]
        if ids.size == 0:
            continue
        ranks = average_ranks(ranking.scores[q][valid])
        gold = queries.gold[q]
        is_gold = np.isin(ids, gold)
        if is_gold.any():
            sent[q] = ranks[is_gold].min()
        # paragraph ranks: best sentence rank per paragraph, then averaged ranks
        pids = pids_all[ids]
        uniq, inv = np.unique(pids, return_inverse=True)
        best = np.full(uniq.size, np.inf)
        np.minimum.at(best, inv, ranks)
        pranks = average_ranks(-best)
        gold_p = np.isin(uniq, pids_all[gold])
        if gold_p.any():
            para[q] = pranks[gold_p].min()
    return sent, para


def best_per_question(ranks: np.ndarray, question_keys: Sequence[str]) -> dict[str, float]:
    """Each unique question keeps its best (lowest) rank over its query inputs."""
    best: dict[str, float] = {}
    for key, r in zip(question_keys, ranks):
        if r < best.get(key, np.inf):
            best[key] = float(r)
        else:
            best.setdefault(key, float(r))
    return best


def mrr_and_recall(question_ranks: np.ndarray, cutoffs: Sequence[int] = DEFAULT_CUTOFFS) -> dict[str, float]:
    r = np.asarray(question_ranks, dtype=np.float64)
    out = {"MRR": float(np.mean(1.0 / r)) if r.size else 0.0}
    for k in cutoffs:
        out[f"R@{k}"] = float(np.mean(r <= k)) if r.size else 0.0
    return out


def reqa_metrics(
    ranking: Ranking, queries: Queries, corpus: Corpus, cutoffs: Sequence[int] = DEFAULT_CUTOFFS
) -> dict:
    """ReQA metrics for a ranking of ``queries`` over ``corpus``.

    Returns ``{"sentence": {MRR, R@k...}, "paragraph": {...}, "questions": int,
    "query_inputs": int, "depth": K, "not_found_within_depth": int}``.
    """
    sent, para = query_ranks(ranking, queries, corpus)
    s_best = best_per_question(sent, queries.question_keys)
    p_best = best_per_question(para, queries.question_keys)
    s_ranks = np.fromiter(s_best.values(), dtype=np.float64, count=len(s_best))
    p_ranks = np.fromiter(p_best.values(), dtype=np.float64, count=len(p_best))
    return {
        "sentence": mrr_and_recall(s_ranks, cutoffs),
        "paragraph": mrr_and_recall(p_ranks, cutoffs),
        "questions": len(s_best),
        "query_inputs": len(queries),
        "depth": int(ranking.depth),
        "not_found_within_depth": int(np.isinf(s_ranks).sum()),
    }


def reqa_per_question(ranking: Ranking, queries: Queries, corpus: Corpus, cutoffs: Sequence[int] = DEFAULT_CUTOFFS) -> dict[str, np.ndarray]:
    """Per unique question (``eval.qrels`` order and ids): ``rr``, ``r@k`` and ``paragraph_rr``.

    The means of these arrays are :func:`reqa_metrics`' sentence MRR, R@k and
    paragraph MRR exactly (same ranks, same question grouping).
    """
    sent, para = query_ranks(ranking, queries, corpus)
    s = np.fromiter(best_per_question(sent, queries.question_keys).values(), dtype=np.float64)
    p = np.fromiter(best_per_question(para, queries.question_keys).values(), dtype=np.float64)
    out = {"rr": 1.0 / s}
    for k in cutoffs:
        out[f"r@{k}"] = (s <= k).astype(np.float64)
    out["paragraph_rr"] = 1.0 / p
    return out


def first_relevant_rank(ranking: Ranking, queries: Queries, none: int | None = None) -> np.ndarray:
    """1-based position of the first gold result per query (``none``, default K+1, if absent)."""
    is_gold = np.zeros(ranking.ids.shape, dtype=bool)
    for q, gold in enumerate(queries.gold):
        is_gold[q] = np.isin(ranking.ids[q], gold) & (ranking.ids[q] >= 0)
    found = is_gold.any(axis=1)
    first = np.where(found, is_gold.argmax(axis=1) + 1, none if none is not None else ranking.depth + 1)
    return first.astype(np.int64)
