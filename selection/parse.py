"""Build selectors from command-line specs and from saved dicts."""

from __future__ import annotations

from typing import Any

from data.errors import UserError
from selection.base import Selector
from selection.oracle import Oracle
from selection.ordinal import Ordinal
from selection.threshold import Threshold
from selection.top import TopN

SELECTORS: dict[str, type[Selector]] = {cls.method: cls for cls in (TopN, Threshold, Ordinal, Oracle)}
SPEC_HELP = "top:N, threshold:θ[,τ], ordinal[:τ], oracle"


def _int(text: str, spec: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(f"selector {spec!r}: {what} must be an integer, got {text!r}") from None


def _float(text: str, spec: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"selector {spec!r}: {what} must be a number, got {text!r}") from None


def parse_selector(spec: str) -> Selector:
    """``top:5``, ``threshold:0.8``, ``threshold:0.8,25``, ``ordinal``, ``ordinal:25``, ``oracle``.

    Parameters are checked here, so a bad spec fails before any work starts.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"selector {spec!r}: expected one of {SPEC_HELP}")
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    args = [a.strip() for a in rest.split(",")] if rest.strip() else []
    if name == "top":
        if len(args) != 1:
            raise UserError(f"selector {spec!r}: expected top:N")
        selector: Selector = TopN(_int(args[0], spec, "N"))
    elif name == "threshold":
        if len(args) not in (1, 2):
            raise UserError(f"selector {spec!r}: expected threshold:θ or threshold:θ,τ")
        theta = _float(args[0], spec, "θ")
        selector = Threshold(theta) if len(args) == 1 else Threshold(theta, _int(args[1], spec, "τ"))
    elif name == "ordinal":
        if len(args) > 1:
            raise UserError(f"selector {spec!r}: expected ordinal or ordinal:τ")
        selector = Ordinal() if not args else Ordinal(_int(args[0], spec, "τ"))
    elif name == "oracle":
        if args:
            raise UserError(f"selector {spec!r}: oracle takes no parameters")
        selector = Oracle()
    else:
        raise UserError(f"selector {spec!r}: unknown method {name!r} (expected one of {SPEC_HELP})")
    try:
        selector._check()
    except UserError as e:
        raise UserError(f"selector {spec!r}: {str(e).split(': ', 1)[-1]}") from None
    return selector


def selector_from_dict(d: dict[str, Any]) -> Selector:
    """Inverse of ``Selector.to_dict()``: same parameters and fitted state."""
    if not isinstance(d, dict) or d.get("method") not in SELECTORS:
        method = d.get("method") if isinstance(d, dict) else d
        raise UserError(f"selector dict: unknown method {method!r} (expected one of {', '.join(SELECTORS)})")
    cls = SELECTORS[d["method"]]
    params = d.get("params") or {}
    try:
        selector = cls(**params)
    except TypeError as e:
        raise UserError(f"selector dict for {d['method']!r}: bad params {params} ({e})") from None
    selector._check()
    selector.set_fitted_state(d.get("fitted") or {})
    return selector
