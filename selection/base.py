"""What every passage-count selector shares: the estimator protocol and score kernels.

A selector decides, per query, how many of the top-K retrieved passages the
reader reads.  It is a small scikit-learn-style estimator:

* plain constructor parameters, no work in ``__init__``;
* ``fit(scores [Q, K], first_relevant_rank [Q]) -> self`` (a no-op for the
  unlearned ones); ``first_relevant_rank`` is the 1-based rank of the first
  relevant result, and K (or anything larger) when there is none;
* ``predict(scores [Q, K], first_relevant_rank=None) -> int64 [Q]`` with
  values in ``1..K`` (only the oracle reads ``first_relevant_rank``);
* ``to_dict()`` / ``selector_from_dict()``: JSON-able parameters *and* fitted
  state, saved with a run so it can be reloaded and re-applied exactly;
* declared properties ``learned``, ``needs_gold``, ``max_depth`` and a
  ``spec`` string derived from ``method`` and the constructor parameters.

This module imports nothing from ``selection.registry`` (names -> classes):
the selectors depend on it, never the other way round.

Scores are rows sorted by descending score, as in ``retrievers.types.Ranking``;
non-finite scores (NaN, -inf: padding where a query has fewer than K results)
count as "no result".
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import numpy as np

from data.errors import UserError
from data.plugins import parameters


class Selector:
    """Base class; subclasses set ``method`` and implement ``predict`` (and ``fit`` when ``learned``).

    What a driver may rely on, declared rather than guessed:

    * ``method``: the registered name, the first word of the spec (``top``);
    * ``usage``: the spec syntax shown in errors and help (``threshold:θ[,τ]``):
      the name, then the leading constructor parameters a spec gives by
      position, ``[...]`` around the optional ones; derived from the
      constructor when empty.  Every constructor parameter may also be given
      as ``key=value`` (``threshold:0.8,normalization=sum``);
    * ``learned``: ``fit`` must see training data before ``predict``;
    * ``needs_gold``: ``predict`` reads ``first_relevant_rank``;
    * ``reads_answers``: the reader is in the loop: ``fit`` takes the training
      reads (``answer_scores``, ``correct``), ``predict`` the answer scores of
      the passages read, and ``stop_points`` says, after each rank read, which
      questions stop (:func:`pipeline.stages.read_until`);
    * ``max_depth``: the most passages it can select (None: up to the
      retrieval depth), i.e. how deep a driver has to retrieve and read.
    """

    method: ClassVar[str] = ""
    usage: ClassVar[str] = ""
    learned: ClassVar[bool] = False
    needs_gold: ClassVar[bool] = False
    reads_answers: ClassVar[bool] = False

    # -- estimator protocol ---------------------------------------------------
    def fit(self, scores: np.ndarray, first_relevant_rank: np.ndarray) -> "Selector":
        self._check()
        check_scores(scores)
        check_ranks(first_relevant_rank, len(scores))
        return self

    def predict(self, scores: np.ndarray, first_relevant_rank: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def needs_fit(self) -> bool:
        """Whether ``fit`` has work to do before ``predict`` (a learned selector given its fitted parameters has none)."""
        return self.learned

    def _check(self):
        """Validate constructor parameters (UserError ``selector <spec>: ...``); subclasses extend."""
        return None

    @property
    def max_depth(self) -> int | None:
        """The most passages this selector may select per query; None: any number up to the retrieval depth."""
        return None

    # -- parameters and spec --------------------------------------------------
    @classmethod
    def spec_usage(cls) -> str:
        """``usage``, or one derived from the constructor: ``name[:a[,b]]`` (parameters with defaults optional)."""
        if cls.usage:
            return cls.usage
        params = list(parameters(cls).values())
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        optional = [p.name for p in params if p.default is not inspect.Parameter.empty]
        text = cls.method + (":" + ",".join(required) if required else "")
        tail = ""
        for i, name in enumerate(optional):
            sep = ":" if (not required and i == 0) else ","
            tail += "[" + sep + name
        return text + tail + "]" * len(optional)

    @classmethod
    def spec_arity(cls) -> tuple[int, int]:
        """(fewest, most) positional arguments a spec takes, from ``spec_usage()``."""
        counts = [_form_arity(form) for form in usage_forms(cls.spec_usage())]
        return min(counts), max(counts)

    @property
    def spec(self) -> str:
        """The ``parse_selector`` string that builds this selector (unfitted).

        ``method``, then the positional parameters of the longest usage form
        (always written: ``threshold:0.8,25``), then any other parameter that
        differs from its default as ``key=value``.
        """
        params = parameters(type(self))
        _, most = self.spec_arity()
        values = self.get_params()
        names = list(params)
        args = [_spec_value(values.get(name), params[name]) for name in names[:most]]
        for name in names[most:]:
            default = params[name].default
            value = values.get(name)
            if default is inspect.Parameter.empty or not _same(value, default):
                args.append(f"{name}={_spec_value(value, params[name])}")
        return self.method + (":" + ",".join(args) if args else "")

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters, read back from the attributes of the same names (scikit-learn style)."""
        return {name: getattr(self, name) for name in parameters(type(self))}

    def fitted_state(self) -> dict[str, Any]:
        """JSON-able fitted parameters (empty for unlearned selectors)."""
        return {}

    def set_fitted_state(self, state: dict[str, Any]) -> None:
        if state:
            raise UserError(f"selector {self.spec}: unexpected fitted state {sorted(state)}")

    # -- persistence ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "spec": self.spec, "params": self.get_params(), "fitted": self.fitted_state()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Selector":
        """Inverse of ``to_dict`` for this class (``selection.selector_from_dict`` looks the class up by name)."""
        if cls is Selector or not cls.method:
            raise UserError("Selector.from_dict: call it on a selector class, or use selection.selector_from_dict")
        method = d.get("method") if isinstance(d, dict) else d
        if method != cls.method:
            raise UserError(f"selector dict has method {method!r}, expected {cls.method!r}")
        params = d.get("params") or {}
        try:
            selector = cls(**params)
        except TypeError as e:
            raise UserError(f"selector dict for {cls.method!r}: bad params {params} ({e})") from None
        selector._check()
        selector.set_fitted_state(d.get("fitted") or {})
        return selector

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def check_integer(selector: "Selector", value, what: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (UserError ``selector <spec>: <what> must be an integer >= m`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise UserError(f"selector {selector.spec}: {what} must be an integer >= {minimum}")
    return int(value)


def check_number(selector: "Selector", value, what: str, low: float, high: float, *, high_open: bool = False,
                 low_open: bool = False) -> float:
    """``value`` as a float in the range (UserError naming the selector, the parameter and the range otherwise)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) and np.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        bounds = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UserError(f"selector {selector.spec}: {what} must be a number in {bounds}")
    return float(value)


def usage_forms(usage: str) -> list[str]:
    """The spec forms a usage string allows: ``threshold:θ[,τ]`` -> ``["threshold:θ", "threshold:θ,τ"]``."""
    start = usage.find("[")
    if start < 0:
        return [usage]
    depth = 0
    for end in range(start, len(usage)):
        depth += {"[": 1, "]": -1}.get(usage[end], 0)
        if depth == 0:
            break
    head, inner, tail = usage[:start], usage[start + 1:end], usage[end + 1:]
    return usage_forms(head + tail) + usage_forms(head + inner + tail)


def _form_arity(form: str) -> int:
    _, colon, rest = form.partition(":")
    return len(rest.split(",")) if colon and rest else 0


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, str) != isinstance(default, str) or isinstance(value, bool) != isinstance(default, bool):
        return False
    try:
        return bool(value == default)
    except Exception:  # e.g. an array: never "the default"
        return False


def _spec_value(value: Any, param: inspect.Parameter) -> str:
    """A parameter as spec text that reads back as the same value (``0.8``, ``25``, ``sum``, ``true``).

    A value of the wrong type (``tau=True``, only ever seen in an error
    message) is written as Python writes it.
    """
    annotation = param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", "")
    if isinstance(value, (bool, np.bool_)):
        return ("true" if value else "false") if "bool" in annotation else str(bool(value))
    if value is None:
        return "none" if "None" in annotation or param.default is None else "None"
    floaty = annotation == "float" or (isinstance(param.default, float) and not isinstance(param.default, bool))
    if isinstance(value, (int, np.integer)) and not floaty:
        return str(int(value))
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(float(value))
    return str(value)


def check_scores(scores) -> np.ndarray:
    """``scores`` as a float64 [Q, K] array with K >= 1 (UserError otherwise)."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise UserError(f"retrieval scores must be a [queries, K>=1] array, got shape {arr.shape}")
    return arr


def check_ranks(first_relevant_rank, n_queries: int) -> np.ndarray:
    """1-based ranks of the first relevant result as int64 [Q] (UserError otherwise)."""
    ranks = np.asarray(first_relevant_rank)
    if ranks.shape != (n_queries,):
        raise UserError(f"first_relevant_rank must have shape ({n_queries},), got {ranks.shape}")
    if ranks.size and (not np.issubdtype(ranks.dtype, np.number) or np.any(ranks != np.round(ranks))):
        raise UserError("first_relevant_rank must hold integer ranks (1-based; K when none is relevant)")
    ranks = ranks.astype(np.int64)
    if ranks.size and ranks.min() < 1:
        raise UserError(
            f"first_relevant_rank {int(ranks.min())}: ranks are 1-based (use K when no result is relevant)"
        )
    return ranks


def valid_counts(scores: np.ndarray) -> np.ndarray:
    """Per row, how many leading scores are finite (real results), at least 1."""
    finite = np.isfinite(scores)
    # results are a prefix of the row: count until the first non-finite entry
    leading = np.where(finite.all(axis=1), scores.shape[1], np.argmin(finite, axis=1))
    return np.maximum(leading, 1).astype(np.int64)


NORMALIZATIONS = ("softmax", "sum")


def normalize_scores(scores: np.ndarray, tau: int, normalization: str = "softmax") -> np.ndarray:
    """Confidences of the top-``tau`` results: float64 [Q, tau], each row summing to 1.

    ``softmax``: ``exp(s_i - max s) / sum_j exp(s_j - max s)`` over the row's
    real (finite) results among the first ``tau``; ``sum``: ``s_i / sum_j s_j``
    (the normalization of Kratzwald & Feuerriegel's public notebook, for
    non-negative scores such as TF-IDF or BM25).  Columns beyond K or beyond a
    row's real results are 0, the zero padding of the paper's notebook.
    """
    if normalization not in NORMALIZATIONS:
        raise UserError(f"score normalization {normalization!r}: use one of {', '.join(NORMALIZATIONS)}")
    top = scores[:, :tau]
    q, k = top.shape
    n_valid = valid_counts(top)
    mask = np.arange(k)[None, :] < n_valid[:, None]
    mask &= np.isfinite(top)
    out = np.zeros((q, tau), dtype=np.float64)
    if q == 0:
        return out
    if normalization == "softmax":
        safe = np.where(mask, top, -np.inf)
        row_max = safe.max(axis=1, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        weights = np.where(mask, np.exp(np.where(mask, top, 0.0) - row_max), 0.0)
    else:
        if np.any(mask & (top < 0)):
            raise UserError("score normalization 'sum' needs non-negative retrieval scores; use 'softmax'")
        weights = np.where(mask, top, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    # a row of all-zero scores (sum normalization): spread evenly over its real results
    even = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    out[:, :k] = np.where(total > 0, weights / np.where(total > 0, total, 1.0), even)
    return out
