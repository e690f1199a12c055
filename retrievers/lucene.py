"""Lucene indexes for BM25: built from files by Anserini's indexer, searched in batches.

Building (:func:`build_index`): the corpus is streamed in chunks into input
files, then Anserini's multi-threaded ``IndexCollection`` (the program behind
``python -m pyserini.index.lucene``; Lin et al. 2021, "Pyserini") indexes them in
a separate JVM, into a temporary directory that becomes the index only when the
build finished (``_COMPLETE`` marker, ``os.replace``).  A killed build leaves
only a temporary directory that the next build removes.  The input files are
our ``RowTextCollection``'s (:func:`write_row_text_files`: a file's UTF-8 texts
back to back, their offsets, ids = corpus rows), written from a corpus store's
Arrow buffers as they are, so neither side encodes or parses JSON per document;
only without a ``javac`` for our helper classes are they Pyserini
``JsonCollection`` shards (``{"id": row, "contents": text}``).  Either way the
documents go through Anserini's own generator, analyzer and IndexWriter: the
same index (tests/test_bm25_engine.py).

Searching (:class:`BatchSearcher`): the same search as Anserini 1.7's
``SimpleSearcher.batch_search`` (same query generator and analyzer, same
``Sort(score, id)`` tie-break, Anserini's own score-tie adjuster), run by our
small Java class ``qaeval.BatchSearch`` (``retrievers/java_src``), which maps
Lucene doc ids to corpus rows through one int array and hands a batch's rows and
scores to numpy as one binary file; no stored document is loaded per hit and no
object per hit crosses JNI.  Rankings are identical to ``batch_search``'s
(tests/test_bm25_engine.py).

Checking (:func:`verify_index`): Lucene opens an index checksumming only its small
files, so a damaged postings, norms or doc-values file would be searched as it is.
Every file's CRC-32 footer is checked against its bytes after a build and whenever
a cached index's files changed since their last check (a stat per file otherwise);
:class:`retrievers.bm25.BM25Retriever` removes a damaged index with one ``warning:``
line and rebuilds it (tests/test_damaged_caches.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np
import orjson
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError

CHUNK = 20_000  # corpus rows per streamed chunk (bounded memory)
SHARD_DOCS = 250_000  # most documents per JSONL shard (IndexCollection parallelises over files)


# ---------------------------------------------------------------------------- building
def index_args(language: str = "en", pretokenized: bool = False) -> list[str]:
    """IndexCollection options beyond input/output/threads (the ones the index key depends on).

    BM25 reads term frequencies and document lengths (norms) only, so neither
    positions nor term vectors are stored (Pyserini's documented BM25 command
    adds ``-storePositions -storeDocvectors -storeRaw`` for phrase queries, RM3
    and raw documents, none of which we use): at 1M passages 118 MB instead of
    606 MB with positions and term vectors, built 1.5x faster, identical BM25
    scores (bench/retrieval_scale.py).  An index that has them can still be
    searched through ``--bm25-index``.
    """
    args: list[str] = []
    if pretokenized:
        args.append("-pretokenized")
    elif language != "en":
        args += ["-language", language]
    return args


_ascii_json = json.JSONEncoder(check_circular=False).encode  # escapes everything, lone surrogates too


def _json_bytes(text: str) -> bytes:
    """``text`` as a JSON string, UTF-8 (orjson: 2-3x faster than json, the Python share of an index build)."""
    try:
        return orjson.dumps(text)
    except TypeError:  # a lone surrogate: not UTF-8, so written as a \uXXXX escape
        return _ascii_json(text).encode("ascii")


def _json_line(row: int, text: str) -> bytes:
    """One ``JsonCollection`` document: id = the corpus row."""
    return b'{"id": "%d", "contents": %s}\n' % (row, _json_bytes(text))


def write_jsonl_shards(contents: Iterator[Sequence[str]], n_docs: int, out_dir: Path, shards: int,
                       start_row: int = 0, desc: str = "bm25 write") -> int:
    """Write ``JsonCollection`` shards ``docs-NNN.jsonl`` with ids = row numbers; returns documents written.

    ``contents`` yields chunks of document texts in row order; nothing is held
    beyond one chunk.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    per = max(1, math.ceil(n_docs / max(1, shards)))
    row, shard, written_in_shard = start_row, 0, 0
    f = open(out_dir / f"docs-{shard:03d}.jsonl", "wb")
    try:
        with tqdm(total=n_docs, desc=desc, unit="doc", unit_scale=True, leave=False) as bar:
            for chunk in contents:
                if hasattr(chunk, "to_pylist"):  # an Arrow array (a corpus store's texts)
                    chunk = chunk.to_pylist()
                lines = []
                for text in chunk:
                    if written_in_shard >= per:
                        f.write(b"".join(lines))
                        lines = []
                        f.close()
                        shard += 1
                        written_in_shard = 0
                        f = open(out_dir / f"docs-{shard:03d}.jsonl", "wb")
                    lines.append(_json_line(row, text))
                    row += 1
                    written_in_shard += 1
                f.write(b"".join(lines))
                bar.update(len(chunk))
    finally:
        f.close()
    return row - start_row


