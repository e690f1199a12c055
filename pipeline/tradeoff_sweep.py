"""The noise-information trade-off sweep from a typed config: the run's stages looped over corpus sizes, n and seeds.

Kratzwald & Feuerriegel (2018), "Adaptive Document Retrieval for Deep
Question Answering", EMNLP: reading more of the ranking raises the chance
that an answer-bearing passage is read but adds noise; which n is best
depends on the corpus size, and adaptive selection (threshold §4.1, ordinal
regression §4.2) is the most robust choice across sizes.

For every corpus size (gold rows of the evaluated questions plus seeded
noise, :func:`data.open_domain.corpus_levels`) and seed the sweep

1. indexes that corpus and retrieves once per question at depth N;
2. reads every (question, passage) pair of the top N once, through a
   :class:`readers.extractive.ReadCache` shared by every size and seed (a
   passage read for a question gives the same span whatever else is in the
   corpus, so larger sizes and later seeds only read what is new);
3. scores every n = 1..N from one running argmax
   (:func:`readers.aggregate.choose_passage_every_n`): EM, F1, answer recall@n
   (an answer string in the top n), gold recall@n (the gold paragraph in the
   top n) and the mean number of answer-bearing passages in the top n;
4. scores the selectors on the same reads: threshold over a θ grid, ordinal
   regression fitted on training-split questions retrieved against a corpus of
   the same size built the same way, and the oracle.

Per (size, seed) results are written as they finish (``levels/``) and reused
when the same command runs again.  At the end: ``results.csv`` (one row per
size x system x seed; the fixed systems are ``top:n``), ``summary.csv`` (mean
and std over seeds, bootstrap interval over questions), ``summary.json``
(best n per size, regret per system, see :mod:`eval.tradeoff`), plots (PNG
and SVG) and ``manifest.json``.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import atomic_path, sha256_text, write_json
from pipeline.cli import Timer, print_table, write_manifest
from pipeline.config import SweepConfig
from retrievers.base import release

SWEEP_VERSION = "3"  # 3: levels keyed on the typed configuration's fingerprint
SWEEP_SCALE = "fraction"  # EM, F1, their intervals and regret in [0, 1] units; sweeps without it wrote percent


def parse_n(spec) -> tuple[int, int]:
    """``"20"`` -> (1, 20); ``"1-50"`` -> (1, 50); ``"5-20"`` -> (5, 20)."""
    text = str(spec).strip()
    lo, sep, hi = text.partition("-")
    try:
        low, high = (int(lo), int(hi)) if sep else (1, int(lo))
    except ValueError:
        raise UserError(f"--n {spec!r}: expected N or A-B (e.g. 1-50)") from None
    if not 1 <= low <= high:
        raise UserError(f"--n {spec!r}: need 1 <= A <= B")
    return low, high


def parse_seeds(spec) -> list[int]:
    """``"5"`` -> [1..5]; ``"3,7"`` -> [3, 7]."""
    text = str(spec).strip()
    try:
        if "," in text:
            seeds = [int(x) for x in text.split(",") if x.strip()]
        else:
            k = int(text)
            if k < 1:
                raise ValueError
            seeds = list(range(1, k + 1))
    except ValueError:
        raise UserError(f"--seeds {spec!r}: expected a count K >= 1 or a list like 3,7") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {spec!r}: seeds must be distinct")
    return seeds


def parse_thetas(spec) -> list[float]:
    """``"0.5:0.95:0.05"`` (inclusive) or ``"0.6,0.8"``; each θ in (0, 1]."""
    text = str(spec).strip()
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0:
                raise ValueError
            count = int(np.floor((stop - start) / step + 1e-9)) + 1
            thetas = [round(start + i * step, 10) for i in range(max(count, 0))]
        else:
            thetas = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--thetas {spec!r}: expected START:STOP:STEP or a list of numbers") from None
    if not thetas or any(not 0 < t <= 1 for t in thetas):
        raise UserError(f"--thetas {spec!r}: every θ must lie in (0, 1]")
    return sorted(set(thetas))


def every_kth_question(dataset, k: int | None):
    """Keep the query inputs of questions 0, k, 2k, ... (in dataset order); the corpus stays whole."""
    if not k or k == 1:
        return dataset
    if k < 1:
        raise UserError(f"--every must be >= 1 (got {k})")
    order: dict[str, int] = {}
    for qid in dataset.queries.question_ids:
        order.setdefault(qid, len(order))
    keep = [i for i, qid in enumerate(dataset.queries.question_ids) if order[qid] % k == 0]
    dataset.queries = dataset.queries.subset(keep)
    return dataset


# ------------------------------------------------------------------ scoring
@dataclass
class LevelResult:
    """Everything one (corpus size, seed) gives, per question (``[Q, ...]`` arrays)."""

    em: np.ndarray  # [Q, N]: EM when reading the top n (column n-1)
    f1: np.ndarray  # [Q, N]
    bearing: np.ndarray  # bool [Q, N]: passage j holds an answer string
    gold_hit: np.ndarray  # bool [Q, N]: passage j is a gold passage
    systems: list[str]  # selector specs
    sys_n: np.ndarray  # int [Q, M]: n each selector read
    info: dict = field(default_factory=dict)
    bert_f1: np.ndarray | None = None  # [Q, N] BERT-F1 of the answer read from the top n (--metrics bert_f1)
    more: dict = field(default_factory=dict)  # name -> [Q, N]: every other answer metric asked for (plugins)
    passages: np.ndarray | None = None  # int [Q]: the passages question q has at this level (<= N; fewer in a small corpus)

    def metric(self, name: str) -> np.ndarray | None:
        """``[Q, N]`` values of an answer metric (None when this level did not score it)."""
        return {"em": self.em, "f1": self.f1, "bert_f1": self.bert_f1}.get(name, self.more.get(name))

    @property
    def sys_em(self) -> np.ndarray:
        return np.take_along_axis(self.em, columns(self.sys_n), axis=1)

    @property
    def sys_f1(self) -> np.ndarray:
        return np.take_along_axis(self.f1, columns(self.sys_n), axis=1)

    @property
    def fixed_n(self) -> np.ndarray:
        """int ``[Q, N]``: the passages top:n reads per question (column n-1), as ``pipeline.run`` counts them
        (a result made without ``passages``: every question has N)."""
        q, width = self.em.shape
        return fixed_n_read(np.full(q, width) if self.passages is None else self.passages, width)


def columns(n: np.ndarray) -> np.ndarray:
    """The ``[Q, N]`` column holding the result of reading n passages (n = 0, a question with nothing to read: the
    first column, where every column has the same empty answer)."""
    return np.maximum(np.asarray(n, dtype=np.int64), 1) - 1


def fixed_n_read(passages: np.ndarray, width: int) -> np.ndarray:
    """int ``[Q, width]``: the passages top:1..top:width read per question when question q has ``passages[q]``
    passages to read: n, never past the passages a question has (0 with none), as
    :func:`pipeline.stages.select_n` counts them for ``pipeline.run``, so a sweep's n per question and the run's agree."""
    have = np.asarray(passages, dtype=np.int64)
    return np.minimum(np.arange(1, width + 1, dtype=np.int64)[None, :], have[:, None])


def stored_passages(arrays, info: dict, shape: tuple[int, int]) -> np.ndarray | None:
    """The passages per question of a saved level (``arrays``: its npz, ``info``: its json's ``info``): the stored
    ``passages`` array; for a level saved before it was stored, every question had N when the level read Q x N pairs,
    else None (not recoverable: the level is evaluated again, its reads from the read cache)."""
    if "passages" in getattr(arrays, "files", arrays):
        return np.asarray(arrays["passages"], dtype=np.int64)
    q, width = shape
    if info.get("pairs") == q * width:
        return np.full(q, width, dtype=np.int64)
    return None


def score_every_n(reads, passages, golds, language: str = "en", mu: float = 1.0):
    """EM and F1 ``[Q, N]`` of the answer read from the top n, for every n at once, and the chosen column.

    One running argmax gives the chosen passage per n; each passage's answer is
    scored once, however many n choose it.
    """
    from pipeline import stages

    chosen = stages.answers_every_n(reads, passages, mu=mu)
    return (stages.metric_every_n("em", reads, chosen, golds, language), stages.metric_every_n("f1", reads, chosen, golds, language),
            chosen)


def gold_hits(passages, queries, corpus) -> np.ndarray:
    """``[Q, N]`` bool: passage j of query q is one of its gold rows (or gold paragraphs)."""
    out = np.zeros(passages.keys.shape, dtype=bool)
    use_paragraphs = passages.unit == "paragraph" and bool(corpus.paragraph_texts)
    for q, g in enumerate(queries.gold):
        g = np.asarray(g, dtype=np.int64)
        if g.size == 0:
            continue
        targets = np.unique(corpus.paragraph_ids[g]) if use_paragraphs else g
        out[q] = np.isin(passages.keys[q], targets) & (passages.keys[q] >= 0)
    return out


def noise_ratio(size: int, n_gold: int) -> float | None:
    """Corpus size over gold rows (None when the questions have no known gold passages: open datasets)."""
    return round(size / n_gold, 4) if n_gold else None


def open_level_counts(queries, ranking) -> dict:
    """Open datasets: questions with an answer-bearing passage within the depth, distinct answer-bearing rows found,
    and the ranking's answer recall@k for every k up to the depth (DPR's top-k accuracy: the share of questions with
    an answer-bearing passage among the first k; free here, the answer matching has already run over the depth)."""
    mask = getattr(queries, "has_answer", None)
    if mask is None or mask.shape != ranking.ids.shape or mask.shape[0] == 0:
        return {}
    recall = np.logical_or.accumulate(np.asarray(mask, dtype=bool), axis=1).mean(axis=0)
    return {"answer_bearing_questions": int(mask.any(axis=1).sum()), "answer_bearing_rows": int(np.unique(ranking.ids[mask]).size),
            "answer_recall_at_k": [round(float(v), 6) for v in recall]}


def open_level_summary(plan, levels: dict) -> dict:
    """Open datasets: per corpus size (mean over seeds) the answer-bearing counts and the ranking's answer recall@k
    for k = 1..depth, for summary.json."""
    out, curves = {}, {}
    for size in plan.sizes:
        infos = [levels[(size, s)].info for s in plan.seeds if "answer_bearing_rows" in levels[(size, s)].info]
        if infos:
            out[str(size)] = {k: float(np.mean([i[k] for i in infos])) for k in ("answer_bearing_questions", "answer_bearing_rows")}
        recalls = [i["answer_recall_at_k"] for i in infos if i.get("answer_recall_at_k")]
        if recalls and len(recalls) == len(plan.seeds) and len({len(r) for r in recalls}) == 1:
            curves[str(size)] = [round(float(v), 6) for v in np.mean(recalls, axis=0)]
    summary = {"answer_bearing_by_size": out} if out else {}
    if curves:
        summary["answer_recall_at_k_by_size"] = curves  # index k-1: recall@k of the ranking, k = 1..depth
    return summary


def selector_systems(thetas: list[float], tau: int, ordinal, extra: Sequence = ()) -> list:
    """The selectors scored at every level: threshold per θ, ordinal (fitted), the extra ones asked for
    (``--selector``, fitted when learned), oracle."""
    from selection import Oracle, Threshold

    systems = [Threshold(theta, tau) for theta in thetas]
    if ordinal is not None:
        systems.append(ordinal)
    systems.extend(extra)
    systems.append(Oracle())
    return systems


def evaluate_level(
    level, ranking, reader, cache, n_max: int, selectors: list, unit: str = "sentence", mu: float = 1.0,
    bertscore: dict | None = None, metrics: Sequence[str] = (),
) -> LevelResult:
    """Read the top ``n_max`` once and score every n and every selector on those reads.

    EM and F1 always; BERT-F1 with ``bertscore``'s options; every other answer metric named in ``metrics``
    (a registered per-answer metric) per (question, passage) answer, as EM and F1 are.
    """
    from pipeline import stages

    found = stages.candidates_for(level, ranking, n_max, unit)
    qs, passages, bearing = found.queries, found.passages, found.bearing
    hits = gold_hits(passages, qs, level.corpus)
    generative = getattr(reader, "reads", "pairs") == "set"
    t0 = time.perf_counter()
    if generative:  # every n generated (shared prompt prefixes reused); column n - 1 is the answer from the top n
        reads, grid = stages.generate_every_n(reader, qs.texts, passages, cache=cache)
    else:
        reads = stages.read_top(reader, qs.texts, passages, cache=cache)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    if generative:
        chosen = stages.generated_columns(len(qs), passages.depth)
        em, f1 = (stages.metric_every_n(name, reads, chosen, qs.answers, qs.language) for name in ("em", "f1"))
    else:
        em, f1, chosen = score_every_n(reads, passages, qs.answers, qs.language, mu)
    bert, bert_info = (None, None) if bertscore is None else bert_f1_every_n(reads, chosen, qs.answers, bertscore)
    more = {name: stages.metric_every_n(name, reads, chosen, qs.answers, qs.language)
            for name in metrics if name not in ("em", "f1", "bert_f1")}
    if generative:  # the cost axis in tokens: per question and n the prompt's tokens and the answer's
        for key in ("prompt_tokens", "generated_tokens"):
            more[key] = np.stack([getattr(grid[n], key) for n in range(1, passages.depth + 1)], axis=1).astype(np.float32)
    first_rel = found.first_relevant()
    sys_n = np.zeros((len(qs), len(selectors)), dtype=np.int64)
    for m, sel in enumerate(selectors):  # reader-in-the-loop selectors stop on the cached reads of the top N
        sys_n[:, m] = stages.select_n(sel, passages, first_rel, reads=reads, mu=mu)
    t_score = time.perf_counter() - t0
    info = {
        "questions": len(qs),
        "reads_done": int(reads.n_read),
        "reads_reused": int(reads.n_reused),
        "pairs": int(sum(len(t) for t in passages.texts)),
        "read_s": round(t_read, 3),
        "score_s": round(t_score, 3),
    }
    if bert_info is not None:
        info["bert_f1"] = bert_info
    if generative:
        info["closed_book"] = closed_book_scores(grid[0], qs, metrics)
    have = (passages.keys >= 0).sum(axis=1).astype(np.int64)  # what a question can read: top:n reads min(n, this)
    return LevelResult(em, f1, bearing, hits, [s.spec for s in selectors], sys_n, info, bert, more, have)


def closed_book_scores(generations, queries, metrics: Sequence[str] = ()) -> dict:
    """A generative reader's n = 0 (no passage): mean EM, F1 and every other per-answer metric asked for, and the
    prompt tokens (the baseline every n is measured against)."""
    from eval.registry import answer_metric

    out = {"questions": len(generations), "prompt_tokens": round(float(np.mean(generations.prompt_tokens)), 3) if len(generations) else 0.0}
    for name in dict.fromkeys(("em", "f1", *metrics)):
        if name == "bert_f1" or answer_metric(name).sweep != "cell":
            continue
        metric = answer_metric(name)
        values = [metric.score(a, [g for g in gold if isinstance(g, str)], queries.language)
                  for a, gold in zip(generations.text, queries.answers) if any(isinstance(g, str) for g in gold)]
        out[name] = round(float(np.mean(values)), 6) if values else None
    return out


def bert_f1_every_n(reads, chosen: np.ndarray, golds, bertscore: dict) -> tuple[np.ndarray, dict]:
    """BERT-F1 ``[Q, N]`` of the answer chosen for every n: each distinct (question, passage) answer scored once
    (and, through ``eval.bertscore``'s pair cache, once across sizes, seeds and reruns)."""
    from eval.bertscore import bert_f1

    cells = [(q, int(c)) for q in range(chosen.shape[0]) for c in np.unique(chosen[q]) if c >= 0]
    values, info = bert_f1([reads.texts[q][c] for q, c in cells], [golds[q] for q, _ in cells], **bertscore)
    lookup = dict(zip(cells, values))
    out = np.full(chosen.shape, np.nan, dtype=np.float32)
    for q in range(chosen.shape[0]):
        out[q] = [lookup.get((q, int(c)), np.nan) for c in chosen[q]]
    return out, info


def fit_learned(train_level, retriever, selectors: list, tau: int, unit: str, depth: int, train=None, *, reader=None,
                cache=None, mu: float = 1.0) -> list:
    """Fit learned selectors on one retrieval of the training questions against ``train_level``;
    each sees its own depth (its ``max_depth``, else τ) of that ranking.  A learned retriever is fitted on
    ``train`` first, as at the evaluated levels.  Reader-in-the-loop selectors are fitted on ``reader``'s reads
    of those training questions (through the sweep's read cache)."""
    from pipeline import stages

    ranking = stages.retrieve(retriever, train_level, depth, train=train)
    return [stages.fit_selector(sel, train_level, ranking, min(sel.max_depth or tau, ranking.depth), unit,
                                reader=reader, cache=cache, mu=mu) for sel in selectors]


def make_reader(config: SweepConfig):
    """The run's reader, with reads reaching the cache every 1,024 pairs (an interrupted level resumes from them)."""
    from pipeline.reading import make_reader as reader_of

    return reader_of(config.reader, device=config.device, pairs_per_chunk=1024)


# --------------------------------------------------------------- level files
def _level_paths(out: Path, size: int, seed: int) -> tuple[Path, Path]:
    stem = out / "levels" / f"size{size}-seed{seed}"
    return stem.with_suffix(".npz"), stem.with_suffix(".json")


def save_level(out: Path, size: int, seed: int, result: LevelResult, meta: dict) -> None:
    npz, js = _level_paths(out, size, seed)
    with atomic_path(npz) as tmp:
        with open(tmp, "wb") as f:
            extra = {} if result.bert_f1 is None else {"bert_f1": result.bert_f1}
            extra.update({f"metric_{name}": values for name, values in result.more.items()})
            if result.passages is not None:
                extra["passages"] = result.passages
            np.savez_compressed(f, em=result.em, f1=result.f1, bearing=result.bearing, gold_hit=result.gold_hit, sys_n=result.sys_n, **extra)
    write_json(js, {**meta, "systems": result.systems, "info": result.info})


def load_level(out: Path, size: int, seed: int, fingerprints: Sequence[str], need_bert_f1: bool = False,
               need: Sequence[str] = ()) -> LevelResult | None:
    """The saved result of a level if it was made by the same configuration, else None.

    ``fingerprints``: the current fingerprint first, then older forms of it; a level saved under an
    older form is re-labelled with the current one.
    """
    npz, js = _level_paths(out, size, seed)
    if not (npz.is_file() and js.is_file()):
        return None
    try:
        meta = json.loads(js.read_text(encoding="utf-8"))
        if meta.get("fingerprint") not in fingerprints:
            return None
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("em", "f1", "bearing", "gold_hit", "sys_n")}
            arrays["bert_f1"] = z["bert_f1"] if "bert_f1" in z.files else None
            more = {k[len("metric_"):]: z[k] for k in z.files if k.startswith("metric_")}
            passages = stored_passages(z, meta.get("info", {}), arrays["em"].shape)
        if passages is None:
            return None  # saved before the passages per question were kept, and not all had N: redo (reads are cached)
        if need_bert_f1 and arrays["bert_f1"] is None:
            return None  # saved before BERT-F1 was scored: redo it (its reads come from the read cache)
        if set(need) - set(more) - {"em", "f1", "bert_f1"}:
            return None  # a metric asked for now was not scored then: redo it from the read cache
        if meta["fingerprint"] != fingerprints[0]:
            write_json(js, {**meta, "fingerprint": fingerprints[0]})
    except (OSError, ValueError, KeyError):
        return None
    info = dict(meta.get("info", {}))
    info["resumed"] = True
    return LevelResult(arrays["em"], arrays["f1"], arrays["bearing"], arrays["gold_hit"], list(meta["systems"]), arrays["sys_n"], info,
                       arrays["bert_f1"], more, passages)


