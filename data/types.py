"""Plain types that stages exchange: a candidate corpus, a set of queries, a ranking.

Every stage (retrievers, selectors, readers, evaluation) reads and writes only
these types and plain numpy arrays; none reaches into another's internals.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# the languages a dataset can be in: the answer metrics (eval.answer_metrics) and BM25 analysis know them
LANGUAGES = ("en", "th")


def take_rows(seq, rows: np.ndarray):
    """``seq`` at ``rows``: a lazy view when ``seq`` is store-backed (has ``take``), else a list."""
    if seq is None:
        return None
    if hasattr(seq, "take"):
        return seq.take(rows)
    return [seq[i] for i in rows]


def fetch_rows(seq, rows) -> list:
    """The values of ``seq`` at ``rows`` as a list (one bulk read for store-backed columns)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if hasattr(seq, "fetch"):
        return seq.fetch(rows)
    return [seq[i] for i in rows]


class RowParagraphs(Sequence):
    """``contexts`` of a sentence-level corpus: row i's paragraph, ``paragraph_texts[paragraph_ids[i]]``, read on demand.

    The paragraph texts are held once (``Corpus.paragraph_texts``); this view
    holds only the int64 row -> paragraph array, so the corpus carries no
    per-row copy or per-row list of its paragraphs.  Supports what corpus
    columns support: ``len``, int index, slice / row array -> list, ``take``
    (a view over some rows), ``fetch``, iteration.
    """

    def __init__(self, paragraph_texts: Sequence[str], paragraph_ids: np.ndarray):
        self.paragraph_texts = paragraph_texts
        self.paragraph_ids = np.asarray(paragraph_ids, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paragraph_ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.paragraph_texts[p] for p in self.paragraph_ids[index].tolist()]
        if isinstance(index, (list, np.ndarray)):
            return self.fetch(index)
        return self.paragraph_texts[int(self.paragraph_ids[index])]

    def __iter__(self):
        texts = self.paragraph_texts
        return (texts[p] for p in self.paragraph_ids.tolist())

    def fetch(self, rows) -> list[str]:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        return [self.paragraph_texts[p] for p in self.paragraph_ids[rows].tolist()]

    def take(self, rows) -> "RowParagraphs":
        return RowParagraphs(self.paragraph_texts, self.paragraph_ids[np.asarray(rows, dtype=np.int64)])

    def __eq__(self, other) -> bool:  # as a list of the same texts would compare
        if isinstance(other, RowParagraphs) and other.paragraph_texts is self.paragraph_texts:
            return bool(np.array_equal(other.paragraph_ids, self.paragraph_ids))
        try:
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        except TypeError:
            return NotImplemented

    def __repr__(self) -> str:
        return f"RowParagraphs({len(self)} rows over {len(self.paragraph_texts)} paragraphs)"