ROWS_SUFFIX = ".rows"
ROWS_MAGIC = b"QAROWS01"


def _as_arrow(chunk):
    """A chunk of texts as one Arrow string array, or None when UTF-8 cannot encode one (a lone surrogate)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(chunk, pa.ChunkedArray):
        chunk = chunk.combine_chunks()
    if not isinstance(chunk, pa.Array):
        try:
            return pa.array(chunk, pa.string())
        except UnicodeEncodeError:
            return None
    if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
        raise TypeError(f"expected string texts, got {chunk.type}")
    if chunk.null_count:
        from data.corpus_store import utf8_scalar

        return pc.fill_null(chunk, utf8_scalar(""))
    return chunk


def _utf8_parts(arr) -> tuple[memoryview, np.ndarray]:
    """The UTF-8 bytes of a string array's values and their offsets into them (int64, starting at 0)."""
    import pyarrow as pa

    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = memoryview(data_buf)[lo:hi] if data_buf is not None and hi > lo else memoryview(b"")
    return data, offsets - lo


class _RowTextFile:
    """One ``RowTextCollection`` file being written: texts appended, offsets and trailer at :meth:`close`."""

    def __init__(self, path: Path, first_row: int):
        self.first_row = first_row
        self._f = open(path, "wb")
        self._offsets: list[np.ndarray] = [np.zeros(1, np.int64)]
        self._bytes = 0
        self.count = 0

    def append(self, arr) -> None:
        data, offsets = _utf8_parts(arr)
        self._f.write(data)
        self._offsets.append(offsets[1:] + self._bytes)
        self._bytes += len(data)
        self.count += len(arr)

    def close(self) -> None:
        import struct

        self._f.write(np.concatenate(self._offsets).astype("<i8").tobytes())
        self._f.write(struct.pack("<qq8s", self.first_row, self.count, ROWS_MAGIC))
        self._f.close()

    def abandon(self) -> None:
        self._f.close()


