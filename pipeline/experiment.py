"""One experiment from a typed config: load -> retrieve -> select -> read -> score -> write.

:func:`run_experiment` is what ``python -m pipeline.run`` does after parsing
its flags, and what a notebook calls with a :class:`pipeline.config.RunConfig`
(see docs/api.md).  Without a reader it evaluates retrieval only (ReQA
MRR/R@k, plus BEIR's nDCG@10/MRR@10/R@100/R@1000 for BEIR/MTEB sets and DPR
top-k accuracy for open-domain sets).  With a reader it selects n passages
per question (``config.selector``), reads them and scores the answers.

Outputs in ``config.out``: metrics.json, run.trec (top 100), qrels and
queries, per_query.jsonl, manifest.json and, with a reader, predictions.json,
details.jsonl and selector.json.  They are written together at the end
(metrics.json last): a run that fails or is killed leaves none of them
half-written.  Long stages resume from their caches (corpus embeddings in
shards, reads in ``<out>/reads``), so the same config run again after a
crash skips the work already done and writes byte-identical outputs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from data.errors import UserError
from data.io import write_json
from pipeline.config import RunConfig


@dataclass
class RunResult:
    """What a run gives back: its metrics (as in metrics.json), its output directory and manifest."""

    metrics: dict
    out: Path
    manifest: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------- load
def load_data(config: RunConfig, *, train: bool = False):
    """The evaluated split (``train=False``, limited to ``data.limit`` questions) or the training split."""
    from data.registry import load_dataset
    from data.types import limit_queries

    data = config.data
    if train:
        return load_dataset(data.dataset, data.train_split, **data.train_options())
    return limit_queries(load_dataset(data.dataset, data.split, **data.load_options()), data.limit)


def retriever_options(config, language: str = "en") -> dict:
    """Constructor options per retriever kind (``make_retriever``'s ``options``), with per-language settings
    (Thai: BM25 pre-tokenized with newmm)."""
    options = config.retriever.constructor_options(seed=config.seed if hasattr(config, "seed") else 13, device=config.device)
    if language == "th":
        from data.thai import thai_word_tokens

        options["bm25"] = dict(options["bm25"], pretokenize=thai_word_tokens)
    return options


def build_retriever(spec: str, options: dict):
    """The (unindexed) retriever a spec names, with the given options per kind."""
    from pipeline import stages

    return stages.build_retriever(spec, options)


# ------------------------------------------------------------------------ run
def run_experiment(config: RunConfig, *, engine=None, flags: dict | None = None) -> RunResult:
    """Run one experiment; see the module docstring.  ``engine`` defaults to the one ``config.engine`` names
    (closed at the end when made here); ``flags`` (the command line's flat view) goes into the manifest."""
    from pipeline.engine import make_engine

    own_engine = engine is None
    if own_engine:
        engine = make_engine(config.engine, device=config.device)
        if hasattr(engine, "check"):
            engine.check()
    try:
        return _run(config, engine, flags)
    finally:
        if own_engine:
            engine.close()


def _run(config: RunConfig, engine, flags: dict | None) -> RunResult:
    from data.io import staged_outputs
    from pipeline import stages
    from pipeline.cli import Timer, make_out_dir, write_manifest
    from pipeline.outputs import skipped_records, write_per_query, write_trec
    from pipeline.scoring import METRICS_SCALE, headline_intervals, retrieval_metrics
    from retrievers.fusion import needs_fit
    from selection import parse_selector

    timer = Timer()
    notes: list[str] = []
    np.random.seed(config.seed)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    reader_model = config.reader.model
    spec = config.retriever.spec
    out = make_out_dir(config.out, f"{config.data.dataset}-{config.data.split}-{spec}"
                       + (f"-{Path(reader_model).name}" if reader_model else ""))
    selector = parse_selector(config.selector) if reader_model else None
    stages.build_retriever(spec, retriever_options(config))  # bad retriever specs and options fail before any work
    reader = None
    if reader_model:
        from pipeline.reading import make_reader

        with timer("load_reader"):
            reader = prepare_reader(make_reader(config.reader, device=config.device, threads=config.threads), engine)
    with timer("load_data"):
        dataset = load_data(config)
    depth = config.retriever.depth
    if depth > len(dataset.corpus):
        depth = len(dataset.corpus)
        notes.append(f"--depth {config.retriever.depth} is more than the {len(dataset.corpus)} candidates in the corpus:"
                     f" every query ranks all {depth}")
        print(f"note: {notes[-1]}", file=sys.stderr)
    options = retriever_options(config, dataset.corpus.language)

    def new_retriever():
        return engine.adapt_retriever(stages.build_retriever(spec, options))

    retriever = new_retriever()
    train = None
    if needs_fit(retriever) or (selector is not None and selector.learned):
        with timer("load_train"):
            train = load_data(config, train=True)
    if reader_model and not dataset.queries.has_answers:
        from data.beir import NO_ANSWERS_MESSAGE

        print(NO_ANSWERS_MESSAGE.format(name=dataset.name), file=sys.stderr)
        reader_model = None
    with timer("retrieve"):
        ranking = stages.retrieve(retriever, dataset, depth, train=train)
    with timer("retrieval_metrics"):
        metrics: dict[str, Any] = {"dataset": dataset.name, "split": dataset.split, "retriever": spec,
                                   "corpus_size": len(dataset.corpus), "level": dataset.level, "scale": METRICS_SCALE}
        per_query: dict = {}
        metrics["retrieval"] = retrieval_metrics(ranking, dataset, per_query)
    saved = {}
    if hasattr(retriever, "to_dict"):
        saved["retriever"] = retriever.to_dict()
    extra = run_facts(retriever, engine)
    if config.data.skip_bad_records:
        extra["skipped_records"] = skipped_records(dataset)
        if train is not None:
            extra["train_skipped_records"] = skipped_records(train)
    if notes:
        extra["notes"] = notes
    with staged_outputs(out) as stage:  # nothing reaches the output directory unless every file was written
        write_trec(stage / "run.trec", ranking, dataset.queries, dataset.corpus, tag=spec)
        from eval.qrels import write_question_files

        write_question_files(stage, dataset.queries, dataset.corpus)  # the qrels run.trec is scored against
        if reader_model:
            from pipeline.reading import run_reader

            reading = run_reader(config, dataset, ranking, selector, train, reader=reader, timer=timer, out=out,
                                 retriever_factory=new_retriever, engine=engine, stage=stage)
            metrics["reading"] = reading["metrics"]
            per_query["reading"] = reading["per_query"]
            extra["reading"] = reading["info"]
            saved["selector"] = selector.to_dict()
        if saved:
            write_json(stage / "selector.json" if "selector" in saved else stage / "learned.json", saved)
        if needs_fit(retriever):
            retriever.save(stage / "retriever")  # fitted router / re-ranker, loadable with its load()
        metrics["ci95"] = headline_intervals(per_query, seed=config.seed)
        write_per_query(stage / "per_query.jsonl", per_query)
        write_json(stage / "metrics.json", metrics)
        sources = dict(dataset.sources)
        if train is not None:
            sources.update({f"train:{k}": v for k, v in train.sources.items()})
        manifest = write_manifest(stage, command="pipeline.run", config=config.to_dict(), seed=config.seed, sources=sources,
                                  timings=timer.timings, extra={"flags": flags or {}, "fingerprint": config.fingerprint(), **extra})
    return RunResult(metrics=metrics, out=out, manifest=manifest, notes=notes)


def prepare_reader(reader, engine):
    """Load the reader here (local engine), or only check it (Ray: the actors load it)."""
    return engine.prepare_reader(reader)


def run_facts(retriever, engine) -> dict:
    """What the manifest records of the execution and the retrievers: engine, shard size, encoders, shards, indexes."""
    from retrievers.base import run_facts as retriever_facts
    from retrievers.dense import default_shard_rows

    return {"engine": engine.info(), "shard_rows": default_shard_rows(), **retriever_facts(retriever)}


def check_environment(config: RunConfig) -> None:
    """What the config cannot know by itself: a GPU that must be here, a read cache that is not a directory."""
    if config.device.startswith("cuda") and config.engine.name == "local":
        from hardware.device import resolve_device

        resolve_device(config.device)
    cache = config.reader.read_cache
    if cache and Path(cache).exists() and not Path(cache).is_dir():
        raise UserError(f"--read-cache {cache}: not a directory")