# ----------------------------------------------------------------- the sweep
@dataclass
class SweepPlan:
    dataset: object
    sizes: list[int]
    seeds: list[int]
    n_gold: int
    n_pool: int
    n_min: int
    n_max: int
    depth: int
    tau: int
    thetas: list[float]


def plan_sweep(config: SweepConfig, dataset) -> SweepPlan:
    from data.open_domain import gold_rows, parse_corpus_sizes

    sel = config.selectors
    n_min, n_max = parse_n(sel.n)
    seeds = parse_seeds(config.data.seeds)
    thetas = parse_thetas(sel.thetas)
    n_gold = int(gold_rows(dataset.queries).size)
    n_pool = len(dataset.corpus)
    sizes = parse_corpus_sizes(config.data.corpus_sizes, n_gold, n_pool)
    tau = int(sel.tau) if sel.tau else min(25, n_max)
    if not 1 <= tau <= n_max:
        raise UserError(f"--tau {sel.tau}: must lie in 1..N={n_max} (the passages read)")
    reads_paragraphs_of_sentences = config.reader.read_unit == "paragraph" and dataset.level == "sentence"
    depth = config.retriever.depth or (max(5 * n_max, 100) if reads_paragraphs_of_sentences else n_max)
    if depth < n_max:
        raise UserError(f"--depth {depth}: must be >= N={n_max}")
    return SweepPlan(dataset, sizes, seeds, n_gold, n_pool, n_min, n_max, depth, tau, thetas)


