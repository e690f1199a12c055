"""Small synthetic datasets and rule-based retrievers with planted signals.

They are real (if tiny) retrievers satisfying the Retriever protocol: they
read the indexed corpus and rank its rows by a fixed rule, so fusion methods
can be checked against an outcome known by construction.  Every query holds
a unique marker token that occurs only in its gold sentence.
"""

from __future__ import annotations

import zlib

import numpy as np

from data.types import Corpus, Dataset, Queries
from retrievers.types import Ranking

WH = ("who", "what")


def planted_dataset(
    split: str, n_queries: int = 60, n_distractors: int = 120, seed: int = 0, query_fillers: int = 2
) -> Dataset:
    """Queries ``"<wh> is <split>key<i> wX wY"``; gold sentence i holds ``<split>key<i>``.

    ``query_fillers``: how many random vocabulary words follow the marker (with
    none, the query's only content word is the marker).

    Sentences are grouped three to a paragraph in a shuffled order; the wh-word
    alternates who/what.
    """
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(200)]
    sentences, gold_of = [], []
    for i in range(n_queries):
        words = list(rng.choice(vocab, size=6)) + [f"{split}key{i}"]
        rng.shuffle(words)
        gold_of.append(len(sentences))
        sentences.append(" ".join(words))
    for _ in range(n_distractors):
        sentences.append(" ".join(rng.choice(vocab, size=7)))
    order = rng.permutation(len(sentences))
    row_of = np.empty(len(sentences), dtype=np.int64)
    row_of[order] = np.arange(len(sentences))
    texts = [sentences[i] for i in order]
    paragraph_ids = np.arange(len(texts), dtype=np.int64) // 3
    paragraph_texts = [" ".join(texts[p * 3 : p * 3 + 3]) for p in range(int(paragraph_ids.max()) + 1)]
    corpus = Corpus(
        ids=[f"{split}-s{r}" for r in range(len(texts))],
        texts=texts,
        contexts=[paragraph_texts[p] for p in paragraph_ids],
        paragraph_ids=paragraph_ids,
        paragraph_texts=paragraph_texts,
    )
    q_texts = [f"{WH[i % 2]} is {split}key{i} {' '.join(rng.choice(vocab, size=query_fillers))}".strip() for i in range(n_queries)]
    queries = Queries(
        ids=[f"{split}-q{i}" for i in range(n_queries)],
        texts=q_texts,
        gold=[np.array([row_of[gold_of[i]]], dtype=np.int64) for i in range(n_queries)],
        question_keys=q_texts,
        question_ids=[f"{split}-q{i}" for i in range(n_queries)],
        answers=[[] for _ in range(n_queries)],
    )
    return Dataset(name="planted", split=split, corpus=corpus, queries=queries)


def _marker(text: str) -> str | None:
    return next((t for t in text.split() if "key" in t), None)


def _rng(text: str, seed: int) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(text.encode()) * 1000 + seed)


class _MarkerRetriever:
    """Base: finds each query's gold row through its marker token, then places it by a rule."""

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.seed = seed

    def index(self, corpus: Corpus):
        self.corpus = corpus
        self.row_of_marker = {}
        for row, text in enumerate(corpus.texts):
            m = _marker(text)
            if m is not None:
                self.row_of_marker[m] = row
        return self

    def _ranking(self, text: str, k: int, gold_rank: int | None, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # every member lists the non-gold rows in the same blocks of nine, shuffled within each
        # block by its own seed, so in any top-10 nothing but the gold's place tells it apart;
        # a deeper search extends a shallower one (prefix-consistent)
        gold = self.row_of_marker.get(_marker(text))
        others = np.array([r for r in _rng(text, 0).permutation(len(self.corpus)) if r != gold], dtype=np.int64)
        own = _rng(text, self.seed + 1)
        for start in range(0, len(others), 9):
            others[start : start + 9] = others[start : start + 9][own.permutation(len(others[start : start + 9]))]
        ids = others
        if gold is not None and gold_rank is not None:
            ids = np.insert(others, min(gold_rank, len(others)), gold)
        ids = ids[:k]
        return ids, scores[: len(ids)]


class ScrambleRetriever(_MarkerRetriever):
    """Puts the gold row at a uniformly random rank in ``[0, gold_max_rank)``; scores are random, descending."""

    def __init__(self, name: str, gold_max_rank: int = 10, seed: int = 0):
        super().__init__(name, seed)
        self.gold_max_rank = gold_max_rank

    def search(self, query_texts, k):
        ids = np.full((len(query_texts), k), -1, dtype=np.int64)
        scores = np.full((len(query_texts), k), -np.inf, dtype=np.float32)
        n = len(self.corpus) + 1
        for q, text in enumerate(query_texts):
            rng = _rng(text, self.seed + 7)
            rank = int(rng.integers(0, self.gold_max_rank))
            s = 10.0 - np.cumsum(rng.uniform(0, 0.2, size=n))
            row_ids, row_scores = self._ranking(text, k, rank, s)
            ids[q, : len(row_ids)] = row_ids
            scores[q, : len(row_ids)] = row_scores
        return Ranking(ids, scores)


class WhRuleRetriever(_MarkerRetriever):
    """Gold at rank 0 for queries whose wh-word is ``good_for``, at rank ``bad_rank`` otherwise.

    ``peaked``: when the member is right its scores are peaked (1, then
    0.3, 0.299, ...); when wrong they are flat (0.5, 0.4995, ...).  Without
    ``peaked`` both cases get the same linear scores, so nothing but the query
    tells which member is right.
    """

    def __init__(self, name: str, good_for: str, bad_rank: int = 9, peaked: bool = False, seed: int = 0):
        super().__init__(name, seed)
        self.good_for, self.bad_rank, self.peaked = good_for, bad_rank, peaked

    def search(self, query_texts, k):
        ids = np.full((len(query_texts), k), -1, dtype=np.int64)
        scores = np.full((len(query_texts), k), -np.inf, dtype=np.float32)
        steps = np.arange(len(self.corpus) + 1)
        for q, text in enumerate(query_texts):
            right = text.split()[0] == self.good_for
            if not self.peaked:
                s = 1.0 - 0.01 * steps
            elif right:
                s = np.where(steps == 0, 1.0, 0.3 - 0.001 * steps)
            else:
                s = 0.5 - 0.0005 * steps
            row_ids, row_scores = self._ranking(text, k, 0 if right else self.bad_rank, s)
            ids[q, : len(row_ids)] = row_ids
            scores[q, : len(row_ids)] = row_scores
        return Ranking(ids, scores)


class RecordingRetriever:
    """Wraps a retriever and records every corpus it indexes and every query text it searches."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.indexed: list[list[str]] = []
        self.searched: list[str] = []

    def index(self, corpus):
        self.indexed.append(list(corpus.ids))
        self.inner.index(corpus)
        return self

    def search(self, query_texts, k):
        self.searched.extend(query_texts)
        return self.inner.search(query_texts, k)


def mrr(ranking: Ranking, gold) -> float:
    """Mean reciprocal rank (0 when no gold row is retrieved)."""
    out = []
    for q, g in enumerate(gold):
        hit = np.nonzero(np.isin(ranking.ids[q], g))[0]
        out.append(1.0 / (1 + hit[0]) if len(hit) else 0.0)
    return float(np.mean(out))
