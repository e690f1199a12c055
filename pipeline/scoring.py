"""The scoring stage's retrieval half: ReQA/BEIR/DPR means, per-question values, bootstrap intervals."""

from __future__ import annotations

import numpy as np

METRICS_SCALE = "fraction"  # every metric in metrics.json lies in [0, 1] (EM and F1 were percent before)


def retrieval_metrics(ranking, dataset, per_query: dict | None = None) -> dict:
    """ReQA (and BEIR) means; ``per_query`` receives ``{"ids": [...], "rr": [...], ...}`` per unique question."""
    from eval.retrieval_metrics import reqa_metrics

    result = {"reqa": reqa_metrics(ranking, dataset.queries, dataset.corpus)}
    beir_values: dict = {}
    if dataset.queries.gold_grades is not None:
        from eval.beir_metrics import beir_metrics

        result["beir"] = beir_metrics(ranking, dataset.queries, corpus_ids=dataset.corpus.ids, per_query_out=beir_values)
    if per_query is not None:
        per_query["retrieval"] = retrieval_per_query(ranking, dataset, beir_values)
    if dataset.queries.has_answer is not None:  # open-domain: DPR top-k accuracy (pipeline.stages.open_metrics)
        from pipeline.stages import open_metrics

        result.update(open_metrics(ranking, dataset))
    return result


def retrieval_per_query(ranking, dataset, beir_values: dict) -> dict:
    """Per unique question (``eval.qrels`` ids): ReQA ``rr``/``r@k``/``paragraph_rr``, BEIR ``ndcg@10``... when graded."""
    from eval.qrels import question_groups
    from eval.retrieval_metrics import reqa_per_question

    groups = question_groups(dataset.queries)
    table = {"ids": groups.ids, **reqa_per_question(ranking, dataset.queries, dataset.corpus)}
    for name, values in beir_values.items():  # per query input; BEIR has one input per question
        table[name.lower()] = np.asarray(values)[groups.rows]
    return table


# per_query.jsonl name -> the metrics.json value it averages to (its bootstrap interval goes in "ci95")
HEADLINE = {
    "rr": "retrieval.reqa.sentence.MRR", "r@1": "retrieval.reqa.sentence.R@1", "r@5": "retrieval.reqa.sentence.R@5",
    "r@10": "retrieval.reqa.sentence.R@10", "paragraph_rr": "retrieval.reqa.paragraph.MRR",
    "ndcg@10": "retrieval.beir.nDCG@10", "mrr@10": "retrieval.beir.MRR@10", "r@100": "retrieval.beir.R@100",
    "r@1000": "retrieval.beir.R@1000",
}
READING_HEADLINE = ("em", "f1", "rouge_l", "meteor", "bert_f1", "answer_recall")


def headline_intervals(per_query: dict, seed: int = 0, n_resamples: int = 1000) -> dict:
    """95% percentile-bootstrap intervals over questions of the headline means (``eval.significance``)."""
    from eval.significance import bootstrap_ci

    out: dict = {"method": f"percentile bootstrap over questions, {n_resamples} resamples, seed {seed}"}
    for name, key in HEADLINE.items():
        if name in per_query.get("retrieval", {}):
            out[key] = list(bootstrap_ci(per_query["retrieval"][name], n_resamples, seed))
    for name in READING_HEADLINE:
        if name in per_query.get("reading", {}):
            out[f"reading.{name}"] = list(bootstrap_ci(per_query["reading"][name], n_resamples, seed))
    return out