def level_fingerprint(config: SweepConfig, plan: SweepPlan, rows: np.ndarray, reader_identity: str, seed: int,
                      cache_path: bool = False) -> str:
    """What a saved level must have been made with to be reused: every result-changing setting of the
    configuration (its fingerprint: no list of flags kept by hand), the dataset's sources, the questions,
    the corpus rows, the seed and the reader's identity.

    An ``open:`` or BEIR corpus store is named by its content key, not by where the cache lies, so a sweep
    resumed with the cache elsewhere ($QA_CACHE_DIR, another machine) reuses its levels; ``cache_path=True``
    gives the older form that hashed the store's path (levels saved under it are still reused)."""
    q = plan.dataset.queries
    sources = {k: (v if cache_path or k != "corpus_store" else Path(v).name) for k, v in plan.dataset.sources.items()}
    parts = {
        "version": SWEEP_VERSION,
        # a level's own size, seed and n_max are below: the lists of sizes, seeds and n that make the others are not
        "config": config.fingerprint("data", "retriever", "reader", "selectors",
                                     leave_out=("data.corpus_sizes", "data.seeds", "selectors.n")),
        "dataset": [plan.dataset.name, plan.dataset.split, sorted(sources.items())],
        "questions": sha256_text(q.ids, q.texts),
        "rows": sha256_text(rows.tolist()),
        "seed": seed,
        "reading": [reader_identity, plan.n_max, plan.depth],
    }
    return sha256_text(json.dumps(parts, sort_keys=True, default=str))


