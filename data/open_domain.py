"""Paragraph-level open-domain SQuAD and the corpus-size levels of a noise sweep.

``squad_open`` follows Kratzwald & Feuerriegel (2018), "Adaptive Document
Retrieval for Deep Question Answering", EMNLP, §3 (SQuAD as an open-domain
task with a corpus of growing size):

* the questions are those of the split (SQuAD v1.1 dev: 10,570);
* the corpus is a pool of paragraphs, one row per paragraph:
  ``Corpus.texts[i] == Corpus.contexts[i]`` is the paragraph text,
  ``paragraph_ids[i] == i``, ``paragraph_texts`` holds the same texts and
  ``titles`` the article titles;
* the pool is SQuAD v1.1 dev followed by SQuAD v1.1 train paragraphs, in file
  order, for *both* splits (2,067 + 18,896 = 20,963 paragraphs), so the
  evaluated and the training questions see the same pool.  With the argument
  ``own`` (``squad_open:own``) the pool is only the split's own paragraphs;
* the gold of a question is the row of its own paragraph plus every row with
  the identical text (a paragraph may occur twice in the pool).

Corpus-size levels (:func:`corpus_levels`) are the gold paragraphs of the
evaluated questions plus a seeded share of the other paragraphs (noise).  The
noise is one seeded permutation of the pool with the gold rows left out and a
level of size S takes its first ``S - |gold|`` rows, so for one seed a larger
level is a superset of a smaller one (nested) and a reader's reads of the
passages the levels share are reused.  The same sampler serves any dataset, e.g. the ReQA
sentence candidates of ``reqa_squad``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus, Dataset, Queries

POOL_SPLITS = ("dev", "train")


# ------------------------------------------------------------------- loader
def load_squad_open(split, *, data_dir, data_file, arg=None, skip_bad_records=False) -> Dataset:
    """``squad_open`` / ``squad_open:own``: SQuAD questions over a paragraph corpus (see module doc)."""
    from data.cache import cached_build
    from data.squad import squad_dict

    if split not in POOL_SPLITS:
        raise UserError(f"squad_open has no split {split!r}; use dev or train")
    if arg not in (None, "", "own"):
        raise UserError(f"dataset squad_open:{arg}: unknown argument (use squad_open or squad_open:own)")
    own_only = arg == "own"
    pool_splits = [split] if own_only else list(POOL_SPLITS)
    files = {}
    for s in pool_splits:
        files[s] = squad_dict(s, data_dir=data_dir, data_file=data_file if s == split else None)
    digests = [files[s][1] for s in pool_splits]

    def build():
        from data.squad import load_squad_any

        squads, sources = {}, {}
        for s in pool_splits:
            squads[s], src = load_squad_any(
                s, data_dir=data_dir, data_file=data_file if s == split else None, skip_bad_records=skip_bad_records
            )
            sources.update(src)
        return build_squad_open(squads, split=split, name="squad_open" + (":own" if own_only else ""), sources=sources)

    if any(d is None for d in digests):
        return build()
    return cached_build(["squad_open", split, own_only, *digests, skip_bad_records], build)


def build_squad_open(squads: dict[str, dict], *, split: str, name: str = "squad_open", sources: dict | None = None) -> Dataset:
    """The open-domain dataset from SQuAD dicts ``{"dev": ..., "train": ...}`` (pool in POOL_SPLITS order)."""
    if split not in squads:
        raise UserError(f"squad_open: no SQuAD data for split {split!r}")
    ids: list[str] = []
    texts: list[str] = []
    titles: list[str] = []
    counts: dict[str, int] = {}
    own_rows: dict[tuple[str, int, int], int] = {}
    for s in [p for p in POOL_SPLITS if p in squads]:
        n = 0
        for a, article in enumerate(squads[s]["data"]):
            for p, para in enumerate(article["paragraphs"]):
                own_rows[(s, a, p)] = len(ids)
                ids.append(f"{s}-p{n}")
                texts.append(para["context"])
                titles.append(str(article.get("title", "")))
                n += 1
        counts[s] = n
    rows_of_text: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        rows_of_text.setdefault(t, []).append(i)

    q_ids, q_texts, q_answers, gold = [], [], [], []
    for a, article in enumerate(squads[split]["data"]):
        for p, para in enumerate(article["paragraphs"]):
            row = own_rows[(split, a, p)]
            g = np.asarray(sorted(rows_of_text[texts[row]]), dtype=np.int64)
            for qa in para["qas"]:
                answers = [x["text"] for x in qa["answers"]]
                if not answers:
                    continue
                q_ids.append(str(qa["id"]))
                q_texts.append(qa["question"])
                q_answers.append(answers)
                gold.append(g)
    corpus = Corpus(
        ids=ids,
        texts=texts,
        contexts=texts,  # paragraph-level: the same list, not copies
        paragraph_ids=np.arange(len(texts), dtype=np.int64),
        titles=titles,
        paragraph_texts=texts,
    )
    queries = Queries(
        ids=list(q_ids),
        texts=q_texts,
        gold=gold,
        question_keys=list(q_ids),
        question_ids=list(q_ids),
        answers=q_answers,
    )
    meta = dict(sources or {})
    meta["pool"] = " + ".join(f"{s} {counts[s]} paragraphs" for s in counts)
    return Dataset(name=name, split=split, corpus=corpus, queries=queries, sources=meta, level="paragraph")


# ------------------------------------------------------------ corpus levels
def gold_rows(queries: Queries) -> np.ndarray:
    """Sorted distinct corpus rows that are gold for any of ``queries``."""
    if len(queries) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate([np.asarray(g, dtype=np.int64).reshape(-1) for g in queries.gold]))


_RATIO = re.compile(r"^x(\d+(?:\.\d+)?)$")
_COUNT = re.compile(r"^(\d+(?:\.\d+)?)([km]?)$")
_FRACTION = re.compile(r"^(\d*\.\d+|\d+(?:\.\d+)?%)$")


def parse_corpus_sizes(spec: str | Sequence, n_gold: int, n_pool: int) -> list[int]:
    """Corpus sizes from ``"2067,5000,all"``, ``"x1,x2,x5,x10"`` or ``"10k,100k,1M,0.5,all"`` (mixable).

    ``all`` is the whole pool; ``xR`` is R times the gold rows in all (``x1``:
    gold only, ``x2``: as much noise as gold), rounded and capped at the pool;
    a count may carry a ``k`` (10^3) or ``M`` (10^6) suffix; a fraction of the
    pool is written with a decimal point or a percent sign (``0.25``, ``25%``);
    every size must lie in ``[max(n_gold, 1), n_pool]``.  Sorted distinct counts.
    """
    items = [str(x).strip() for x in (spec.split(",") if isinstance(spec, str) else spec)]
    items = [x for x in items if x]
    if not items:
        raise UserError("--corpus-sizes: no sizes given (e.g. 2067,5000,all, x1,x2,x5 or 10k,100k,1M,all)")
    low_bound = max(int(n_gold), 1)
    sizes = []
    for item in items:
        low = item.lower().replace("_", "")
        if low == "all":
            sizes.append(n_pool)
            continue
        m = _RATIO.match(low)
        if m:
            ratio = float(m.group(1))
            if ratio < 1:
                raise UserError(f"--corpus-sizes {item}: a noise ratio must be >= x1 (x1 = the gold rows only)")
            if n_gold == 0:
                raise UserError(f"--corpus-sizes {item}: a noise ratio needs gold rows, and these questions have no known gold passages; use counts (10k), fractions (0.1) or all")
            sizes.append(min(n_pool, int(round(ratio * n_gold))))
            continue
        if _FRACTION.match(low):
            frac = float(low[:-1]) / 100 if low.endswith("%") else float(low)
            if not 0 < frac <= 1:
                raise UserError(f"--corpus-sizes {item}: a fraction of the pool must lie in (0, 1]")
            size = max(1, int(round(frac * n_pool)))
            if size < low_bound:
                raise UserError(f"--corpus-sizes {item}: {size} rows, below the {n_gold} gold rows of the evaluated questions")
            sizes.append(size)
            continue
        m = _COUNT.match(low)
        if not m or (m.group(2) == "" and "." in m.group(1)):
            raise UserError(f"--corpus-sizes {item!r}: expected a count (10000, 10k, 1M), a fraction (0.1, 10%), xRATIO or all")
        size = int(round(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2)]))
        if size < low_bound:
            what = f"the {n_gold} gold rows of the evaluated questions (use x1 for gold only)" if n_gold else "1 row"
            raise UserError(f"--corpus-sizes {item}: below {what}")
        if size > n_pool:
            raise UserError(f"--corpus-sizes {item}: above the {n_pool} rows of the pool (use all)")
        sizes.append(size)
    return sorted(set(sizes))


def corpus_levels(n_pool: int, gold: Sequence[int], sizes: Sequence[int], seed: int) -> list[np.ndarray]:
    """Rows of each corpus level: every gold row plus seeded noise; sorted int64 arrays, one per size.

    Deterministic for ``seed``; nested (for one seed, the rows of a smaller
    size are a subset of those of a larger one) because every level takes a
    prefix of one seeded permutation of the pool with the gold rows left out.
    The permutation is of the whole pool, so the noise order is the same
    whatever the gold set is (question subsets share their noise).
    """
    gold = np.unique(np.asarray(list(gold), dtype=np.int64))
    if gold.size and (gold[0] < 0 or gold[-1] >= n_pool):
        raise UserError(f"gold rows must lie in 0..{n_pool - 1}")
    is_gold = np.zeros(n_pool, dtype=bool)
    is_gold[gold] = True
    # one seeded order of the whole pool, gold rows skipped: the noise order does not depend
    # on which questions are evaluated, so levels built for a subset of the questions share
    # most of their noise (and their reads) with the levels of a larger subset
    order = np.random.default_rng(np.random.SeedSequence(int(seed))).permutation(n_pool)
    order = order[~is_gold[order]]
    out = []
    for size in sizes:
        size = int(size)
        if not gold.size <= size <= n_pool:
            raise UserError(f"corpus size {size}: must lie in [{gold.size} gold rows, {n_pool} pool rows]")
        out.append(np.sort(np.concatenate([gold, order[: size - gold.size]])))
    return out


def restrict_corpus(dataset: Dataset, rows: np.ndarray) -> Dataset:
    """``dataset`` with only corpus ``rows`` (in that order); gold rows re-indexed, rows outside dropped.

    For open datasets the gold is the known gold only (re-indexed): a ranking
    over the new corpus adds its answer-bearing rows (``pipeline.stages.retrieve``).
    """
    rows = np.asarray(rows, dtype=np.int64)
    new_row = np.full(len(dataset.corpus), -1, dtype=np.int64)
    new_row[rows] = np.arange(len(rows))
    queries = dataset.queries.subset(range(len(dataset.queries)))

    def reindex(golds):
        out = []
        for g in golds:
            m = new_row[np.asarray(g, dtype=np.int64)]
            out.append(m[m >= 0])
        return out

    base = dataset.queries.known_gold if dataset.queries.known_gold is not None else dataset.queries.gold
    queries.gold = reindex(base)
    if dataset.queries.known_gold is not None:
        queries.known_gold = reindex(dataset.queries.known_gold)
    queries.has_answer = None  # belongs to a ranking over the old corpus
    if dataset.queries.gold_grades is not None:
        queries.gold_grades = [
            np.asarray(gr)[new_row[np.asarray(g, dtype=np.int64)] >= 0]
            for g, gr in zip(dataset.queries.gold, dataset.queries.gold_grades)
        ]
    return Dataset(
        name=dataset.name,
        split=dataset.split,
        corpus=dataset.corpus.subset(rows),
        queries=queries,
        sources=dict(dataset.sources),
        level=dataset.level,
    )


def sample_training_questions(dataset: Dataset, limit: int | None, seed: int) -> Dataset:
    """A seeded sample of about ``limit`` questions taken whole article by whole article.

    Articles are the corpus titles of the questions' first gold row when the
    corpus has titles, else runs of 40 consecutive paragraph ids (SQuAD keeps
    an article's paragraphs together).  Taking whole articles keeps the
    same-topic paragraphs an evaluated question competes with.  The corpus is
    unchanged; only the queries are subsampled (in their original order).
    """
    queries = dataset.queries
    if not limit or limit >= len(queries):
        return dataset
    if limit < 2:
        raise UserError(f"--train-limit {limit}: fitting needs at least 2 questions")
    corpus = dataset.corpus
    first = np.array([int(np.asarray(g).reshape(-1)[0]) if len(g) else -1 for g in queries.gold], dtype=np.int64)
    if not (first >= 0).any() or corpus.content_key is not None:
        # open-domain questions: no gold passage groups them into articles, so the
        # sample is a seeded uniform one (in the original order)
        rows = np.sort(np.random.default_rng(np.random.SeedSequence([int(seed), 7])).permutation(len(queries))[:limit])
        return Dataset(name=dataset.name, split=dataset.split, corpus=corpus, queries=queries.subset(rows.tolist()),
                       sources=dict(dataset.sources), level=dataset.level)
    if corpus.titles is not None:
        _, group_of_row = np.unique(np.asarray(corpus.titles, dtype=object).astype(str), return_inverse=True)
    else:
        group_of_row = np.asarray(corpus.paragraph_ids) // 40
    group = np.where(first >= 0, group_of_row[np.maximum(first, 0)], -1)
    groups = np.unique(group[group >= 0])
    order = np.random.default_rng(np.random.SeedSequence([int(seed), 7])).permutation(groups)
    keep = np.zeros(len(queries), dtype=bool)
    for g in order:
        keep |= group == g
        if keep.sum() >= limit:
            break
    rows = np.flatnonzero(keep)[:limit]
    return Dataset(
        name=dataset.name,
        split=dataset.split,
        corpus=corpus,
        queries=queries.subset(rows.tolist()),
        sources=dict(dataset.sources),
        level=dataset.level,
    )



# ------------------------------------------------------------- open datasets
def load_open(split, *, data_dir, data_file, arg=None, skip_bad_records=False, language=None) -> Dataset:
    """``open:CORPUS+QUESTIONS``: any passage corpus x any question set (see :mod:`data.open_sources`).

    The corpus goes through the out-of-core store (:mod:`data.corpus_store`):
    built once per source content, memory-mapped, text fetched by row.  Gold
    is decided after retrieval, as DPR and Pyserini decide it: the retrieved
    passages that have an answer (``Queries.answer_match``), plus the gold
    passage ids the question set itself gives (DPR's positive contexts).
    ``--data-file`` replaces the question file.  ``language`` (``--language``,
    default English) is the language of corpus and questions: BM25's analyzer
    (Thai: pre-tokenized with newmm) and the answer metrics follow it.
    """
    from data.open_sources import parse_open_spec

    spec = parse_open_spec(arg)
    store, corpus_sources = open_corpus_store(spec.corpus, skip_bad_records)
    corpus_name = corpus_sources.pop("_name", None) or _short(spec.corpus)
    questions, q_sources, q_skipped = load_open_questions(spec.questions, split, data_dir=data_dir,
                                                          data_file=data_file, skip_bad_records=skip_bad_records)
    language = language or "en"
    corpus = store.corpus(language=language)
    wanted = [g for q in questions for g in q.gold_ids]
    row_of = store.rows_of_ids(wanted + [f"wiki:{g}" for g in wanted] + [g[5:] for g in wanted if g.startswith("wiki:")])

    def known(q) -> np.ndarray:
        rows = set()
        for g in q.gold_ids:
            for cand in (g, f"wiki:{g}", g[5:] if g.startswith("wiki:") else None):
                if cand is not None and cand in row_of:
                    rows.add(row_of[cand])
        return np.asarray(sorted(rows), dtype=np.int64)

    known_gold = [known(q) for q in questions]
    ids = [q.qid for q in questions]
    queries = Queries(
        ids=list(ids), texts=[q.text for q in questions], gold=[g.copy() for g in known_gold],
        question_keys=list(ids), question_ids=list(ids), answers=[q.answers for q in questions],
        answer_match=spec.match, known_gold=known_gold, language=language,
    )
    if len(set(ids)) != len(ids):
        raise UserError(f"open: the question ids of {spec.questions.path} are not unique")
    sources = {**corpus_sources, **q_sources}
    skipped = int(corpus_sources.pop("_skipped", 0)) + q_skipped
    sources.pop("_skipped", None)
    if skip_bad_records:
        sources["skipped_records"] = skipped
    sources["answer_match"] = spec.match
    sources["known_gold_questions"] = int(sum(1 for g in known_gold if g.size))
    name = spec.name or "open:" + corpus_name + "+" + _short(spec.questions)
    return Dataset(name=name, split=split, corpus=corpus, queries=queries, sources=sources, level="paragraph")


def _short(source) -> str:
    if source.kind == "hf":
        return f"hf:{source.path}" + (f"/{source.config}" if source.config else "")
    if source.kind == "squad":
        return "squad"
    return Path(source.path).name


def _named_store(path: Path):
    """A corpus store directory named as the corpus (``store@DIR``): checked, never removed (it is the user's
    corpus now, perhaps without its source file); its sources entry names the file it was built from, and the
    dataset is called after that file (``_name``), as when the file itself is named."""
    from data.corpus_store import check_store, open_store

    if not path.is_dir():
        raise UserError(f"{path}: not a directory (open: corpus store@DIR)")
    problem = check_store(path)
    if problem is not None:
        hint = " (a store keeps its key as its directory's name)" if "names the store" in problem else ""
        raise UserError(f"{path}: not a usable corpus store: {problem}{hint}")
    store = open_store(path)
    built_from = store.manifest.get("source")
    sources = {str(built_from): str(store.manifest.get("sha256", ""))} if built_from else {}
    sources.update({"corpus_store": str(path), "_skipped": int(store.manifest.get("skipped_records", 0) or 0)})
    if built_from:
        built_from = str(built_from)
        sources["_name"] = built_from.rstrip("/") if built_from.startswith("hf:") else Path(built_from).name
    return store, sources


def open_corpus_store(source, skip_bad_records: bool = False):
    """The corpus store of a corpus source (built on first use), and its sources entry."""
    from data.beir import hub_offline, offline_reason
    from data.corpus_store import cached_store, file_digest, tree_digest
    from data.io import read_ahead
    from data.open_sources import (BadRecords, NeedsPythonReader, corpus_files, detect_corpus_format, hub_corpus,
                                   read_corpus)

    meta: dict = {}
    if source.kind == "hf":
        if hub_offline():
            raise UserError(f"open: corpus hf:{source.path}: {offline_reason()}; give a local psgs_w100.tsv")
        import datasets

        key = ["hf", source.path, source.config, datasets.__version__]
        meta["source"] = f"hf:{source.path}/{source.config or ''}"

        def records():
            try:
                yield from hub_corpus(source.path, source.config)
            except UserError:
                raise
            except Exception as e:  # offline or unknown config
                raise UserError(f"open: corpus hf:{source.path} could not be loaded from the hub ({type(e).__name__}: {e})") from None

        store = cached_store(key, records, meta=meta, desc=f"hf:{source.path}")
        return store, {f"hf:{source.path}": source.config or "", "corpus_store": str(store.directory)}
    path = Path(source.path)
    if not path.exists():
        raise UserError(f"{path}: no such file or directory (open: corpus)")
    fmt = source.format or detect_corpus_format(path)
    if fmt == "store":
        return _named_store(path)
    files = corpus_files(path, fmt)
    digest = file_digest(files[0]) if len(files) == 1 and files[0] == path else tree_digest(files, path if path.is_dir() else path.parent)
    bad = BadRecords(skip_bad_records)
    meta.update({"source": str(path), "format": fmt, "sha256": digest})

    def records(fast: bool):
        # Arrow's readers parse the next batches in a thread while the store writes the previous ones
        yield from read_ahead(read_corpus(path, fmt, bad, fast=True)) if fast else read_corpus(path, fmt, bad)
        meta["skipped_records"] = bad.count

    key = [fmt, digest, bool(skip_bad_records)]
    # parsed by Arrow's CSV / JSON reader unless the file holds something only the Python reader decides
    fast = fmt in ("dpr-tsv", "beir", "pyserini")
    meta["reader"] = "arrow" if fast else "python"
    try:
        store = cached_store(key, lambda: records(fast), meta=meta, desc=f"{path.name} store")
    except NeedsPythonReader:
        meta["reader"] = "python"
        store = cached_store(key, lambda: records(False), meta=meta, desc=f"{path.name} store")
    return store, {str(path): digest, "corpus_store": str(store.directory),
                   "_skipped": int(store.manifest.get("skipped_records", 0) or 0)}


def load_open_questions(source, split: str, *, data_dir=None, data_file=None, skip_bad_records=False):
    """(questions, sources, skipped) of a question source for ``split`` (``{split}`` in paths is replaced)."""
    from data.beir import hub_offline, offline_reason
    from data.io import sha256_file
    from data.open_sources import BadRecords, detect_question_format, hub_questions, read_questions

    bad = BadRecords(skip_bad_records)
    if source.kind == "hf":
        if hub_offline():
            raise UserError(f"open: questions hf:{source.path}: {offline_reason()}; give a local file")
        try:
            qs = hub_questions(source.path, source.config, split)
        except UserError:
            raise
        except Exception as e:  # offline, unknown config
            raise UserError(f"open: questions hf:{source.path} could not be loaded from the hub ({type(e).__name__}: {e})") from None
        return qs, {f"hf:{source.path}": f"{source.config or ''}:{split}"}, 0
    if data_file is not None:
        path, fmt = Path(data_file), source.format
    elif source.kind == "squad":
        from data.locations import shown_dir
        from data.squad import squad_dict

        path, _ = squad_dict(split, data_dir=data_dir, data_file=None)
        if path is None:
            raise UserError(f"open: questions squad: no SQuAD v1.1 {split} file under {shown_dir(data_dir)}")
        fmt = "squad"
    else:
        path, fmt = Path(source.path.replace("{split}", split)), source.format
    if not path.is_file():
        raise UserError(f"{path}: no such file (open: questions for split {split!r})")
    fmt = fmt or detect_question_format(path)
    qs = read_questions(path, fmt, bad)
    if not qs:
        raise UserError(f"{path}: no questions with answers")
    return qs, {str(path): sha256_file(path)}, bad.count
