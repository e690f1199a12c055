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

# The defaults are the commands': read off the config classes that python -m pipeline.run builds from its flags,
# so a number from here with the defaults equals the command's with its defaults.
_RUN = RunConfig()
DEFAULT_SPLIT: str = _RUN.data.split
DEFAULT_RETRIEVER: str = _RUN.retriever.spec
DEFAULT_DEPTH: int = int(_RUN.retriever.depth)
DEFAULT_SELECTOR: str = _RUN.selector
DEFAULT_UNIT: str = _RUN.reader.read_unit
DEFAULT_MU: float = _RUN.reader.mu
DEFAULT_DEVICE: str = _RUN.device
DEFAULT_METRICS: tuple[str, ...] = tuple(_RUN.metrics.answer)


def _default_n() -> int:
    """The passages the default selector reads (``top:5``: 5)."""
    from selection import parse_selector

    return int(getattr(parse_selector(DEFAULT_SELECTOR), "n", 1))


DEFAULT_N: int = _default_n()


def _unused(function: str, given: dict[str, Any], why: str) -> None:
    """One line for keywords that were given but would change nothing (no argument is accepted and ignored)."""
    names = [k for k, v in given.items() if v is not None]
    if names:
        raise UserError(f"{function}: {', '.join(names)} given but not used: {why}")


def load_dataset(name: str, split: str = DEFAULT_SPLIT, *, limit: int | None = None, **options: Any) -> Dataset:
    """A dataset by registered name (``reqa_squad``, ``beir:scifact``, ``squad_file:PATH``, ``open:...``, a plugin's),
    its first ``limit`` questions; ``options`` as :func:`data.registry.load_dataset`: ``data_dir`` (default: the
    search order of :mod:`data.locations`), ``data_file``, ``skip_bad_records``, ``answer_match`` (``open:`` sets),
    ``language`` (``squad_file:`` and ``open:`` sets); any other is a ``TypeError``."""
    from data.registry import load_dataset as load
    from data.types import limit_queries

    return limit_queries(load(name, split, **options), limit)


def _spec_kinds(spec: str) -> set[str]:
    """The option kinds a retriever spec uses: its retrievers' registered names, and ``fusion`` for a fused one."""
    from retrievers.registry import FUSERS, split_members

    spec = (spec or "").strip()
    head, _, rest = spec.partition(":")
    if head in FUSERS.names():
        return {"fusion"} | {member.partition(":")[0].split("[", 1)[0].strip() for member in split_members(rest)}
    return {head.split("[", 1)[0].strip()}


def make_retriever(spec: str = DEFAULT_RETRIEVER, options: Mapping[str, Mapping[str, Any]] | None = None,
                   **by_kind: Mapping[str, Any]):
    """The (unindexed) retriever a spec names: ``bm25``, ``dense:MODEL``, ``rrf:bm25+dense``, ``bm25[k1=1.2]``, a plugin's.

    Options per kind as keyword arguments (``bm25={"k1": 1.2}``, ``dense={"model": PATH}``, ``fusion={...}``, a
    plugin retriever's name) or as one ``options`` mapping; they are the retrievers' own constructor parameters.
    Options for a kind the spec does not use are an error (``dense={...}`` with ``bm25``).
    ``rerank={"spec": MODEL, "depth": 100, ...}`` re-ranks the retriever's top ``depth`` hits with a cross-encoder
    (``--rerank``; other keys: ``max_length``, ``dtype``, ``batch_size``, ``device``, ``cache_dir``, the scorer's options).
    """
    from retrievers.registry import make_retriever as make

    merged = {**(options or {}), **by_kind}
    unused = sorted(set(merged) - _spec_kinds(spec) - {"rerank"})
    if unused:
        raise UserError(f"make_retriever({spec!r}): options for {', '.join(unused)} given, but the spec uses "
                        f"{', '.join(sorted(_spec_kinds(spec)))}")
    return make(spec, options=merged)


def retrieve(retriever, dataset: Dataset, depth: int = DEFAULT_DEPTH, *, train: Dataset | None = None) -> Ranking:
    """Index ``dataset``'s corpus and search its queries: a :class:`Ranking` (``ids``/``scores`` ``[Q, depth]``,
    ``depth`` at most the corpus; default ``--depth``'s, 1000).

    ``retriever`` is a retriever object or a spec string; learned ones (route, mrrank) are fitted on ``train``
    (which other retrievers refuse).
    """
    from pipeline import stages
    from retrievers.fusion import needs_fit

    if isinstance(retriever, str):
        retriever = make_retriever(retriever)
    if train is not None and not needs_fit(retriever):
        _unused("retrieve", {"train": train}, f"retriever {getattr(retriever, 'name', type(retriever).__name__)!r} "
                                              "is not learned (route, mrrank are)")
    return stages.retrieve(retriever, dataset, min(depth, len(dataset.corpus)), train=train)


