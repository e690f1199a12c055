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
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus, Dataset, Queries

POOL_SPLITS = ("dev", "train")


# ------------------------------------------------------------------- loader
def load_squad_open(split, *, data_dir, data_file, arg=None, skip_bad_records=False) -> Dataset:
    """``squad_open`` / ``squad_open:own``: SQuAD questions over a paragraph corpus (see module doc)."""
    from data.registry import cached_build, squad_dict

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
        from data.registry import load_squad_any

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
        contexts=list(texts),
        paragraph_ids=np.arange(len(texts), dtype=np.int64),
        titles=titles,
        paragraph_texts=list(texts),
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


def parse_corpus_sizes(spec: str | Sequence, n_gold: int, n_pool: int) -> list[int]:
    """Corpus sizes from ``"2067,5000,all"`` or ``"x1,x2,x5,x10"`` (mixable): sorted distinct counts.

    ``all`` is the whole pool; ``xR`` is R times the gold rows in all (``x1``:
    gold only, ``x2``: as much noise as gold), rounded and capped at the pool;
    a count must lie in ``[n_gold, n_pool]``.
    """
    items = [str(x).strip() for x in (spec.split(",") if isinstance(spec, str) else spec)]
    items = [x for x in items if x]
    if not items:
        raise UserError("--corpus-sizes: no sizes given (e.g. 2067,5000,all or x1,x2,x5)")
    sizes = []
    for item in items:
        low = item.lower()
        if low == "all":
            sizes.append(n_pool)
            continue
        m = _RATIO.match(low)
        if m:
            ratio = float(m.group(1))
            if ratio < 1:
                raise UserError(f"--corpus-sizes {item}: a noise ratio must be >= x1 (x1 = the gold rows only)")
            sizes.append(min(n_pool, int(round(ratio * n_gold))))
            continue
        try:
            size = int(low.replace("_", ""))
        except ValueError:
            raise UserError(f"--corpus-sizes {item!r}: expected a count, xRATIO or all") from None
        if size < n_gold:
            raise UserError(f"--corpus-sizes {size}: below the {n_gold} gold rows of the evaluated questions (use x1 for gold only)")
        if size > n_pool:
            raise UserError(f"--corpus-sizes {size}: above the {n_pool} rows of the pool (use all)")
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
    """``dataset`` with only corpus ``rows`` (in that order); gold rows re-indexed, rows outside dropped."""
    rows = np.asarray(rows, dtype=np.int64)
    new_row = np.full(len(dataset.corpus), -1, dtype=np.int64)
    new_row[rows] = np.arange(len(rows))
    queries = dataset.queries.subset(range(len(dataset.queries)))
    gold = []
    for g in dataset.queries.gold:
        m = new_row[np.asarray(g, dtype=np.int64)]
        gold.append(m[m >= 0])
    queries.gold = gold
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