@dataclass
class SweepSetup:
    """What every level of a sweep shares: the questions, the plan, the reader and its cache, the training sample."""

    config: SweepConfig
    dataset: object
    plan: SweepPlan
    make_retriever: object  # () -> a new, unindexed retriever
    reader: object
    cache: object
    train: object = None  # the training split (learned selectors or retrievers), else None
    train_sample: object = None  # its sampled questions the learned selectors are fitted on
    fit_retriever: bool = False  # the retriever is learned: fitted on ``train`` at every level
    extra: list = field(default_factory=list)  # the --selector ones (unfitted)

    @property
    def learns_selectors(self) -> bool:
        return self.config.selectors.ordinal or any(sel.needs_fit() for sel in self.extra)


def setup_sweep(config: SweepConfig, out: Path, timer: Timer) -> SweepSetup:
    """Load the questions (and the training split when something learns), plan the levels, build the reader."""
    from data.open_domain import sample_training_questions
    from data.registry import load_dataset
    from data.types import limit_queries
    from pipeline import stages
    from pipeline.experiment import retriever_options
    from readers.extractive import ReadCache
    from retrievers.fusion import needs_fit
    from selection import parse_selector

    data, rc = config.data, config.reader
    if not rc.model:
        raise UserError("--reader is required (a QA checkpoint path or alias)")
    with timer("load_data"):
        dataset = load_dataset(data.dataset, data.split, **data.load_options())
        dataset = limit_queries(every_kth_question(dataset, data.every), data.limit)
    if not dataset.queries.has_answers:
        raise UserError(f"dataset {dataset.name!r} has no answer strings: a reading sweep needs answers")
    options = retriever_options(config, dataset.corpus.language)
    reader = make_reader(config)
    if getattr(reader, "reads", "pairs") == "set":  # a generative reader's generations, cached apart from span reads
        from readers.generative import GenerationCache

        cache = GenerationCache(Path(rc.read_cache) if rc.read_cache else out / "generations")
    else:
        cache = ReadCache(Path(rc.read_cache) if rc.read_cache else out / "reads")
    setup = SweepSetup(config, dataset, plan_sweep(config, dataset),
                       lambda: stages.build_retriever(config.retriever.spec, options), reader, cache,
                       extra=[parse_selector(spec) for spec in config.selectors.extra])
    setup.fit_retriever = needs_fit(setup.make_retriever())
    if setup.learns_selectors and data.train_split == data.split:
        raise UserError(f"--train-split {data.train_split} is the evaluated split: learned selectors are fitted on another split")
    shots = int(getattr(reader, "shots", 0) or 0)
    if setup.learns_selectors or setup.fit_retriever or shots:
        with timer("load_train"):
            setup.train = load_dataset(data.dataset, data.train_split, **data.train_options())
        setup.train_sample = sample_training_questions(setup.train, data.train_limit, data.train_seed)
    if shots:  # few-shot examples from the training split, never the evaluated one
        from pipeline.generation import prepare_examples

        prepare_examples(reader, setup.train, rc.read_unit, dataset.split)
    return setup


def run_sweep(config: SweepConfig, out: Path, timer: Timer) -> dict:
    """Every (corpus size, seed) level: reused when saved by the same configuration, copied from a twin with the
    same corpora, else evaluated and saved."""
    from data.open_domain import corpus_levels, gold_rows
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    setup = setup_sweep(config, out, timer)
    plan = setup.plan
    reader_identity = setup.reader.identity()
    need_bert_f1 = config.metrics.bertscore(setup.dataset.queries.language, config.device) is not None
    levels: dict[tuple[int, int], LevelResult] = {}
    noted = False
    jobs = [(size, seed) for seed in plan.seeds for size in plan.sizes]
    bar = tqdm(jobs, desc="sweep levels", unit="level")
    same_rows: dict[str, tuple[int, int]] = {}  # levels whose corpora (eval and train) are identical
    for size, seed in bar:
        bar.set_postfix_str(f"size {size} seed {seed}")
        rows = corpus_levels(plan.n_pool, gold_rows(setup.dataset.queries), [size], seed)[0]
        t_rows = None
        if setup.learns_selectors:
            t_gold = gold_rows(setup.train_sample.queries)
            t_size = min(max(size, t_gold.size), len(setup.train_sample.corpus))
            t_rows = corpus_levels(len(setup.train_sample.corpus), t_gold, [t_size], seed)[0]
        fingerprint = level_fingerprint(config, plan, rows, reader_identity, seed)
        older = level_fingerprint(config, plan, rows, reader_identity, seed, cache_path=True)
        done = load_level(out, size, seed, [fingerprint, older], need_bert_f1=need_bert_f1, need=config.metrics.answer)
        if done is not None:
            levels[(size, seed)] = done
            continue
        rows_key = sha256_text(rows.tolist(), [] if t_rows is None else t_rows.tolist())
        meta = {"fingerprint": fingerprint, "size": int(size), "seed": int(seed), "n_gold": plan.n_gold, "n_max": plan.n_max}
        if rows_key in same_rows:  # e.g. "all" under another seed: same corpus, same result
            twin = levels[same_rows[rows_key]]
            result = replace(twin, info={**twin.info, "reads_done": 0, "reads_reused": 0, "same_corpus_as_seed": same_rows[rows_key][1]})
        else:
            result = evaluate_new_level(setup, size, rows, t_rows, timer)
            same_rows[rows_key] = (size, seed)
            note = (result.info.get("bert_f1") or {}).get("note")
            if note and not noted:
                noted = print(f"note: {note}", file=sys.stderr) or True
            tqdm.write(f"size {size} seed {seed}: EM@1 {np.nanmean(result.em[:, 0]) * 100:.2f}"
                       f"  reads done {result.info['reads_done']} reused {result.info['reads_reused']}")
        save_level(out, size, seed, result, meta)
        levels[(size, seed)] = result
    return {"plan": plan, "levels": levels, "train": setup.train, "reader": setup.reader.facts()}


def evaluate_new_level(setup: SweepSetup, size: int, rows: np.ndarray, t_rows: np.ndarray | None, timer: Timer) -> LevelResult:
    """One level: retrieve against its corpus, fit the learned selectors on the training level, read and score."""
    from data.open_domain import restrict_corpus
    from pipeline import stages

    config, plan, rc = setup.config, setup.plan, setup.config.reader
    level = restrict_corpus(setup.dataset, rows)
    t0 = time.perf_counter()
    retriever = setup.make_retriever()
    with timer("retrieve"):
        try:
            ranking = stages.retrieve(retriever, level, plan.depth, train=setup.train if setup.fit_retriever else None)
        finally:  # the next level searches its own index: this one's mapped files go now, not at the end
            release(retriever)
    t_retrieve = time.perf_counter() - t0
    ordinal, extra, train_info = fit_level_selectors(setup, t_rows, timer)
    selectors = selector_systems(plan.thetas, plan.tau, ordinal, extra)
    with timer("read_and_score"):
        result = evaluate_level(level, ranking, setup.reader, setup.cache, plan.n_max, selectors, rc.read_unit, rc.mu,
                                config.metrics.bertscore(setup.dataset.queries.language, config.device), metrics=config.metrics.answer)
    result.info.update({"corpus_size": int(size), "n_gold": plan.n_gold, "retrieve_s": round(t_retrieve, 3), **train_info})
    result.info.update(open_level_counts(level.queries, ranking))
    return result


