"""Selector names -> classes, and selectors built from spec strings and saved dicts.

``SELECTORS`` holds the built-ins (imported on first use, so this module
imports none of them) and the selectors of installed packages, declared as
entry points in the group ``qa_retrieval_eval.selectors``::

    [project.entry-points."qa_retrieval_eval.selectors"]
    relative = "my_package.selectors:RelativeScore"

A spec is ``name`` or ``name:arg1,arg2,key=value``: the positional arguments
are the leading constructor parameters (as many as the class's ``usage``
allows), and any constructor parameter may be given as ``key=value``; values
are converted to the parameters' annotated types (``data.plugins``).  No
selector needs parsing code of its own.
"""

from __future__ import annotations

from typing import Any

from data.errors import UserError
from data.plugins import Registry, parameters, positional_options
from selection.base import Selector, usage_forms

SELECTORS: Registry[type[Selector]] = Registry("selectors", what="selector")
SELECTORS.register("top", "selection.top:TopN")
SELECTORS.register("threshold", "selection.threshold:Threshold")
SELECTORS.register("ordinal", "selection.ordinal:Ordinal")
SELECTORS.register("gap", "selection.gap:Gap")
SELECTORS.register("rlt", "selection.truncation:Truncation")
SELECTORS.register("confidence", "selection.confidence:Confidence")
SELECTORS.register("oracle", "selection.oracle:Oracle")


def selector_names() -> list[str]:
    """Registered selector names: the built-ins in registration order, then those of installed plugins."""
    builtins = SELECTORS.builtin_names()
    return builtins + sorted(set(SELECTORS.plugins()) - set(builtins))


def selector_usage() -> str:
    """Every selector's spec syntax, for help texts: ``top:N, threshold:θ[,τ], ordinal[:τ], oracle, ...``."""
    out = []
    for name in selector_names():
        try:
            out.append(SELECTORS.get(name).spec_usage())
        except Exception:  # a broken plugin still gets its name listed
            out.append(name)
    return ", ".join(out)


def _lookup(name: str) -> type[Selector] | None:
    cls = SELECTORS.find(name)
    if cls is None and name.lower() != name:
        cls = SELECTORS.find(name.lower())
    return cls


def parse_selector(spec: str) -> Selector:
    """``top:5``, ``threshold:0.8``, ``threshold:0.8,25``, ``ordinal``, ``ordinal:25``, ``oracle``, a plugin's.

    Parameters are converted and checked here, so a bad spec fails, in one
    line, before any work starts.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"selector {spec!r}: expected one of {selector_usage()}")
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    args = [a.strip() for a in rest.split(",")] if rest.strip() else []
    cls = _lookup(name)
    if cls is None:
        raise UserError(f"selector {spec!r}: unknown method {name.lower()!r} (expected one of {selector_usage()})")
    what = f"selector {spec!r}"
    params = list(parameters(cls))
    positional = 0
    for arg in args:
        key, eq, _ = arg.partition("=")
        key = key.strip().replace("-", "_")
        if eq and key in params:
            continue
        if eq and key.isidentifier():
            raise UserError(f"{what}: unknown option {key!r} (allowed: {', '.join(params) or 'none'})")
        positional += 1
    fewest, most = cls.spec_arity()
    if positional > most or positional > len(params):
        if not params:
            raise UserError(f"{what}: {cls.method or name} takes no parameters")
        raise UserError(f"{what}: expected {' or '.join(usage_forms(cls.spec_usage()))}")
    options = positional_options(cls, args, what)
    if any(p not in options for p in params[:fewest]):
        raise UserError(f"{what}: expected {' or '.join(usage_forms(cls.spec_usage()))}")
    try:
        selector = cls(**options)
    except TypeError as e:
        raise UserError(f"{what}: {e}") from None
    try:
        selector._check()
    except UserError as e:
        message = str(e)
        for prefix in (f"selector {selector.spec}: ", f"selector {selector.spec!r}: "):
            if message.startswith(prefix):
                message = message[len(prefix):]
                break
        raise UserError(f"{what}: {message}") from None
    return selector


def selector_from_dict(d: dict[str, Any]) -> Selector:
    """Inverse of ``Selector.to_dict()``: the registered class of ``d["method"]``, same parameters and fitted state."""
    method = d.get("method") if isinstance(d, dict) else d
    cls = _lookup(method) if isinstance(d, dict) and isinstance(method, str) and method else None
    if cls is None:
        raise UserError(f"selector dict: unknown method {method!r} (expected one of {', '.join(selector_names())})")
    return cls.from_dict(d)
