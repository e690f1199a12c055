"""Out-of-core passage corpora: an Arrow file on disk, memory-mapped, text fetched by row.

A corpus of N passages costs a few NumPy arrays here, not N Python objects:
the passages live in one Arrow IPC file (``passages.arrow``: string columns
``id``, ``title``, ``text`` in record batches) that is memory-mapped
(``pyarrow.memory_map``), so only the pages a stage touches are read.  The
columns are exposed as lazy sequences (:class:`StoreColumn`): ``len``, an int
index, a slice or an array of rows (-> ``list[str]``), iteration chunk by chunk,
and ``take(rows)`` for a view over a subset (corpus-size levels) without
copying anything.

Stores are built once per source by streaming its records
(:func:`build_store`, bounded memory: one record batch at a time; progress in
passages/s) and cached under ``<cache>/corpus_store/<key>/`` where the key
hashes the source's content (the SHA-256 of its bytes), its format and the
parser version.  A build goes into a temporary directory that is renamed into
place only when complete (under a file lock); a killed build leaves only a
temporary directory, which the next build removes, so a partial store is never
opened.  The manifest records the Arrow file's size and CRC-32, and a cached store
is checked against them before it is used (:func:`check_store`: in full the first
time and whenever its files changed since): a damaged store is removed with one
``warning:`` line and rebuilt, never served.  An unwritable cache or a full disk is
one ``error:`` line (``UserError``) and leaves nothing half-written.  The content
digest of a large file is remembered by (path, size, mtime) so that later runs do
not re-read it to hash it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from data.errors import UserError
from data.io import entry_lock, os_reason, warn

STORE_VERSION = "1"
FILE_NAME = "passages.arrow"
MANIFEST = "manifest.json"
BATCH_ROWS = 65_536
BATCH_BYTES = 128 << 20  # keeps every string array far below Arrow's 2 GiB offset limit
# rows fetched through the memory map between two releases of its pages (:meth:`CorpusStore._release`): a page
# fault maps up to 64 KiB of page-cached file around it, so this bounds the mapped file to ~64 MiB (at 21M
# passages, search + DPR has-answer at depth 1000 over 3,610 questions peaked at 16.0 GiB without releasing, 3.9 GiB
# with 8,192 rows, 3.5-4.2 GiB with 1,024; 3.2 GiB once has-answer's blocks were bounded by passages)
RELEASE_ROWS = 1024
COLUMNS = ("id", "title", "text")
# "contents": what retrievers and readers see, title and text as Pyserini's DPR collections
# store them ("title\ntext"; the text alone when there is no title)
VIRTUAL = ("contents",)


def _fsync(path: Path) -> None:
    """fsync a file or a directory (best effort for directories: not every file system allows it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def _schema():
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in COLUMNS])


