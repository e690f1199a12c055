"""The Python API: every stage of a run, callable from a notebook in a few lines (docs/api.md).

Each function takes and returns the plain types the stages exchange --
:class:`data.types.Dataset`, :class:`data.types.Ranking`, selectors, readers,
metric dicts -- and nothing here reads flags or writes files unless asked
(:func:`run` and :func:`sweep` write their output directory, as the commands do)::

    from pipeline import api

    ds = api.load_dataset("reqa_squad", "dev", limit=100)
    ranking = api.retrieve("bm25", ds, depth=100)
    api.retrieval_metrics(ranking, ds)["reqa"]["sentence"]["MRR"]

The same stages, composed once, are what ``python -m pipeline.run`` and
``python -m pipeline.sweep`` run (:mod:`pipeline.experiment`,
:mod:`pipeline.tradeoff_sweep`), so a number from here equals the command's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from data.errors import UserError
from data.types import Dataset, Ranking
from pipeline.config import RunConfig, SweepConfig, load_config
from pipeline.experiment import RunResult
from pipeline.tradeoff_sweep import SweepResult

__all__ = [
    "RunConfig", "SweepConfig", "RunResult", "SweepResult", "load_config",
    "load_dataset", "make_retriever", "retrieve", "retrieval_metrics", "make_selector", "fit_selector",
    "select", "make_reader", "read", "answer_metrics", "run", "sweep",
]


def load_dataset(name: str, split: str = "dev", *, limit: int | None = None, **options: Any) -> Dataset:
    """A dataset by registered name (``reqa_squad``, ``beir:scifact``, ``squad_file:PATH``, ``open:...``, a plugin's),
    its first ``limit`` questions; ``options`` as :func:`data.registry.load_dataset` (data_dir, data_file, language...)."""
    from data.registry import load_dataset as load
    from data.types import limit_queries

    return limit_queries(load(name, split, **options), limit)


def make_retriever(spec: str = "bm25", options: Mapping[str, Mapping[str, Any]] | None = None, **by_kind: Mapping[str, Any]):
    """The (unindexed) retriever a spec names: ``bm25``, ``dense:MODEL``, ``rrf:bm25+dense``, ``bm25[k1=1.2]``, a plugin's.

    Options per kind as keyword arguments (``bm25={"k1": 1.2}``, ``dense={"model": PATH}``, ``fusion={...}``) or as
    one ``options`` mapping; they are the retrievers' own constructor parameters.
    """
    from retrievers.registry import make_retriever as make

    return make(spec, options={**(options or {}), **by_kind})


def retrieve(retriever, dataset: Dataset, depth: int = 100, *, train: Dataset | None = None) -> Ranking:
    """Index ``dataset``'s corpus and search its queries: a :class:`Ranking` (``ids``/``scores`` ``[Q, depth]``).

    ``retriever`` is a retriever object or a spec string; learned ones (route, mrrank) are fitted on ``train``.
    """
    from pipeline import stages

    if isinstance(retriever, str):
        retriever = make_retriever(retriever)
    return stages.retrieve(retriever, dataset, min(depth, len(dataset.corpus)), train=train)


def retrieval_metrics(ranking: Ranking, dataset: Dataset) -> dict:
    """ReQA MRR/R@k (sentence and paragraph), BEIR's measures on graded sets, DPR top-k accuracy on open sets."""
    from pipeline.scoring import retrieval_metrics as score

    return score(ranking, dataset)


def make_selector(spec: str = "top:5"):
    """A selector by spec: ``top:5``, ``threshold:0.8,25``, ``ordinal:25``, ``gap:25,5``, ``rlt:25``,
    ``confidence:20``, ``oracle``, a plugin's."""
    from selection import parse_selector

    return parse_selector(spec)


def fit_selector(selector, train: Dataset, ranking: Ranking, depth: int | None = None, unit: str = "sentence", *,
                 reader=None, mu: float = 1.0, cache_dir: str | Path | None = None):
    """Fit a (learned) selector on a training split's ranking, as the run does; returns the selector.
    A selector with the reader in the loop (``confidence``) is fitted on ``reader``'s reads of that ranking."""
    from pipeline import stages
    from pipeline.reading import selector_depth

    depth = min(depth or selector_depth(selector), ranking.depth)
    return stages.fit_selector(selector, train, ranking, depth, unit, reader=reader, cache=_cache(cache_dir), mu=mu)


def select(selector, ranking: Ranking, dataset: Dataset, unit: str = "sentence", *, reader=None, mu: float = 1.0,
           cache_dir: str | Path | None = None) -> np.ndarray:
    """How many passages the selector reads per unique question (int ``[questions]``: at least 1, never past the
    passages a question retrieved, so 0 where it retrieved none).  A selector with the reader in the loop reads
    (with ``reader``) in rank order until each question stops."""
    from pipeline import stages
    from pipeline.reading import selector_depth

    found = stages.candidates_for(dataset, ranking, min(selector_depth(selector), ranking.depth), unit)
    if getattr(selector, "reads_answers", False):
        if reader is None:
            raise UserError(f"selector {selector.spec} reads in the loop: select(..., reader=...) needs a reader")
        return stages.read_until(selector, reader, found.queries.texts, found.passages, cache=_cache(cache_dir), mu=mu)[1]
    return stages.select_n(selector, found.passages, found.first_relevant())


def _cache(cache_dir):
    if cache_dir is None:
        return None
    from readers.extractive import ReadCache

    return ReadCache(Path(cache_dir))


def make_reader(model: str, *, device: str = "auto", threads: int | None = None, **settings: Any):
    """An extractive reader (a QA checkpoint path or alias), loaded; ``settings`` as
    :class:`pipeline.config.ReaderConfig` (max_length, stride, dtype, mu, ...)."""
    from pipeline.config import ReaderConfig
    from pipeline.reading import make_reader as make

    reader = make(ReaderConfig(model=str(model), **settings), device=device, threads=threads)
    reader.load()
    return reader


def read(reader, dataset: Dataset, ranking: Ranking, n: Any = 1, *,
         unit: str = "sentence", mu: float = 1.0, cache_dir: str | Path | None = None) -> dict[str, str]:
    """Read each unique question's top ``n`` passages (one n for all, or one per question) and answer:
    ``{question id: answer}``, the run's predictions.json.  ``n`` may also be a reader-in-the-loop selector
    (``confidence``): each question is then read in rank order until it stops.  Reads are cached in
    ``cache_dir`` when given."""
    from pipeline import stages

    if getattr(n, "reads_answers", False):
        from pipeline.reading import selector_depth

        found = stages.candidates_for(dataset, ranking, min(selector_depth(n), ranking.depth), unit)
        reads, counts, _ = stages.read_until(n, reader, found.queries.texts, found.passages, cache=_cache(cache_dir), mu=mu)
        answers, _ = stages.answers_for_n(reads, stages.take_top(found.passages, counts), counts, mu=mu)
        return dict(zip(found.queries.question_ids, answers))
    rows = stages.unique_question_rows(dataset.queries)
    queries = dataset.queries.subset(rows)
    counts = np.broadcast_to(np.asarray(n, dtype=np.int64), (len(rows),))
    depth = int(min(counts.max(initial=1), ranking.depth))
    passages = stages.passages_for(ranking.subset(rows), dataset.corpus, depth, unit)
    counts = np.clip(counts, 1, np.maximum((passages.keys >= 0).sum(axis=1), 1))
    top = stages.take_top(passages, counts)
    reads = stages.read_top(reader, queries.texts, top, cache=_cache(cache_dir))
    answers, _ = stages.answers_for_n(reads, top, counts, mu=mu)
    return dict(zip(queries.question_ids, answers))


def answer_metrics(predictions: Mapping[str, str], dataset: Dataset, metrics: Sequence[str] = ("em", "f1"), **bertscore: Any) -> dict:
    """Mean answer metrics (fractions) of ``{question id: answer}`` against the dataset's gold answers;
    any registered answer metric by name (``bert_f1`` takes BERTScore's options as keywords)."""
    from eval.answer_metrics import answer_metrics as score

    rows, seen = [], set()
    for i, qid in enumerate(dataset.queries.question_ids):
        if qid in predictions and qid not in seen:
            seen.add(qid)
            rows.append(i)
    queries = dataset.queries.subset(rows)
    options = {"bert_f1": {"language": queries.language, **bertscore}} if "bert_f1" in metrics else None
    values = score([predictions[q] for q in queries.question_ids], queries.answers, language=queries.language,
                   metrics=tuple(metrics), options=options)
    return {name: float(np.nanmean(v)) for name, v in values.items()}


def _config(cls, config, overrides: dict):
    from pipeline.config import build_config, set_path

    if isinstance(config, (str, Path)):
        return load_config(cls, config, **overrides)
    if isinstance(config, cls) and not overrides:
        return config
    tree = config.model_dump() if isinstance(config, cls) else dict(config or {})
    for key, value in overrides.items():
        set_path(tree, tuple(key.split(".")), value)
    return build_config(cls, tree)


def run(config: RunConfig | Mapping[str, Any] | str | Path | None = None, **overrides: Any) -> RunResult:
    """A whole experiment (``python -m pipeline.run``) from a config object, a nested dict or a YAML/TOML file;
    ``overrides`` by field path: ``run(cfg, **{"retriever.depth": 100})``.  Returns metrics and the output directory."""
    from pipeline.experiment import run_experiment

    return run_experiment(_config(RunConfig, config, overrides))


def sweep(config: SweepConfig | Mapping[str, Any] | str | Path | None = None, **overrides: Any) -> SweepResult:
    """A whole trade-off sweep (``python -m pipeline.sweep``); returns summary.json's content, its rows and directory."""
    from pipeline.tradeoff_sweep import run_sweep_experiment

    return run_sweep_experiment(_config(SweepConfig, config, overrides))
