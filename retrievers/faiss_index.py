"""FAISS indexes for dense retrieval at scale.

Johnson, Douze & Jégou 2019 ("Billion-scale similarity search with GPUs")
for FAISS.  Four pieces, all inner product over (normalised) embeddings:

* :class:`EmbeddingShards` -- corpus embeddings as consecutive row blocks,
  memory-mapped ``.npy`` shards read as needed (never one in-memory array);
* :func:`flat_search` -- exact top-k over the shards, one block (48-192 MB) at
  a time, merged with FAISS's result heap (what ``IndexFlatIP`` returns, without
  copying the corpus into the index); ties go to the lower corpus row;
* :func:`cached_index` -- any ``faiss.index_factory`` string (IVF: Jégou et
  al. 2011 / Sivic & Zisserman 2003; PQ: Jégou, Douze & Schmid 2011; OPQ:
  Ge et al. 2013; HNSW: Malkov & Yashunin 2018; RaBitQ: Gao & Long 2024,
  multi-bit: Gao et al. 2025; SQ), trained on a seeded
  sample of the embeddings, filled shard by shard, cached on disk (key: the
  embeddings key, the factory string, the training sample and the FAISS
  version), written atomically with its checksum in its name and
  memory-mapped on load (``IO_FLAG_MMAP_IFC``); a damaged file is rebuilt;
* :class:`PrebuiltIndex` -- a directory in Pyserini's dense-index layout
  (``index`` = ``faiss.write_index`` output, ``docid`` = one document id a
  line, as ``pyserini.search.faiss.FaissSearcher.load_index`` reads it), its
  entries mapped to corpus rows by corpus id; Pyserini prebuilt index names
  are downloaded by Pyserini's own ``download_prebuilt_index``.

Search parameters (``nprobe`` for IVF, ``efSearch`` for HNSW, also an HNSW
coarse quantizer's) are set through ``faiss.ParameterSpace``.  With
``faiss-gpu`` installed and a CUDA device chosen, indexes FAISS can move are
searched on the GPU (``index_cpu_to_gpu``; GPU FAISS searches at most
``GPU_MAX_K`` results, deeper searches use the CPU copy).
"""

from __future__ import annotations

import json
import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from data.errors import UserError
from data.io import atomic_path, cache_dir, file_lock, sha256_file, sha256_text, warn

GPU_MAX_K = 2048  # largest k (and nprobe) FAISS GPU indexes search
QUERY_BLOCK = 4096  # queries per exact-search block (FAISS's own BLAS query block)
EXACT_BLOCK_BYTES = (48 << 20, 192 << 20)  # exact search's corpus blocks: least and most bytes (see exact_block_bytes) ...
EXACT_BLOCK_ROWS_PER_K = 128  # ... and rows per result kept, between those bounds (bench/flat_blocks.py)
EXACT_BLAS_MIN_QUERIES = 8  # ... scored with BLAS for batches of at least this many queries (see flat_search)
TRAIN_MIN = 65536  # default training sample: at least this many rows ...
TRAIN_PER_LIST = 64  # ... and this many per IVF list (FAISS k-means wants >= 39)
INDEX_SUFFIX = ".faiss"
PYSERINI_INDEX = "index"
PYSERINI_DOCID = "docid"
EXACT_SPECS = {"flat", "Flat"}
REFINE_QUERY_BLOCK = 256  # queries per re-ranking block of refine_search (their candidate vectors are gathered at once)