# ------------------------------------------------------------------ opening
class CorpusStore:
    """A built store: memory-mapped columns, row fetches, and its content key."""

    def __init__(self, directory: str | os.PathLike):
        import pyarrow as pa

        self.directory = Path(directory)
        try:
            self.manifest = json.loads((self.directory / MANIFEST).read_text(encoding="utf-8"))
            self._map = pa.memory_map(str(self.directory / FILE_NAME), "r")
            self._table = pa.ipc.open_file(self._map).read_all()
        except (OSError, ValueError, pa.ArrowInvalid) as e:
            raise UserError(f"{self.directory}: not a readable corpus store ({e})") from None
        size, built = self._map.size(), self.manifest.get("file_bytes")
        if isinstance(built, int) and size != built:
            raise UserError(f"{self.directory}: {FILE_NAME} has {size} bytes, its build wrote {built}")
        if self._table.num_rows != int(self.manifest.get("rows", -1)):
            raise UserError(f"{self.directory}: corpus store has {self._table.num_rows} rows, its manifest says {self.manifest.get('rows')}")
        lengths = [len(c) for c in self._table.column("id").chunks]
        self._offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        self.key = str(self.manifest["key"])
        self._fetched = 0  # rows fetched through the map since its pages were last released
        self._map.seek(0)
        self._base = self._map.read_buffer(1).address if size else 0  # where the file is mapped

    def _release(self, rows: int) -> None:
        """Count ``rows`` fetched through the memory map; past :data:`RELEASE_ROWS`, drop the map's pages from this
        process (``madvise(MADV_DONTNEED)``: the kernel keeps them in its page cache, and the next access maps them
        again, without reading the disk).

        Random fetches touch pages all over the file: DPR has-answer over 3,610 questions at depth 1000 maps most
        of a 21M-passage store's 14 GB, and a mapped page counts in the process's RSS like its own memory.
        """
        self._fetched += rows
        if self._fetched >= RELEASE_ROWS:
            self._fetched = 0
            release_mapped_pages(self._base, self._map.size())

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __reduce__(self):
        return (open_store, (str(self.directory),))

    def column(self, name: str) -> "StoreColumn":
        if name not in COLUMNS + VIRTUAL:
            raise KeyError(name)
        return StoreColumn(self, name)

    @property
    def disk_bytes(self) -> int:
        return (self.directory / FILE_NAME).stat().st_size

    # -- row access
    def _chunk_values(self, name: str, chunk: int, local: np.ndarray | None = None) -> list[str]:
        import pyarrow as pa

        if name == "contents":
            titles = self._chunk_values("title", chunk, local)
            texts = self._chunk_values("text", chunk, local)
            return [f"{t}\n{x}" if t else x for t, x in zip(titles, texts)]
        arr = self._table.column(name).chunk(chunk)
        if local is not None:
            arr = arr.take(pa.array(local, type=pa.int64()))
        values = arr.to_pylist()
        self._release(len(values))
        return values

    def value(self, name: str, row: int) -> str:
        """One value (no array round trip: readers fetch passages one by one)."""
        if name == "contents":
            title, text = self.value("title", row), self.value("text", row)
            return f"{title}\n{text}" if title else text
        c = int(np.searchsorted(self._offsets, row, side="right")) - 1
        value = self._table.column(name).chunk(c)[row - int(self._offsets[c])].as_py()
        self._release(1)
        return value

    def fetch(self, name: str, rows) -> list[str]:
        """Values of column ``name`` at ``rows`` (any order, repeats allowed)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size == 0:
            return []
        n = len(self)
        if rows.min() < 0 or rows.max() >= n:
            raise IndexError(f"corpus row out of range 0..{n - 1}")
        chunk = np.searchsorted(self._offsets, rows, side="right") - 1
        out: list = [None] * rows.size
        order = np.argsort(chunk, kind="stable")
        bounds = np.flatnonzero(np.diff(chunk[order])) + 1
        for group in np.split(order, bounds):
            c = int(chunk[group[0]])
            values = self._chunk_values(name, c, rows[group] - self._offsets[c])
            for pos, v in zip(group.tolist(), values):
                out[pos] = v
        return out

    def iter_chunks(self, name: str, rows: np.ndarray | None = None, size: int = BATCH_ROWS,
                    arrow: bool = False) -> Iterator:
        """Column ``name`` as lists of at most ``size`` values, in order (over ``rows`` when given).

        With ``arrow`` the chunks are Arrow string arrays instead (no Python
        object per value: the index build writes their buffers as they are).

        A full scan (or one over ascending rows, as corpus-size levels are) reads
        the file one record batch at a time with plain reads, not through the
        memory map, so a pass over the whole corpus does not leave every page of
        it resident (and counted in RSS): memory stays at about one batch.
        """
        import pyarrow as pa

        if rows is not None and not (rows.size < 2 or np.all(np.diff(rows) > 0)):
            for lo in range(0, len(rows), size):
                values = self.fetch(name, rows[lo : lo + size])
                yield pa.array(values, pa.string()) if arrow else values
            return

        fields = ("title", "text") if name == "contents" else (name,)
        with pa.OSFile(str(self.directory / FILE_NAME), "rb") as f:
            reader = pa.ipc.open_file(f)
            for c in range(reader.num_record_batches):
                lo_row, hi_row = int(self._offsets[c]), int(self._offsets[c + 1])
                if rows is not None:
                    a, b = np.searchsorted(rows, [lo_row, hi_row])
                    if a == b:
                        continue
                    local = rows[a:b] - lo_row
                batch = reader.get_batch(c).select(list(fields))
                if rows is not None:
                    batch = batch.take(pa.array(local, type=pa.int64()))
                if arrow:
                    values = contents_array(batch.column(0), batch.column(1)) if name == "contents" else batch.column(0)
                    del batch
                    for i in range(0, len(values), size):
                        yield values.slice(i, size)
                    continue
                cols = [batch.column(k).to_pylist() for k in fields]
                del batch
                values = [f"{t}\n{x}" if t else x for t, x in zip(*cols)] if name == "contents" else cols[0]
                del cols
                for i in range(0, len(values), size):
                    yield values[i : i + size]

    def file_slices(self, name: str) -> list[tuple[int, ...]] | None:
        """Where column ``name``'s strings lie in the store's Arrow file, one entry per record batch, or None.

        An entry is ``(first_row, rows, title_offsets_pos, title_data_pos, title_data_len, offsets_pos,
        data_pos, data_len)``: byte positions in ``passages.arrow`` of the batch's int32 offsets and UTF-8 data
        (for ``contents``, of ``title`` and ``text``, which a reader joins as :func:`contents_array` does; for
        another column the title positions are -1).  The BM25 index build hands these to its Java collection,
        which reads the texts from the file itself, so no copy of the corpus is written.  None where a batch has
        nulls or its buffers are not plain ranges of the file.
        """
        import pyarrow as pa

        fields = ("title", "text") if name == "contents" else (name,)
        size, base = self._map.size(), self._base
        out = []
        # the table is the file's record batches, memory-mapped: a chunk's buffers are ranges of the file
        for c, cols in enumerate(zip(*(self._table.column(f).chunks for f in fields))):
            where: list[int] = [] if name == "contents" else [-1, -1, 0]
            for col in cols:
                if col.type != pa.string() or col.null_count or col.offset:
                    return None
                _, offs, data = col.buffers()
                offs_pos = offs.address - base
                data_pos, data_len = (data.address - base, data.size) if data is not None and data.size else (0, 0)
                if not (0 <= offs_pos and offs_pos + 4 * (len(col) + 1) <= size and 0 <= data_pos and data_pos + data_len <= size):
                    return None
                where += [offs_pos, data_pos, data_len]
            out.append((int(self._offsets[c]), len(cols[0]), *where))
        return out

    def ids_array(self):
        """The id column as an Arrow array (for vectorized lookups)."""
        return self._table.column("id")

    def rows_of_ids(self, ids: Sequence[str]) -> dict[str, int]:
        """``id -> row`` for the given ids that are in the store (one vectorized pass, no id dict)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        wanted = sorted(set(map(str, ids)))
        if not wanted:
            return {}
        mask = pc.is_in(self._table.column("id"), value_set=pa.array(wanted, pa.string()))
        rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        return dict(zip(self.fetch("id", rows), rows.tolist()))

    def corpus(self, language: str = "en"):
        """This store as a :class:`data.types.Corpus` of lazy columns (see its docstring)."""
        from data.types import Corpus

        contents = self.column("contents")
        return Corpus(ids=self.column("id"), texts=contents, contexts=contents,
                      paragraph_ids=np.arange(len(self), dtype=np.int64), titles=self.column("title"),
                      paragraph_texts=[], language=language, bodies=self.column("text"), content_key=self.key)


