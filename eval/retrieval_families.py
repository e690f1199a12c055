"""The built-in retrieval metric families (``reqa``, ``beir``, ``dpr``) and the run's retrieval block.

Each family is a :class:`eval.registry.RetrievalFamily` registered in
:data:`eval.registry.RETRIEVAL_METRICS`; :func:`retrieval_metrics` runs those
that apply to a dataset and returns what ``metrics.json`` holds under
``"retrieval"``, and, given ``per_query``, fills ``per_query["retrieval"]``
with the per-question table of ``per_query.jsonl``.

* ``reqa`` (every dataset): :func:`eval.retrieval_metrics.reqa_metrics`;
  per question ``rr``, ``r@1``, ``r@5``, ``r@10``, ``paragraph_rr``.
* ``beir`` (graded qrels, ``queries.gold_grades is not None``):
  :func:`eval.beir_metrics.beir_metrics` with the corpus ids (trec_eval's tie
  order); per question ``ndcg@10``, ``mrr@10``, ``r@100``, ``r@1000``.
* ``dpr`` (open-domain questions: ``queries.answer_match`` or
  ``queries.has_answer`` set): DPR top-k accuracy
  (:func:`eval.dpr_accuracy.dpr_metrics`) from the ``[Q, K]`` has-answer
  matrix, and ReQA metrics at k = 1, 5, 20, 100 against the gold passages the
  questions themselves name (``known_gold``).  The matrix is
  ``queries.has_answer`` when it belongs to this ranking (set by
  ``pipeline.stages.resolve_open_gold``, which also resolves the ``reqa``
  family's gold and so must run before the metrics), else it is computed here
  with :func:`eval.dpr_accuracy.has_answer_matrix` without changing ``queries``.

The numbers are those ``pipeline.run.retrieval_metrics`` /
``pipeline.stages.open_metrics`` computed before the registry (same functions,
same arguments); ``tests/test_metric_registry.py`` checks it on real data.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from eval.registry import RETRIEVAL_METRICS, RetrievalFamily

DPR_KNOWN_GOLD_CUTOFFS = (1, 5, 20, 100)


# -------------------------------------------------------------------- reqa
def reqa_applies(dataset) -> bool:
    return True


def reqa_compute(ranking, dataset, per_query: dict | None = None) -> dict:
    from eval.retrieval_metrics import reqa_metrics, reqa_per_question

    out = {"reqa": reqa_metrics(ranking, dataset.queries, dataset.corpus)}
    if per_query is not None:
        per_query.update(reqa_per_question(ranking, dataset.queries, dataset.corpus))
    return out


# -------------------------------------------------------------------- beir
def beir_applies(dataset) -> bool:
    return dataset.queries.gold_grades is not None


def beir_compute(ranking, dataset, per_query: dict | None = None) -> dict:
    from eval.beir_metrics import beir_metrics

    values: dict = {}
    out = {"beir": beir_metrics(ranking, dataset.queries, corpus_ids=dataset.corpus.ids, per_query_out=values)}
    if per_query is not None and values:
        from eval.qrels import question_groups

        rows = question_groups(dataset.queries).rows  # per query input -> per question (BEIR: one input each)
        for name, v in values.items():
            per_query[name.lower()] = np.asarray(v)[rows]
    return out


# --------------------------------------------------------------------- dpr
def dpr_applies(dataset) -> bool:
    q = dataset.queries
    return q.has_answer is not None or q.answer_match is not None


def has_answer_for(ranking, dataset) -> np.ndarray:
    """The ``[Q, K]`` has-answer matrix of ``ranking``: ``queries.has_answer`` when it is this ranking's, else computed."""
    queries = dataset.queries
    mask = queries.has_answer
    if mask is not None and mask.shape == ranking.ids.shape:
        return mask
    from eval.dpr_accuracy import has_answer_matrix

    return has_answer_matrix(ranking.ids, dataset.corpus.answer_texts, queries.answers, queries.answer_match,
                             progress=len(queries) >= 2000)


