"""The reading half of ``pipeline.run``: select n, read, answer, score."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from data.errors import UserError
from data.io import write_json, write_jsonl
from pipeline import stages
from pipeline.config import ReaderConfig, RunConfig
from retrievers.base import release


DEFAULT_SELECTOR_DEPTH = 25  # passages an unbounded selector (the oracle) may read


def selector_depth(selector, default: int = DEFAULT_SELECTOR_DEPTH) -> int:
    """How many passages the selector may ask for (the N read at most): its declared ``max_depth``."""
    return int(selector.max_depth or default)


def make_reader(reader: ReaderConfig, *, device: str = "auto", threads: int | None = None, pairs_per_chunk: int | None = None):
    """The reader a :class:`pipeline.config.ReaderConfig` describes (nothing loaded yet): its spec's kind
    (:data:`readers.registry.READERS`) built with the config's settings that kind takes, then ``reader.options``
    and the spec's bracket options.

    An extractive reader's reads reach the read cache every ``pairs_per_chunk`` pairs (default ``$QA_SHARD_ROWS``).
    """
    from readers.registry import make_reader as build
    from retrievers.dense import default_shard_rows

    settings = {"device": device, "dtype": reader.dtype, "num_threads": threads, "batch_size": reader.batch_size,
                "max_batch_tokens": reader.token_budget}
    if reader.kind == "extractive":
        settings.update(max_length=reader.max_length, stride=reader.stride, max_answer_tokens=reader.max_answer_tokens,
                        pairs_per_chunk=pairs_per_chunk or default_shard_rows(), backend=reader.backend)
    return build(reader.model, reader.options, **settings)


def fit_selector(selector, train, retriever_factory, depth: int, read_unit: str, train_limit: int | None, timer, *,
                 reader=None, cache=None, mu: float = 1.0, split: str | None = None) -> None:
    """Fit a learned selector on the training split's rankings (and, with the reader in the loop, its reads);
    never on the evaluated split (``split``)."""
    from data.types import limit_queries

    if train is None:
        raise UserError(f"selector {selector.spec} is learned: it needs a training split (--train-split)")
    if split is not None and train.split == split:
        raise UserError(f"selector {selector.spec} is learned: --train-split {train.split} is the evaluated split; "
                        "fit it on another split")
    if getattr(selector, "reads_answers", False):
        train_limit = min(train_limit or selector.fit_questions, selector.fit_questions)
    with timer("selector_fit"):
        train = limit_queries(train, train_limit)
        retriever = retriever_factory()
        try:
            ranking = stages.retrieve(retriever, train, depth, train=train)
        finally:  # its index is not searched again: its mapped files go before the reading
            release(retriever)
        stages.fit_selector(selector, train, ranking, depth, read_unit, reader=reader, cache=cache, mu=mu)


def run_reader(config: RunConfig, dataset, ranking, selector, train, retriever_factory, timer, out: Path, reader=None,
               engine=None, stage: Path | None = None) -> dict:
    """Select, read, answer and score; writes predictions.json, details.jsonl and costs.jsonl into ``stage``
    (default ``out``).

    ``config`` gives the reader, metrics and selector-training settings.
    Reads are cached in ``reader.read_cache`` (default ``<out>/reads``, so a rerun
    of the same command resumes from the chunks already read) and run on
    ``engine`` (default: this process).  A selector with the reader in the loop
    (``confidence``) reads rank by rank and stops each question where it says
    (:func:`pipeline.stages.read_until`); every other selector's n passages are
    read in one go.  Returns ``{"metrics": ..., "info": ..., "per_query":
    ...}``; ``info`` (reads done and reused, reader seconds) belongs in the
    manifest, never in metrics.json, so a resumed run writes the same metrics
    as an uninterrupted one.
    """
    from pipeline.engine import EngineReader, LocalEngine
    from readers.extractive import ReadCache
    from readers.registry import is_set_reader

    engine = engine or LocalEngine()
    stage = Path(stage) if stage is not None else out
    rc = config.reader
    reader = reader or make_reader(rc, device=config.device, threads=config.threads)
    if is_set_reader(reader):  # a generative reader: all n passages at once
        from pipeline.generation import run_generative_reader

        return run_generative_reader(config, dataset, ranking, selector, train, retriever_factory, timer, out, reader, stage)
    depth = min(selector_depth(selector), ranking.depth)
    cache = ReadCache(Path(rc.read_cache) if rc.read_cache else out / "reads")
    if selector.needs_fit():
        fit_selector(selector, train, retriever_factory, depth, rc.read_unit, config.data.train_limit, timer,
                     reader=EngineReader(reader, engine), cache=cache, mu=rc.mu, split=dataset.split)
    found = stages.candidates_for(dataset, ranking, depth, rc.read_unit)
    qs, bearing = found.queries, found.bearing
    if getattr(selector, "reads_answers", False):
        with timer("read"):
            reads, n, seconds = stages.read_until(selector, EngineReader(reader, engine), qs.texts, found.passages,
                                                  cache=cache, mu=rc.mu, progress=len(qs) >= 2000)
        selected = stages.take_top(found.passages, n)
    else:
        n = stages.select_n(selector, found.passages, found.first_relevant())
        selected = stages.take_top(found.passages, n)
        with timer("read"):
            t0 = time.perf_counter()
            reads = stages.read_top(EngineReader(reader, engine), qs.texts, selected, cache=cache)
            seconds = (time.perf_counter() - t0) * n / max(int(n.sum()), 1)  # shared by passages read
    answers, chosen = stages.answers_for_n(reads, selected, n, mu=rc.mu)
    with timer("answer_metrics"):
        scored = score_answers(answers, qs, bearing, n, config)
    tail = ("errors", "bert_f1_info")  # metrics.json keeps its key order: the run's facts before these
    summary = {k: v for k, v in scored["summary"].items() if k not in tail}
    summary.update({"selector": selector.spec, "read_unit": rc.read_unit, "reader": rc.model})
    summary.update({k: scored["summary"][k] for k in tail if k in scored["summary"]})
    info = {"reads_done": reads.n_read, "reads_reused": reads.n_reused, "read_cache": str(cache.directory),
            "passages_read": int(n.sum()), "reader_s": round(float(seconds.sum()), 3),
            **engine.reader_facts(reader), **scored["info"]}
    write_json(stage / "predictions.json", dict(zip(qs.question_ids, answers)))
    write_jsonl(stage / "details.jsonl", detail_rows(qs, dataset.corpus, selected, n, reads, answers, chosen, bearing, scored))
    write_jsonl(stage / "costs.jsonl", cost_rows(qs.question_ids, n, seconds))
    return {"metrics": summary, "info": info, "per_query": scored["per_query"]}


def cost_rows(question_ids, n: np.ndarray, seconds: np.ndarray) -> list[dict]:
    """costs.jsonl: per question the passages read and the reader seconds spent on them (wall time shared by the
    passages of each batch; reads served by the read cache cost next to nothing, so a resumed run's seconds differ)."""
    return [{"id": qid, "passages_read": int(k), "reader_s": round(float(s), 6)} for qid, k, s in zip(question_ids, n, seconds)]


def score_answers(answers: list[str], queries, bearing: np.ndarray, n: np.ndarray, config: RunConfig) -> dict:
    """The scoring stage's answer half: every answer metric asked for, answer recall and the error split.

    Returns ``{"summary": means for metrics.json, "per_query": per-question values, "values": the metric arrays,
    "recall": answer-bearing passage read, "errors": error kind per question, "info": for the manifest}``.
    """
    from eval.answer_metrics import answer_metrics

    language = queries.language
    scores = answer_metrics(answers, queries.answers, language=language, metrics=tuple(config.metrics.answer),
                            options=config.metrics.options(language, config.device))
    recall = np.array([bearing[q, : n[q]].any() for q in range(len(answers))])
    summary = {name: float(np.nanmean(v)) for name, v in scores.items()}  # fractions in [0, 1], every metric
    summary.update({"questions": len(answers), "mean_n": float(n.mean()), "answer_recall": float(recall.mean())})
    split = error_split(answers, queries.answers, recall, language)
    summary["errors"] = split["summary"]
    per_query = {"ids": list(queries.question_ids), **{name: v for name, v in scores.items()},
                 "answer_recall": recall.astype(np.float64), "n": n.astype(np.int64), "error": split["kind"]}
    info: dict = {}
    metric_info = getattr(scores, "info", {}) or {}
    if "bert_f1" in metric_info:
        bert_info = dict(metric_info["bert_f1"])
        info["bert_f1_pairs"] = {"scored": bert_info.pop("pairs_scored", None), "cached": bert_info.pop("pairs_cached", None)}
        summary["bert_f1_info"] = bert_info  # model, layer, rescaling, versions: what produced the number
        if bert_info.get("note"):
            print(f"note: {bert_info['note']}", file=sys.stderr)
    return {"summary": summary, "per_query": per_query, "values": scores, "recall": recall, "errors": split["kind"], "info": info}


def detail_rows(queries, corpus, selected, n, reads, answers, chosen, bearing, scored) -> list[dict]:
    """details.jsonl: per question what was read, in rank order, the answer chosen and its scores."""
    rows = []
    for q in range(len(answers)):
        keys = [int(k) for k in selected.keys[q, : n[q]]]
        rows.append(
            {
                "id": queries.question_ids[q],
                "question": queries.texts[q],
                "n": int(n[q]),
                "passages": [corpus.ids[k] for k in keys] if selected.unit == "sentence" else keys,
                "answer": answers[q],
                "answer_rank": int(chosen[q]) + 1 if chosen[q] >= 0 else None,
                "score": float(reads.scores[q, chosen[q]]) if chosen[q] >= 0 else None,
                "answer_in_passages": bool(scored["recall"][q]),
                "gold": queries.answers[q],
                **{name: (None if np.isnan(v[q]) else float(v[q])) for name, v in scored["values"].items()},
                "error": scored["errors"][q],
                # what was read, in rank order (pipeline.report shows it): text, retriever score, the reader's span
                "read": [{"rank": j + 1, "text": selected.texts[q][j], "retriever_score": float(selected.retriever_scores[q, j]),
                          "span": reads.texts[q][j], "reader_score": float(reads.scores[q, j]),
                          "answer_bearing": bool(bearing[q, j])} for j in range(int(n[q]))],
            }
        )
    return rows


def error_split(answers, golds, answer_read, language: str = "en") -> dict:
    """Wrong answers (EM 0) split into *retrieval misses* (no answer-bearing passage was read) and
    *reading misses* (one was read, another answer chosen).  ``kind[q]``: None (right), "retrieval" or "reading"."""
    from eval.answer_metrics import exact_match

    kind: list = []
    for pred, gold, read in zip(answers, golds, answer_read):
        gold = [g for g in gold if isinstance(g, str)]
        if not gold or exact_match(pred, gold, language) == 1.0:
            kind.append(None)
        else:
            kind.append("reading" if read else "retrieval")
    q = max(len(kind), 1)
    wrong = sum(k is not None for k in kind)
    retrieval = sum(k == "retrieval" for k in kind)
    return {"kind": kind, "summary": {"wrong": wrong / q, "retrieval_misses": retrieval / q,
                                       "reading_misses": (wrong - retrieval) / q, "questions": len(kind)}}