def fit_level_selectors(setup: SweepSetup, t_rows: np.ndarray | None, timer: Timer) -> tuple:
    """``(ordinal, extra selectors, info)`` for one level: the learned ones fitted on training questions retrieved
    against a training corpus of the level's size (fresh estimators: each level fits its own)."""
    from data.open_domain import restrict_corpus
    from selection import parse_selector

    plan, ordinal_on = setup.plan, setup.config.selectors.ordinal
    extra = [parse_selector(sel.spec) for sel in setup.extra]
    if t_rows is None:
        return None, extra, {}
    t0 = time.perf_counter()
    learn = ([parse_selector(f"ordinal:{plan.tau}")] if ordinal_on else []) + [sel for sel in extra if sel.needs_fit()]
    retriever = setup.make_retriever()
    with timer("fit_ordinal"):
        try:
            fitted = fit_learned(restrict_corpus(setup.train_sample, t_rows), retriever, learn, plan.tau,
                                 setup.config.reader.read_unit, plan.depth, train=setup.train if setup.fit_retriever else None,
                                 reader=setup.reader, cache=setup.cache, mu=setup.config.reader.mu)
        finally:
            release(retriever)
    ordinal = fitted[0] if ordinal_on else None
    info = {"train_questions": len(setup.train_sample.queries), "train_corpus_size": int(len(t_rows)),
            "fit_s": round(time.perf_counter() - t0, 3)}
    if ordinal is not None:
        info["ordinal"] = ordinal.to_dict()
    if any(sel.needs_fit() for sel in extra):
        info["fitted"] = {sel.spec: sel.to_dict() for sel in extra if sel.needs_fit()}
    return ordinal, extra, info


# --------------------------------------------------------------- aggregation
def system_names(plan: SweepPlan, selectors: list[str]) -> list[str]:
    return [f"top:{n}" for n in range(1, plan.n_max + 1)] + list(selectors)


def system_table(result: LevelResult, metric: str = "em") -> np.ndarray:
    """Per-question score ``[Q, M]`` of every system (top:1..N, then the selectors)."""
    base = result.metric(metric)
    sel = np.take_along_axis(base, columns(result.sys_n), axis=1)
    return np.concatenate([base, sel], axis=1).astype(np.float64)


def system_n(result: LevelResult) -> np.ndarray:
    """Per question the passages every system (top:1..N, then the selectors) reads ``[Q, N + M]``: top:n reads n,
    never more than the question's passages at this level (as ``pipeline.run`` counts it)."""
    return np.concatenate([result.fixed_n, result.sys_n], axis=1)


def family(name: str) -> str:
    """A system's family: ``top``, ``threshold``, ``ordinal``, ``oracle`` or a plugin selector's name."""
    return name.split(":")[0]


def level_means(r: LevelResult, weights: np.ndarray, objective: str = "em") -> dict[str, np.ndarray]:
    """Per system (top:1..N, then the selectors) the means over questions of one level: EM, F1, n read, answer and
    gold recall, answer-bearing passages, every other metric scored, and the bootstrap interval of the
    ``objective`` (``{objective}_ci_low`` / ``_high``)."""
    from eval.tradeoff import bootstrap_means, percentile_interval

    def at_systems(per_n: np.ndarray) -> np.ndarray:  # [Q, N] per n -> [Q, N + M]: the selectors' n appended
        return np.concatenate([per_n, np.take_along_axis(per_n, columns(r.sys_n), axis=1)], axis=1)

    judged = system_table(r, objective)
    lo, hi = percentile_interval(bootstrap_means(judged, weights))
    em_t = judged if objective == "em" else system_table(r, "em")
    metrics = {
        "em": np.nanmean(em_t, axis=0),  # fractions in [0, 1] (percent before SWEEP_SCALE)
        "f1": np.nanmean(system_table(r, "f1"), axis=0),
        "mean_n": system_n(r).mean(axis=0),
        "answer_recall": at_systems(np.logical_or.accumulate(r.bearing, axis=1)).mean(axis=0),
        "gold_recall": at_systems(np.logical_or.accumulate(r.gold_hit, axis=1)).mean(axis=0),
        "answer_bearing": at_systems(np.cumsum(r.bearing, axis=1)).mean(axis=0),
        f"{objective}_ci_low": lo,
        f"{objective}_ci_high": hi,
    }
    if r.bert_f1 is not None:
        metrics["bert_f1"] = np.nanmean(system_table(r, "bert_f1"), axis=0)
    for name in r.more:
        metrics[name] = np.nanmean(system_table(r, name), axis=0)
    return metrics


def seed_aggregate(plan: SweepPlan, size: int, names: list[str], q_count: int, seed_metrics: list[dict],
                   extra_keys: tuple, interval: tuple[np.ndarray, np.ndarray], objective: str = "em") -> list[dict]:
    """summary.csv rows of one corpus size: mean and std over seeds, the bootstrap interval of the seed-mean
    ``objective``."""
    lo, hi = interval
    rows = []
    for m, name in enumerate(names):
        entry = {
            "dataset": plan.dataset.name, "split": plan.dataset.split, "corpus_size": size,
            "noise_ratio": noise_ratio(size, plan.n_gold), "system": name, "family": family(name),
            "n": m + 1 if m < plan.n_max else "", "seeds": len(plan.seeds), "questions": q_count,
        }
        for key in ("em", "f1", "mean_n", "answer_recall", "gold_recall", "answer_bearing") + extra_keys:
            vals = np.array([sm[key][m] for sm in seed_metrics])
            entry[f"{key}_mean"] = round(float(vals.mean()), 6)
            entry[f"{key}_std"] = round(float(vals.std(ddof=1)) if len(vals) > 1 else 0.0, 6)
        entry[f"{objective}_ci_low"] = round(float(lo[m]), 6)
        entry[f"{objective}_ci_high"] = round(float(hi[m]), 6)
        rows.append(entry)
    return rows


def regret_table(plan: SweepPlan, names: list[str], per_seed: np.ndarray, boot: np.ndarray, weighting: str) -> dict:
    """Regret per system over corpus sizes (:func:`eval.tradeoff.regret`) of the objective's ``[S, K, M]`` seed means
    and ``[B, K, M]`` bootstrap means: mean and std over seeds, bootstrap interval, and the uniform-weight mean."""
    from eval.tradeoff import percentile_interval, regret

    reference = np.array([family(n) != "oracle" for n in names])
    reg_seed = regret(per_seed, plan.sizes, reference, weighting)  # [S, M]
    reg_lo, reg_hi = percentile_interval(regret(boot, plan.sizes, reference, weighting))  # over [B, M]
    reg_uniform = regret(per_seed, plan.sizes, reference, "uniform").mean(axis=0)
    return {
        name: {
            "mean": round(float(reg_seed[:, m].mean()), 6),
            "std": round(float(reg_seed[:, m].std(ddof=1)) if len(plan.seeds) > 1 else 0.0, 6),
            "ci95": [round(float(reg_lo[m]), 6), round(float(reg_hi[m]), 6)],
            "uniform_mean": round(float(reg_uniform[m]), 6),
        }
        for m, name in enumerate(names)
    }


