"""An answer metric added by entry point: character-level F1.

Registered in ``qa_plugin_example-0.1.dist-info/entry_points.txt``::

    [qa_retrieval_eval.answer_metrics]
    char_f1 = qa_plugin_example.metric:char_f1

A plain function with the per-answer contract of ``eval.registry``
(``(prediction, golds, language) -> float`` in [0, 1], maximum over the gold
answers) is all an answer metric needs: ``answer_metrics(..., metrics=("em",
"char_f1"))`` and ``pipeline.run --metrics em,char_f1`` find it by name.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from eval.answer_metrics import normalize_answer


def _chars(text: str, language: str) -> Counter:
    """Characters of the SQuAD-normalized answer, white space left out."""
    return Counter(normalize_answer(text, language).replace(" ", ""))


def _f1(pred: Counter, gold: Counter) -> float:
    same = sum((pred & gold).values())
    if same == 0:  # as SQuAD v1.1 token F1: no overlap (or both empty) scores 0
        return 0.0
    precision = same / sum(pred.values())
    recall = same / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def char_f1(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """Character-level F1 of the normalized prediction against each gold answer, maximum over golds."""
    if isinstance(golds, str) or not golds:
        raise ValueError("char_f1 needs a non-empty list of gold answers")
    pred = _chars(prediction, language)
    return max(_f1(pred, _chars(g, language)) for g in golds)
