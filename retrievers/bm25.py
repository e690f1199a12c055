"""BM25 through Pyserini (Lucene).

Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and
Beyond"; the Lucene implementation that Pyserini/Anserini use (Lin et al.
2021, "Pyserini: A Python Toolkit for Reproducible Information Retrieval
Research with Sparse and Dense Representations").

The index is built once per corpus content and analyzer settings and cached on
disk (``<cache>/bm25/<key>``) by Anserini's multi-threaded ``IndexCollection``
from JSONL files streamed out of the corpus (:mod:`retrievers.lucene`); k1 and b
are search-time parameters.  A cached index is checked before it is searched
(every file's CRC-32 when its files changed since their last check:
:func:`retrievers.lucene.verify_index`); a damaged one is removed with one
``warning:`` line and rebuilt, never searched, and so is one that a Java error
while opening or searching it shows to be damaged (the search then starts over on
the rebuilt index).  A damaged ``index_path`` index is one ``error:`` line.  Lucene's ``id`` field holds the corpus row number.
An existing Lucene index (``index_path``: a directory, e.g. built by
``python -m pyserini.index.lucene``, or a Pyserini prebuilt index name such as
``wikipedia-dpr-100w``) can be searched instead; its ids are matched to the
corpus ids.

Search runs Anserini's ``batch_search`` ranking through our batch helper
(:class:`retrievers.lucene.BatchSearcher`): identical rankings, without loading
each hit's stored document or crossing JNI once per hit.  Without a Java
compiler for the helper, Pyserini's ``batch_search`` itself is used (one
``warning:`` line).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError
from data.io import cache_dir, entry_lock, sha256_text
from data.types import Corpus
from retrievers.base import RetrieverBase
from retrievers.types import Ranking

FIELDS = ("sentence", "sentence+context", "context")
SEARCHERS = ("auto", "pyserini")  # who searches the index: our batch helper (auto) or Pyserini's batch_search
_WARNED: set[str] = set()


class BM25Retriever(RetrieverBase):
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
    threads : search threads (default: all cores); also the indexer's threads.
    index_dir : root of the index cache (default ``<cache>/bm25``).
    index_path : search this existing Lucene index (directory or Pyserini
        prebuilt name) instead of building one; its ``id`` field is matched to
        ``corpus.ids``.
    searcher : ``"auto"`` (our batch helper when it can be compiled, else
        Pyserini's ``batch_search``) or ``"pyserini"`` (always ``batch_search``).
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
        index_path: str | None = None,
        searcher: str = "auto",
    ):
        self.k1 = k1
        self.b = b
        self.field = field
        self.language = language
        self.pretokenize = pretokenize
        self.threads = threads
        self.index_dir = index_dir
        self.index_path = index_path
        self.searcher = searcher

    # ------------------------------------------------------------------ index
    def _content_chunks(self, corpus: Corpus, chunk: int = 20_000) -> Iterator[list[str]]:
        """The indexed text of each row (see ``field``), ``chunk`` rows at a time."""
        if self.field not in FIELDS:
            raise UserError(f"bm25 field {self.field!r} unknown; use one of {', '.join(FIELDS)}")
        n = len(corpus)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            texts = corpus.texts[lo:hi]
            if self.field == "sentence":
                yield list(texts)
                continue
            ctxs = corpus.contexts[lo:hi]
            if self.field == "context":
                yield [c or t for t, c in zip(texts, ctxs)]
            else:
                yield [f"{t} {c}" if c and c != t else t for t, c in zip(texts, ctxs)]

    def _store_contents(self, corpus: Corpus) -> bool:
        """Whether the indexed texts are a corpus store column as it is (contents of every row, untokenized)."""
        texts = corpus.texts
        return bool(self.pretokenize is None and hasattr(texts, "iter_arrow_chunks") and self.field in FIELDS
                    and (self.field == "sentence" or texts.same_as(corpus.contexts)))

    def _indexed_slices(self, corpus: Corpus):
        """(store file, positions of the texts in it) when the indexer can read the texts from the store itself."""
        if not self._store_contents(corpus):
            return None
        slices = corpus.texts.file_slices()
        return None if slices is None else (corpus.texts.file_path, slices)

    def _indexed_chunks(self, corpus: Corpus) -> Iterator:
        """What the index build writes: lists of texts, or Arrow string arrays straight from a corpus store."""
        texts = corpus.texts
        if self._store_contents(corpus):
            # a store corpus whose indexed text is its contents column (texts and contexts are the same
            # values, so every field reads as the text): its Arrow buffers go to the index as they are
            yield from texts.iter_arrow_chunks(20_000)
            return
        for chunk in self._content_chunks(corpus):
            if self.pretokenize is not None:
                chunk = [" ".join(self.pretokenize(s)) for s in chunk]
            yield chunk

    def _analysis(self) -> list[str]:
        from retrievers.lucene import index_args

        args = index_args(self.language, self.pretokenize is not None)
        if self.pretokenize is not None:
            fn = self.pretokenize
            args.append(f"pretokenize={getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}")
        return args

    def index_key(self, corpus: Corpus) -> str:
        """Cache key of the index: analysis settings + field + the corpus content.

        A corpus with a ``content_key`` (the corpus store's content hash) is keyed
        by it; otherwise every indexed text is hashed (streamed).
        """
        from retrievers.lucene import content_hash

        content_key = getattr(corpus, "content_key", None)
        if isinstance(content_key, str) and content_key:
            return sha256_text("bm25-v2", self._analysis(), self.field, len(corpus), content_key)[:24]
        return content_hash(self._content_chunks(corpus), "bm25-v2", *self._analysis(), self.field, len(corpus))[:24]

    def index(self, corpus: Corpus) -> "BM25Retriever":
        if len(corpus) == 0:
            raise UserError("bm25: the corpus is empty")
        if self.searcher not in SEARCHERS:
            raise UserError(f"bm25 searcher {self.searcher!r} unknown; use one of {', '.join(SEARCHERS)}")
        from retrievers.java import ensure_jvm

        ensure_jvm()
        self.close()  # a retriever re-indexed (sweep levels) releases the previous index's readers
        self._check = None
        if self.index_path:
            path, own = _existing_index(self.index_path), False
        else:
            path, own = self._cached_index(corpus), True
        self._size = len(corpus)
        self._path = path
        self._own = own
        self._corpus = corpus  # kept to rebuild our index should a search find it damaged
        self._lucene = None
        from jnius import JavaException

        try:
            self._open(path, own, corpus)
        except JavaException as e:
            self.close()
            self._after_java_error(e, "opening it")
            self._open(path, own, corpus)
        return self

    def _open(self, path: Path, own: bool, corpus: Corpus) -> None:
        # Anserini's SimpleSearcher, configured exactly as Pyserini's LuceneSearcher configures it
        # (set_bm25, set_language); importing pyserini.search itself would load torch, FAISS and
        # transformers (30 s, 0.5 GB) for nothing
        from jnius import autoclass

        self._lucene = None
        self._opened = _identity(path)
        self._simple = autoclass("io.anserini.search.SimpleSearcher")(str(path))
        self._configure(self._simple)
        self._batch = None
        self._id_rows = None
        if self.searcher == "auto":
            self._batch = self._batch_searcher(path, own, corpus)
        if self._batch is None and not own:
            self._id_rows = {str(x): i for i, x in enumerate(corpus.ids)}  # the fallback maps Pyserini's docids

    def _after_java_error(self, error: BaseException, doing: str) -> None:
        """A Java exception while opening or searching the index: rebuild ours if a full check finds it damaged.

        Returns when our index was damaged and is rebuilt (the caller reopens it and
        starts over; nothing from the damaged index is kept).  A damaged index given
        with ``index_path`` is one ``UserError`` line naming it.  An index that checks
        sound re-raises ``error``: that failure is not the index's.
        """
        from retrievers.lucene import is_complete, verify_index

        path = self._path
        if not self._own:
            check = verify_index(path, force=True, record=False)
            if check.problem is not None:
                raise UserError(f"{path}: the BM25 index is damaged ({check.problem}); rebuild it and rerun") from None
            if doing == "opening it":
                from retrievers.lucene import java_error_line

                raise UserError(f"{path}: cannot open this Lucene index ({java_error_line(error)})") from None
            raise error
        corpus = self._corpus
        with entry_lock(path, "BM25 index"):
            if _identity(path) != self._opened and is_complete(path):
                return  # another process found it damaged and rebuilt it meanwhile: search the new one
            check = verify_index(path, force=True) if is_complete(path) else None
            if check is not None and check.problem is None:
                raise error
            problem = check.problem if check is not None else "its build record _COMPLETE is gone"
            self._discard(path, f"{problem}; found {doing}")
            self._build(corpus, path)

    def close(self) -> None:
        """Close the Lucene readers this retriever opened (``index`` reopens)."""
        for name in ("_batch", "_simple", "_lucene"):
            obj = getattr(self, name, None)
            if obj is None:
                continue
            try:
                obj.close()
            except Exception:  # closing is best effort
                pass
            setattr(self, name, None)

    def _configure(self, simple) -> None:
        simple.set_bm25(float(self.k1), float(self.b))
        if self.pretokenize is None and self.language != "en":
            simple.set_language(self.language)

    @property
    def _searcher(self):
        """Pyserini's ``LuceneSearcher`` on the index, same settings (the fallback; created on first use)."""
        if getattr(self, "_lucene", None) is None:
            if not hasattr(self, "_path"):
                raise RuntimeError("call index(corpus) before search()")
            search_lucene, _ = _pyserini()
            self._lucene = search_lucene.LuceneSearcher(str(self._path))
            self._configure(self._lucene.object)
        return self._lucene

    def _cached_index(self, corpus: Corpus) -> Path:
        """Our index of ``corpus``: built when missing, checked (:func:`retrievers.lucene.verify_index`) when found;
        a damaged one is removed with one ``warning:`` line and rebuilt, never searched."""
        from retrievers.lucene import is_complete, verify_index

        key = self.index_key(corpus)
        root = Path(self.index_dir) if self.index_dir else cache_dir("bm25")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{root}: cannot create the BM25 index directory ({e.strerror or e})") from None
        path = root / key
        with entry_lock(path, "BM25 index"):
            if is_complete(path):
                check = verify_index(path)
                self._check = check.facts()
                if check.problem is not None:
                    self._discard(path, check.problem)
            if not is_complete(path):
                self._build(corpus, path)
        return path

    def _build(self, corpus: Corpus, path: Path) -> None:
        """Build our index of ``corpus`` at ``path`` (call under its :func:`data.io.entry_lock`)."""
        from retrievers.lucene import build_index

        counters = build_index(lambda: self._indexed_chunks(corpus), len(corpus), path, language=self.language,
                               pretokenized=self.pretokenize is not None, threads=self.threads,
                               slices=self._indexed_slices(corpus))
        self._check = {"checksums": "all files, after the build", "seconds": counters.get("check_seconds")}

    @staticmethod
    def _discard(path: Path, problem: str) -> None:
        from data.io import warn
        from retrievers.lucene import discard_index

        warn(f"{path}: cached BM25 index is damaged ({problem}); removed and rebuilt")
        discard_index(path)

    def _batch_searcher(self, path: Path, own: bool, corpus: Corpus):
        from retrievers.java import helper_available, jvm_info
        from retrievers.lucene import BatchSearcher

        if not helper_available():
            _warn_once(f"bm25: {jvm_info()['batch_helper_problem']}; searching with Pyserini's batch_search (slower at depth)")
            return None
        batch = BatchSearcher(path, self._simple)
        try:
            return self._map_rows(batch, path, own, corpus)
        except BaseException:
            batch.close()  # not kept: its reader is closed here
            raise

    def _map_rows(self, batch, path: Path, own: bool, corpus: Corpus):
        from retrievers.lucene import ids_as_bytes, rows_for_ids

        if own:
            bad = batch.map_row_ids(len(corpus))
            if bad:
                raise UserError(f"{path}: {bad} documents of the cached BM25 index are not rows of this corpus; delete it")
            return batch
        rows = _cached_row_map(path, corpus, lambda: rows_for_ids(batch.index_ids(), ids_as_bytes(corpus.ids)))
        matched = int((rows >= 0).sum())
        if matched == 0:
            raise UserError(f"{self.index_path}: none of the index's {batch.max_doc} document ids is a corpus id")
        if matched < batch.max_doc:
            _warn_once(f"bm25: {batch.max_doc - matched} of {batch.max_doc} documents of {self.index_path} are not in the corpus; their hits are dropped")
        if matched < len(corpus):
            _warn_once(f"bm25: {len(corpus) - matched} of {len(corpus)} corpus passages are not in {self.index_path}; BM25 never retrieves them")
        batch.set_rows(rows)
        return batch

    # ----------------------------------------------------------------- search
    def search(self, query_texts: Sequence[str], k: int, batch_size: int = 2000) -> Ranking:
        if not hasattr(self, "_path"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"bm25: k must be >= 1 (got {k})")
        texts = list(query_texts)
        if self.pretokenize is not None:
            texts = [" ".join(self.pretokenize(t)) for t in texts]
        from jnius import JavaException

        try:
            return self._search(texts, k, batch_size)
        except JavaException as e:
            # a failure that a damaged index explains: ours is checked, rebuilt if damaged, and every query searched
            # again from the start (nothing the damaged index returned is kept); anything else is raised as it is
            self.close()
            self._after_java_error(e, "searching it")
            self._open(self._path, self._own, self._corpus)
            return self._search(texts, k, batch_size)

    def _search(self, texts: list[str], k: int, batch_size: int) -> Ranking:
        k_eff = min(k, self._size)
        threads = self.threads or max(1, os.cpu_count() or 1)
        batch_size = max(1, min(batch_size, (32 << 20) // k_eff))  # one batch's hits stay under 256 MB in Java
        ids = np.full((len(texts), k_eff), -1, dtype=np.int64)
        scores = np.full((len(texts), k_eff), -np.inf, dtype=np.float32)
        for start in tqdm(range(0, len(texts), batch_size), desc="bm25 search", unit="batch", leave=False):
            chunk = texts[start : start + batch_size]
            if self._batch is not None:
                rows, sc = self._batch.search(chunk, k_eff, threads)
                ids[start : start + len(chunk)] = rows
                scores[start : start + len(chunk)] = sc
                continue
            qids = [str(start + i) for i in range(len(chunk))]
            hits = self._searcher.batch_search(chunk, qids, k=k_eff, threads=threads)
            for qid, hs in hits.items():
                q = int(qid)
                if self._id_rows is None:
                    pairs = [(int(h.docid), h.score) for h in hs]
                else:
                    pairs = [(self._id_rows[h.docid], h.score) for h in hs if h.docid in self._id_rows]
                if pairs:
                    ids[q, : len(pairs)] = [r for r, _ in pairs]
                    scores[q, : len(pairs)] = [s for _, s in pairs]
        return Ranking(ids, scores)

    def facts(self) -> dict:
        """The index searched and how (:meth:`describe`), once indexed."""
        return {"index": self.describe()} if hasattr(self, "_path") else {}

    def describe(self) -> dict:
        """Engine facts for a run manifest (index, search path, JVM heap): :meth:`facts`' ``"index"``."""
        from retrievers.java import jvm_info

        batch = getattr(self, "_batch", None)
        facts = {"index": str(getattr(self, "_path", "")), "search": "batch-helper" if batch else "pyserini-batch_search",
                 "jvm": jvm_info()}
        if batch is not None:
            facts["id_order_seconds"] = round(batch.id_order_seconds, 3)
            facts["term_at_a_time_from_k"] = batch.term_at_a_time_from_k
        if getattr(self, "_check", None):  # how our index was found sound this time (verify_index)
            facts["index_check"] = self._check
        done = Path(facts["index"]) / "_COMPLETE" if facts["index"] else None
        if done is not None and done.is_file():  # how our index was built (when, by this or an earlier run)
            try:
                facts["index_build"] = json.loads(done.read_text())
            except (OSError, ValueError):
                pass
        return facts


def _identity(path: Path) -> int | None:
    """The index directory's inode: a rebuilt index is a new directory renamed into place."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr)


def _cached_row_map(index: Path, corpus: Corpus, build: Callable[[], np.ndarray]) -> np.ndarray:
    """Lucene doc -> corpus row of an external index, cached when the corpus has a ``content_key``.

    Reading every id of a 21M-document index (stored fields for indexes without
    id doc values) and matching it takes minutes; the map is keyed by the index's
    commit (``segments_N`` name, size, mtime) and the corpus content.
    """
    content_key = getattr(corpus, "content_key", None)
    if not (isinstance(content_key, str) and content_key):
        return build()
    segments = sorted(index.glob("segments_*"))
    stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in segments]
    from data.io import Damaged, checked_writer, open_checked, warn

    key = sha256_text("bm25-rowmap-v2", str(index.resolve()), stamp, content_key)[:24]  # v2: checksummed
    path = cache_dir("bm25", "rowmaps") / f"{key}.npy"
    if path.is_file():
        try:
            with open_checked(path) as f:
                return np.load(f, allow_pickle=False)
        except (Damaged, OSError, ValueError) as e:  # a flipped byte would map Lucene documents to other rows
            warn(f"{path}: cached BM25 row map is damaged ({' '.join(str(e).split())[:120]}); removed and rebuilt")
            path.unlink(missing_ok=True)
    rows = build()
    try:
        with checked_writer(path) as f:
            np.save(f, rows, allow_pickle=False)
    except UserError:
        pass  # an unwritable cache only costs time
    return rows


def _existing_index(spec: str) -> Path:
    """A Lucene index directory, or a Pyserini prebuilt index name (downloaded by Pyserini; needs internet)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any(path.glob("segments_*")):
            raise UserError(f"{spec}: not a Lucene index (no segments_N file)")
        return path
    if os.sep in spec or spec.startswith((".", "~")):
        raise UserError(f"{spec}: BM25 index directory not found")
    search_lucene, _ = _pyserini()
    try:
        searcher = search_lucene.LuceneSearcher.from_prebuilt_index(spec)
    except Exception as e:  # download or lookup failure
        raise UserError(f"{spec}: cannot open Pyserini prebuilt index ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if searcher is None:
        raise UserError(f"{spec}: not a directory and not a Pyserini prebuilt index name")
    return Path(searcher.index_dir)


def _pyserini():
    from retrievers.java import import_pyserini_lucene

    return import_pyserini_lucene()
