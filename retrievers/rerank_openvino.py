"""A cross-encoder on OpenVINO, and the per-CPU choice between it and torch.

What.  The sequence-classification checkpoint's forward (tokens in, relevance logits out) is converted once to
OpenVINO and run at the re-ranker's precision (float32, or bf16 on a CPU with native bf16), on all the CPU's
streams at once (:class:`hardware.openvino.BatchRunner`).

How the choice is made (``backend="auto"``).  Building scores the held-out SQuAD *train* check sample
(:func:`hardware.openvino.validation_sample`, the reader's 300 questions) with each question paired with its own
paragraph and the next ``candidates - 1`` paragraphs of the sample, with torch float32, torch at the run's
precision and OpenVINO at the run's precision, timing the last two after a warm-up.  OpenVINO is kept when it ranks
the candidates of as many questions exactly as torch float32 does as :data:`MIN_SAME_RANKING` asks (99% in
float32, 98.5% in bf16: the reader's thresholds for identical answers) or as torch at the run's precision does,
whichever is less, and it scores at least :data:`MIN_SPEEDUP` times as fast as torch at the run's precision;
otherwise torch scores.  The converted model and
the measurements are cached under ``$QA_CACHE_DIR/rerank-openvino/``, keyed by the scorer's identity (model
content, max length, precision), the check sample, the OpenVINO version, how compiled models run and the CPU;
the scores an OpenVINO scorer writes are keyed apart from torch's (its identity says so).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.io import sha256_text
from hardware.openvino import (
    EXECUTION,
    BatchRunner,
    build_checked,
    cached_entry,
    compile_for_cpu,
    cpu_identity,
    read_entry,
    validation_sample,
    validation_source,
)

FORMAT = "rerank-openvino-v1"
BACKENDS = ("auto", "torch", "openvino")
MIN_SAME_RANKING = {"float32": 99.0, "bfloat16": 98.5}  # percent of check questions ranked as torch float32 ranks them
MIN_SPEEDUP = 1.05
WARM_UP = 32  # pairs scored by each side before the timed scoring


@dataclass(frozen=True)
class RerankCheck:
    """The check the backends are compared on (every field is part of the cache key)."""

    precision: str = "float32"
    validation_questions: int = 300
    seed: int = 13
    candidates: int = 5


class OpenVINOCrossEncoder:
    """A compiled cross-encoder: ``run(batches)`` takes ``(tag, inputs)`` (numpy int64) and yields ``(tag, logits
    [B, labels])`` (numpy float32) as each batch finishes."""

    def __init__(self, compiled, precision: str):
        self.compiled = compiled
        self.precision = precision
        self.runner = BatchRunner(compiled)

    def run(self, batches):
        for tag, (logits,) in self.runner.run(batches):
            yield tag, np.asarray(logits, dtype=np.float32)


def _traceable(model):
    """``model`` (a transformers sequence classifier) as a module of tensors in, logits out."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).logits

    return Logits(model).eval()


def entry_key(scorer_identity: str, check: RerankCheck, sample_digest: str) -> str:
    import openvino

    return sha256_text(FORMAT, EXECUTION, scorer_identity, str(sorted(asdict(check).items())), sample_digest,
                       openvino.__version__, cpu_identity())[:32]


def check_pairs(pairs: list[tuple[str, str]], candidates: int) -> tuple[list[str], list[str]]:
    """Each check question with its own paragraph and the next ``candidates - 1`` paragraphs of the sample."""
    questions, passages = [], []
    for i, (question, _) in enumerate(pairs):
        for c in range(min(candidates, len(pairs))):
            questions.append(question)
            passages.append(pairs[(i + c) % len(pairs)][1])
    return questions, passages


