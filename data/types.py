"""Plain types that stages exchange: a candidate corpus and a set of queries.

Every stage (retrievers, selectors, readers, evaluation) reads and writes only
these types and plain numpy arrays; none reaches into another's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Corpus:
    """Retrieval candidates.

    For sentence-level datasets (ReQA) a candidate is a (sentence, paragraph)
    pair: ``texts[i]`` is the sentence and ``contexts[i]`` its paragraph.  For
    paragraph-level datasets ``texts[i]`` is the paragraph and ``contexts[i]``
    the same text (or ``""``).  ``paragraph_ids[i]`` groups candidates that come
    from the same paragraph (used for paragraph-level metrics and for reading
    whole paragraphs); ``titles`` is optional (BEIR corpora have titles).
    """

    ids: list[str]
    texts: list[str]
    contexts: list[str]
    paragraph_ids: np.ndarray  # int64 [N]
    titles: list[str] | None = None
    # paragraph_texts[p] is the text of paragraph p (len = number of paragraphs)
    paragraph_texts: list[str] = field(default_factory=list)
    language: str = "en"

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, rows: np.ndarray) -> "Corpus":
        """A new corpus holding only ``rows`` (paragraph ids are kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        return Corpus(
            ids=[self.ids[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            contexts=[self.contexts[i] for i in rows],
            paragraph_ids=self.paragraph_ids[rows],
            titles=None if self.titles is None else [self.titles[i] for i in rows],
            paragraph_texts=self.paragraph_texts,
            language=self.language,
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
        )


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