def dpr_compute(ranking, dataset, per_query: dict | None = None) -> dict:
    from eval.dpr_accuracy import dpr_metrics

    queries = dataset.queries
    mask = has_answer_for(ranking, dataset)
    out: dict = {"dpr": {**dpr_metrics(mask, ranking.depth), "match": queries.answer_match}}
    known = queries.known_gold
    if known is not None and any(len(g) for g in known):
        from eval.retrieval_metrics import reqa_metrics

        keep = [q for q, g in enumerate(known) if len(g)]
        sub = queries.subset(keep)
        sub.gold = [np.asarray(known[q], dtype=np.int64) for q in keep]
        out["known_gold"] = reqa_metrics(ranking.subset(keep), sub, dataset.corpus, cutoffs=DPR_KNOWN_GOLD_CUTOFFS)
    return out


REQA = RetrievalFamily(
    "reqa", reqa_compute, reqa_applies, keys=("reqa",),
    headline={"rr": "reqa.sentence.MRR", "r@1": "reqa.sentence.R@1", "r@5": "reqa.sentence.R@5",
              "r@10": "reqa.sentence.R@10", "paragraph_rr": "reqa.paragraph.MRR"},
    description="ReQA MRR and R@1/5/10, sentence and paragraph level (Ahmad et al. 2019)",
)
BEIR = RetrievalFamily(
    "beir", beir_compute, beir_applies, keys=("beir",),
    headline={"ndcg@10": "beir.nDCG@10", "mrr@10": "beir.MRR@10", "r@100": "beir.R@100", "r@1000": "beir.R@1000"},
    description="BEIR/MTEB nDCG@10, MRR@10, R@100, R@1000 by pytrec_eval (graded qrels)",
)
DPR = RetrievalFamily(
    "dpr", dpr_compute, dpr_applies, keys=("dpr", "known_gold"),
    description="DPR top-k accuracy of open-domain questions, and ReQA metrics against their known gold passages",
)


# ----------------------------------------------------------------- the block
def families_for(dataset, names: Iterable[str] | None = None) -> list[RetrievalFamily]:
    """The families that apply to ``dataset`` (all registered ones, built-ins first, or ``names``)."""
    if names is None:
        builtin = RETRIEVAL_METRICS.builtin_names()
        names = builtin + [n for n in RETRIEVAL_METRICS.names() if n not in builtin]
    return [f for f in (RETRIEVAL_METRICS.get(n) for n in names) if f.applies(dataset)]


def retrieval_metrics(ranking, dataset, per_query: dict | None = None, families: Iterable[str] | None = None) -> dict:
    """``metrics["retrieval"]`` of a run: the blocks of every family that applies, in registration order.

    ``per_query``, if given, receives ``per_query["retrieval"]``: ``{"ids":
    [question ids of run.trec/qrels.tsv], name: float64 [G], ...}`` over the
    unique questions (ReQA ``rr``/``r@k``/``paragraph_rr``, BEIR ``ndcg@10``...
    when graded).  A drop-in for ``pipeline.run.retrieval_metrics``.
    """
    result: dict = {}
    table: dict | None = None
    if per_query is not None:
        from eval.qrels import question_groups

        table = {"ids": question_groups(dataset.queries).ids}
    for family in families_for(dataset, families):
        result.update(family.compute(ranking, dataset, table))
    if per_query is not None:
        per_query["retrieval"] = table
    return result


def headline() -> dict[str, str]:
    """per_query.jsonl name -> metrics.json path of the mean it averages to (``retrieval.reqa.sentence.MRR``...)."""
    out: dict[str, str] = {}
    builtin = RETRIEVAL_METRICS.builtin_names()
    for name in builtin + [n for n in RETRIEVAL_METRICS.names() if n not in builtin]:
        for key, path in RETRIEVAL_METRICS.get(name).headline.items():
            out.setdefault(key, f"retrieval.{path}")
    return out