# --------------------------------------------------------------- embeddings
class EmbeddingShards:
    """Corpus embeddings ``[N, D]`` held as consecutive row blocks.

    ``parts`` are float32 arrays (usually ``np.load(path, mmap_mode="r")``
    views of cache shards), part ``i`` holding rows
    ``offsets[i]:offsets[i + 1]``.  Nothing is concatenated: exact search reads
    one block at a time and index building adds block by block, so a
    1M x 384 corpus is never duplicated in memory.
    """

    def __init__(self, parts: Sequence[np.ndarray], paths: Sequence[str | os.PathLike] | None = None):
        self.paths = [Path(p) for p in paths] if paths is not None else None  # the shard files, when read from files
        self.parts = [p if p.dtype == np.float32 else p.astype(np.float32) for p in parts]
        if not self.parts:
            raise ValueError("EmbeddingShards needs at least one part")
        dims = {p.shape[1] for p in self.parts if p.ndim == 2}
        if len(dims) != 1 or any(p.ndim != 2 for p in self.parts):
            raise ValueError(f"embedding shards must be 2-d with one width, got shapes {[p.shape for p in self.parts][:4]}")
        self.dim = dims.pop()
        self.offsets = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])]).astype(np.int64)

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike]) -> "EmbeddingShards":
        """Memory-map ``.npy`` shard files in row order (read-only; pages are read on use)."""
        return cls([np.load(p, mmap_mode="r", allow_pickle=False) for p in paths], paths)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self.parts))

    @property
    def memory_mapped(self) -> bool:
        return all(isinstance(p, np.memmap) for p in self.parts)

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, block)`` per part, in row order."""
        for lo, part in zip(self.offsets[:-1], self.parts):
            if len(part):
                yield int(lo), part

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of ``rows`` (any order) as one new float32 array."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"rows outside [0, {len(self)})")
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for positions, vectors in self.reads(rows):
            out[positions] = vectors
        return out

    def reads(self, rows: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(positions in rows, their embeddings)`` part by part, each part read once in row order (rows in range)."""
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        bounds = np.searchsorted(ordered, self.offsets)
        for i in np.nonzero(bounds[1:] > bounds[:-1])[0]:
            a, b = bounds[i], bounds[i + 1]
            yield order[a:b], self.parts[i][ordered[a:b] - self.offsets[i]]

    def to_array(self) -> np.ndarray:
        """All rows as one in-memory array (for callers that want one; costs N x D x 4 bytes)."""
        return np.concatenate([np.asarray(p) for p in self.parts], axis=0)


# ------------------------------------------------------------- exact search
def _ties_to_lower_row(scores: np.ndarray, ids: np.ndarray) -> None:
    """In place: within runs of equal scores of each (descending) row, put lower ids first."""
    if scores.shape[1] < 2:
        return
    tied = np.nonzero((scores[:, 1:] == scores[:, :-1]).any(axis=1))[0]
    if not len(tied):
        return
    s, i = scores[tied], ids[tied]
    order = np.lexsort((np.where(i >= 0, i, np.iinfo(np.int64).max), -s.astype(np.float64)), axis=1)
    scores[tied] = np.take_along_axis(s, order, axis=1)
    ids[tied] = np.take_along_axis(i, order, axis=1)


def exact_block_bytes(k: int, dim: int) -> int:
    """Bytes of the corpus blocks exact search scores at once for a top ``k`` of ``dim``-d vectors.

    Each block costs a top-k selection and a merge, so blocks hold at least
    ``EXACT_BLOCK_ROWS_PER_K`` rows per result, within ``EXACT_BLOCK_BYTES``:
    48 MiB (32,768 rows of 384 floats) up to k = 256, 188 MiB at k = 1000.  On
    2 AVX2 cores (bench/flat_blocks.py) 48 MiB blocks were the fastest at
    k = 100 (192 MiB: slower, 0.5x for 64 queries) and 192 MiB the fastest at
    k = 1000 (1.3x the 48 MiB ones).
    """
    least, most = EXACT_BLOCK_BYTES
    return int(min(most, max(least, EXACT_BLOCK_ROWS_PER_K * int(k) * 4 * int(dim))))