@dataclass
class Corpus:
    """Retrieval candidates.

    For sentence-level datasets (ReQA) a candidate is a (sentence, paragraph)
    pair: ``texts[i]`` is the sentence and ``contexts[i]`` its paragraph (a
    :class:`RowParagraphs` view of ``paragraph_texts``, not a second copy).  For
    paragraph-level datasets ``texts[i]`` is the paragraph and ``contexts[i]``
    the same text (or ``""``).  ``paragraph_ids[i]`` groups candidates that come
    from the same paragraph (used for paragraph-level metrics and for reading
    whole paragraphs); ``titles`` is optional (BEIR corpora have titles).

    Open-domain corpora (:mod:`data.corpus_store`) are store-backed: ``ids``,
    ``texts``, ``contexts``, ``titles`` and ``bodies`` are lazy sequences over a
    memory-mapped Arrow file (``len``, int index, slice/array of rows -> list,
    chunked iteration, ``take`` for views); ``texts`` is then "title\ntext"
    (what Pyserini indexes for DPR's Wikipedia), ``bodies`` the text alone
    (what DPR's has-answer test looks at), ``paragraph_texts`` is empty (every
    row is its own passage) and ``content_key`` names the content (store key
    plus the rows of a view), so an index keyed by it is built once.
    """

    ids: Sequence[str]
    texts: Sequence[str]
    contexts: Sequence[str]
    paragraph_ids: np.ndarray  # int64 [N]
    titles: Sequence[str] | None = None
    # paragraph_texts[p] is the text of paragraph p (len = number of paragraphs)
    paragraph_texts: Sequence[str] = field(default_factory=list)
    language: str = "en"
    # the passage text without its title (DPR's has_answer); None: the same as texts
    bodies: Sequence[str] | None = None
    # hash of the content for store-backed corpora (None: hash the texts)
    content_key: str | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def answer_texts(self, rows) -> list[str]:
        """Texts (title excluded) of ``rows``, fetched by row: what answer matching reads."""
        return fetch_rows(self.bodies if self.bodies is not None else self.texts, rows)

    def subset(self, rows: np.ndarray) -> "Corpus":
        """A new corpus holding only ``rows`` (paragraph ids are kept; store-backed columns stay lazy views)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.content_key is not None and rows.size == len(self) and np.array_equal(rows, np.arange(rows.size)):
            # every row in order (a sweep's "all" level): the same content, so the same key -- its index is
            # the whole corpus's, built once, not a second one over a view of every row
            return dataclasses.replace(self)
        same = self.contexts is self.texts
        texts = take_rows(self.texts, rows)
        key = None
        if self.content_key is not None:
            key = hashlib.sha256(self.content_key.encode() + b"\0" + np.ascontiguousarray(rows).tobytes()).hexdigest()[:24]
        return Corpus(
            ids=take_rows(self.ids, rows),
            texts=texts,
            contexts=texts if same and hasattr(texts, "take") else take_rows(self.contexts, rows),
            paragraph_ids=self.paragraph_ids[rows],
            titles=take_rows(self.titles, rows),
            paragraph_texts=self.paragraph_texts,
            language=self.language,
            bodies=take_rows(self.bodies, rows),
            content_key=key,
        )


@dataclass
class Queries:
    """Query inputs and their relevance judgements.

    ``gold[q]`` holds the corpus row indices relevant to query input ``q``;
    ``gold_grades[q]`` (optional, same shape) their graded relevance (BEIR).
    ``question_keys[q]`` groups query inputs that are the same question: ReQA
    keys questions by their text and keeps, per question, the best rank over
    its query inputs.  ``answers[q]`` are the gold answer strings (empty when
    the dataset has none) and ``question_ids[q]`` the dataset's own id (the key
    of SQuAD-style predictions).
    """

    ids: list[str]
    texts: list[str]
    gold: list[np.ndarray]
    question_keys: list[str]
    question_ids: list[str]
    answers: list[list[str]]
    gold_grades: list[np.ndarray] | None = None
    # answer_sentences[q]: the gold answer sentence text (ReQA); "" otherwise
    answer_sentences: list[str] | None = None
    language: str = "en"
    # open-domain questions: how an answer-bearing passage is decided ("string": DPR's
    # has_answer, "regex": CuratedTREC patterns); None for datasets whose gold is fixed
    answer_match: str | None = None
    # open-domain: the gold rows the dataset itself knows (before retrieval adds the
    # answer-bearing retrieved rows to ``gold``), and the [Q, K] has-answer matrix of the
    # last ranking that resolved ``gold`` (see pipeline.stages.resolve_open_gold)
    known_gold: list[np.ndarray] | None = None
    has_answer: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_answers(self) -> bool:
        return any(len(a) > 0 for a in self.answers)

    def subset(self, rows) -> "Queries":
        rows = list(rows)
        pick = lambda xs: None if xs is None else [xs[i] for i in rows]  # noqa: E731
        return Queries(
            ids=pick(self.ids),
            texts=pick(self.texts),
            gold=pick(self.gold),
            question_keys=pick(self.question_keys),
            question_ids=pick(self.question_ids),
            answers=pick(self.answers),
            gold_grades=pick(self.gold_grades),
            answer_sentences=pick(self.answer_sentences),
            language=self.language,
            answer_match=self.answer_match,
            known_gold=pick(self.known_gold),
            has_answer=None if self.has_answer is None else self.has_answer[np.asarray(rows, dtype=np.int64)],
        )


def limit_queries(dataset: "Dataset", limit: int | None) -> "Dataset":
    """Keep the query inputs of the first ``limit`` questions (the corpus stays whole)."""
    from data.errors import UserError

    if not limit:
        return dataset
    if limit < 1:
        raise UserError(f"--limit must be >= 1 (got {limit})")
    keep, seen = [], []
    seen_set = set()
    for i, qid in enumerate(dataset.queries.question_ids):
        if qid not in seen_set:
            if len(seen) == limit:
                break
            seen_set.add(qid)
            seen.append(qid)
        keep.append(i)
    return dataclasses.replace(dataset, queries=dataset.queries.subset(keep))


@dataclass
class Dataset:
    """A named corpus + queries pair for one split."""

    name: str
    split: str
    corpus: Corpus
    queries: Queries
    # files the dataset was built from (path -> sha256), for the run manifest
    sources: dict[str, str] = field(default_factory=dict)
    level: str = "sentence"  # "sentence" (ReQA) or "paragraph" or "document"


@dataclass
class Ranking:
    """Top-K results for Q queries.

    ``ids[q, j]`` is the corpus row of the j-th result of query q (``-1`` pads
    rows that have fewer than K results) and ``scores[q, j]`` its score; rows
    are sorted by descending score.
    """

    ids: np.ndarray  # int64 [Q, K]
    scores: np.ndarray  # float32 [Q, K]

    def __post_init__(self) -> None:
        self.ids = np.asarray(self.ids, dtype=np.int64)
        self.scores = np.asarray(self.scores, dtype=np.float32)
        if self.ids.shape != self.scores.shape or self.ids.ndim != 2:
            raise ValueError(f"ids {self.ids.shape} and scores {self.scores.shape} must be equal [Q, K] shapes")

    @property
    def depth(self) -> int:
        return self.ids.shape[1]

    def __len__(self) -> int:
        return self.ids.shape[0]

    def top(self, k: int) -> "Ranking":
        return Ranking(self.ids[:, :k], self.scores[:, :k])

    def subset(self, rows) -> "Ranking":
        rows = np.asarray(list(rows), dtype=np.int64)
        return Ranking(self.ids[rows], self.scores[rows])