def load_or_build(scorer_identity: str, torch_model, example_inputs: dict,
                  score: Callable[[object, str, list[str], list[str]], np.ndarray], precision: str, threads: int,
                  label: str = "") -> tuple[OpenVINOCrossEncoder | None, dict]:
    """``(model or None, info)``: the cached OpenVINO cross-encoder (None when it could not be converted) and the
    choice measured on this CPU (``info["chosen"]``: ``openvino`` or ``torch``), built first when missing.

    ``score(model, precision, questions, passages)`` scores pairs with the torch model at a precision (model None)
    or with an :class:`OpenVINOCrossEncoder`.
    """
    check = RerankCheck(precision=precision)
    path, digest = validation_source(check)
    key = entry_key(scorer_identity, check, digest)

    def build(staging: Path) -> None:
        import openvino as ov

        info = {"format": FORMAT, "check_sample": asdict(check), "backend": {"openvino": ov.__version__},
                "cpu": cpu_identity()}
        print(f"note: converting re-ranker '{label}' to OpenVINO {precision} once and timing it against torch on the "
              f"SQuAD train check sample; cached for later runs", file=sys.stderr)
        build_checked(staging, info, _traceable(torch_model), example_inputs, label, "rerank backend openvino",
                      "re-ranking with torch",
                      lambda converted: measure(converted, score, validation_sample(path, check)[0], check, threads))

    def load(entry: Path):
        info, converted = read_entry(entry)
        if converted is None:
            return None, info
        return OpenVINOCrossEncoder(compile_for_cpu(converted, precision, threads), precision), info

    return cached_entry("rerank-openvino", key, "OpenVINO re-ranker", build, load)


def measure(converted, score, pairs: list[tuple[str, str]], check: RerankCheck, threads: int) -> dict:
    """Rankings of the check questions' candidates by torch float32, torch and OpenVINO at ``check.precision``; the
    time of the last two; the choice."""
    if not pairs:
        return {"chosen": "torch", "reason": "no SQuAD train file under $QA_DATA_DIR to check its rankings against torch's"}
    questions, passages = check_pairs(pairs, check.candidates)
    shape = (len(pairs), min(check.candidates, len(pairs)))
    reference = score(None, "float32", questions, passages).reshape(shape)
    model = OpenVINOCrossEncoder(compile_for_cpu(converted, check.precision, threads), check.precision)
    sides = {}
    for side, handle in (("torch", None), ("openvino", model)):
        score(handle, check.precision, questions[:WARM_UP], passages[:WARM_UP])
        t0 = time.perf_counter()
        scores = score(handle, check.precision, questions, passages).reshape(shape)
        seconds = time.perf_counter() - t0
        same = np.all(np.argsort(-scores, axis=1, kind="stable") == np.argsort(-reference, axis=1, kind="stable"), axis=1)
        sides[side] = {"seconds": round(seconds, 3), "same_ranking_percent": round(100.0 * float(same.mean()), 2),
                       "max_abs_score_diff": round(float(np.abs(scores - reference).max()), 5)}
    speedup = sides["torch"]["seconds"] / max(sides["openvino"]["seconds"], 1e-9)
    facts = {"check": {"questions": len(pairs), "candidates": shape[1], "pairs": len(questions), "split": "squad train",
                       "precision": check.precision, "speedup": round(speedup, 3), **{k: v for k, v in sides.items()}}}
    # as close to float32 as the threshold asks, or as torch at the run's precision is (bf16 moves near-tied
    # candidates: a weakly trained cross-encoder ranked half the check questions' candidates differently in torch bf16)
    need = min(MIN_SAME_RANKING[check.precision], sides["torch"]["same_ranking_percent"])
    agree = sides["openvino"]["same_ranking_percent"]
    if agree >= need and speedup >= MIN_SPEEDUP:
        facts["chosen"] = "openvino"
    else:
        facts["chosen"] = "torch"
        facts["reason"] = (f"OpenVINO ranked {agree:.2f}% of the check questions as torch float32 at {speedup:.2f}x torch's "
                           f"speed (needs >= {need:.2f}%, torch {check.precision}'s agreement or "
                           f"{MIN_SAME_RANKING[check.precision]}%, and >= {MIN_SPEEDUP}x)")
    return facts
