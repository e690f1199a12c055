"""The extractive reader on OpenVINO at float precision, and the per-CPU choice between it and torch.

What.  ``backend="openvino"`` converts the QA checkpoint once (``openvino.convert_model`` of the torch model, no
quantization) and runs it in float32 or bf16, the precision the reader resolved (``INFERENCE_PRECISION_HINT``;
bf16 only where the CPU has native bf16).  ``backend="auto"`` (the pipeline's default) reads with OpenVINO when,
on this CPU and at this precision, it was measured faster than torch and its answers agreed with torch float32's
on the check sample; otherwise with torch.

Why.  OpenVINO fuses what eager torch runs as separate kernels (attention, GELU, layer norms) and reads the same
passages faster at the same precision: ``bench/reader_int8.py`` measured 1.34x float32 and 1.31x bf16 on an AMD
EPYC and 1.14x bf16 on an AMX Xeon, with 100% and 98.9% of answers equal to torch float32's.  On CPUs without
native bf16, float32 is the only exact precision and OpenVINO float32 the only speed-up that changes no answer.

How the choice is made.  Building reads ``validation_questions`` held-out SQuAD *train* questions (never an
evaluated split; the int8 reader's sample, :func:`readers.int8.validation_sample`) with torch float32 (the
reference), with torch at the reader's precision and with the converted model, timing the last two.  The
converted model is chosen when its answers agree with the reference on at least :data:`MIN_IDENTICAL` percent
(99 in float32, 98.5 in bf16) and it read the sample at least :data:`MIN_SPEEDUP` times as fast as torch.  The
entry (model, agreement, timings, choice) is cached, keyed by the checkpoint and reader settings, precision, the
sample, the OpenVINO version and the CPU (model name and instruction-set flags: a choice measured on one CPU is
never served on another); its weights carry a CRC-32 checked on load.  A checkpoint OpenVINO cannot convert, or a
machine with no SQuAD train file to check against, records ``torch`` with the reason (one ``note:`` line when
built).  Reads are cached apart per backend (:meth:`readers.extractive.ExtractiveReader.identity`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.errors import UserError
from data.io import sha256_text
from hardware.openvino import (  # noqa: F401 (validation_source: part of this module's interface)
    EXECUTION,
    BatchRunner,
    cached_entry,
    compile_for_cpu,
    convert,
    cpu_identity,
    read_entry,
    save_entry,
    validation_sample,
    validation_source,
)

BACKENDS = ("auto", "torch", "openvino")
FORMAT = "openvino-float-v1"
MIN_IDENTICAL = {"float32": 99.0, "bfloat16": 98.5}  # percent of answers equal to torch float32's
MIN_SPEEDUP = 1.05  # OpenVINO must read the sample this much faster than torch to be chosen
WARM_UP = 32  # pairs read by each backend before the timed reads


@dataclass
class QAOutput:
    """What the reader needs of a forward pass (the shape of a transformers QA model's output)."""

    start_logits: object
    end_logits: object


class OpenVINOQAModel:
    """A compiled OpenVINO QA model.  ``run(batches)`` reads batches on all its streams at once (the reader's path,
    :class:`hardware.openvino.BatchRunner`); ``model(input_ids=..., attention_mask=...)`` reads one batch like a
    transformers QA model."""

    def __init__(self, compiled, info: dict):
        self.compiled = compiled
        self.info = info
        self.runner = BatchRunner(compiled)

    def run(self, batches):
        """``(tag, inputs)`` pairs (numpy int64 inputs) in, ``(tag, start_logits, end_logits)`` (numpy) out as
        each batch finishes."""
        for tag, (start, end) in self.runner.run(batches):
            yield tag, start, end

    def __call__(self, **inputs):
        import torch

        feed = {name: inputs[name].numpy() if hasattr(inputs[name], "numpy") else inputs[name] for name in inputs}
        ((_, start, end),) = list(self.run([(None, feed)]))
        return QAOutput(torch.from_numpy(start), torch.from_numpy(end))


@dataclass(frozen=True)
class FloatRecipe:
    """How the OpenVINO float reader is checked (every field is part of the cache key).

    precision: ``float32`` or ``bfloat16`` (the reader's resolved precision).
    validation_questions: held-out SQuAD train questions read to compare answers and time both backends.
    seed: which train questions are drawn.
    """

    precision: str = "float32"
    validation_questions: int = 300
    seed: int = 13
    activation_group_size: int = 0  # no dynamic int8 quantization of activations: products in float

    @property
    def min_identical(self) -> float:
        return MIN_IDENTICAL[self.precision]


def entry_key(reader_identity: str, recipe: FloatRecipe, sample_digest: str) -> str:
    import openvino

    return sha256_text(FORMAT, EXECUTION, reader_identity, json.dumps(asdict(recipe), sort_keys=True), sample_digest,
                       openvino.__version__, cpu_identity())[:32]


def load_or_build_float(key: str, torch_model, example_inputs: dict, read: Callable[[object, str, list], list[str]],
                        validation_file: Path | None, recipe: FloatRecipe, threads: int, label: str = ""):
    """``(model or None, info)``: the cached float OpenVINO reader ``key`` and its measured choice
    (``info["chosen"]``: ``openvino`` or ``torch``), built first when missing.

    ``read(model, precision, pairs)`` reads (question, paragraph) pairs with a model (the torch model at a precision,
    or a compiled OpenVINO one) and returns the answer texts.
    """

    def build(staging: Path) -> None:
        import openvino as ov

        info = {"format": FORMAT, "recipe": asdict(recipe), "backend": {"openvino": ov.__version__},
                "cpu": cpu_identity()}
        try:
            model = convert(torch_model, example_inputs, label, what="reader backend openvino")
        except UserError as err:
            reason = str(err)
            print(f"note: {reason}; reading with torch", file=sys.stderr)
            save_entry(staging, None, {**info, "chosen": "torch", "reason": reason})
            return
        compiled = compile_for_cpu(model, recipe.precision, threads)
        pairs, _ = validation_sample(validation_file, recipe)
        check = measure(OpenVINOQAModel(compiled, {}), torch_model, read, pairs, recipe)
        info.update(check=check, chosen=check.pop("chosen"))
        if check.get("reason"):
            info["reason"] = check.pop("reason")
        save_entry(staging, model, info)

    def load(entry: Path):
        info, model = read_entry(entry)
        return None if model is None else OpenVINOQAModel(compile_for_cpu(model, recipe.precision, threads), info), info

    return cached_entry("reader-openvino", key, "OpenVINO reader", build, load)


def measure(compiled, torch_model, read, pairs: list, recipe: FloatRecipe) -> dict:
    """Agreement with torch float32 and the time of each backend on the check sample, and the choice they make."""
    if not pairs:
        return {"questions": 0, "chosen": "torch",
                "reason": "no SQuAD train file under $QA_DATA_DIR to check its answers against torch float32's"}
    reference = read(torch_model, "float32", pairs)
    warm = pairs[:WARM_UP]  # first calls pay for kernel selection and allocation, in either backend: not timed
    read(compiled, recipe.precision, warm)
    if recipe.precision != "float32":
        read(torch_model, recipe.precision, warm)
    t0 = time.perf_counter()
    torch_answers = read(torch_model, recipe.precision, pairs)
    torch_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    answers = read(compiled, recipe.precision, pairs)
    ov_seconds = time.perf_counter() - t0
    identical = 100.0 * sum(a == b for a, b in zip(answers, reference)) / len(pairs)
    torch_identical = 100.0 * sum(a == b for a, b in zip(torch_answers, reference)) / len(pairs)
    speedup = torch_seconds / max(ov_seconds, 1e-9)
    facts = {"questions": len(pairs), "split": "squad train", "identical_percent": round(identical, 2),
             "torch_identical_percent": round(torch_identical, 2), "torch_seconds": round(torch_seconds, 3),
             "openvino_seconds": round(ov_seconds, 3), "speedup": round(speedup, 3)}
    if identical < recipe.min_identical:
        facts.update(chosen="torch", reason=f"{identical:.1f}% of answers equal torch float32's (< {recipe.min_identical:g}%)")
    elif speedup < MIN_SPEEDUP:
        facts.update(chosen="torch", reason=f"{speedup:.2f}x torch's speed (< {MIN_SPEEDUP:g}x)")
    else:
        facts["chosen"] = "openvino"
    return facts
