"""One experiment from a typed config: load -> retrieve -> select -> read -> score -> write.

:func:`run_experiment` is what ``python -m pipeline.run`` does after parsing
its flags, and what a notebook calls with a :class:`pipeline.config.RunConfig`
(see docs/api.md).  Without a reader it evaluates retrieval only (ReQA
MRR/R@k, plus BEIR's nDCG@10/MRR@10/R@100/R@1000 for BEIR/MTEB sets and DPR
top-k accuracy for open-domain sets).  With a reader it selects n passages
per question (``config.selector``), reads them and scores the answers.

Outputs in ``config.out``: metrics.json, run.trec (the whole ranking the metrics are computed from; with
``--rerank`` the re-ranked one, and run.first-stage.trec the ranking before it), qrels and
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
from retrievers.base import release

# every file (and folder) pipeline.run may write into --out, besides its read cache
RUN_OUTPUTS = ("metrics.json", "manifest.json", "run.trec", "run.first-stage.trec", "per_query.jsonl", "qrels.tsv", "qrels.trec", "queries.jsonl",
               "predictions.json", "details.jsonl", "costs.jsonl", "selector.json", "learned.json", "retriever")


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
    options = config.retriever.constructor_options(seed=getattr(config, "seed", None), device=config.device)
    if options.get("rerank") and getattr(config, "threads", None):  # --threads reaches the cross-encoder as the reader
        options["rerank"]["num_threads"] = config.threads
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
    from pipeline import stages
    from pipeline.cli import Timer
    from pipeline.scoring import METRICS_SCALE, retrieval_metrics
    from retrievers.fusion import needs_fit

    timer = Timer()
    out, selector, reader = _prepare(config, engine, timer)  # bad specs, options and models fail before any work
    with timer("load_data"):
        dataset = load_data(config)
    notes: list[str] = []
    depth = _depth_within(config.retriever.depth, len(dataset.corpus), notes)
    options = retriever_options(config, dataset.corpus.language)

    def new_retriever():
        return engine.adapt_retriever(stages.build_retriever(config.retriever.spec, options))

    retriever = new_retriever()
    train = None
    if needs_fit(retriever) or (selector is not None and selector.needs_fit()) or getattr(reader, "shots", 0):
        with timer("load_train"):
            train = load_data(config, train=True)
    if reader is not None and not dataset.queries.has_answers:
        from data.beir import NO_ANSWERS_MESSAGE

        print("note: " + NO_ANSWERS_MESSAGE.format(name=dataset.name), file=sys.stderr)
        reader = None
    with timer("retrieve"):
        ranking = stages.retrieve(retriever, dataset, depth, train=train)
    with timer("retrieval_metrics"):
        metrics: dict[str, Any] = {"dataset": dataset.name, "split": dataset.split, "retriever": config.retriever.spec,
                                   "corpus_size": len(dataset.corpus), "level": dataset.level, "scale": METRICS_SCALE}
        per_query: dict = {}
        metrics["retrieval"] = retrieval_metrics(ranking, dataset, per_query)
    extra = {**run_facts(retriever, engine), **_data_facts(config, dataset, train)}
    # the ranking is all that is searched: the index's readers and mapped files go before the reading, so a run
    # over 21M passages does not hold Lucene's 2 GiB of index pages beside the reader (to_dict and save need none)
    release(retriever)
    if notes:
        extra["notes"] = notes
    def read(stage: Path) -> dict:  # the reading stage: select, read, answer, score (into the staged outputs)
        from pipeline.reading import run_reader

        return run_reader(config, dataset, ranking, selector, train, reader=reader, timer=timer, out=out,
                          retriever_factory=new_retriever, engine=engine, stage=stage)

    manifest = _write(config, out, dataset, train, ranking, retriever, selector, metrics, per_query,
                      read if reader is not None else None, extra, flags, timer)
    return RunResult(metrics=metrics, out=out, manifest=manifest, notes=notes)


def _prepare(config: RunConfig, engine, timer):
    """Seed, threads, the output directory, the selector and the reader (loaded), and a check that the retriever
    spec builds: everything that can fail on a bad setting, before any data is read."""
    from pipeline import stages
    from pipeline.cli import make_out_dir
    from selection import parse_selector

    np.random.seed(config.seed)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    model = config.reader.model
    out = make_out_dir(config.out, f"{config.data.dataset}-{config.data.split}-{config.retriever.spec}"
                       + (f"-{Path(model).name}" if model else ""))
    selector = parse_selector(config.selector) if model else None
    from retrievers.rerank import check_rerankers

    check_rerankers(stages.build_retriever(config.retriever.spec, retriever_options(config)))
    reader = None
    if model:
        from pipeline.reading import make_reader

        check_reader_source(model)
        with timer("load_reader"):
            reader = engine.prepare_reader(make_reader(config.reader, device=config.device, threads=config.threads))
    return out, selector, reader


def _depth_within(depth: int, corpus_size: int, notes: list[str]) -> int:
    """The retrieval depth, at most the corpus (with a note when the setting asked for more)."""
    if depth <= corpus_size:
        return depth
    notes.append(f"--depth {depth} is more than the {corpus_size} candidates in the corpus: every query ranks all {corpus_size}")
    print(f"note: {notes[-1]}", file=sys.stderr)
    return corpus_size


def _data_facts(config: RunConfig, dataset, train) -> dict:
    """Records skipped by ``--skip-bad-records`` (the manifest's)."""
    if not config.data.skip_bad_records:
        return {}
    from pipeline.outputs import skipped_records

    facts = {"skipped_records": skipped_records(dataset)}
    if train is not None:
        facts["train_skipped_records"] = skipped_records(train)
    return facts


def _write(config, out, dataset, train, ranking, retriever, selector, metrics, per_query, read, extra, flags, timer) -> dict:
    """The writing stage: every output staged and published together (metrics.json last); reading, when asked,
    runs inside it because it writes predictions.json and details.jsonl beside the rest."""
    from data.io import staged_outputs
    from eval.qrels import write_question_files
    from pipeline.cli import write_manifest
    from pipeline.outputs import write_per_query, write_trec
    from pipeline.scoring import headline_intervals
    from retrievers.fusion import needs_fit
    from retrievers.rerank import rerankers_of

    saved = {"retriever": retriever.to_dict()} if hasattr(retriever, "to_dict") else {}
    # nothing reaches the output directory unless every file was written; what an earlier run with other settings
    # wrote there and this one does not (a reader's files after a retrieval-only rerun) is removed
    with staged_outputs(out, outputs=RUN_OUTPUTS) as stage:
        reranked = rerankers_of(retriever)
        tag = config.retriever.spec + ("+rerank" if reranked else "")
        write_trec(stage / "run.trec", ranking, dataset.queries, dataset.corpus, tag=tag)
        if reranked and reranked[0].first_stage is not None:  # the ranking before re-ranking, same ids and depth
            write_trec(stage / "run.first-stage.trec", reranked[0].first_stage, dataset.queries, dataset.corpus,
                       tag=config.retriever.spec)
        write_question_files(stage, dataset.queries, dataset.corpus)  # the qrels run.trec is scored against
        if read is not None:
            reading = read(stage)
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
        return write_manifest(stage, command="pipeline.run", config=config.to_dict(), seed=config.seed, sources=sources,
                              timings=timer.timings, extra={"flags": flags or {}, "fingerprint": config.fingerprint(), **extra})


def run_facts(retriever, engine) -> dict:
    """What the manifest records of the execution and the retrievers: engine, shard size, encoders, shards, indexes."""
    from retrievers.base import run_facts as retriever_facts
    from retrievers.dense import default_shard_rows

    return {"engine": engine.info(), "shard_rows": default_shard_rows(), **retriever_facts(retriever)}


def local_readers() -> list[Path]:
    """Extractive QA checkpoints beside the data (``<data dir>/../models/*`` holding a ``config.json`` whose
    architecture answers questions), e.g. ``../shared/models/minilm-squad-reader``."""
    import json

    from data.locations import data_dir

    root = data_dir()
    if root is None or not (root.parent / "models").is_dir():
        return []
    found = []
    for config in sorted((root.parent / "models").glob("*/config.json")):
        try:
            architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
        except (OSError, ValueError, AttributeError):
            continue
        if any(str(a).endswith("ForQuestionAnswering") for a in architectures):
            found.append(config.parent)
    return found


def check_reader_source(model: str) -> None:
    """A reader named by hub name -- an alias (``bert-base``) or ``org/model`` -- when the hub is not to be used: it
    must be in the local HF cache, else one error line naming a local directory to pass instead, before anything is
    loaded and without the hub client's retries (one probe, :mod:`data.hub`).  Paths, bare names that are no alias
    of ours (a reader's own aliases) and specs with a kind or options (``KIND:MODEL[...]``) are left to the
    reader's own checks."""
    from data import hub
    from readers.extractive import ALIASES
    from readers.generative import ALIASES as PACKAGED
    from readers.registry import parse_reader_spec

    spec = model
    kind, model, _ = parse_reader_spec(spec)
    if kind not in ("extractive", "generative") or model in PACKAGED:
        return
    if kind != "extractive":
        ALIASES = {}
    name = ALIASES.get(model, model)
    if model not in ALIASES and (name.count("/") != 1 or ":" in name or "[" in name or name.startswith((".", "/", "~")) or "\\" in name
                                 or Path(name).expanduser().exists()):
        return
    if not hub.offline() or hub.cached_locally(name):
        return
    local = local_readers() if kind == "extractive" else []
    instead = f", e.g. --reader {hub.shown_path(local[0])}" if local else ""
    if kind == "generative":
        instead = ", a .gguf file, or a packaged model: --reader generative:smollm2-135m-instruct"
    raise UserError(f"--reader {spec}: {name} is a Hugging Face hub model, not in the local HF cache ({hub.cache_dir()}),"
                    f" and {hub.why_offline()}; pass --reader DIR, a local checkpoint directory{instead}")


def check_environment(config: RunConfig) -> None:
    """What the config cannot know by itself: a GPU that must be here, a read cache that is not a directory."""
    if config.device.startswith("cuda") and config.engine.name == "local":
        from hardware.device import resolve_device

        resolve_device(config.device)
    cache = config.reader.read_cache
    if cache and Path(cache).exists() and not Path(cache).is_dir():
        raise UserError(f"--read-cache {cache}: not a directory")
    scores = config.retriever.rerank_cache
    if scores and Path(scores).exists() and not Path(scores).is_dir():
        raise UserError(f"--rerank-cache {scores}: not a directory")