def write_row_text_files(contents: Iterator, n_docs: int, out_dir: Path, shards: int, start_row: int = 0,
                         desc: str = "bm25 write") -> int:
    """Write the documents as ``RowTextCollection`` files (``retrievers/java_src``); returns documents written.

    ``contents`` yields chunks of texts in row order, as lists of ``str`` or Arrow
    string arrays (a corpus store's, written without a Python object per text).
    Each of ``shards`` files holds the UTF-8 texts of consecutive rows back to
    back, then their offsets and a trailer (first row, count, magic); the
    indexer gives document i of a file the id first + i.  A chunk holding a text
    UTF-8 cannot encode goes to a JsonCollection ``.jsonl`` file instead (JSON
    escapes it), which the same collection reads.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    per = max(1, math.ceil(n_docs / max(1, shards)))
    names = (out_dir / f"docs-{i:05d}" for i in itertools.count(1))
    row, in_shard = start_row, 0
    current: _RowTextFile | None = None

    def finish_file() -> None:
        nonlocal current
        if current is not None:
            current.close()
            current = None

    try:
        with tqdm(total=n_docs, desc=desc, unit="doc", unit_scale=True, leave=False) as bar:
            for chunk in contents:
                arr = _as_arrow(chunk)
                n, lo = len(chunk), 0
                while lo < n:
                    if in_shard >= per:  # the shard is full: the next rows start a new file
                        finish_file()
                        in_shard = 0
                    take = min(n - lo, per - in_shard)
                    if arr is None:  # JSON escapes what UTF-8 cannot encode
                        finish_file()
                        with open(next(names).with_suffix(".jsonl"), "wb") as f:
                            f.write(b"".join(_json_line(row + i, t) for i, t in enumerate(chunk[lo : lo + take])))
                    else:
                        if current is None:
                            current = _RowTextFile(next(names).with_suffix(ROWS_SUFFIX), row)
                        current.append(arr.slice(lo, take))
                    row, lo, in_shard = row + take, lo + take, in_shard + take
                bar.update(n)
        finish_file()
    finally:
        if current is not None:
            current.abandon()
    return row - start_row


SLICES_SUFFIX = ".slices"
SLICES_MAGIC = b"QASLICE1"


def write_slice_files(store_file: Path, slices: Sequence[tuple[int, ...]], n_docs: int, out_dir: Path, shards: int) -> int:
    """Write ``RowTextCollection`` ``.slices`` files: where the texts lie in a corpus store's Arrow file.

    ``slices`` is :meth:`data.corpus_store.CorpusStore.file_slices` of the indexed
    column (rows in order, covering ``n_docs``); the rows are split into
    ``shards`` files of consecutive rows, and the indexer reads each text from
    the store file itself, so a few bytes per record batch are written instead
    of a copy of the corpus.  Returns the documents the files cover.
    """
    import struct

    out_dir.mkdir(parents=True, exist_ok=True)
    per = max(1, math.ceil(n_docs / max(1, shards)))
    name = str(Path(store_file).resolve()).encode("utf-8")
    files: list[list[tuple[int, ...]]] = [[]]
    in_file = row = 0
    for first, count, *where in slices:
        if first != row:
            raise ValueError(f"store slices are not consecutive rows (row {first}, expected {row})")
        start = 0
        while start < count:
            if in_file >= per:
                files.append([])
                in_file = 0
            take = min(count - start, per - in_file)
            files[-1].append((first + start, start, take, *where))
            start, in_file, row = start + take, in_file + take, row + take
    if row != n_docs:
        raise ValueError(f"store slices cover {row} rows, the corpus has {n_docs}")
    for i, entries in enumerate(files, 1):
        with open(out_dir / f"docs-{i:05d}{SLICES_SUFFIX}", "wb") as f:
            f.write(SLICES_MAGIC + struct.pack("<i", len(name)) + name + struct.pack("<q", len(entries)))
            f.write(np.asarray(entries, dtype="<i8").tobytes())
    return row


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the indexer JVM gets SIGKILL when the Python process that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


_ADDED = re.compile(r": (\d+) docs added\.")


class IndexCollectionRun:
    """Anserini's ``IndexCollection`` on a JsonCollection directory, in its own JVM, started ahead of its input.

    With the batch helper's classes (any ``javac``), the JVM starts at construction
    under ``qaeval.IndexWhenReady``, which loads the indexer and waits: the caller
    writes the shards meanwhile, and :meth:`run` sends ``go``, so the JVM's start-up
    overlaps the writing.  Without them the JVM starts in :meth:`run`.  The JVM dies
    with its parent (Linux) and exits without indexing when stdin closes first.
    """

    def __init__(self, input_dir: Path, index_dir: Path, args: Sequence[str], threads: int,
                 memory_buffer_mb: int = 1024, heap: str | None = None, desc: str = "bm25 index"):
        from retrievers.java import helper_classes, java_command

        self.index_dir, self.desc = index_dir, desc
        helper = helper_classes()
        # with our helper classes the input is row text files (write_row_text_files), else JSONL shards
        self.collection = "RowTextCollection" if helper is not None else "JsonCollection"
        options = ["-collection", self.collection, "-input", str(input_dir), "-index", str(index_dir),
                   "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(max(1, threads)),
                   "-memoryBuffer", str(memory_buffer_mb), "-verbose", *args]
        cmd = java_command(heap)
        if helper is not None:
            cp = cmd.index("-cp") + 1
            cmd[cp] = cmd[cp] + os.pathsep + helper
            self._cmd = cmd + ["qaeval.IndexWhenReady", *options]
        else:
            self._cmd = cmd + ["io.anserini.index.IndexCollection", *options]
        self._proc: subprocess.Popen | None = None
        self.started_early = helper is not None
        if self.started_early:
            self._proc = self._start(stdin=subprocess.PIPE)

    def _start(self, stdin) -> subprocess.Popen:
        return subprocess.Popen(self._cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)

    def run(self, n_docs: int) -> dict:
        """Index (input complete now), showing progress in docs/s; ``UserError`` with the indexer's error line."""
        t0 = time.perf_counter()
        if self._proc is None:
            self._proc = self._start(stdin=subprocess.DEVNULL)
        else:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write("go\n")
                self._proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # the JVM already failed: its output says why
        proc = self._proc
        counters: dict[str, int] = {}
        tail: list[str] = []
        try:
            with tqdm(total=n_docs, desc=self.desc, unit="doc", unit_scale=True, leave=False) as bar:
                done = 0
                assert proc.stdout is not None
                for line in proc.stdout:
                    tail = (tail + [line.rstrip()])[-20:]
                    m = _ADDED.search(line)
                    if m:
                        done += int(m.group(1))
                        bar.update(int(m.group(1)))
                        bar.set_postfix_str(f"{done / max(time.perf_counter() - t0, 1e-9):,.0f} docs/s")
                    for name in ("indexed", "unindexable", "empty", "skipped", "errors"):
                        m2 = re.search(rf"{name}:\s+([\d,]+)", line)
                        if m2:
                            counters[name] = int(m2.group(1).replace(",", ""))
            rc = proc.wait()
        except BaseException:
            self.close()
            raise
        if rc != 0 or "indexed" not in counters:
            errors = [t for t in tail if "ERROR" in t or "Exception" in t] or tail[-3:]
            raise UserError(f"{self.index_dir}: Anserini IndexCollection failed (exit {rc}): {' | '.join(errors)[:500]}")
        counters["seconds"] = time.perf_counter() - t0
        return counters

    def close(self) -> None:
        """Stop the JVM if it still runs (a build that failed before or during :meth:`run`)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def shard_count(n_docs: int, threads: int) -> int:
    """How many JSONL shards a build writes: at most SHARD_DOCS documents each, a multiple of ``threads``."""
    threads = max(1, threads)
    shards = max(threads, math.ceil(n_docs / SHARD_DOCS))
    return int(math.ceil(shards / threads) * threads)


def build_index(contents: Callable[[], Iterator[Sequence[str]]], n_docs: int, path: Path, *, language: str = "en",
                pretokenized: bool = False, threads: int | None = None,
                slices: tuple[Path, Sequence[tuple[int, ...]]] | None = None) -> dict:
    """Build the Lucene index at ``path`` atomically from streamed document texts (row ids).

    ``contents()`` yields chunks of texts in corpus-row order; with ``slices``
    (a corpus store's Arrow file and :meth:`~data.corpus_store.CorpusStore.file_slices`
    of the same texts) and our collection available, the indexer reads the texts
    from the store file instead and ``contents`` is not called.  The input files and
    the index are written under a temporary sibling of ``path``; the index is moved
    onto ``path`` with a ``_COMPLETE`` marker only when Anserini finished, and the
    shards are removed.  Call under a file lock (two builders would both work).
    Returns IndexCollection's counters plus timings.
    """
    threads = max(1, threads or os.cpu_count() or 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(path)
        shutil.rmtree(path, ignore_errors=True)  # no _COMPLETE: never served, rebuilt
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.build.", dir=path.parent))
    except OSError as e:
        raise UserError(f"{path.parent}: cannot write the BM25 index there ({e.strerror or e}); set QA_CACHE_DIR") from None
    try:
        shards = shard_count(n_docs, threads)
        # the indexer's JVM starts while the shards are written (it waits for them)
        indexer = IndexCollectionRun(tmp / "input", tmp / "index", index_args(language, pretokenized), threads)
        try:
            t0 = time.perf_counter()
            if slices is not None and indexer.collection == "RowTextCollection":
                written, source = write_slice_files(slices[0], slices[1], n_docs, tmp / "input", shards), "store file"
            else:
                write = write_row_text_files if indexer.collection == "RowTextCollection" else write_jsonl_shards
                written, source = write(contents(), n_docs, tmp / "input", shards), "written copy"
            t_write = time.perf_counter() - t0
            counters = indexer.run(written)
        finally:
            indexer.close()
        shutil.rmtree(tmp / "input")
        counters.update(write_seconds=t_write, threads=threads, docs=written, jvm_started_early=indexer.started_early,
                        collection=indexer.collection, texts_from=source)
        (tmp / "index" / "_COMPLETE").write_text(json.dumps(counters) + "\n")
        # checked before it is published (it is in the page cache now: a small fraction of the build), which also
        # records the check, so the first search does not read it all again
        check = verify_index(tmp / "index", force=True)
        if check.problem is not None:
            raise UserError(f"{path}: the BM25 index just built does not verify ({check.problem}); check the disk and rerun")
        counters["check_seconds"] = round(check.seconds, 3)
        os.replace(tmp / "index", path)
    except OSError as e:  # a full disk, an unwritable cache: one line, nothing left under the final name
        raise UserError(f"{e.filename or path}: BM25 index build failed: write failed ({e.strerror or e})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counters


def remove_stale_builds(path: Path) -> None:
    """Remove temporary directories that killed builds of ``path`` left behind."""
    for stale in path.parent.glob(f".{path.name}.*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def is_complete(path: Path) -> bool:
    return (Path(path) / "_COMPLETE").is_file()


# ---------------------------------------------------------------------------- checking
VERIFIED = "_VERIFIED"  # the record of the last full check of an index: its files' stamps then
_NOT_STAMPED = (VERIFIED, "write.lock")


class IndexCheck(NamedTuple):
    """What :func:`verify_index` found: ``problem`` (one line, None when sound), whether every byte was checked
    (``full``; otherwise the files were unchanged since the last full check), its seconds and the bytes read."""

    problem: str | None
    full: bool
    seconds: float
    bytes: int = 0

    def facts(self) -> dict:
        return {"checksums": "all files" if self.full else "unchanged since checked", "seconds": round(self.seconds, 3),
                "bytes": self.bytes}


def verify_index(path: str | os.PathLike, *, force: bool = False, record: bool = True) -> IndexCheck:
    """Check that a Lucene index is whole before it is searched; never raises for a damaged index.

    Lucene itself, opening an index, checksums only its small files (``segments_N``,
    ``.si``, field infos and the codecs' metadata) and checks the big ones' lengths: a
    flipped byte in postings (``.doc``, ``.tim``), norms (``.nvd``), doc values or stored
    fields is read as it is and changes scores without a word.  Every Lucene index file
    ends in a codec footer holding the CRC-32 of all its bytes before the checksum, so a
    full check is:

    * the latest commit read by Lucene (``SegmentInfos.readLatestCommit``, in the JVM the
      search uses anyway, through pyjnius: the same with and without our Java helper):
      ``segments_N`` and every ``.si`` checksummed, and the list of the files the commit
      needs (a missing one is named);
    * every one of those files read once by Lucene's ``CodecUtil.checksumEntireFile``
      (memory-mapped, the JVM's CRC-32 intrinsic: 11-15 GB/s on a 256 MiB file once
      warm, about 1 ms a file of JNI calls otherwise);
    * the document count against the one our build recorded (``_COMPLETE``'s ``indexed``).

    Measured on a 2-core AMD EPYC VM (files in the page cache): the first full check
    in a process 0.1-0.15 s (class loading), later ones 12-30 ms, for the 0.6 MB index
    of ReQA SQuAD dev (10,250 sentences), the 3.1 MB one of squad_open (20,963
    paragraphs) and 12 MB (100k passages) alike; the bytes themselves go at 11-15
    GB/s, so a 1M-passage index (118 MB) adds ~10 ms and DPR's 21M (about 2.5 GB)
    ~0.2 s, or its read from disk when not cached (~1.4 GB/s here: ~2 s).

    A full check reads the whole index (seconds from disk for the largest ones, and once
    per Ray task that opens it), so it is recorded (``_VERIFIED``: name, size, mtime,
    ctime and inode of every file of the directory) and not repeated while those are
    unchanged: an unchanged index costs a ``stat`` per file (0.2 ms), and any write,
    truncation, deletion, replacement or copy of a file changes its stamp (ctime cannot
    be set back by ``touch``) and brings a full check.  What the record cannot see is
    damage below the file system (a disk returning other bytes without an I/O error);
    a Java error while opening or searching such an index makes the caller check again
    with ``force`` (:class:`retrievers.bm25.BM25Retriever`).  Lucene's commit fsyncs the
    index files, so a record is never ahead of the data.  ``record=False`` leaves the
    directory untouched (indexes that are not ours).
    """
    t0 = time.perf_counter()
    path = Path(path)
    try:
        stamp = _stamp(path)
    except OSError as e:
        return IndexCheck(f"cannot list it ({e.strerror or e})", True, time.perf_counter() - t0)
    if not force:
        try:
            seen = json.loads((path / VERIFIED).read_text())
            if isinstance(seen, dict) and seen.get("version") == 1 and seen.get("stamp") == stamp:
                return IndexCheck(None, False, time.perf_counter() - t0)
        except (OSError, ValueError):
            pass  # no record, or an unreadable one: check it all
    problem, read = _full_check(path)
    seconds = time.perf_counter() - t0
    if problem is None and record:
        try:
            tmp = path / f".{VERIFIED}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"version": 1, "stamp": stamp, "bytes": read, "seconds": round(seconds, 3),
                                       "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")
            os.replace(tmp, path / VERIFIED)
        except OSError:  # a read-only copy is checked on every open instead
            pass
    return IndexCheck(problem, True, seconds, read)


def _stamp(path: Path) -> list[list]:
    """(name, size, mtime, ctime, inode) of every file of the directory but the check's own record."""
    out = []
    with os.scandir(path) as entries:
        for e in entries:
            if e.name in _NOT_STAMPED or e.name.startswith(".") or not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
            out.append([e.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return sorted(out)


def _full_check(path: Path) -> tuple[str | None, int]:
    """(problem or None, bytes read): the commit as Lucene reads it, every file's checksum, the document count."""
    expected = None
    try:
        done = json.loads((path / "_COMPLETE").read_text())
        if isinstance(done, dict) and isinstance(done.get("indexed"), int):
            expected = done["indexed"]
    except FileNotFoundError:
        pass  # not built by us (an index given with index_path)
    except (OSError, ValueError):
        return "_COMPLETE: the build record is unreadable", 0
    from retrievers.java import ensure_jvm

    ensure_jvm()
    from jnius import JavaException, autoclass

    directory, name, read = None, None, 0
    try:
        directory = autoclass("org.apache.lucene.store.FSDirectory").open(autoclass("java.io.File")(str(path)).toPath())
        infos = autoclass("org.apache.lucene.index.SegmentInfos").readLatestCommit(directory)
        names = sorted(str(n) for n in infos.files(True).toArray())
        missing = [n for n in names if not (path / n).is_file()]
        if missing:
            return f"{missing[0]}: missing" + (f" (and {len(missing) - 1} more files)" if len(missing) > 1 else ""), 0
        checksum = autoclass("org.apache.lucene.codecs.CodecUtil").checksumEntireFile
        once = autoclass("org.apache.lucene.store.IOContext").READONCE
        for name in names:
            source = directory.openInput(name, once)
            try:
                checksum(source)
                read += int(source.length())
            finally:
                source.close()
        name = None
        max_doc = int(infos.totalMaxDoc())
    except JavaException as e:
        line = java_error_line(e)
        named = re.search(r" \(([^()/ ]+)\)$", line)  # the file Lucene found wrong while reading the commit
        if name is None and named and (path / named.group(1)).is_file():
            name = named.group(1)
        if name is not None:
            line = f"{name}: " + line.removesuffix(f" ({name})")
        return line, read
    finally:
        if directory is not None:
            directory.close()
    if expected is not None and max_doc != expected:
        return f"it holds {max_doc} documents, its build indexed {expected}", read
    return None, read


def java_error_line(error) -> str:
    """A Java exception (pyjnius ``JavaException``) as one short line: its class's simple name and message."""
    text = " ".join(str(getattr(error, "innermessage", None) or error).split())
    name = str(getattr(error, "classname", "") or "").rsplit(".", 1)[-1]
    text = text.replace("JVM exception occurred: ", "")
    for prefix in ("org.apache.lucene.index.", "java.nio.file.", "java.io.", "java.lang.", "java.util.concurrent."):
        text = text.replace(prefix, "")
    where = re.search(r'\(resource=.*?path="([^"]+)"', text)  # Lucene names the file deep inside its input's repr
    if where:
        text = text[: where.start()].rstrip(" :") + f" ({os.path.basename(where.group(1))})"
    text = re.sub(r" lockFactory=\S+", "", re.sub(r":? files: \[.*", "", text))
    if name and not text.startswith(name):
        text = f"{name}: {text}" if text else name
    return text[:300]


def discard_index(path: Path) -> None:
    """Remove a damaged index (:func:`data.io.discard_directory`: nothing is ever found half-removed at ``path``)."""
    from data.io import discard_directory

    discard_directory(path, "BM25 index")


# ---------------------------------------------------------------------------- searching
class BatchSearcher:
    """Batch BM25 search through ``qaeval.BatchSearch`` over one Lucene index.

    ``simple_searcher`` is Anserini's ``SimpleSearcher`` on the same index (what
    Pyserini's ``LuceneSearcher.object`` is), with BM25 parameters and language
    already set: its similarity and analyzer are the ones used, so scores and
    query analysis are Pyserini's.
    """

    def __init__(self, index_dir: str | os.PathLike, simple_searcher):
        from jnius import autoclass

        generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        obj = simple_searcher
        self.index_dir = str(index_dir)
        self._java = autoclass("qaeval.BatchSearch")(self.index_dir, obj.get_similarity(), obj.get_analyzer(), generator)
        self.max_doc = int(self._java.maxDoc())
        self._tmp = tempfile.mkdtemp(prefix="qa-bm25-", dir=_exchange_dir(max(self.max_doc * 24, 64 << 20)))

    def map_row_ids(self, corpus_size: int) -> int:
        """Lucene ``id`` = corpus row number (our own indexes); returns ids that are not rows."""
        return int(self._java.mapNumericIds(int(corpus_size)))

    def index_ids(self) -> np.ndarray:
        """The ``id`` of every Lucene doc, as a fixed-width bytes array (``b""`` for deleted docs)."""
        path = os.path.join(self._tmp, "ids.txt")
        self._java.writeIds(path)
        buf = np.fromfile(path, dtype=np.uint8)
        os.unlink(path)
        return _split_lines(buf)

    def set_rows(self, rows: np.ndarray) -> None:
        """Lucene doc -> corpus row (-1: not in the corpus; its hits are dropped)."""
        rows = np.ascontiguousarray(rows, dtype="<i4")
        if rows.shape != (self.max_doc,):
            raise ValueError(f"row map has {rows.shape} entries, index has {self.max_doc} docs")
        path = os.path.join(self._tmp, "rows.bin")
        rows.tofile(path)
        self._java.setRows(path)
        os.unlink(path)

    def search(self, queries: list[str], k: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows (int32, -1 past the last hit) and scores (float32, -inf) of each query: [Q, k] each."""
        q = len(queries)
        tmp = self._tmp if shutil.disk_usage(self._tmp).free > 2 * q * k * 8 else tempfile.gettempdir()
        path = os.path.join(tmp, f"qa-bm25-hits-{os.getpid()}-{id(self)}.bin")
        if q == 0:
            return np.empty((0, k), np.int32), np.empty((0, k), np.float32)
        self._java.search(queries, int(k), int(threads), path)
        raw = np.fromfile(path, dtype=np.uint8)
        os.unlink(path)
        rows = raw[: q * k * 4].view("<i4").reshape(q, k)
        scores = raw[q * k * 4 :].view("<f4").reshape(q, k)
        return rows, scores

    @property
    def term_at_a_time_from_k(self) -> int:
        """The depth from which bag-of-words queries are scored term at a time (below it: Lucene's MaxScore)."""
        return int(self._java.termAtATimeFromK())

    @term_at_a_time_from_k.setter
    def term_at_a_time_from_k(self, k: int) -> None:
        self._java.setTermAtATimeFromK(int(min(k, 2**31 - 1)))

    @property
    def id_order_seconds(self) -> float:
        """Time spent once sorting the index's ids (the order score ties are broken in)."""
        return float(self._java.idOrderSeconds())

    def close(self) -> None:
        try:
            self._java.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __del__(self):  # pragma: no cover - best effort
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)


def _exchange_dir(need_bytes: int) -> str | None:
    """Where Java hands files to numpy: /dev/shm (memory) when it has room, else the temp dir."""
    try:
        if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 2 * need_bytes:
            return "/dev/shm"
    except OSError:
        pass
    return None


def _split_lines(buf: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """Newline-terminated UTF-8 lines -> fixed-width ``S`` array, without a Python object per line."""
    ends = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], ends[:-1] + 1]) if len(ends) else np.empty(0, np.int64)
    lengths = ends - starts
    width = int(lengths.max()) if len(lengths) else 1
    width = max(width, 1)
    out = np.zeros((len(ends), width), dtype=np.uint8)
    cols = np.arange(width)
    for lo in range(0, len(ends), chunk):
        s, n = starts[lo : lo + chunk], lengths[lo : lo + chunk]
        idx = s[:, None] + cols[None, :]
        mask = cols[None, :] < n[:, None]
        out[lo : lo + chunk] = np.where(mask, buf[np.minimum(idx, len(buf) - 1)], 0)
    return out.view(f"S{width}").reshape(-1)


def ids_as_bytes(ids: Sequence[str], chunk: int = 1 << 20) -> np.ndarray:
    """Corpus ids (list or lazy sequence) -> fixed-width UTF-8 ``S`` array, chunk by chunk."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind == "S":
        return ids
    parts = []
    for lo in range(0, len(ids), chunk):
        part = np.asarray(ids[lo : lo + chunk])
        parts.append(part if part.dtype.kind == "S" else np.char.encode(part.astype(str), "utf-8"))
    return np.concatenate(parts) if parts else np.empty(0, "S1")


def rows_for_ids(index_ids: np.ndarray, corpus_ids: np.ndarray) -> np.ndarray:
    """For each index id, the corpus row with that id (-1 when none), by sorting (no dict of strings).

    When under half the ids match, DPR's ``wiki:`` prefix is ignored on both sides
    (Pyserini's ``wikipedia-dpr-100w`` ids are bare numbers; some copies of
    ``psgs_w100.tsv`` prefix them).
    """
    rows = _match(index_ids, corpus_ids)
    if len(index_ids) and (rows >= 0).mean() < 0.5:
        strip = lambda a: np.char.replace(a, b"wiki:", b"", count=1) if a.dtype.kind == "S" else a  # noqa: E731
        alt = _match(strip(index_ids), strip(corpus_ids))
        if (alt >= 0).sum() > (rows >= 0).sum():
            rows = alt
    return rows


def _match(index_ids: np.ndarray, corpus_ids: np.ndarray) -> np.ndarray:
    width = max(index_ids.dtype.itemsize, corpus_ids.dtype.itemsize, 1)
    a = index_ids.astype(f"S{width}")
    c = corpus_ids.astype(f"S{width}")
    order = np.argsort(c, kind="stable")
    sorted_c = c[order]
    pos = np.searchsorted(sorted_c, a)
    pos_clipped = np.minimum(pos, len(c) - 1) if len(c) else pos
    found = (pos < len(c)) & (sorted_c[pos_clipped] == a) & (a != b"") if len(c) else np.zeros(len(a), bool)
    return np.where(found, order[pos_clipped] if len(c) else -1, -1).astype(np.int32)


def content_hash(chunks: Iterator[Sequence[str]], *params) -> str:
    """sha256 over parameters and every text (length-prefixed, like :func:`data.io.sha256_text`)."""
    h = hashlib.sha256()
    for p in params:
        b = str(p).encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    for chunk in chunks:
        for text in chunk:
            b = text.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()