def retrieval_metrics(ranking: Ranking, dataset: Dataset) -> dict:
    """ReQA MRR/R@k (sentence and paragraph), BEIR's measures on graded sets, DPR top-k accuracy on open sets."""
    from pipeline.scoring import retrieval_metrics as score

    return score(ranking, dataset)


def make_selector(spec: str = DEFAULT_SELECTOR):
    """A selector by spec: ``top:5``, ``threshold:0.8,25``, ``ordinal:25``, ``gap:25,5``, ``rlt:25``,
    ``confidence:20``, ``oracle``, a plugin's."""
    from selection import parse_selector

    return parse_selector(spec)


def _reading_settings(reader, unit, mu, cache_dir) -> tuple[str, float, Any]:
    """``unit``, ``mu`` and ``cache_dir`` as given, else as :func:`make_reader` was told (``read_unit``, ``mu``,
    ``read_cache``), else the commands' defaults."""
    told = getattr(reader, "api_settings", None) or {}
    return (unit if unit is not None else told.get("read_unit", DEFAULT_UNIT),
            mu if mu is not None else told.get("mu", DEFAULT_MU),
            cache_dir if cache_dir is not None else told.get("read_cache"))


def fit_selector(selector, train: Dataset, ranking: Ranking, depth: int | None = None, unit: str | None = None, *,
                 reader=None, mu: float | None = None, cache_dir: str | Path | None = None):
    """Fit a learned selector on a training split's ranking, as the run does; returns the selector.
    A selector with the reader in the loop (``confidence``) is fitted on ``reader``'s reads of that ranking
    (``mu``, ``cache_dir``: as :func:`read`).  ``unit``: ``sentence`` (default) or ``paragraph``.
    An unlearned selector, or ``reader``/``mu``/``cache_dir`` for one that does not read, is an error."""
    from pipeline import stages
    from pipeline.reading import selector_depth

    if not selector.needs_fit():
        raise UserError(f"fit_selector: selector {selector.spec} is not learned: there is nothing to fit")
    if not getattr(selector, "reads_answers", False):
        _unused("fit_selector", {"reader": reader, "mu": mu, "cache_dir": cache_dir},
                f"selector {selector.spec} does not read answers")
    unit, mu, cache_dir = _reading_settings(reader, unit, mu, cache_dir)
    depth = min(depth or selector_depth(selector), ranking.depth)
    return stages.fit_selector(selector, train, ranking, depth, unit, reader=reader, cache=_cache(cache_dir), mu=mu)


def select(selector, ranking: Ranking, dataset: Dataset, unit: str | None = None, *, reader=None,
           mu: float | None = None, cache_dir: str | Path | None = None) -> np.ndarray:
    """How many passages the selector reads per unique question (int ``[questions]``: at least 1, never past the
    passages a question retrieved, so 0 where it retrieved none).  A selector with the reader in the loop reads
    (with ``reader``; ``mu``, ``cache_dir`` as :func:`read`) in rank order until each question stops; for any
    other, ``reader``, ``mu`` and ``cache_dir`` are an error.  ``unit``: ``sentence`` (default) or ``paragraph``."""
    from pipeline import stages
    from pipeline.reading import selector_depth

    reads = getattr(selector, "reads_answers", False)
    if not reads:
        _unused("select", {"reader": reader, "mu": mu, "cache_dir": cache_dir},
                f"selector {selector.spec} does not read answers")
    unit, mu, cache_dir = _reading_settings(reader, unit, mu, cache_dir)
    found = stages.candidates_for(dataset, ranking, min(selector_depth(selector), ranking.depth), unit)
    if reads:
        if reader is None:
            raise UserError(f"selector {selector.spec} reads in the loop: select(..., reader=...) needs a reader")
        return stages.read_until(selector, reader, found.queries.texts, found.passages, cache=_cache(cache_dir), mu=mu)[1]
    return stages.select_n(selector, found.passages, found.first_relevant())


def _cache(cache_dir):
    if cache_dir is None:
        return None
    from readers.extractive import ReadCache

    return ReadCache(Path(cache_dir))


