"""Metric registries: answer metrics and retrieval metric families, open to third-party packages.

Both are :class:`data.plugins.Registry` tables: built-ins are registered here
by ``"module:attribute"`` (imported on first use, so this module imports none
of the metric code), plugins come from the entry-point groups
``qa_retrieval_eval.answer_metrics`` and ``qa_retrieval_eval.retrieval_metrics``.

Answer metrics (:data:`ANSWER_METRICS`, entries are :class:`AnswerMetric`)
---------------------------------------------------------------------------
Two contracts, declared by :attr:`AnswerMetric.batch`:

* **per answer** (``batch=False``; em, f1, rouge_l, meteor and any plain
  function a plugin registers)::

      metric(prediction: str, golds: Sequence[str], language: str = "en") -> float

  the score of one prediction against a non-empty list of gold answers: the
  maximum over the golds, in [0, 1].  It is called only for questions with at
  least one gold answer (the others score NaN).
* **batch** (``batch=True``; bert_f1): metrics that load a model or take
  options score a whole run at once::

      metric(predictions: list[str], golds: list[list[str]], *, language: str, **options) -> (values, info)

  ``values`` float64 [Q] (NaN where a question cannot be scored), ``info`` a
  JSON-able dict saying what produced them (model, layer, versions...), kept in
  ``AnswerScores.info[name]``.  ``options`` are the keyword parameters the
  entry lists in :attr:`AnswerMetric.options`.

A plugin's entry point names either a plain per-answer function (it is wrapped
with the defaults below: shown as percent, no options, not in sweeps) or an
:class:`AnswerMetric` (full control)::

    [project.entry-points."qa_retrieval_eval.answer_metrics"]
    char_f1 = "my_package.metric:char_f1"

:func:`eval.answer_metrics.answer_metrics` dispatches through this registry,
so a registered metric is available there (and to everything built on it) by
its name.

Retrieval metric families (:data:`RETRIEVAL_METRICS`, :class:`RetrievalFamily`)
-----------------------------------------------------------------------------
``reqa`` (MRR/R@k, always), ``beir`` (nDCG@10, MRR@10, R@100, R@1000 on graded
qrels) and ``dpr`` (DPR top-k accuracy of open-domain questions, plus ReQA
metrics against the known gold passages): each is
``compute(ranking, dataset, per_query=None) -> {metrics.json key: block}``
with ``applies(dataset) -> bool``; :func:`eval.retrieval_families.retrieval_metrics`
runs the families that apply, in registration order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from data.errors import UserError
from data.plugins import Registry

SWEEP_MODES = ("cell", "batch", None)


@dataclass(frozen=True)
class AnswerMetric:
    """One answer metric and what its callers need to know about it without calling it.

    * ``name``: the registry name, the key of its array in ``answer_metrics``'
      result, metrics.json and per_query.jsonl;
    * ``score``: the function (contract above, chosen by ``batch``);
    * ``display``: a label for tables and plots (``"EM"``, ``"BERT-F1"``);
    * ``percent``: printed as a percentage (metrics.json always keeps the fraction);
    * ``batch``: ``score`` takes whole lists and returns ``(values, info)``;
    * ``options``: the keyword options it accepts (empty: it takes none);
    * ``sweep``: how ``pipeline.sweep`` can score it for every (question, n)
      cell: ``"cell"`` (a cheap per-answer call per cell), ``"batch"`` (one
      batch call over all distinct cells), ``None`` (not offered by sweeps).
    """

    name: str
    score: Callable[..., Any]
    display: str = ""
    percent: bool = True
    batch: bool = False
    options: tuple[str, ...] = ()
    sweep: str | None = None
    description: str = ""

    def __post_init__(self):
        if not callable(self.score):
            raise UserError(f"answer metric {self.name!r}: {self.score!r} is not callable")
        if self.sweep not in SWEEP_MODES:
            raise ValueError(f"answer metric {self.name!r}: sweep must be one of {SWEEP_MODES}, got {self.sweep!r}")
        if not self.display:
            object.__setattr__(self, "display", self.name)
        object.__setattr__(self, "options", tuple(self.options))

    @property
    def takes_options(self) -> bool:
        return bool(self.options)

    @classmethod
    def from_function(cls, name: str, function: Callable[..., float]) -> "AnswerMetric":
        """A plain per-answer function as an entry: shown as percent, no options, scored per cell in sweeps."""
        doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
        return cls(name, function, sweep="cell", description=doc[0] if doc else "")

    def check_options(self, options: Mapping[str, Any] | None, label: str | None = None) -> dict[str, Any]:
        """``options`` checked against :attr:`options` (``-`` or ``_`` in keys) and typed from the signature.

        An unknown key is a one-line ``UserError`` naming the known ones,
        before any model is loaded.
        """
        if not options:
            return {}
        label = label or f"{self.name} option"
        if not self.options:
            raise UserError(f"answer metric {self.name!r} takes no options (got {', '.join(map(str, options))})")
        named = {str(k).replace("-", "_"): v for k, v in options.items()}
        unknown = [k for k in options if str(k).replace("-", "_") not in self.options]
        if unknown:
            raise UserError(f"unknown {label} {unknown[0]!r} (known: {', '.join(sorted(self.options))})")
        from data.plugins import typed_options

        try:
            return typed_options(self.score, named, self.name)
        except (TypeError, ValueError):  # a callable object without a readable signature: as given
            return named


class AnswerMetricRegistry(Registry[AnswerMetric]):
    """A :class:`Registry` whose entries are always :class:`AnswerMetric` (plain functions are wrapped)."""

    def find(self, name: str) -> AnswerMetric | None:
        item = super().find(name)
        if item is None or (isinstance(item, AnswerMetric) and item.name == name):
            return item
        if isinstance(item, AnswerMetric):
            entry = dataclasses.replace(item, name=name)
        elif callable(item):
            entry = AnswerMetric.from_function(name, item)
        else:
            raise UserError(f"answer metric {name!r}: {item!r} is neither a function nor an AnswerMetric")
        (self._items if name in self._items else self._loaded)[name] = entry  # a plugin stays a plugin
        return entry


ANSWER_METRICS: AnswerMetricRegistry = AnswerMetricRegistry("answer_metrics", what="answer metric")
ANSWER_METRICS.register("em", "eval.answer_metrics:EM")
ANSWER_METRICS.register("f1", "eval.answer_metrics:F1")
ANSWER_METRICS.register("rouge_l", "eval.answer_metrics:ROUGE_L")
ANSWER_METRICS.register("meteor", "eval.answer_metrics:METEOR")
ANSWER_METRICS.register("bert_f1", "eval.bertscore:BERT_F1")
ANSWER_METRICS.register("has_answer", "eval.answer_metrics:HAS_ANSWER")


def answer_metric(name: str) -> AnswerMetric:
    """The entry registered as ``name`` (a one-line ``UserError`` listing the known names otherwise)."""
    return ANSWER_METRICS.get(name)


def answer_metric_names(*, sweep: bool | None = None, percent: bool | None = None) -> list[str]:
    """Registered answer-metric names (built-ins first, in registration order, then plugins by name),
    optionally only those a sweep can score (``sweep=True``) or shown as percent (``percent=True``)."""
    builtin = ANSWER_METRICS.builtin_names()
    names = builtin + [n for n in ANSWER_METRICS.names() if n not in builtin]
    out = []
    for n in names:
        m = ANSWER_METRICS.get(n)
        if sweep is not None and (m.sweep is not None) != sweep:
            continue
        if percent is not None and m.percent != percent:
            continue
        out.append(n)
    return out


# ------------------------------------------------------------ retrieval families
@dataclass(frozen=True)
class RetrievalFamily:
    """A family of retrieval metrics computed together.

    * ``compute(ranking, dataset, per_query=None) -> dict``: the blocks it adds
      under ``metrics["retrieval"]``, keyed as there (``{"reqa": {...}}``;
      ``dpr`` gives ``{"dpr": {...}}`` plus ``"known_gold"`` when the questions
      name gold passages).  ``per_query``, when given, receives per-question
      arrays ``{name: float64 [G]}`` over the unique questions of
      :func:`eval.qrels.question_groups` (the ids of run.trec/qrels.tsv);
    * ``applies(dataset) -> bool``: whether the family scores this dataset;
    * ``keys``: the metrics.json keys it may write;
    * ``headline``: per-query name -> the path (below ``retrieval.``) of the
      mean it averages to, e.g. ``{"rr": "reqa.sentence.MRR"}``: what gets a
      bootstrap interval.
    """

    name: str
    compute: Callable[..., dict]
    applies: Callable[[Any], bool]
    keys: tuple[str, ...] = ()
    headline: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


RETRIEVAL_METRICS: Registry[RetrievalFamily] = Registry("retrieval_metrics", what="retrieval metric")
RETRIEVAL_METRICS.register("reqa", "eval.retrieval_families:REQA")
RETRIEVAL_METRICS.register("beir", "eval.retrieval_families:BEIR")
RETRIEVAL_METRICS.register("dpr", "eval.retrieval_families:DPR")
