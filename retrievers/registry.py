"""Retriever spec strings -> retriever objects.

Grammar::

    spec    := single | METHOD ":" member ("+" member)*
    single  := "bm25" | "dense" | "dense:" NAME_OR_PATH
    member  := single
    METHOD  := rrf | fuse-minmax | fuse-zscore | fuse-sum | route | route-stat | mrrank

Examples: ``bm25``, ``dense``, ``dense:/models/e5``, ``rrf:bm25+dense``,
``mrrank:bm25+dense+dense:/models/mpnet``.  Parameters of the single
retrievers (k1, b, field, index type...) come from ``bm25_options`` /
``dense_options``; fused retrievers take ``fusion_options`` (see
:func:`retrievers.fusion.build_fused`).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from data.errors import UserError
from retrievers.base import Retriever

SINGLE = ("bm25", "dense")


def _construct(cls, options: Mapping[str, Any] | None, what: str, **fixed):
    params = inspect.signature(cls.__init__).parameters
    kwargs = dict(fixed)
    for key, value in (options or {}).items():
        name = str(key).replace("-", "_")
        if name not in params or name == "self":
            allowed = ", ".join(p for p in params if p != "self")
            raise UserError(f"{what}: unknown option {key!r} (allowed: {allowed})")
        kwargs[name] = value
    return cls(**kwargs)


def make_single(spec: str, bm25_options=None, dense_options=None) -> Retriever:
    head, _, arg = spec.partition(":")
    if head == "bm25":
        from retrievers.bm25 import BM25Retriever

        if arg:
            raise UserError(f"retriever {spec!r}: bm25 takes no argument (use --bm25-k1/--bm25-b/--bm25-field)")
        return _construct(BM25Retriever, bm25_options, "bm25")
    if head == "dense":
        from retrievers.dense import DenseRetriever

        opts = dict(dense_options or {})
        if arg:
            opts["model"] = arg
        return _construct(DenseRetriever, opts, "dense")
    raise UserError(f"unknown retriever {spec!r}; use bm25, dense, dense:MODEL or METHOD:a+b (METHOD: {_methods()})")


def _methods() -> str:
    from retrievers.fusion import FUSION_METHODS

    return ", ".join(FUSION_METHODS)


def make_retriever(
    spec: str,
    *,
    bm25_options: Mapping[str, Any] | None = None,
    dense_options: Mapping[str, Any] | None = None,
    fusion_options: Mapping[str, Any] | None = None,
) -> Retriever:
    """Build (not index) the retriever named by ``spec``."""
    spec = (spec or "").strip()
    if not spec:
        raise UserError("empty --retriever spec")
    head, _, rest = spec.partition(":")
    if head in SINGLE:
        return make_single(spec, bm25_options, dense_options)
    from retrievers.fusion import FUSION_METHODS, build_fused

    if head not in FUSION_METHODS:
        raise UserError(f"unknown retriever {spec!r}; use bm25, dense, dense:MODEL or METHOD:a+b (METHOD: {_methods()})")
    parts = [p for p in rest.split("+") if p]
    if not parts:
        raise UserError(f"retriever {spec!r}: {head} needs members, e.g. {head}:bm25+dense")
    members = [make_single(p, bm25_options, dense_options) for p in parts]
    return build_fused(head, members, fusion_options)