def make_reader(model: str, *, device: str = DEFAULT_DEVICE, threads: int | None = None, **settings: Any):
    """A reader by spec (``PATH`` or alias: extractive; ``generative:MODEL[opts]``: a language model;
    :mod:`readers.registry`), loaded; ``settings`` as
    :class:`pipeline.config.ReaderConfig`: ``max_length``, ``stride``, ``max_answer_tokens``, ``batch_size``,
    ``token_budget``, ``dtype``, ``backend`` (extractive: ``auto``, ``torch``, ``openvino``) shape the reader; ``read_unit``, ``mu`` and ``read_cache`` become its defaults for
    :func:`read`, :func:`select` and :func:`fit_selector` (their ``unit``, ``mu``, ``cache_dir``).  Any other
    keyword, or a bad value, is one error line naming it."""
    from pipeline.config import ReaderConfig
    from pipeline.experiment import check_reader_source
    from pipeline.reading import make_reader as make

    from pydantic import ValidationError

    try:
        config = ReaderConfig(model=str(model), **settings)
    except ValidationError as e:  # an unknown keyword or a bad value, with its field name
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        raise UserError(f"make_reader: {where}: {first.get('msg', e)}") from None
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserError(f"make_reader: threads {threads!r}: a whole number >= 1 (None: the cores this process may use)")
    check_reader_source(config.model)
    reader = make(config, device=device, threads=threads)
    reader.load()
    reader.api_settings = {"read_unit": config.read_unit, "mu": config.mu, "read_cache": config.read_cache}
    return reader


def read(reader, dataset: Dataset, ranking: Ranking, n: Any = DEFAULT_N, *,
         unit: str | None = None, mu: float | None = None, cache_dir: str | Path | None = None) -> dict[str, str]:
    """Read each unique question's top ``n`` passages (one n for all, or one per question; default: the default
    selector's, ``top:5``) and answer: ``{question id: answer}``, the run's predictions.json.  ``n`` may also be a
    reader-in-the-loop selector (``confidence``): each question is then read in rank order until it stops.
    ``unit`` (``sentence``/``paragraph``), ``mu`` (BERTserini's interpolation) and ``cache_dir`` (reads are cached
    there) default to what :func:`make_reader` was given, else the commands' defaults (sentence, 1.0, no cache)."""
    from pipeline import stages

    unit, mu, cache_dir = _reading_settings(reader, unit, mu, cache_dir)
    if getattr(reader, "reads", "pairs") == "set":  # a generative reader: one answer from the top n at once
        return _generate(reader, dataset, ranking, n, unit, cache_dir)
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


def _generate(reader, dataset: Dataset, ranking: Ranking, n: Any, unit: str, cache_dir) -> dict[str, str]:
    """:func:`read` for a generative reader: n = 0 is closed book; a reader-in-the-loop selector stops on the
    answers' mean token log-probability (every n up to its τ generated, the shared prompt prefix reused)."""
    from pipeline import stages
    from pipeline.generation import pick_generations
    from pipeline.reading import selector_depth
    from readers.generative import GenerationCache

    cache = GenerationCache(Path(cache_dir)) if cache_dir is not None else None
    if getattr(n, "reads_answers", False):
        found = stages.candidates_for(dataset, ranking, min(selector_depth(n), ranking.depth), unit)
        reads, grid = stages.generate_every_n(reader, found.queries.texts, found.passages, cache=cache)
        counts = stages.select_n(n, found.passages, found.first_relevant(), reads=reads)
        return dict(zip(found.queries.question_ids, pick_generations(grid, counts).text))
    rows = stages.unique_question_rows(dataset.queries)
    queries = dataset.queries.subset(rows)
    counts = np.broadcast_to(np.asarray(n, dtype=np.int64), (len(rows),))
    depth = int(min(max(counts.max(initial=1), 1), ranking.depth))
    passages = stages.passages_for(ranking.subset(rows), dataset.corpus, depth, unit)
    counts = np.clip(counts, 0, (passages.keys >= 0).sum(axis=1))
    gens = stages.generate_top(reader, queries.texts, passages, counts, cache=cache)
    return dict(zip(queries.question_ids, gens.text))


def answer_metrics(predictions: Mapping[str, str], dataset: Dataset, metrics: Sequence[str] = DEFAULT_METRICS,
                   **bertscore: Any) -> dict:
    """Mean answer metrics (fractions) of ``{question id: answer}`` against the dataset's gold answers;
    any registered answer metric by name (default: the command's, em, f1, rouge_l, meteor, bert_f1).  ``bert_f1``
    takes BERTScore's options as keywords (:func:`eval.bertscore.bert_f1`'s: ``model``, ``num_layers``,
    ``rescale``, ``batch_size``, ...); without ``bert_f1`` among the metrics they are an error."""
    from eval.answer_metrics import answer_metrics as score

    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    if bertscore and "bert_f1" not in metrics:
        _unused("answer_metrics", bertscore, "they are BERT-F1's options and bert_f1 is not among the metrics")
    rows, seen = [], set()
    for i, qid in enumerate(dataset.queries.question_ids):
        if qid in predictions and qid not in seen:
            seen.add(qid)
            rows.append(i)
    if predictions and not rows:
        raise UserError(f"answer_metrics: none of the {len(predictions)} predictions is for a question of dataset "
                        f"{dataset.name!r} (first id: {next(iter(predictions))!r})")
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