def release_mapped_pages(address: int, size: int) -> None:
    """Unmap the resident pages of a read-only file mapping (``pyarrow.memory_map``: page-aligned ``address``,
    ``size`` bytes) from this process (Linux; elsewhere nothing): ``madvise(MADV_DONTNEED)``.  The data stays
    valid: a shared file mapping is mapped again from the page cache on the next access."""
    import mmap

    madvise = _madvise()
    if madvise is not None and size > 0 and address % mmap.PAGESIZE == 0:
        madvise(address, size, mmap.MADV_DONTNEED)  # a failure only leaves the pages mapped


@functools.cache
def _madvise():
    """libc's ``madvise`` from the symbols already loaded in this process (no ``find_library``: it forks
    ``ldconfig``, from a process that may hold gigabytes), or None off Linux."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def utf8_scalar(text: str):
    """An Arrow string scalar made from its bytes.

    Converting any Python object (``pa.scalar("")``, a ``""`` argument to a
    compute function) makes pyarrow import pandas first, 0.6 s that a store or
    index build otherwise never pays.
    """
    import pyarrow as pa

    data = text.encode("utf-8")
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)])[0]


def contents_array(titles, texts):
    """``title\ntext`` (the text alone where the title is empty) as an Arrow string array, as ``contents`` reads."""
    import pyarrow.compute as pc

    empty = utf8_scalar("")
    titles = pc.fill_null(titles, empty) if titles.null_count else titles
    texts = pc.fill_null(texts, empty) if texts.null_count else texts
    return pc.if_else(pc.equal(titles, empty), texts, pc.binary_join_element_wise(titles, texts, utf8_scalar("\n")))


class StoreColumn(Sequence):
    """A lazy, read-only ``Sequence[str]`` over one store column, optionally through a row map."""

    def __init__(self, store: CorpusStore, name: str, rows: np.ndarray | None = None):
        self.store = store
        self.name = name
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)

    def __reduce__(self):
        return (StoreColumn, (self.store, self.name, self.rows))

    def __len__(self) -> int:
        return len(self.store) if self.rows is None else int(self.rows.size)

    def _base(self, idx: np.ndarray) -> np.ndarray:
        return idx if self.rows is None else self.rows[idx]

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            i = int(index)
            n = len(self)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"corpus row {index} out of range 0..{n - 1}")
            return self.store.value(self.name, i if self.rows is None else int(self.rows[i]))
        if isinstance(index, slice):
            idx = np.arange(*index.indices(len(self)), dtype=np.int64)  # only the slice's rows
        else:
            idx = np.asarray(index)
            if idx.dtype == bool:
                idx = np.flatnonzero(idx)
            idx = idx.astype(np.int64)
            if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
                raise IndexError("corpus row out of range")
            idx = np.where(idx < 0, idx + len(self), idx)
        return self.store.fetch(self.name, self._base(idx))

    def fetch(self, rows) -> list[str]:
        """Values at ``rows`` (rows of this view) as a list."""
        return self[np.asarray(rows, dtype=np.int64)]

    def take(self, rows) -> "StoreColumn":
        """A view over ``rows`` of this view (nothing is copied)."""
        rows = np.asarray(rows, dtype=np.int64)
        return StoreColumn(self.store, self.name, self._base(rows))

    def iter_chunks(self, size: int = BATCH_ROWS) -> Iterator[list[str]]:
        return self.store.iter_chunks(self.name, self.rows, size)

    def iter_arrow_chunks(self, size: int = BATCH_ROWS) -> Iterator:
        """The values in order as Arrow string arrays of at most ``size`` (see :meth:`CorpusStore.iter_chunks`)."""
        return self.store.iter_chunks(self.name, self.rows, size, arrow=True)

    def file_slices(self) -> list[tuple[int, ...]] | None:
        """:meth:`CorpusStore.file_slices` of this column; None for a view over some rows."""
        return None if self.rows is not None else self.store.file_slices(self.name)

    @property
    def file_path(self) -> Path:
        """The store's Arrow file (what :meth:`file_slices` positions point into)."""
        return self.store.directory / FILE_NAME

    def same_as(self, other) -> bool:
        """Whether ``other`` is a view of the same values (same store, column and rows)."""
        if other is self:
            return True
        if not isinstance(other, StoreColumn) or other.store is not self.store or other.name != self.name:
            return False
        if self.rows is None or other.rows is None:
            return self.rows is None and other.rows is None
        return bool(np.array_equal(self.rows, other.rows))

    def __iter__(self) -> Iterator[str]:
        for chunk in self.iter_chunks():
            yield from chunk

    def __repr__(self) -> str:
        return f"StoreColumn({self.store.directory.name}:{self.name}, {len(self)} rows)"