def best_n_table(plan: SweepPlan, names: list[str], per_seed: np.ndarray, objective: str = "em") -> dict:
    """Per corpus size: the fixed n with the best ``objective`` (mean over seeds, and per seed) and the best
    non-oracle system."""
    reference = np.array([family(n) != "oracle" for n in names])
    mean = per_seed.mean(axis=0)  # [K, M]
    best_n = {}
    for k, size in enumerate(plan.sizes):
        top = mean[k, : plan.n_max]
        best_n[str(size)] = {
            "n": int(np.argmax(top)) + 1, objective: round(float(top.max()), 6),
            "per_seed": [int(np.argmax(per_seed[s, k, : plan.n_max])) + 1 for s in range(len(plan.seeds))],
            "best_system": names[int(np.argmax(np.where(reference, mean[k], -np.inf)))],
        }
    return best_n


def aggregate(plan: SweepPlan, levels: dict, n_boot: int, boot_seed: int, weighting: str, objective: str = "em") -> dict:
    """Tidy rows, seed aggregates, regret and best n from the per-level results; best n, the best system, regret
    and the savings at equal quality are judged by ``objective`` (EM, or any answer metric the levels scored)."""
    from eval.tradeoff import bootstrap_means, bootstrap_weights, percentile_interval

    first = levels[(plan.sizes[0], plan.seeds[0])]
    names = system_names(plan, first.systems)
    q_count = first.em.shape[0]
    weights = bootstrap_weights(q_count, n_boot, boot_seed)
    rows, agg_rows, cost_rows = [], [], []
    if first.metric(objective) is None:
        raise UserError(f"--objective {objective}: the sweep did not score it (add it to --metrics)")
    per_seed = np.zeros((len(plan.seeds), len(plan.sizes), len(names)))  # the objective's means
    boot = np.zeros((n_boot, len(plan.sizes), len(names)))
    for k, size in enumerate(plan.sizes):
        seed_metrics = []
        for s, seed in enumerate(plan.seeds):
            r = levels[(size, seed)]
            metrics = level_means(r, weights, objective)
            seed_metrics.append(metrics)
            per_seed[s, k] = metrics[objective]
            for m, name in enumerate(names):
                rows.append({
                    "dataset": plan.dataset.name, "split": plan.dataset.split, "corpus_size": size,
                    "noise_ratio": noise_ratio(size, plan.n_gold), "seed": seed, "system": name, "family": family(name),
                    "n": m + 1 if m < r.em.shape[1] else "", "questions": q_count,
                    **{key: round(float(v[m]), 6) for key, v in metrics.items()},
                    "reads_done": r.info.get("reads_done", 0), "reads_reused": r.info.get("reads_reused", 0),
                })
        mean_table = np.mean([system_table(levels[(size, seed)], objective) for seed in plan.seeds], axis=0)  # [Q, M] over seeds
        boot[:, k] = bootstrap_means(mean_table, weights)
        extra_keys = tuple(key for key in seed_metrics[0] if key == "bert_f1" or key in first.more)
        size_rows = seed_aggregate(plan, size, names, q_count, seed_metrics, extra_keys, percentile_interval(boot[:, k]), objective)
        agg_rows += size_rows
        n_table = np.mean([system_n(levels[(size, seed)]) for seed in plan.seeds], axis=0).astype(np.float64)  # [Q, M]
        boot_tokens = None
        if "prompt_tokens" in first.more:
            t_table = np.mean([system_table(levels[(size, seed)], "prompt_tokens") for seed in plan.seeds], axis=0)
            boot_tokens = bootstrap_means(t_table, weights)
        cost_rows += size_costs(plan, names, size_rows, boot[:, k], bootstrap_means(n_table, weights), boot_tokens, objective)
    regrets = regret_table(plan, names, per_seed, boot, weighting)

    def best_of(fam: str):
        cands = [(regrets[n]["mean"], n) for n in names if family(n) == fam]
        return None if not cands else {"system": min(cands)[1], "regret": min(cands)[0]}

    mean = per_seed.mean(axis=0)  # [K, M]
    label = metric_label(objective)
    summary = {
        "dataset": plan.dataset.name, "split": plan.dataset.split, "questions": q_count, "scale": SWEEP_SCALE,
        "corpus_sizes": plan.sizes, "noise_ratios": [noise_ratio(s, plan.n_gold) for s in plan.sizes],
        "gold_rows": plan.n_gold, "pool_rows": plan.n_pool, "seeds": plan.seeds, "n_max": plan.n_max, "tau": plan.tau,
        "thetas": plan.thetas, "objective": objective, "best_n": best_n_table(plan, names, per_seed, objective),
        **open_level_summary(plan, levels),
        "regret": {
            "weighting": weighting,
            "definition": f"per size: best {label} among non-oracle systems minus the system's {label} ({label} as a fraction;"
                          f" x100 = {label} points); "
                          + {"trapezoid": "trapezoid weights over corpus size, normalized by the size range",
                             "log-trapezoid": "trapezoid weights over log corpus size, normalized by the log size range"}.get(weighting, "plain mean over sizes"),
            "best_fixed": best_of("top"), "best_threshold": best_of("threshold"), "ordinal": best_of("ordinal"), "oracle": best_of("oracle"),
            "by_family": {fam: best_of(fam) for fam in dict.fromkeys(family(n) for n in names)},
            "systems": regrets,
        },
        f"{objective}_by_size": {name: [round(float(v), 6) for v in mean[:, m]] for m, name in enumerate(names)},
        "reads": {
            "done": int(sum(r.info.get("reads_done", 0) for r in levels.values())),
            "reused": int(sum(r.info.get("reads_reused", 0) for r in levels.values())),
        },
        "cost": cost_summary(plan, cost_rows, levels, objective),
        "bootstrap": {"replicates": n_boot, "seed": boot_seed, "interval": "95% percentile, questions resampled, paired across sizes"},
    }
    bert_info = next((r.info["bert_f1"] for r in levels.values() if r.info.get("bert_f1")), None)
    if bert_info:
        summary["bert_f1_info"] = {k: v for k, v in bert_info.items() if not k.startswith("pairs_")}
    return {"rows": rows, "agg_rows": agg_rows, "summary": summary, "names": names, "cost_rows": cost_rows}


ADAPTIVE_EXCLUDED = ("top", "oracle")  # the families that are not adaptive selectors


def metric_label(name: str) -> str:
    """An answer metric's label for tables and plots (``EM``, ``has answer``): its registry entry's ``display``."""
    from eval.registry import ANSWER_METRICS

    try:
        return ANSWER_METRICS.get(name).display
    except Exception:  # noqa: BLE001 - a metric no longer registered (an old sweep's plugin): its name
        return name


