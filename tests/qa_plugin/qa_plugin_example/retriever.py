"""An example plugin retriever: query-term overlap, registered as ``overlap`` by the entry point

    [qa_retrieval_eval.retrievers]
    overlap = qa_plugin_example.retriever:OverlapRetriever

It is then a retriever spec like the built-in ones: ``--retriever overlap``,
``overlap[idf=false,min_token_length=3]``, or a member of a fused spec
(``rrf:bm25+overlap``).  Bracket options are the constructor's parameters,
converted to their annotated types.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus, Ranking
from retrievers.base import RetrieverBase

_WORD = re.compile(r"\w+")


class OverlapRetriever(RetrieverBase):
    """Scores a passage by the distinct lowercased query tokens it contains (unlearned, lexical).

    Parameters
    ----------
    idf : weigh each shared token by its inverse document frequency
        ``log((N + 1) / df)`` (else every shared token counts 1).
    min_token_length : shorter tokens are ignored (drops "a", "of"... at 2).

    Only passages sharing at least one token are ranked; a row of the
    ranking is padded with id -1 / score -inf past them.  Equal scores are
    ordered by corpus row.
    """

    name = "overlap"

    def __init__(self, idf: bool = True, min_token_length: int = 2):
        self.idf = idf
        self.min_token_length = min_token_length

    def tokens(self, text: str) -> set[str]:
        return {t for t in _WORD.findall(text.lower()) if len(t) >= self.min_token_length}

    def index(self, corpus: Corpus) -> "OverlapRetriever":
        if len(corpus) == 0:
            raise UserError("overlap: the corpus is empty")
        postings: dict[str, list[int]] = {}
        for row, text in enumerate(corpus.texts):
            for token in self.tokens(text):
                postings.setdefault(token, []).append(row)
        n = len(corpus)
        self._postings = {t: np.asarray(rows, dtype=np.int64) for t, rows in postings.items()}
        self._weights = {t: math.log((n + 1) / len(rows)) if self.idf else 1.0 for t, rows in postings.items()}
        self._size = n
        return self

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        if not hasattr(self, "_postings"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"overlap: k must be >= 1 (got {k})")
        ids = np.full((len(query_texts), k), -1, dtype=np.int64)
        scores = np.full((len(query_texts), k), -np.inf, dtype=np.float32)
        for q, text in enumerate(query_texts):
            terms = [t for t in self.tokens(text) if t in self._postings]
            if not terms:
                continue
            rows = np.concatenate([self._postings[t] for t in terms])
            weights = np.concatenate([np.full(len(self._postings[t]), self._weights[t]) for t in terms])
            candidates, which = np.unique(rows, return_inverse=True)
            summed = np.bincount(which, weights=weights).astype(np.float32)
            order = np.lexsort((candidates, -summed))[:k]  # score descending, then row ascending
            ids[q, : len(order)] = candidates[order]
            scores[q, : len(order)] = summed[order]
        return Ranking(ids, scores)

    def facts(self) -> dict:
        """What a run manifest records: the index's size and weighting (once indexed)."""
        if not hasattr(self, "_postings"):
            return {}
        return {"index": {"passages": self._size, "terms": len(self._postings), "idf": self.idf,
                          "min_token_length": self.min_token_length}}
