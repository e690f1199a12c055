"""The scoring stage's retrieval half: ReQA/BEIR/DPR means, per-question values, bootstrap intervals."""

from __future__ import annotations

METRICS_SCALE = "fraction"  # every metric in metrics.json lies in [0, 1] (EM and F1 were percent before)


def retrieval_metrics(ranking, dataset, per_query: dict | None = None) -> dict:
    """Every registered retrieval-metric family that applies to the dataset (ReQA always, BEIR on graded sets,
    DPR on open-domain sets); ``per_query`` receives ``{"retrieval": {"ids": [...], "rr": [...], ...}}``."""
    from eval.retrieval_families import retrieval_metrics as families

    return families(ranking, dataset, per_query)


def reading_headline() -> list[str]:
    """The per-question reading values that get a bootstrap interval: every answer metric, and answer recall."""
    from eval.registry import answer_metric_names

    return answer_metric_names() + ["answer_recall"]


def headline_intervals(per_query: dict, seed: int = 0, n_resamples: int = 1000) -> dict:
    """95% percentile-bootstrap intervals over questions of the headline means (``eval.significance``)."""
    from eval.retrieval_families import headline
    from eval.significance import bootstrap_ci

    out: dict = {"method": f"percentile bootstrap over questions, {n_resamples} resamples, seed {seed}"}
    for name, key in headline().items():
        if name in per_query.get("retrieval", {}):
            out[key] = list(bootstrap_ci(per_query["retrieval"][name], n_resamples, seed))
    for name in reading_headline():
        if name in per_query.get("reading", {}):
            out[f"reading.{name}"] = list(bootstrap_ci(per_query["reading"][name], n_resamples, seed))
    return out
