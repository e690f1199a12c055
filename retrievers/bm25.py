"""BM25 through Pyserini (Lucene), in process.

Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond"; the Lucene implementation that Pyserini/Anserini use (Lin et al.
2021, "Pyserini: A Python Toolkit for Reproducible Information Retrieval
Research with Sparse and Dense Representations").

The index is built once per corpus content and analyzer settings and cached on
disk (``<cache>/bm25/<key>``); k1 and b are search-time parameters.  Document
ids inside Lucene are corpus row numbers, so hits map to rows without a
lookup table.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from data.errors import UserError
from data.io import cache_dir, sha256_text
from data.types import Corpus
from retrievers.types import Ranking

FIELDS = ("sentence", "sentence+context", "context")


class BM25Retriever:
    """Lucene BM25 over a corpus.

    Parameters
    ----------
    k1, b : BM25 parameters (Pyserini defaults 0.9 / 0.4).
    field : what is indexed for each candidate: ``"sentence"`` (the candidate
        text alone), ``"sentence+context"`` (the sentence followed by its
        paragraph) or ``"context"`` (the paragraph alone).
    language : Lucene analyzer language (``"en"``: Porter stemming and English
        stop words, Anserini's default).  ``"th"`` and other languages without
        white-space word breaks go through ``pretokenize`` instead.
    pretokenize : optional ``text -> list of tokens``; when given, text is
        joined with spaces and indexed/searched with Lucene's white-space
        analyzer (Pyserini's ``-pretokenized``).
    threads : search threads for ``batch_search``.
    """

    name = "bm25"

    def __init__(
        self,
        k1: float = 0.9,
        b: float = 0.4,
        field: str = "sentence",
        language: str = "en",
        pretokenize: Callable[[str], list[str]] | None = None,
        threads: int | None = None,
        index_dir: str | None = None,
    ):
        self.k1 = k1
        self.b = b
        self.field = field
        self.language = language
        self.pretokenize = pretokenize
        self.threads = threads
        self.index_dir = index_dir

    # ------------------------------------------------------------------ index
    def _contents(self, corpus: Corpus) -> list[str]:
        if self.field not in FIELDS:
            raise UserError(f"bm25 field {self.field!r} unknown; use one of {', '.join(FIELDS)}")
        titles = corpus.titles
        out = []
        for i, (text, ctx) in enumerate(zip(corpus.texts, corpus.contexts)):
            if self.field == "sentence":
                s = text
            elif self.field == "context":
                s = ctx or text
            else:
                s = f"{text} {ctx}" if ctx and ctx != text else text
            out.append(s)
        del titles
        if self.pretokenize is not None:
            out = [" ".join(self.pretokenize(s)) for s in tqdm(out, desc="bm25 tokenize", leave=False)]
        return out

    def index(self, corpus: Corpus) -> "BM25Retriever":
        if len(corpus) == 0:
            raise UserError("bm25: the corpus is empty")
        search_lucene, index_lucene = _pyserini()
        contents = self._contents(corpus)
        args = self._index_args()
        key = sha256_text("bm25-v1", args, contents)[:24]
        root = Path(self.index_dir) if self.index_dir else cache_dir("bm25")
        root.mkdir(parents=True, exist_ok=True)
        path = root / key
        with FileLock(str(root / f"{key}.lock")):
            if not (path / "_COMPLETE").is_file():
                self._build(index_lucene, contents, args, path)
        self._size = len(corpus)
        self._path = path
        self._searcher = search_lucene.LuceneSearcher(str(path))
        self._searcher.set_bm25(float(self.k1), float(self.b))
        if self.pretokenize is None and self.language != "en":
            self._searcher.set_language(self.language)
        return self

    def _index_args(self) -> list[str]:
        args = ["-storePositions", "-storeDocvectors"]
        if self.pretokenize is not None:
            args.append("-pretokenized")
        elif self.language != "en":
            args += ["-language", self.language]
        return args

    def _build(self, index_lucene, contents: list[str], args: list[str], path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            indexer = index_lucene.LuceneIndexer(
                args=["-index", str(tmp)] + list(args), threads=max(1, os.cpu_count() or 1)
            )
            batch = 10_000
            for start in tqdm(range(0, len(contents), batch), desc="bm25 index", unit="k docs", leave=False):
                docs = [{"id": str(start + i), "contents": c} for i, c in enumerate(contents[start : start + batch])]
                indexer.add_batch_dict(docs)
            indexer.close()
            (tmp / "_COMPLETE").write_text("ok\n")
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    # ----------------------------------------------------------------- search
    def search(self, query_texts: Sequence[str], k: int, batch_size: int = 2000) -> Ranking:
        if not hasattr(self, "_searcher"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"bm25: k must be >= 1 (got {k})")
        k_eff = min(k, self._size)
        texts = list(query_texts)
        if self.pretokenize is not None:
            texts = [" ".join(self.pretokenize(t)) for t in texts]
        threads = self.threads or max(1, os.cpu_count() or 1)
        ids = np.full((len(texts), k_eff), -1, dtype=np.int64)
        scores = np.full((len(texts), k_eff), -np.inf, dtype=np.float32)
        for start in tqdm(range(0, len(texts), batch_size), desc="bm25 search", unit="batch", leave=False):
            chunk = texts[start : start + batch_size]
            qids = [str(start + i) for i in range(len(chunk))]
            hits = self._searcher.batch_search(chunk, qids, k=k_eff, threads=threads)
            for qid, hs in hits.items():
                q = int(qid)
                n = len(hs)
                if n:
                    ids[q, :n] = [int(h.docid) for h in hs]
                    scores[q, :n] = [h.score for h in hs]
        return Ranking(ids, scores)


def _pyserini():
    from retrievers.java import import_pyserini_lucene

    return import_pyserini_lucene()