def flat_search(shards: EmbeddingShards, queries: np.ndarray, k: int, query_block: int = QUERY_BLOCK,
                block_bytes: int | None = None):
    """Exact inner-product top-``k`` over every shard: ``(scores [Q, k], ids [Q, k])``.

    The top ``k`` by (score descending, corpus row ascending): what one
    ``IndexFlatIP`` over the whole corpus returns, with ties -- at the cut too
    -- settled by row.  The shards are scored in blocks of about
    ``block_bytes`` (default: :func:`exact_block_bytes`) with ``faiss.knn`` and merged in a
    ``faiss.ResultHeap``.  Rows are padded with id -1 / score -inf when ``k``
    exceeds the corpus.

    FAISS keeps an arbitrary subset of the rows tied at its k-th score (its
    reservoir for k >= 100, and its heaps, which replace the lowest id first),
    so each query is searched ``_tie_margin(k)`` deeper: when the score at that
    depth is below the k-th, every row scoring at least the k-th is among those
    kept and the first ``k`` by (score, row) are exact; the queries whose tie
    runs through the margin are searched again four times deeper, until it
    ends.  And FAISS scores a batch of fewer than
    ``distance_compute_blas_threshold / d`` queries (333 at d = 384) one query
    at a time over a whole block, streaming a large block from memory once per
    query: batches of at least ``EXACT_BLAS_MIN_QUERIES`` go through its BLAS
    path (8-13x faster for 64-256 queries on 2 AVX2 cores), smaller ones keep
    the shards as blocks (bench/flat_blocks.py).  BLAS can round the same
    vector differently at two positions or in two batch shapes, so "tied" means
    equal as scored in that batch.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    nq, n = len(queries), len(shards)
    k_eff = min(int(k), n)
    if block_bytes is None:
        block_bytes = exact_block_bytes(k_eff, shards.dim)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    for qlo in range(0, nq, query_block):
        todo = np.arange(qlo, min(nq, qlo + query_block))
        depth = min(n, k_eff + _tie_margin(k_eff))
        while len(todo):
            d, i = _exact_top(shards, queries[todo], depth, block_bytes)
            done = np.ones(len(todo), dtype=bool) if depth >= n else d[:, depth - 1] < d[:, k_eff - 1]
            scores[todo[done], :k_eff] = np.where(i[done, :k_eff] >= 0, d[done, :k_eff], -np.inf)
            ids[todo[done], :k_eff] = i[done, :k_eff]
            todo, depth = todo[~done], min(n, 4 * depth)
    return scores, ids


def refine_search(shards: EmbeddingShards, queries: np.ndarray, candidates: np.ndarray, k: int,
                  query_block: int = REFINE_QUERY_BLOCK):
    """Exact inner-product top-``k`` among each query's ``candidates`` (corpus rows, -1 = none): ``(scores, ids)``.

    The re-ranking step of FAISS's ``IndexRefine`` (its ``k_factor``: an
    approximate index proposes ``k_factor x k`` rows, exact scores order
    them), with the exact vectors read from the memory-mapped embedding
    shards on demand instead of a second in-memory copy of the corpus -- the
    disk-resident design of Jayaram Subramanya et al. 2019 (DiskANN), so only
    the compressed index is built in memory.  Order: score descending, corpus
    row ascending; rows padded with id -1 / score -inf.  Each shard is read
    once per block of ``query_block`` queries, in row order.  The vectors come
    through the OS page cache: the file pages a search touched count in the
    process's RSS (clean, reclaimable), and with the kernel's fault-around
    (16 pages a fault) a large query batch maps most of the file -- unmapping
    them after each block (``MADV_DONTNEED``) did not bound the peak and made
    the re-ranking 2-3x slower on 1M MiniLM vectors (2 cores), so it is not done.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    candidates = np.asarray(candidates, dtype=np.int64)
    nq, width = candidates.shape
    k_out = int(k)
    scores = np.full((nq, k_out), -np.inf, dtype=np.float32)
    ids = np.full((nq, k_out), -1, dtype=np.int64)
    if width == 0:
        return scores, ids
    big = np.iinfo(np.int64).max
    for lo in range(0, nq, query_block):
        hi = min(nq, lo + query_block)
        cand = candidates[lo:hi]
        valid = cand >= 0
        rows = np.where(valid, cand, 0).ravel()
        # score (query, candidate) pairs in corpus-row order: each shard is read once, in file order, straight
        # into the dot products (no gathered [B, C, D] copy)
        block = queries[lo:hi]
        pair_scores = np.empty(len(rows), dtype=np.float32)
        for positions, vectors in shards.reads(rows):
            pair_scores[positions] = np.einsum("jd,jd->j", vectors, block[positions // width])
        s = np.where(valid, pair_scores.reshape(hi - lo, width), -np.inf).astype(np.float32)
        top = np.lexsort((np.where(valid, cand, big), -s.astype(np.float64)), axis=1)[:, :k_out]
        got = top.shape[1]
        scores[lo:hi, :got] = np.take_along_axis(s, top, axis=1)
        ids[lo:hi, :got] = np.where(np.isfinite(scores[lo:hi, :got]), np.take_along_axis(cand, top, axis=1), -1)
    return scores, ids


def _tie_margin(k: int) -> int:
    """How much deeper than ``k`` :func:`flat_search` looks, so that a tie at the k-th score can be settled by row."""
    return max(16, k // 8)


def _exact_top(shards: EmbeddingShards, q: np.ndarray, depth: int, block_bytes: int):
    """The ``depth`` best rows of every block merged: ``(scores, ids)`` by (score desc, row asc), ties at the end FAISS's."""
    import faiss

    blas = len(q) >= EXACT_BLAS_MIN_QUERIES
    heap = faiss.ResultHeap(len(q), depth, keep_max=True)
    with _faiss_setting("distance_compute_blas_threshold", 0 if blas else None):
        for lo, block in _exact_blocks(shards, block_bytes if blas else 0):
            d, i = faiss.knn(q, block, min(depth, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(d, np.where(i >= 0, i + lo, -1))
    heap.finalize()
    d, i = heap.D, heap.I
    _ties_to_lower_row(d, i)
    return d, i


@contextmanager
def _faiss_setting(name: str, value: int | None):
    """FAISS's global ``cvar.<name>`` set to ``value`` inside the block (``None``: unchanged), then restored."""
    import faiss

    if value is None:
        yield
        return
    saved = getattr(faiss.cvar, name)
    setattr(faiss.cvar, name, value)
    try:
        yield
    finally:
        setattr(faiss.cvar, name, saved)


def _exact_blocks(shards: EmbeddingShards, block_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, block)`` covering the shards in row order, each block about ``block_bytes``.

    A part of at least ``block_bytes`` is scored where it lies (memory-mapped, no
    copy); smaller consecutive parts are copied together into one reused buffer
    of at most ``block_bytes`` (a block is valid until the next one is yielded).
    Every ``faiss.knn`` call selects and sorts a top k of its own, which the
    heap then merges: against 4,096-row shards, blocks of :func:`exact_block_bytes`
    search 1.2-1.3x faster at k = 100 and 3.2-3.4x at k = 1000 (100k real /
    1M synthetic x 384, 2,000 / 500 queries; bench/flat_blocks.py).
    """
    rows = max(1, int(block_bytes) // (4 * shards.dim))
    buffer: np.ndarray | None = None
    start = fill = 0
    for lo, part in shards.blocks():
        if len(part) >= rows:
            if fill:
                yield start, buffer[:fill]
                fill = 0
            yield lo, _contiguous(part)
            continue
        if fill and fill + len(part) > rows:
            yield start, buffer[:fill]
            fill = 0
        if buffer is None:
            buffer = np.empty((min(rows, len(shards)), shards.dim), dtype=np.float32)
        if not fill:
            start = lo
        buffer[fill : fill + len(part)] = part
        fill += len(part)
    if fill:
        yield start, buffer[:fill]


def _contiguous(block: np.ndarray) -> np.ndarray:
    """``block`` itself when FAISS can read it in place (C-contiguous float32; memmaps are)."""
    if block.dtype == np.float32 and block.flags.c_contiguous:
        return block
    return np.ascontiguousarray(block, dtype=np.float32)


# ---------------------------------------------------------- factory indexes
def resolve_index_spec(spec: str, hnsw_m: int = 32) -> str | None:
    """``None`` for exact search (``flat``), else the FAISS factory string (``hnsw`` -> ``HNSW<m>``)."""
    text = str(spec or "flat").strip()
    if text in EXACT_SPECS:
        return None
    if text.lower() == "hnsw":
        return f"HNSW{int(hnsw_m)}"
    return text


def make_index(factory: str, dim: int):
    """``faiss.index_factory(dim, factory, METRIC_INNER_PRODUCT)``; a bad string is a ``UserError``."""
    import faiss

    try:
        index = faiss.index_factory(int(dim), factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        # FAISS says "Error in <function> at <file>:<line>: [Error: '<check>' failed: ]<why>": keep the why, whole
        reason = re.sub(r"^Error in .* at \S+:\d+: (Error: '.*' failed: )?", "", reason)
        raise UserError(
            f"--dense-index {factory!r}: not a FAISS index factory string for {dim}-d vectors ({reason[:200]}); "
            "use flat, hnsw or e.g. IVF4096,PQ64 / HNSW32 / IVF1024,SQ8 / OPQ16,IVF256,PQ16"
        ) from None
    # polysemous training (a simulated annealing over PQ code ids, minutes per sub-quantizer) only
    # serves Hamming pre-filtering (polysemous_ht), which we never switch on: skip it
    ivf = faiss.try_extract_index_ivf(index)
    for part in (faiss.downcast_index(ivf) if ivf is not None else None, faiss.downcast_index(index)):
        if hasattr(part, "do_polysemous_training"):
            part.do_polysemous_training = False
    return index


def ivf_nlist(index) -> int:
    """Inverted lists of the index's IVF part (0 when it has none)."""
    import faiss

    ivf = faiss.try_extract_index_ivf(index)
    return int(ivf.nlist) if ivf is not None else 0


def hnsw_parts(index) -> tuple[bool, bool]:
    """``(index has an HNSW graph, its IVF coarse quantizer is one)``."""
    import faiss

    inner = faiss.downcast_index(index)
    while True:
        if isinstance(inner, faiss.IndexPreTransform):
            inner = faiss.downcast_index(inner.index)
        elif isinstance(inner, faiss.IndexRefine):
            inner = faiss.downcast_index(inner.base_index)
        elif isinstance(inner, (faiss.IndexIDMap, faiss.IndexIDMap2)):
            inner = faiss.downcast_index(inner.index)
        else:
            break
    top = isinstance(inner, faiss.IndexHNSW)
    ivf = faiss.try_extract_index_ivf(index)
    quant = ivf is not None and isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexHNSW)
    return top, quant


def default_nprobe(nlist: int) -> int:
    """IVF lists visited per query when ``--nprobe`` is not given: ``2 sqrt(nlist)`` (64 of 1024, 128 of 4096)."""
    return max(1, min(int(nlist), int(round(2 * math.sqrt(nlist)))))


def default_train_size(index, n: int) -> int:
    """Training rows when none are asked for: ``max(65536, 64 x nlist)``, at most the corpus."""
    return int(min(n, max(TRAIN_MIN, TRAIN_PER_LIST * ivf_nlist(index))))


def train_rows(n: int, size: int, seed: int) -> np.ndarray:
    """A seeded sample of ``size`` distinct rows of ``[0, n)``, ascending (all rows when ``size >= n``)."""
    if size >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(int(seed))
    return np.sort(rng.choice(n, size=int(size), replace=False)).astype(np.int64)


def set_search_parameters(index, nprobe: int | None = None, ef_search: int | None = None) -> dict:
    """Set ``nprobe`` / ``efSearch`` where the index has them; returns what was set.

    ``nprobe=None`` uses :func:`default_nprobe`; ``ef_search`` applies to an
    HNSW index and to an HNSW coarse quantizer.  ``nprobe`` on an index
    without inverted lists is ignored with a warning.
    """
    import faiss

    space = faiss.ParameterSpace()
    nlist = ivf_nlist(index)
    applied: dict = {}
    if nlist:
        value = default_nprobe(nlist) if nprobe is None else int(nprobe)
        if value < 1:
            raise UserError(f"--nprobe {value}: must be >= 1")
        value = min(value, nlist)
        space.set_index_parameter(index, "nprobe", value)
        applied["nprobe"] = value
    elif nprobe is not None:
        warn(f"--nprobe {nprobe}: this index has no inverted lists (IVF); ignored")
    if ef_search is not None:
        top, quant = hnsw_parts(index)
        if int(ef_search) < 1:
            raise UserError(f"--ef-search {ef_search}: must be >= 1")
        if top:
            space.set_index_parameter(index, "efSearch", int(ef_search))
            applied["efSearch"] = int(ef_search)
        if quant:
            space.set_index_parameter(index, "quantizer_efSearch", int(ef_search))
            applied["quantizer_efSearch"] = int(ef_search)
    return applied


def build_index(factory: str, shards: EmbeddingShards, train_size: int | None = None, seed: int = 0):
    """A trained and filled factory index; ``(index, info)``.

    Training uses :func:`train_rows` (``train_size`` rows, default
    :func:`default_train_size`, seeded); vectors are added shard by shard.
    """
    index = make_index(factory, shards.dim)
    n = len(shards)
    info: dict = {"factory": factory, "ntotal": n, "dim": shards.dim}
    if not index.is_trained:
        size = int(train_size) if train_size else default_train_size(index, n)
        if size < 1:
            raise UserError(f"--dense-train-sample {train_size}: must be >= 1")
        rows = train_rows(n, size, seed)
        nlist = ivf_nlist(index)
        if nlist > len(rows):
            raise UserError(
                f"--dense-index {factory!r}: {nlist} inverted lists need at least {nlist} training vectors; "
                f"the corpus/sample has {len(rows)} (use fewer lists, e.g. IVF{max(1, len(rows) // 64)})"
            )
        sample = shards.take(rows)
        try:
            index.train(sample)
        except RuntimeError as e:
            raise UserError(f"--dense-index {factory!r}: FAISS could not train it on {len(rows)} vectors "
                            f"({str(e).strip().splitlines()[-1][-160:]})") from None
        del sample
        info.update(train_rows=int(len(rows)), train_seed=int(seed) if len(rows) < n else None)
    with _progress(total=n, desc=f"fill {factory}", unit="vec", leave=False) as bar:
        for _, block in shards.blocks():
            index.add(_contiguous(block))
            bar.update(len(block))
    return index, info


def _progress(**kw):
    try:
        from data.progress import tqdm  # a line every 30 s when stderr is not a terminal
    except ImportError:
        from tqdm.auto import tqdm
    return tqdm(**kw)


def index_cache_key(embeddings_key: str, factory: str, train_size: int | None, seed: int, n: int) -> str:
    """Key of a cached factory index: embeddings, factory string, training sample, FAISS version."""
    import faiss

    train = "all" if train_size is not None and train_size >= n else f"{train_size or 'auto'}@{seed}"
    return sha256_text("faiss-index-v1", embeddings_key, factory, train, faiss.__version__)[:24]


def read_index(path: str | os.PathLike, mmap: bool = True):
    """``faiss.read_index`` memory-mapped (``IO_FLAG_MMAP_IFC``) when FAISS can, else read into memory."""
    import faiss

    if mmap and hasattr(faiss, "IO_FLAG_MMAP_IFC"):
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:
            pass  # an index type this FAISS cannot map: read it
    return faiss.read_index(str(path))


def cached_index(
    factory: str,
    shards: EmbeddingShards,
    embeddings_key: str | None,
    train_size: int | None = None,
    seed: int = 0,
    directory: str | os.PathLike | None = None,
):
    """A trained, filled factory index: loaded from the cache or built and cached; ``(index, info)``.

    The file is ``<cache>/faiss-index/<key>/index.<sha256, 16 hex>.faiss``
    (see :func:`index_cache_key`), written atomically under a file lock and
    memory-mapped on load; one whose bytes do not match its name, or that
    FAISS cannot read, is removed with a ``warning:`` line and rebuilt.
    ``embeddings_key=None`` builds without caching.
    """
    if embeddings_key is None:
        index, info = build_index(factory, shards, train_size, seed)
        return index, {**info, "cache": "off"}
    key = index_cache_key(embeddings_key, factory, train_size, seed, len(shards))
    folder = Path(directory) if directory else cache_dir("faiss-index", key)
    with file_lock(folder / ".lock"):
        for tmp in folder.glob(".*.tmp"):  # left by a killed writer
            tmp.unlink(missing_ok=True)
        for path in sorted(folder.glob("index.*" + INDEX_SUFFIX)):
            index = _load_checked(path)
            if index is not None and index.ntotal == len(shards) and index.d == shards.dim:
                meta = _read_meta(folder)
                return index, {**meta, "cache": "loaded", "path": str(path)}
            if index is not None:
                warn(f"{path}: cached FAISS index holds {index.ntotal} x {index.d} vectors, not {len(shards)} x {shards.dim}; rebuilt")
                path.unlink(missing_ok=True)
        index, info = build_index(factory, shards, train_size, seed)
        info = {**info, "faiss": _faiss_version(), "key": key}
        with atomic_path(folder / "meta.json") as tmp:  # before the index: an index file always has its meta
            tmp.write_text(json.dumps(info, sort_keys=True) + "\n", encoding="utf-8")
        path = _write_index(index, folder)
        del index
        index = read_index(path)  # serve the memory-mapped file, as a later run will
        return index, {**info, "cache": "built", "path": str(path)}


def _faiss_version() -> str:
    import faiss

    return faiss.__version__


def _write_index(index, folder: Path) -> Path:
    import faiss

    fd_tmp = folder / ".index.writing.tmp"
    with atomic_path(fd_tmp) as tmp:
        faiss.write_index(index, str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    digest = sha256_file(fd_tmp)[:16]
    path = folder / f"index.{digest}{INDEX_SUFFIX}"
    os.replace(fd_tmp, path)
    for old in folder.glob("index.*" + INDEX_SUFFIX):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def _load_checked(path: Path):
    """The index at ``path`` when its bytes match the checksum in its name, else ``None`` (removed, warned)."""
    digest = path.name[len("index.") : -len(INDEX_SUFFIX)]
    try:
        ok = len(digest) == 16 and sha256_file(path)[:16] == digest
    except OSError:
        ok = False
    if ok:
        try:
            return read_index(path)
        except RuntimeError:
            ok = False
    warn(f"{path}: cached FAISS index is damaged (checksum or format); removed and rebuilt")
    path.unlink(missing_ok=True)
    return None


def _read_meta(folder: Path) -> dict:
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def index_bytes(index) -> int:
    """Bytes of the serialized index (its size in memory or in its file); serializes a copy, so small indexes only."""
    import faiss

    return int(faiss.serialize_index(index).nbytes)


# ------------------------------------------------------------------- GPU
def to_gpu(index, device: str):
    """``(index, resources)``: ``index`` on the GPU when faiss-gpu is installed and ``device`` is CUDA.

    ``resources`` (a ``StandardGpuResources`` that must outlive the GPU index)
    is ``None`` when the index stays on the CPU: faiss-cpu, ``--device cpu``,
    no GPU visible to FAISS, or an index type GPU FAISS does not have (HNSW;
    said in a ``warning:`` line).  Not exercised by the tests (no GPU here).
    """
    import faiss

    if not hasattr(faiss, "StandardGpuResources") or not str(device).startswith("cuda") or faiss.get_num_gpus() < 1:
        return index, None
    gpu = int(str(device).split(":")[1]) if ":" in str(device) else 0
    resources = faiss.StandardGpuResources()
    try:
        return faiss.index_cpu_to_gpu(resources, gpu, index), resources
    except RuntimeError as e:
        warn(f"FAISS index stays on the CPU: GPU FAISS cannot hold it ({str(e).strip().splitlines()[-1][-120:]})")
        return index, None


# --------------------------------------------------------------- searchers
@dataclass
class FlatSearcher:
    """Exact search over embedding shards (:func:`flat_search`), or a GPU flat index filled from them."""

    shards: EmbeddingShards
    device: str = "cpu"
    gpu_index: object = None
    resources: object = None

    def __post_init__(self):
        import faiss

        index, self.resources = to_gpu(faiss.IndexFlatIP(self.shards.dim), self.device)
        if self.resources is not None:
            for _, block in self.shards.blocks():
                index.add(_contiguous(block))
            self.gpu_index = index

    def search(self, queries: np.ndarray, k: int):
        if self.gpu_index is not None and k <= GPU_MAX_K:
            d, i = self.gpu_index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self.shards)))
            return _pad(d, i, k)
        return flat_search(self.shards, queries, k)

    def info(self) -> dict:
        return {"factory": "flat", "ntotal": len(self.shards), "dim": self.shards.dim, "memory_mapped": self.shards.memory_mapped,
                "gpu": self.gpu_index is not None}


@dataclass
class IndexSearcher:
    """Search a FAISS index with its search parameters set (GPU copy when available)."""

    index: object
    nprobe: int | None = None
    ef_search: int | None = None
    device: str = "cpu"
    rows: np.ndarray | None = None  # index position -> corpus row (-1: not in the corpus); None: identity
    refine: EmbeddingShards | None = None  # exact vectors to re-rank with (refine_search); None: the index's own scores
    k_factor: float = 1.0  # with refine: candidates per result taken from the index
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.refine is not None:
            if not self.k_factor >= 1:
                raise UserError(f"dense refine: the candidate factor must be >= 1 (got {self.k_factor})")
            if self.refine.dim != self.index.d or (self.rows is None and len(self.refine) != self.index.ntotal):
                raise ValueError(f"refine vectors {len(self.refine)} x {self.refine.dim} do not match the index "
                                 f"({self.index.ntotal} x {self.index.d})")
        self.params = set_search_parameters(self.index, self.nprobe, self.ef_search)
        self.gpu_index, self.resources = to_gpu(self.index, self.device)
        if self.resources is None:
            self.gpu_index = None
        elif "nprobe" in self.params:  # GPU IVF: the same lists (GPU FAISS visits at most GPU_MAX_K)
            import faiss

            faiss.GpuParameterSpace().set_index_parameter(self.gpu_index, "nprobe", min(self.params["nprobe"], GPU_MAX_K))
        self.selector = None
        if self.rows is not None:
            mapped = np.nonzero(self.rows >= 0)[0]
            if len(mapped) < len(self.rows):
                self.selector = _search_params(self.index, mapped, self.params)

    @property
    def searchable(self) -> int:
        """Vectors a search can return (those mapped to corpus rows)."""
        return int(self.index.ntotal if self.rows is None else (self.rows >= 0).sum())

    def search(self, queries: np.ndarray, k: int):
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if self.refine is not None:
            width = max(1, min(math.ceil(int(k) * self.k_factor), self.searchable))
            _, i = self._search(q, width)
            return _pad(*refine_search(self.refine, q, i, min(int(k), width)), int(k))
        return self._search(q, k)

    def _search(self, q: np.ndarray, k: int):
        k_eff = max(1, min(int(k), self.searchable))
        if self.selector is not None:
            d, i = self.index.search(q, k_eff, params=self.selector)
        elif self.gpu_index is not None and k_eff <= GPU_MAX_K:
            d, i = self.gpu_index.search(q, k_eff)
        else:
            d, i = self.index.search(q, k_eff)
        if self.rows is not None:
            i = np.where(i >= 0, self.rows[np.maximum(i, 0)], -1)
        d = np.where(i >= 0, d, -np.inf).astype(np.float32)
        _ties_to_lower_row(d, i)
        return _pad(d, i, k)

    def info(self) -> dict:
        out = {"ntotal": int(self.index.ntotal), "dim": int(self.index.d), "params": self.params,
               "gpu": self.gpu_index is not None}
        if self.refine is not None:
            out["refine"] = {"k_factor": self.k_factor, "vectors": "embedding shards (memory-mapped, read per query block)"}
        return out


def _pad(d: np.ndarray, i: np.ndarray, k: int):
    if d.shape[1] >= k:
        return d[:, :k], i[:, :k]
    pad = k - d.shape[1]
    return (np.pad(d, ((0, 0), (0, pad)), constant_values=-np.inf),
            np.pad(i, ((0, 0), (0, pad)), constant_values=-1))


def _search_params(index, positions: np.ndarray, applied: dict):
    """``SearchParameters`` restricting a search to ``positions`` (the vectors of this corpus)."""
    import faiss

    sel = faiss.IDSelectorBatch(positions.astype(np.int64))
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexIVF):
        params = faiss.SearchParametersIVF(sel=sel, nprobe=int(applied.get("nprobe", inner.nprobe)))
    elif isinstance(inner, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=int(applied.get("efSearch", inner.hnsw.efSearch)))
    elif isinstance(inner, faiss.IndexFlatCodes):
        params = faiss.SearchParameters(sel=sel)
    else:
        raise UserError(
            f"prebuilt index of type {type(inner).__name__}: its ids cannot be restricted to this corpus; "
            "give a corpus that holds every document of the index"
        )
    params._selector = sel  # keep the selector alive as long as the parameters
    return params


# --------------------------------------------------------- prebuilt (Pyserini)
@dataclass
class PrebuiltIndex:
    """A FAISS index directory in Pyserini's dense layout, its entries mapped to corpus rows."""

    path: Path
    index: object
    rows: np.ndarray  # int64 [ntotal]: corpus row of index entry i, -1 when the corpus lacks its docid
    missing_rows: int  # corpus rows without a vector in the index

    @classmethod
    def open(cls, spec: str | os.PathLike, corpus_ids: Sequence[str]) -> "PrebuiltIndex":
        path = resolve_prebuilt(spec)
        index = read_index(path / PYSERINI_INDEX)
        docids = read_docids(path / PYSERINI_DOCID)
        if len(docids) != index.ntotal:
            raise UserError(f"{path / PYSERINI_DOCID}: {len(docids)} docids for the {index.ntotal} vectors of {path / PYSERINI_INDEX}")
        rows = docid_rows(docids, corpus_ids)
        mapped = rows[rows >= 0]
        if not len(mapped):
            raise UserError(f"{path}: none of its {len(docids)} docids is a corpus id (e.g. {docids[0].decode(errors='replace')!r})")
        missing = len(corpus_ids) - len(np.unique(mapped))
        if missing:
            warn(f"{path}: {missing} of {len(corpus_ids)} corpus rows have no vector in the prebuilt index; they are never retrieved")
        return cls(path=path, index=index, rows=rows, missing_rows=int(missing))


def resolve_prebuilt(spec: str | os.PathLike) -> Path:
    """A local directory with ``index`` + ``docid``, or a Pyserini prebuilt dense index name (downloaded by Pyserini)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        for name in (PYSERINI_INDEX, PYSERINI_DOCID):
            if not (path / name).is_file():
                raise UserError(f"{path}: not a Pyserini dense index directory (no {name!r} file; expected 'index' and 'docid')")
        return path
    if os.sep in str(spec) or str(spec).startswith("."):
        raise UserError(f"{spec}: no such index directory")
    from retrievers.java import ensure_jvm

    ensure_jvm()  # pyserini.util loads Anserini classes
    from pyserini.prebuilt_index_info import FAISS_INDEX_INFO
    from pyserini.util import download_prebuilt_index

    if str(spec) not in FAISS_INDEX_INFO:
        raise UserError(f"--dense-index-dir {spec!r}: neither a directory nor a Pyserini prebuilt dense index name "
                        f"(e.g. {next(iter(FAISS_INDEX_INFO), 'wikipedia-dpr-100w.dpr-multi')})")
    try:
        return Path(download_prebuilt_index(str(spec)))
    except Exception as e:  # offline, checksum mismatch
        raise UserError(f"--dense-index-dir {spec!r}: Pyserini could not fetch it ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None


def read_docids(path: str | os.PathLike) -> np.ndarray:
    """Docids, one a line, right-stripped as Pyserini's ``load_docids`` does; a bytes array (no Python object per id kept)."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = np.array([line.rstrip() for line in lines], dtype=bytes)
    return out if out.dtype.kind == "S" else out.astype("S1")


def docid_rows(docids: np.ndarray, corpus_ids: Sequence[str]) -> np.ndarray:
    """int64 [len(docids)]: the corpus row of each docid (its first row when ids repeat), -1 when absent."""
    cids = np.char.encode(np.asarray(list(corpus_ids), dtype=str), "utf-8") if len(corpus_ids) else np.array([], dtype="S1")
    order = np.argsort(cids, kind="stable")
    srt = cids[order]
    pos = np.searchsorted(srt, docids, side="left")
    pos_c = np.minimum(pos, max(len(srt) - 1, 0))
    hit = (pos < len(srt)) & (srt[pos_c] == docids) if len(srt) else np.zeros(len(docids), dtype=bool)
    return np.where(hit, order[pos_c], -1).astype(np.int64)