def open_store(directory: str | os.PathLike) -> CorpusStore:
    return CorpusStore(directory)


# ------------------------------------------------------------------ building
def store_root() -> Path:
    from data.io import cache_dir

    return cache_dir("corpus_store")


def build_store(
    records: Iterable[tuple[str, str, str]],
    directory: str | os.PathLike,
    *,
    key: str,
    meta: dict | None = None,
    desc: str = "corpus store",
    total: int | None = None,
) -> CorpusStore:
    """Stream ``(id, title, text)`` records into a store at ``directory`` (atomic; under a lock).

    ``records`` may also yield Arrow record batches with those columns (a
    columnar reader's output, written as they are).

    Nothing is kept in memory beyond one record batch and, for the duplicate-id
    check, 8 bytes per passage when every id is a decimal integer (DPR's, MS
    MARCO's: :class:`_IdCheck`); other ids are checked with Arrow's vectorized
    ``value_counts`` over the written file (a hash table of all ids).  Duplicate
    ids are an error.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from tqdm.auto import tqdm

    directory = Path(directory)
    with entry_lock(directory, "corpus store"):
        if directory.exists():  # built by another process meanwhile, or found damaged (checked again, under the lock)
            problem = check_store(directory)
            if problem is None:
                try:
                    return CorpusStore(directory)
                except UserError as e:
                    problem = str(e).removeprefix(f"{directory}: ")
            warn(f"{directory}: cached corpus store is damaged ({problem}); removed and rebuilt")
            _discard(directory)
        for stale in directory.parent.glob(f".{directory.name}.*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed build: never trusted
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
        except OSError as e:
            raise UserError(f"{directory.parent}: cannot write the corpus store there ({os_reason(e)})") from None
        try:
            t0 = time.perf_counter()
            schema = _schema()
            n = 0
            ids: list[str] = []
            titles: list[str] = []
            texts: list[str] = []
            size = 0
            id_check = _IdCheck()
            bar = tqdm(total=total, desc=desc, unit=" passages", unit_scale=True, mininterval=2, disable=None, leave=False)
            with pa.OSFile(str(tmp / FILE_NAME), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:

                def flush():
                    nonlocal ids, titles, texts, size
                    if ids:
                        batch = pa.record_batch([pa.array(ids, pa.string()), pa.array(titles, pa.string()),
                                                 pa.array(texts, pa.string())], schema=schema)
                        writer.write_batch(batch)
                        id_check.add(batch.column(0))
                        bar.update(len(ids))
                    ids, titles, texts, size = [], [], [], 0

                pending: list = []  # record batches of a columnar reader, written as one batch of BATCH_ROWS

                def flush_batches():
                    if pending:
                        table = pa.Table.from_batches(pending, schema=schema).combine_chunks()
                        pending.clear()
                        for batch in table.to_batches():
                            writer.write_batch(batch)
                            id_check.add(batch.column(0))
                            bar.update(batch.num_rows)

                for rec in records:
                    if not isinstance(rec, tuple):  # a record batch (id, title, text) from a columnar reader
                        flush()
                        pending.append(pa.record_batch([rec.column(c).cast(pa.string()) for c in COLUMNS], schema=schema))
                        n += rec.num_rows
                        if (sum(b.num_rows for b in pending) >= BATCH_ROWS
                                or sum(b.nbytes for b in pending) >= BATCH_BYTES // 2):
                            flush_batches()
                        continue
                    flush_batches()
                    pid, title, text = rec
                    ids.append(pid)
                    titles.append(title)
                    texts.append(text)
                    size += len(text) + len(title) + len(pid)
                    n += 1
                    if len(ids) >= BATCH_ROWS or size >= BATCH_BYTES:
                        flush()
                flush()
                flush_batches()
            bar.close()
            if n == 0:
                raise UserError(f"{desc}: the corpus is empty")
            duplicate = id_check.duplicate()
            if duplicate is None and not id_check.integers:
                with pa.memory_map(str(tmp / FILE_NAME), "r") as m:
                    id_col = pa.ipc.open_file(m).read_all().column("id")
                    counts = pc.value_counts(id_col)
                    if pc.max(counts.field("counts")).as_py() > 1:
                        dup = pc.filter(counts, pc.greater(counts.field("counts"), 1))
                        first = dup[0].as_py()
                        duplicate = (first["values"], first["counts"], len(dup))
                    del id_col, counts
            if duplicate is not None:
                value, count, distinct = duplicate
                raise UserError(f"{desc}: passage id {value!r} appears {count} times ({distinct} duplicated ids in all)")
            seconds = time.perf_counter() - t0
            # the file's CRC-32, read back from the page cache (3-4 GB/s), against which check_store compares it
            crc, size = _crc32_file(tmp / FILE_NAME)
            manifest = {"version": STORE_VERSION, "key": key, "rows": n, "build_s": round(seconds, 3),
                        "passages_per_s": round(n / max(seconds, 1e-9), 1), "file_bytes": size, "crc32": f"{crc:08x}",
                        **(meta or {})}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            # on disk before the rename publishes them: a crash never leaves a published store with a short file,
            # and the next stage (an index build reading the file) does not share the machine with its writeback
            for name in (FILE_NAME, MANIFEST):
                _fsync(tmp / name)
            _record_check(tmp, _stamp(tmp))  # just checked: the next open costs a stat per file
            os.replace(tmp, directory)
            _fsync(directory.parent)
        except OSError as e:  # a full disk, an unwritable cache: one line, nothing half-written left
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{e.filename or directory}: corpus store build failed ({os_reason(e)})") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return CorpusStore(directory)


class _IdCheck:
    """Duplicate passage ids, collected while a store's batches are written.

    While every id is a decimal integer in its canonical form (``"17"``, not
    ``"017"`` or ``"+17"``: two spellings of one number are two ids), the ids are
    kept as one int64 each and sorted at the end: 168 MB for DPR's 21M passages,
    where Arrow's ``value_counts`` over the id column held a hash table of every
    id string and mapped the file's pages (3.3 GiB peak for the whole build).  The
    first batch with another id stops the collection; the caller then checks the
    written file with ``value_counts``.
    """

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.integers = True

    def add(self, ids) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.integers:
            return
        try:
            if ids.null_count:
                raise ValueError("null id")
            numbers = pc.cast(ids, pa.int64())
            if not pc.all(pc.equal(pc.cast(numbers, pa.string()), ids)).as_py():
                raise ValueError("not canonical")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            self.integers, self.parts = False, []
            return
        # the values buffer as it is (no nulls); Array.to_numpy would import pandas (0.6 s per process)
        self.parts.append(np.frombuffer(numbers.buffers()[1], dtype=np.int64, count=len(numbers), offset=8 * numbers.offset))

    def duplicate(self) -> tuple[str, int, int] | None:
        """``(first duplicated id in file order, its count, how many ids are duplicated)``, or None; None too when
        the ids were not all integers (not checked here)."""
        if not self.integers or not self.parts:
            return None
        values = np.concatenate(self.parts)
        ordered = np.sort(values)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.size == 0:
            return None
        distinct = np.unique(repeated)
        first = values[np.flatnonzero(np.isin(values, distinct))[0]]
        return str(int(first)), int(np.count_nonzero(values == first)), int(distinct.size)


# ------------------------------------------------------------ checking
VERIFIED = "verified.json"  # the record of the last full check: the stamps of the store's files then


def check_store(directory: str | os.PathLike, *, force: bool = False) -> str | None:
    """None when the store at ``directory`` is whole, else one line saying what is wrong; never raises for damage.

    Opening a store reads its manifest and the Arrow file's footer and schema only:
    a flipped byte in the texts is served as it is (and a damaged offsets buffer can
    make Arrow read out of bounds).  The build records the Arrow file's size and
    CRC-32 in the manifest; this compares them with the file (the size always, the
    CRC-32 by reading the whole file once: zlib at 3-4 GB/s a core, 2-4 s for
    the 13 GB of DPR's 21M passages when cached, disk-bound when not).  A full check is
    recorded (``verified.json``: name, size, mtime, ctime and inode of each file) and
    not repeated while those are unchanged -- any write, truncation, replacement or
    copy changes them (``touch`` cannot set ctime back) -- so an unchanged store costs
    two ``stat`` calls to open.  The build records its own check, having just
    computed the CRC-32.  Stores built before the checksum was recorded are checked
    by Arrow's full validation instead (offsets in bounds, UTF-8), which catches a
    damaged structure but not a changed character.  What the record cannot see is
    damage below the file system (a disk returning other bytes without an I/O error);
    ``force`` checks all the same.
    """
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (OSError, ValueError) as e:
        return f"{MANIFEST} is unreadable ({os_reason(e) if isinstance(e, OSError) else 'not JSON'})"
    if not isinstance(manifest, dict) or not {"key", "rows"} <= set(manifest):
        return f"{MANIFEST} lacks the store's key or row count"
    if str(manifest["key"]) != directory.name:  # the key is the directory's name and what indexes of it are keyed by
        return f"{MANIFEST} names the store {manifest['key']!r}"
    try:
        size = (directory / FILE_NAME).stat().st_size
    except FileNotFoundError:
        return f"{FILE_NAME} is missing"
    except OSError as e:
        return f"{FILE_NAME}: {os_reason(e)}"
    built = manifest.get("file_bytes")
    if isinstance(built, int) and size != built:
        return f"{FILE_NAME} has {size} bytes, its build wrote {built}"
    try:
        stamp = _stamp(directory)
    except OSError as e:
        return f"cannot list it ({os_reason(e)})"
    if not force:
        try:
            seen = json.loads((directory / VERIFIED).read_text(encoding="utf-8"))
            if isinstance(seen, dict) and seen.get("version") == 1 and seen.get("stamp") == stamp:
                return None
        except (OSError, ValueError):
            pass  # no record, or an unreadable one: check it all
    if isinstance(manifest.get("crc32"), str):
        try:
            crc, _ = _crc32_file(directory / FILE_NAME)
        except OSError as e:
            return f"{FILE_NAME}: read error ({os_reason(e)})"
        if f"{crc:08x}" != manifest["crc32"]:
            return f"{FILE_NAME}: checksum mismatch (manifest {manifest['crc32']}, file {crc:08x})"
    else:
        problem = _validate_arrow(directory / FILE_NAME, int(manifest["rows"]))
        if problem is not None:
            return problem
    _record_check(directory, stamp)
    return None


def _validate_arrow(path: Path, rows: int) -> str | None:
    """A store without a recorded checksum: Arrow's full validation of every batch, and the row count."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path), "r") as m:
            reader = pa.ipc.open_file(m)
            n = 0
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                batch.validate(full=True)
                n += batch.num_rows
    except (OSError, ValueError, pa.ArrowInvalid) as e:
        return f"{FILE_NAME}: {' '.join(str(e).split())[:200]}"
    return None if n == rows else f"{FILE_NAME} holds {n} rows, its manifest says {rows}"


def _stamp(directory: Path) -> list[list]:
    """(name, size, mtime, ctime, inode) of the store's files."""
    out = []
    for name in (FILE_NAME, MANIFEST):
        st = (directory / name).stat()
        out.append([name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return out


def _record_check(directory: Path, stamp: list) -> None:
    tmp = directory / f".{VERIFIED}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"version": 1, "stamp": stamp, "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
                       + "\n", encoding="utf-8")
        os.replace(tmp, directory / VERIFIED)
    except OSError:  # a read-only cache: checked again on the next open
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _crc32_file(path: Path, block: int = 8 << 20) -> tuple[int, int]:
    """(CRC-32, size) of a file, read in blocks (zlib releases the GIL on them)."""
    import zlib

    crc, size = 0, 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(block)
        view = memoryview(buf)
        while n := f.readinto(view):
            crc = zlib.crc32(view[:n], crc)
            size += n
    return crc, size


def _discard(directory: Path) -> None:
    """Remove a damaged store (:func:`data.io.discard_directory`: a reader never finds it half-removed)."""
    from data.io import discard_directory

    discard_directory(directory, "corpus store")


def cached_store(
    key_parts: list,
    records: Callable[[], Iterable[tuple[str, str, str]]],
    *,
    meta: dict | None = None,
    desc: str = "corpus store",
    root: Path | None = None,
) -> CorpusStore:
    """The store for ``key_parts`` (content digests, format, options), built from ``records()`` if missing."""
    from data.io import sha256_text

    key = sha256_text("corpus-store", STORE_VERSION, *key_parts)[:24]
    root = Path(root) if root else store_root()
    directory = root / key
    if directory.exists() and check_store(directory) is None:  # no lock: a sound store is only read
        try:
            return CorpusStore(directory)
        except UserError:
            pass  # checked again under the build lock, and rebuilt
    # missing or damaged: under the lock it is checked again (another process may have rebuilt it meanwhile), a
    # damaged one removed with one warning line, and the store built; never served damaged
    return build_store(records(), directory, key=key, meta=meta, desc=desc)


# ------------------------------------------------------------ content digests
def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, remembered by (path, size, mtime) so a large file is hashed once."""
    from data.io import remembered_sha256_file

    return remembered_sha256_file(Path(path))


def tree_digest(paths: Sequence[Path], root: Path) -> str:
    """Digest of several files (names relative to ``root`` and their contents).

    The files are hashed on all cores at once (hashlib releases the GIL), so a
    sharded corpus's first run hashes it in a fraction of one core's time.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(len(paths), os.cpu_count() or 1))) as pool:
        digests = list(pool.map(file_digest, paths))
    h = hashlib.sha256()
    for p, digest in zip(paths, digests):
        h.update(str(Path(p).relative_to(root)).encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()
