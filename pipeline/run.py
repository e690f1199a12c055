"""Retrieve, select, read and score: ``python -m pipeline.run``.

The command-line face of :func:`pipeline.experiment.run_experiment`: flags
(or ``--config FILE``) become one typed :class:`pipeline.config.RunConfig`,
the experiment runs, and its headline metrics are printed.

Without ``--reader`` it evaluates retrieval only (ReQA MRR/R@k, plus BEIR's
nDCG@10/MRR@10/R@100/R@1000 for BEIR/MTEB sets).  With a reader it selects n
passages per question (``--selector``), reads them and scores the answers
(EM, F1, ROUGE-L, METEOR, optionally BERT-F1).

Outputs in ``--out DIR``: metrics.json, run.trec (the whole ranking, ``--depth`` hits per
question: what the retrieval metrics are computed from), manifest.json and,
with a reader, predictions.json (SQuAD-style id -> answer), details.jsonl and
selector.json.  They are written together at the end (metrics.json last): a
run that fails or is killed leaves none of them half-written.

Long stages resume: corpus embeddings are cached in shards and reads in
``<out>/reads``, so rerunning the same command after a crash skips the work
already done and writes byte-identical outputs (timings only go to
manifest.json).  ``--engine ray`` runs encoding, reading and BM25 search on a
Ray cluster (:mod:`pipeline.ray_engine`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.cli import config_from_argv, main_guard, print_table, retrieval_levels
from pipeline.config import RunConfig



def percent_metrics() -> list[str]:
    """The reading values printed as percent: the answer metrics that say so, and answer recall."""
    from eval.registry import answer_metric_names

    return answer_metric_names(percent=True) + ["answer_recall"]


def parse_config(argv: list[str] | None = None) -> tuple[RunConfig, dict]:
    """``(config, flags)`` from the command line (``--config FILE`` filled in by the flags given)."""
    return config_from_argv(RunConfig, argv, "python -m pipeline.run", __doc__.splitlines()[0])


@main_guard
def main(argv: list[str] | None = None) -> int:
    from pipeline.experiment import check_environment, run_experiment

    config, flags = parse_config(argv)
    check_environment(config)
    result = run_experiment(config, flags=flags)
    _print_summary(result.metrics, result.out)
    return 0


def _print_summary(metrics: dict, out: Path) -> None:
    r = metrics["retrieval"]["reqa"]
    rows = [("corpus", metrics["corpus_size"]), ("query inputs", r["query_inputs"]), ("questions", r["questions"])]
    for level, label in retrieval_levels(metrics):
        for k, v in r[level].items():
            rows.append((f"{label} {k}", v))
    for k, v in metrics["retrieval"].get("beir", {}).items():
        rows.append((f"beir {k}", v))
    for k, v in metrics["retrieval"].get("dpr", {}).get("accuracy", {}).items():
        rows.append((f"dpr {k} accuracy", v))
    percent = percent_metrics()
    for k, v in metrics.get("reading", {}).items():
        if k in percent and isinstance(v, (int, float)):
            rows.append((f"reader {k} (%)", round(100.0 * v, 2)))  # metrics.json keeps the fraction
        elif isinstance(v, (int, float)):
            rows.append((f"reader {k}", v))
    errors = metrics.get("reading", {}).get("errors")
    if errors:  # the headline split of wrong answers (EM 0) into its two kinds
        rows.append(("wrong answers (%)", f"{100 * errors['wrong']:.2f} = retrieval misses {100 * errors['retrieval_misses']:.2f}"
                                          f" + reading misses {100 * errors['reading_misses']:.2f}"))
    print_table(rows, title=f"{metrics['dataset']} {metrics['split']} / {metrics['retriever']} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
