"""The retriever interface.

A retriever is built from plain constructor parameters (no work in
``__init__``), then ``index(corpus)`` prepares it for one corpus and
``search(query_texts, k)`` returns a :class:`retrievers.types.Ranking` whose ids
are row indices into that corpus.  Learned retrievers (routers, re-rankers)
also have ``fit(dataset)``, called with a *training* split before ``index``.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from data.types import Corpus
from retrievers.types import Ranking


@runtime_checkable
class Retriever(Protocol):
    name: str

    def index(self, corpus: Corpus) -> "Retriever": ...

    def search(self, query_texts: Sequence[str], k: int) -> Ranking: ...
