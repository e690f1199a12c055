"""Fused retrievers: which methods there are and which of them learn.

The spec-string parser (``retrievers.registry``) turns e.g.
``rrf:bm25+dense`` or ``mrrank:bm25+dense+dense:PATH`` into a method name, the
member retrievers and an options dict, then calls
:func:`retrievers.registry.build_fused` (importable from here too).  The
methods are the names of :data:`retrievers.registry.FUSERS` (plugins add their
own through the entry-point group ``qa_retrieval_eval.fusers``).

Methods
-------
``rrf``           :class:`retrievers.rrf.RRFRetriever` (Cormack et al., 2009)
``fuse-minmax``   :class:`retrievers.score_fusion.ScoreFusionRetriever`, min-max normalization
``fuse-zscore``   same, z-score normalization
``fuse-sum``      same, shift-to-zero sum-to-one normalization
``route``         :class:`retrievers.routing.RouterRetriever` (learned; needs ``fit``)
``route-stat``    :class:`retrievers.routing.StatisticalRouterRetriever` (no training)
``mrrank``        :class:`retrievers.mrrank.MrRankRetriever` (learned; needs ``fit``)

Options are the constructor parameters of each class (strings from a spec
are converted to the parameter's type by :func:`data.plugins.typed_options`);
an unknown option is a ``UserError``.  Learned methods declare
``learned = True`` and expose ``fit(train_dataset)``; callers check with
:func:`needs_fit`.
"""

from __future__ import annotations

from typing import Any

from retrievers.registry import FUSERS, build_fused, fusion_method  # noqa: F401 - build_fused kept importable from here

FUSION_METHODS = tuple(FUSERS.builtin_names())  # our own methods (FUSERS.names() adds the installed plugins')


def needs_fit(retriever: Any) -> bool:
    """True for learned retrievers (routers, re-rankers) that must be fitted on a training split (they declare ``learned``)."""
    return bool(getattr(retriever, "learned", False))


def method_learned(method: str) -> bool:
    """Whether the fusion method ``method`` (a :data:`~retrievers.registry.FUSERS` name) is learned, before building one."""
    cls, _ = fusion_method(FUSERS.get(method))
    return bool(getattr(cls, "learned", False))