def size_costs(plan: SweepPlan, names: list[str], size_rows: list[dict], boot_em: np.ndarray, boot_n: np.ndarray,
               boot_tokens: np.ndarray | None = None, objective: str = "em") -> list[dict]:
    """cost.csv rows of one corpus size: per system the ``objective`` (EM by default; ``boot_em`` its bootstrap
    means) and F1 against mean passages read, whether it is on the Pareto front (oracle left out: it reads the
    gold), and for adaptive selectors the fixed n that reaches their objective and the passages per question saved
    against it, with its bootstrap interval (:mod:`eval.cost`).  A generative reader's sweep (``boot_tokens``:
    bootstrap means of the prompt tokens) adds the mean prompt tokens and the prompt tokens saved at equal
    objective, the same way."""
    from eval.cost import pareto_front, saving_at_equal_em

    em = np.array([r[f"{objective}_mean"] for r in size_rows])
    passages = np.array([r["mean_n_mean"] for r in size_rows])
    real = np.array([family(n) != "oracle" for n in names])
    front = np.zeros(len(names), dtype=bool)
    front[real] = pareto_front(passages[real], em[real])
    fixed = slice(0, plan.n_max)
    out = []
    for m, (name, row) in enumerate(zip(names, size_rows)):
        entry = {"dataset": row["dataset"], "split": row["split"], "corpus_size": row["corpus_size"], "system": name,
                 "family": row["family"], "mean_passages": row["mean_n_mean"], objective: row[f"{objective}_mean"],
                 f"{objective}_ci_low": row[f"{objective}_ci_low"], f"{objective}_ci_high": row[f"{objective}_ci_high"],
                 "f1": row["f1_mean"], "pareto_front": bool(front[m]),
                 "fixed_n": "", "fixed_n_passages": "", "saving": "", "saving_ci_low": "", "saving_ci_high": "",
                 "replicates_without_fixed_n": ""}
        if family(name) not in ADAPTIVE_EXCLUDED:
            saved = saving_at_equal_em(em[fixed], passages[fixed], em[m], passages[m], boot_em[:, fixed], boot_n[:, fixed],
                                       boot_em[:, m], boot_n[:, m])
            ci = saved.get("saving_ci95") or ["", ""]
            entry.update({"fixed_n": saved["fixed_n"] or "", "fixed_n_passages": "" if saved["fixed_n_passages"] is None else saved["fixed_n_passages"],
                          "saving": "" if saved["saving"] is None else saved["saving"], "saving_ci_low": ci[0], "saving_ci_high": ci[1],
                          "replicates_without_fixed_n": saved["replicates_without_fixed_n"]})
        if boot_tokens is not None:
            tokens = np.array([r["prompt_tokens_mean"] for r in size_rows])
            entry["mean_prompt_tokens"] = row["prompt_tokens_mean"]
            entry.update({"token_saving": "", "token_saving_ci_low": "", "token_saving_ci_high": ""})
            if family(name) not in ADAPTIVE_EXCLUDED:
                saved = saving_at_equal_em(em[fixed], tokens[fixed], em[m], tokens[m], boot_em[:, fixed], boot_tokens[:, fixed],
                                           boot_em[:, m], boot_tokens[:, m])
                ci = saved.get("saving_ci95") or ["", ""]
                entry.update({"token_saving": "" if saved["saving"] is None else saved["saving"],
                              "token_saving_ci_low": ci[0], "token_saving_ci_high": ci[1]})
        out.append(entry)
    return out


def cost_summary(plan: SweepPlan, cost_rows: list[dict], levels: dict, objective: str = "em") -> dict:
    """summary.json's cost section: per size the Pareto front and each adaptive selector's saving at equal
    ``objective``, and the reader seconds per passage measured on this sweep's fresh reads (None when every read
    came from the cache)."""
    fresh = [r.info for r in levels.values() if r.info.get("reads_done")]
    seconds = sum(i.get("read_s", 0.0) for i in fresh) / max(sum(i["reads_done"] for i in fresh), 1) if fresh else None
    by_size: dict = {}
    for row in cost_rows:
        size = by_size.setdefault(str(row["corpus_size"]), {"pareto_front": [], "savings": {}})
        if row["pareto_front"]:
            size["pareto_front"].append(row["system"])
        if row["family"] not in ADAPTIVE_EXCLUDED:
            size["savings"][row["system"]] = {k: row[k] for k in (objective, "mean_passages", "fixed_n", "fixed_n_passages", "saving",
                                                                  "saving_ci_low", "saving_ci_high", "replicates_without_fixed_n")}
    return {"definition": f"saving = mean passages read by the smallest fixed n whose {metric_label(objective)} reaches the"
                          " selector's, minus the selector's mean passages read (per question; 95% question-bootstrap interval)",
            "seconds_per_read": None if seconds is None else round(seconds, 6), "by_size": by_size}


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    fields = list(rows[0].keys())
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)


PERCENT_COLUMNS = ("em_mean", "em_std", "em_ci_low", "em_ci_high", "f1_mean", "f1_std")


def as_percent(row: dict, objective: str = "em") -> dict:
    """A summary.csv row with EM/F1 columns, and the objective's mean, std and interval, in percent (for plots and
    printed tables)."""
    columns = PERCENT_COLUMNS + tuple(f"{objective}_{k}" for k in ("mean", "std", "ci_low", "ci_high"))
    return {k: (float(v) * 100 if k in columns and v != "" else v) for k, v in row.items()}


def make_plots(out: Path, plan: SweepPlan, agg_rows: list[dict], summary: dict, cost_rows: list[dict] | None = None) -> list[str]:
    from eval.plots import curves_by_size, plot_curves

    written = []
    objective = summary.get("objective", "em")
    label_of = metric_label(objective)
    agg_rows = [as_percent(r, objective) for r in agg_rows]  # the plots show EM (and the objective) in percent
    per_n = [r for r in agg_rows if r["family"] == "top" and plan.n_min <= int(r["n"]) <= plan.n_max]
    label = lambda size: f"{size:,}" + (f" ({size / plan.n_gold:.1f}x gold)" if plan.n_gold else "")  # noqa: E731
    judged = [] if objective == "em" else [(objective, f"{label_of} (%)", f"{objective}_vs_n")]
    for key, ylabel, stem in (
        ("em", "exact match (%)", "em_vs_n"),
        *judged,
        ("answer_recall", "answer recall@n", "recall_vs_n"),
        ("answer_bearing", "answer-bearing passages in top n", "answer_bearing_vs_n"),
    ):
        curves = curves_by_size(per_n, key, plan.sizes, label, with_ci=key == objective)
        written += plot_curves(curves, out / stem, xlabel="n (passages read)", ylabel=ylabel, integer_x=True,
                               title=f"{plan.dataset.name} {plan.dataset.split}: {ylabel} vs n")
    reg = summary["regret"]
    picks = [f"top:{n}" for n in (1, 5, 10) if n <= plan.n_max]
    picks += [best["system"] for fam, best in reg["by_family"].items() if fam != "top"]  # the best of every selector family
    curves = []
    for name in picks:
        rs = sorted((r for r in agg_rows if r["system"] == name), key=lambda r: r["corpus_size"])
        x = [r["corpus_size"] for r in rs]
        nice = name if family(name) in ("top", "oracle") else f"{name} (adaptive)"
        curves.append({
            "label": f"{nice}, regret {100 * reg['systems'][name]['mean']:.2f}", "x": x,
            "y": [r[f"{objective}_mean"] for r in rs], "low": [r[f"{objective}_ci_low"] for r in rs],
            "high": [r[f"{objective}_ci_high"] for r in rs], "std": [r[f"{objective}_std"] for r in rs], "dashed": name == "oracle",
        })
    ylabel = "exact match (%)" if objective == "em" else f"{label_of} (%)"
    written += plot_curves(curves, out / f"{objective}_vs_corpus_size", xlabel=f"corpus size ({size_unit(plan)})",
                           ylabel=ylabel, title=f"{plan.dataset.name} {plan.dataset.split}: {label_of} vs corpus size",
                           logx=max(plan.sizes) >= 20 * min(plan.sizes))  # sizes over decades: log axis
    written += retrieval_recall_plots(out, plan, summary)
    if cost_rows:
        from eval.plots import plot_cost

        written += plot_cost([as_percent(r) | {objective: 100 * float(r[objective])} for r in cost_rows],
                             out / f"{objective}_vs_passages", metric=objective, ylabel=ylabel,
                             title=f"{plan.dataset.name} {plan.dataset.split}: {label_of} vs passages read")
    return written


