"""BERT-F1 (BERTScore F1; Zhang et al. 2020, "BERTScore: Evaluating Text Generation with BERT").

``bert_f1`` wraps the ``bert-score`` package: greedy cosine matching of the
contextual token embeddings of one layer, no idf weighting, no baseline
rescaling, maximum over the references of a question.  It returns the scores
and an ``info`` dict (model, layer, package versions, bert-score's own hash of
the setting) that is written next to the numbers, so a metrics file always says
what produced its BERT-F1.

Model: by default bert-score's English default (``roberta-large``, layer 17);
any model name or local directory works with an explicit layer
(``num_layers``: the number of Transformer layers whose output is used, 1..N).

Compatibility with transformers 5: bert-score 0.3.13 encodes an empty
sentence through ``tokenizer.build_inputs_with_special_tokens``, which
transformers 5 tokenizers no longer have.  Rather than patching bert-score,
empty strings never reach it: an empty prediction scores 0.0 (what bert-score
itself assigns to an empty candidate), empty references are dropped, and a
question with no non-empty reference scores NaN.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError

DEFAULT_LANGUAGE = "en"
OFFLINE_HINT = "pass --bertscore-model PATH --bertscore-layers L (a local model directory and the layer to use)"


def default_model() -> tuple[str, int]:
    """bert-score's default English model and its tuned layer (``roberta-large``, 17)."""
    from bert_score.utils import lang2model, model2layers

    name = lang2model[DEFAULT_LANGUAGE]
    return name, model2layers[name]


def _looks_like_path(model: str) -> bool:
    """An absolute or ./ ~/ path (a hub name such as ``org/model`` is not)."""
    return os.path.isabs(model) or model.startswith((".", "~"))


def _resolve(model: str | os.PathLike | None, num_layers: int | None) -> tuple[str, int, bool]:
    """(model to load, layer, is_default) after checking what can be checked cheaply."""
    from bert_score.utils import model2layers

    if model is None:
        name, layers = default_model()
        return name, (layers if num_layers is None else int(num_layers)), True
    model = str(model)
    local = Path(model).expanduser()
    if _looks_like_path(model) and not local.is_dir():
        raise UserError(f"{model}: BERTScore model directory not found")
    if local.is_dir():
        model = str(local.resolve())
    if num_layers is None:
        known = model2layers.get(model) or model2layers.get(Path(model).name)
        if known is None:
            raise UserError(f"BERTScore model {model}: bert-score has no default layer for it; pass --bertscore-layers L")
        num_layers = known
    return model, int(num_layers), False


@lru_cache(maxsize=2)
def _scorer(model: str, num_layers: int, device: str | None, is_default: bool):
    from bert_score import BERTScorer
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as e:
        if is_default:
            raise UserError(f"BERTScore default model {model} is not available (offline?): {OFFLINE_HINT}") from None
        raise UserError(f"{model}: cannot load BERTScore model ({str(e).splitlines()[0]})") from None
    depth = getattr(config, "num_hidden_layers", None)
    if depth is not None and not 1 <= num_layers <= depth:
        raise UserError(f"--bertscore-layers {num_layers}: {model} has layers 1..{depth}")
    try:
        scorer = BERTScorer(model_type=model, num_layers=num_layers, device=device)
    except (OSError, ValueError) as e:
        raise UserError(f"{model}: cannot load BERTScore model ({str(e).splitlines()[0]})") from None
    # Truncate inputs at the model's real position limit (some tokenizer configs say "unlimited").
    limit = getattr(config, "max_position_embeddings", None)
    if limit and scorer._tokenizer.model_max_length > limit:
        scorer._tokenizer.model_max_length = limit
    return scorer


def bert_f1(
    predictions: Sequence[str],
    references_list: Sequence[Sequence[str]],
    model: str | os.PathLike | None = None,
    num_layers: int | None = None,
    batch_size: int = 64,
    device: str | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, dict]:
    """BERTScore F1 of each prediction against its references (max over references).

    Returns ``(scores float64 [Q], info)``; ``info`` names the model (hub name
    or resolved local path) and layer.  Empty predictions score 0.0, questions
    without a non-empty reference NaN.  Offline, the default model cannot be
    fetched: a ``UserError`` then says to pass a local model and layer.
    """
    from importlib.metadata import version

    import transformers

    if len(predictions) != len(references_list):
        raise UserError(f"{len(predictions)} predictions but {len(references_list)} reference lists")
    if batch_size < 1:
        raise UserError(f"BERTScore batch size {batch_size}: must be >= 1")
    name, layers, is_default = _resolve(model, num_layers)
    scorer = _scorer(name, layers, device, is_default)
    info = {
        "metric": "bert_f1",
        "model": name,
        "num_layers": layers,
        "idf": False,
        "rescale_with_baseline": False,
        "max_over_references": True,
        "bert_score_version": version("bert-score"),
        "transformers_version": transformers.__version__,
        "hash": scorer.hash,
    }
    scores = np.full(len(predictions), np.nan, dtype=np.float64)
    rows, cands, refs = [], [], []
    for q, (pred, golds) in enumerate(zip(predictions, references_list)):
        kept = [g for g in golds if isinstance(g, str) and g.strip()]
        if not kept:
            continue
        if not pred.strip():
            scores[q] = 0.0
            continue
        rows.append(q)
        cands.append(pred)
        refs.append(kept)
    if rows:
        _, _, f = scorer.score(cands, refs, verbose=progress, batch_size=batch_size)
        scores[np.asarray(rows)] = f.detach().cpu().numpy().astype(np.float64)
    return scores, info
