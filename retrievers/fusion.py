"""Build a fused retriever from a method name, member retrievers and options.

The spec-string parser (``retrievers.registry``) turns e.g.
``rrf:bm25+dense`` or ``mrrank:bm25+dense+dense:PATH`` into a method name, the
member retrievers and an options dict, then calls :func:`build_fused`.

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
are converted to the parameter's type); an unknown option is a ``UserError``.
Learned methods expose ``fit(train_dataset)``; callers check with
:func:`needs_fit`.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

from data.errors import UserError
from retrievers.base import Retriever

FUSION_METHODS = ("rrf", "fuse-minmax", "fuse-zscore", "fuse-sum", "route", "route-stat", "mrrank")


def _classes():
    from retrievers.mrrank import MrRankRetriever
    from retrievers.routing import RouterRetriever, StatisticalRouterRetriever
    from retrievers.rrf import RRFRetriever
    from retrievers.score_fusion import ScoreFusionRetriever

    return {
        "rrf": (RRFRetriever, {}),
        "fuse-minmax": (ScoreFusionRetriever, {"method": "minmax"}),
        "fuse-zscore": (ScoreFusionRetriever, {"method": "zscore"}),
        "fuse-sum": (ScoreFusionRetriever, {"method": "sum"}),
        "route": (RouterRetriever, {}),
        "route-stat": (StatisticalRouterRetriever, {}),
        "mrrank": (MrRankRetriever, {}),
    }


def _coerce(value: Any, default: Any, field: str) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null"):
        return None
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise UserError(f"{field}: expected true/false, got {value!r}")
    if isinstance(default, int) or default is None:
        try:
            return int(text)
        except ValueError:
            pass
    if isinstance(default, (int, float)) or default is None:
        try:
            return float(text)
        except ValueError:
            if default is not None:
                raise UserError(f"{field}: expected a number, got {value!r}") from None
    return text  # strings, lists (parsed by the class), names


def build_fused(method: str, members: Sequence[Retriever], options: Mapping[str, Any] | None = None) -> Retriever:
    """A fused retriever of ``method`` over already-constructed ``members``.

    ``options`` hold constructor parameters (e.g. ``{"k": "60", "depth": "100"}``
    for ``rrf``, ``{"weights": "0.3,0.7"}`` for ``fuse-*``, ``{"seed": 1}`` for
    ``mrrank``); nothing is indexed or fitted here.
    """
    table = _classes()
    if method not in table:
        raise UserError(f"unknown fusion method {method!r} (choose from {', '.join(FUSION_METHODS)})")
    cls, fixed = table[method]
    params = inspect.signature(cls.__init__).parameters
    allowed = [n for n in params if n not in ("self", "members") and n not in fixed]
    kwargs = dict(fixed)
    for key, value in (options or {}).items():
        name = str(key).replace("-", "_")
        if name not in allowed:
            raise UserError(f"{method}: unknown option {key!r} (allowed: {', '.join(allowed)})")
        kwargs[name] = _coerce(value, params[name].default, f"{method} option {key}")
    return cls(list(members), **kwargs)


def needs_fit(retriever: Any) -> bool:
    """True for learned retrievers (routers, re-rankers) that must be fitted on a training split."""
    return callable(getattr(retriever, "fit", None))