def size_unit(plan: SweepPlan) -> str:
    """What a corpus size counts: passages of an ``open:`` corpus, paragraphs, or sentence candidates."""
    if plan.dataset.name.startswith("open:"):
        return "passages"
    return "paragraphs" if plan.dataset.level == "paragraph" else "candidates"


RECALL_KS = (1, 5, 10, 20, 50, 100, 200, 500, 1000)  # the k drawn against corpus size (those within the depth)


def retrieval_recall_plots(out: Path, plan: SweepPlan, summary: dict) -> list[str]:
    """Open datasets: the ranking's answer recall@k against corpus size (one curve per k) and against k (one curve
    per size), from summary.json's ``answer_recall_at_k_by_size``; no plot when the levels did not record it."""
    from eval.plots import plot_curves

    by_size = summary.get("answer_recall_at_k_by_size") or {}
    sizes = [s for s in plan.sizes if str(s) in by_size]
    if not sizes:
        return []
    depth = min(len(by_size[str(s)]) for s in sizes)
    ks = [k for k in RECALL_KS if k <= depth] + ([depth] if depth not in RECALL_KS else [])
    name = f"{plan.dataset.name} {plan.dataset.split}"
    written = []
    if len(sizes) > 1:
        curves = [{"label": f"recall@{k}", "x": sizes, "y": [by_size[str(s)][k - 1] for s in sizes]} for k in ks]
        written += plot_curves(curves, out / "retrieval_recall_vs_corpus_size", xlabel=f"corpus size ({size_unit(plan)})",
                               ylabel="answer recall@k of the ranking", logx=max(sizes) >= 20 * min(sizes),
                               title=f"{name}: answer recall@k vs corpus size ({summary['questions']:,} questions)")
    curves = [{"label": f"{s:,}", "x": list(range(1, depth + 1)), "y": by_size[str(s)][:depth]} for s in sizes]
    written += plot_curves(curves, out / "retrieval_recall_vs_k", xlabel="k (passages retrieved)", ylabel="answer recall@k of the ranking",
                           logx=depth >= 20, title=f"{name}: answer recall@k per corpus size")
    return written


def print_summary(summary: dict, out: Path, levels: dict | None = None) -> None:
    """The headline table of a sweep; ``levels`` (the manifest's, per level its info) adds how many levels this run
    took from disk, since the reads line counts what every level read when it was made."""
    rows = []
    objective = summary.get("objective", "em")
    label = metric_label(objective)
    for size, b in summary["best_n"].items():
        rows.append((f"size {size}: best n", f"{b['n']} ({label} {100 * b[objective]:.2f}%; best system {b['best_system']})"))
    reg = summary["regret"]
    for key in ("best_fixed", "best_threshold", "ordinal", "oracle"):
        if reg.get(key):
            rows.append((f"regret {key} ({label} points)", f"{100 * reg[key]['regret']:.3f}  ({reg[key]['system']})"))
    for fam, best in (reg.get("by_family") or {}).items():
        if best and fam not in ("top", "threshold", "ordinal", "oracle"):
            rows.append((f"regret best {fam} ({label} points)", f"{100 * best['regret']:.3f}  ({best['system']})"))
    best = {b["system"] for b in (reg.get("by_family") or {}).values() if b}  # one line per family, not per θ
    for size, cost in (summary.get("cost") or {}).get("by_size", {}).items():
        for name, saved in cost["savings"].items():
            if name not in best:
                continue
            if saved["saving"] == "":
                rows.append((f"size {size}: {name}", f"reads {saved['mean_passages']:.2f}; no fixed n reaches its {label}"))
            else:
                rows.append((f"size {size}: {name}", f"reads {saved['mean_passages']:.2f}; top:{saved['fixed_n']} reaches its {label} "
                             f"reading {saved['fixed_n_passages']:.2f}: saves {saved['saving']:.2f} "
                             f"[{saved['saving_ci_low']}, {saved['saving_ci_high']}] passages/question"))
    rows.append(("reads done / reused", f"{summary['reads']['done']} / {summary['reads']['reused']}"))
    if levels:
        resumed = sum(1 for info in levels.values() if info.get("resumed"))
        rows.append(("levels from disk", f"{resumed} of {len(levels)} (their reads were done when they were made)"
                                         if resumed else f"0 of {len(levels)}"))
    print_table(rows, title=f"{summary['dataset']} {summary['split']} sweep ({summary['questions']} questions) -> {out}")




@dataclass
class SweepResult:
    """What a sweep gives back: summary.json's content, the tidy rows of results.csv and summary.csv, its directory."""

    summary: dict
    rows: list[dict]
    agg_rows: list[dict]
    out: Path
    manifest: dict = field(default_factory=dict)


def _reranker_facts(config: SweepConfig) -> list[dict]:
    """The re-ranking stage's facts (model identity, depth, precision), its model checked; none without ``--rerank``."""
    if not config.retriever.rerank:
        return []
    from pipeline import stages
    from pipeline.experiment import retriever_options
    from retrievers.rerank import static_facts

    return static_facts(stages.build_retriever(config.retriever.spec, retriever_options(config)))


def run_sweep_experiment(config: SweepConfig, *, flags: dict | None = None) -> SweepResult:
    """Run a whole sweep (every size and seed, resumable level by level), aggregate it and write its files."""
    from pipeline.cli import make_out_dir

    sel = config.selectors
    parse_n(sel.n), parse_seeds(config.data.seeds), parse_thetas(sel.thetas)  # bad settings fail before any work
    rerankers = _reranker_facts(config)  # a bad --rerank model too
    stats = config.statistics
    timer = Timer()
    out = make_out_dir(config.out, f"sweep-{config.data.dataset}-{config.data.split}-{config.retriever.spec}")
    with timer("sweep"):
        state = run_sweep(config, out, timer)
    plan, levels = state["plan"], state["levels"]
    with timer("aggregate"):
        agg = aggregate(plan, levels, stats.bootstrap, stats.bootstrap_seed, stats.weighting, stats.objective)
    write_csv(out / "results.csv", agg["rows"])
    write_csv(out / "summary.csv", agg["agg_rows"])
    write_csv(out / "cost.csv", agg["cost_rows"])
    # the ids of the rows of every level's per-question arrays (pipeline.compare reads them)
    queries = plan.dataset.queries
    from pipeline.stages import unique_question_rows

    write_json(out / "question_ids.json", [queries.question_ids[i] for i in unique_question_rows(queries)])
    summary = agg["summary"]
    if stats.plots:
        with timer("plots"):
            # relative to the sweep directory (a relative --out would otherwise name them from the working directory)
            summary["plots"] = [Path(p).relative_to(out).as_posix() for p in make_plots(out, plan, agg["agg_rows"], summary, agg["cost_rows"])]
    write_json(out / "summary.json", summary)
    sources = dict(plan.dataset.sources)
    if state["train"] is not None:
        sources.update({f"train:{k}": v for k, v in state["train"].sources.items()})
    manifest = write_manifest(out, command="pipeline.sweep", config=config.to_dict(), seed=plan.seeds, sources=sources,
                              timings=timer.timings, extra={"flags": flags or {}, "fingerprint": config.fingerprint(),
                                                            "reader": state["reader"], "levels": {f"{s}/{d}": r.info for (s, d), r in levels.items()},
                                                            **({"rerankers": rerankers} if rerankers else {})})
    return SweepResult(summary, agg["rows"], agg["agg_rows"], out, manifest)
