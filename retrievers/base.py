"""The retriever interface, the facts a retriever declares, and the run facts gathered from them.

A retriever is built from plain constructor parameters (no work in
``__init__``), then ``index(corpus)`` prepares it for one corpus and
``search(query_texts, k)`` returns a :class:`retrievers.types.Ranking` whose ids
are row indices into that corpus.  Learned retrievers (routers, re-rankers)
also have ``fit(dataset)``, called with a *training* split before ``index``.

Any class with ``name``, ``index`` and ``search`` is a retriever
(:class:`Retriever`).  Our own retrievers also inherit :class:`RetrieverBase`,
which *declares* what the pipeline would otherwise have to guess:

``learned``
    ``True`` when the retriever must be ``fit`` on a training split first
    (:func:`retrievers.fusion.needs_fit`).
``members``
    the retrievers a fused one combines (an empty tuple for single ones).
``facts()``
    what a run manifest records about it once indexed: its encoder, its
    corpus-embedding shards, its index (see :func:`run_facts`).
``spec_argument`` / ``extra_options_to``
    how a spec string fills its parameters (``dense:MODEL`` fills ``model``;
    bracket keys a dense retriever does not know go to ``encoder_options``):
    :func:`retrievers.registry.make_retriever`.

A plugin retriever need not inherit it: every walker here reads these with
``getattr`` defaults (not learned, no members, no facts).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Iterator, Protocol, Sequence, runtime_checkable

from data.types import Corpus
from retrievers.types import Ranking


@runtime_checkable
class Retriever(Protocol):
    name: str

    def index(self, corpus: Corpus) -> "Retriever": ...

    def search(self, query_texts: Sequence[str], k: int) -> Ranking: ...


class RetrieverBase:
    """What our retrievers declare (see the module docstring); subclasses set ``name`` and implement index/search."""

    name: str
    #: fitted on a training split (``fit(dataset)``) before ``index``
    learned: ClassVar[bool] = False
    #: the parameter the ``:ARG`` of a ``NAME:ARG`` spec fills (``None``: the retriever takes no argument)
    spec_argument: ClassVar[str | None] = None
    #: the dict parameter that receives bracket options the constructor does not name (``None``: they are errors)
    extra_options_to: ClassVar[str | None] = None
    #: the retrievers a fused retriever combines (fused retrievers set a list in ``__init__``)
    members: Sequence[Any] = ()

    def facts(self) -> dict:
        """Manifest facts of this retriever alone (not its members), each key only when known:

        ``"encoder"`` (dict: model, identity, prompts), ``"embedding_shards"``
        (dict of counts: shards, computed, reused), ``"index"`` (dict: what was
        searched and how), ``"reranker"`` (dict: a re-ranking stage's model, depth, precision).
        """
        return {}


def members_of(retriever: Any) -> list:
    """The members a retriever declares (none for a retriever without ``members``)."""
    return list(getattr(retriever, "members", None) or ())


def walk(retriever: Any) -> Iterator[Any]:
    """``retriever`` and the members of fused ones, breadth first."""
    queue = [retriever]
    while queue:
        r = queue.pop(0)
        yield r
        queue.extend(members_of(r))


def constructor_params(obj: Any, cls: type | None = None) -> dict[str, Any]:
    """The constructor parameters of ``obj`` as ``cls`` (default: its class) declares them, scikit-learn style
    (each stored under its own name); a parameter the object does not hold is left out."""
    import inspect

    try:
        params = inspect.signature((cls or type(obj)).__init__).parameters
    except (TypeError, ValueError):
        return {}
    return {n: getattr(obj, n) for n, p in params.items()
            if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and hasattr(obj, n)}


def release(retriever: Any) -> None:
    """Close what ``retriever`` and the members of a fused one hold open (Lucene readers and their memory-mapped
    index files), for a caller done with it; those without ``close`` hold nothing to release.  Best effort: a close
    that fails is not the caller's error."""
    for r in walk(retriever):
        close = getattr(r, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - releasing is best effort
                pass


def facts_of(retriever: Any) -> dict:
    """``retriever.facts()``, or ``{}`` for a retriever that declares none."""
    facts = getattr(retriever, "facts", None)
    return dict(facts() or {}) if callable(facts) else {}


def run_facts(retriever: Any) -> dict:
    """The retrieval facts of a run manifest, from every retriever of it (members included, breadth first).

    ``{"encoders": [encoder facts...], "embedding_shards": {count: sum over the
    dense retrievers}, "indexes": [{"retriever": name, **index facts}...],
    "rerankers": [re-ranking stage facts...]}``; a key with nothing to record
    is left out.
    """
    encoders: list[dict] = []
    rerankers: list[dict] = []
    shards: dict[str, int] = {}
    indexes: list[dict] = []
    for r in walk(retriever):
        facts = facts_of(r)
        if facts.get("encoder"):
            encoders.append(facts["encoder"])
        for key, value in (facts.get("embedding_shards") or {}).items():
            shards[key] = shards.get(key, 0) + int(value)
        if facts.get("index"):
            entry = {"retriever": getattr(r, "name", type(r).__name__), **facts["index"]}
            indexes.append(json.loads(json.dumps(entry, default=str)))
        if facts.get("reranker"):
            rerankers.append(json.loads(json.dumps(facts["reranker"], default=str)))
    out: dict = {}
    if encoders:
        out["encoders"] = encoders  # model, identity, prompts of every dense retriever
    if shards:
        out["embedding_shards"] = shards
    if indexes:
        out["indexes"] = indexes  # what each retriever searched: Lucene index and its build, FAISS index, refine
    if rerankers:
        out["rerankers"] = rerankers  # spec, depth, model identity, max length, precision, pairs scored and reused
    return out
