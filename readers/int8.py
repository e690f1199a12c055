"""The int8 reader: a QA checkpoint whose matrix products run in 8-bit integers on the CPU, built once and cached.

What.  Every weight matrix of the checkpoint (attention and feed-forward
projections, the span head, the embedding tables) is stored in int8 with one
symmetric scale per output channel (NNCF weight compression), and at run time
OpenVINO quantizes each activation row to int8 on the fly, with one scale per
group of ``activation_group_size`` consecutive values (dynamic per-group
quantization), so the products are int8 x int8 with int32 sums (AVX2
``vpmaddubsw``/VNNI/AMX) and are rescaled to float.  The softmax, the layer
norms and the two attention products between activations stay in float32.
Groups, rather than one scale per row or per tensor, are what keep the answers:
a few hidden dimensions of a BERT-family model carry values tens of times
larger than the rest (the outliers SmoothQuant, Xiao et al., 2023, ICML, moves
into the weights), and a per-tensor scale spends most of int8's range on them.
Weight compression with dynamic activation quantization is the scheme of
LLM.int8-style inference (Dettmers et al., 2022, NeurIPS, "LLM.int8(): 8-bit
Matrix Multiplication for Transformers at Scale") with per-group rather than
mixed-precision outlier handling.

Why.  Reading is where a run's time goes, and every CPU we meet multiplies int8
natively, while bf16 is native only on some.  Static post-training quantization
of every layer (activation ranges calibrated once) or torch's dynamic
per-tensor quantization change too many answers on a small reader;
``docs/readers.md`` has the measured frontier of the recipes tried.

Cost.  Building converts the model and compresses its weights (seconds, no
data); the build then reads ``validation_questions`` held-out SQuAD *train*
questions with the float32 and the int8 model and records how often their
answers agree and the EM/F1 of each (in the cache entry's ``info.json``, and
from there in every run's manifest).  The entry is keyed by the checkpoint's
identity and reader settings, the recipe, the validation sample and the
OpenVINO / NNCF versions; its weights file carries a CRC-32 checked on every
load (a damaged entry is rebuilt with one warning line).
``bench/reader_int8.py`` measures speed and agreement against float32, bf16,
other recipes and Optimum's ONNX Runtime int8 pipeline.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from data.errors import UserError
from data.io import sha256_text, warn
from hardware.openvino import (  # noqa: F401 (validation_source: part of this module's interface)
    DamagedEntry,
    cached_entry,
    EXECUTION,
    compile_for_cpu,
    convert,
    read_entry,
    save_entry,
    validation_sample,
    validation_source,
)
from readers.openvino_backend import OpenVINOQAModel as Int8Model, QAOutput  # noqa: F401 (QAOutput: as before)

RECIPE_FORMAT = "int8-openvino-wc-dq-v2"


@dataclass(frozen=True)
class Int8Recipe:
    """How the int8 reader is built and run (every field is part of the cache key).

    activation_group_size: consecutive activation values sharing one int8 scale at run time (OpenVINO's
        ``DYNAMIC_QUANTIZATION_GROUP_SIZE``; 0 turns dynamic quantization off: int8 weights, float products).
    weights: ``"int8_sym"`` (one symmetric scale per output channel) or ``"int8_asym"`` (scale and zero point).
    float_ffn_output: keep every layer's feed-forward output projection in float32 (its input, the GELU output,
        has the widest outliers): of all groups of layers it is the one whose int8 error is largest, on SQuAD
        train (``bench/reader_int8.py --sensitivity``) and on dev alike.
    float_layers: whole encoder layers (indices from 0) kept in float32.
        Both are found by module path (``...layer.<i>.output.dense``, DistilBERT's ``...layer.<i>.ffn.lin2``), as
        named in BERT, RoBERTa, DistilBERT and MiniLM checkpoints.
    validation_questions: held-out SQuAD train questions on which the int8 answers are compared with float32's.
    min_identical: percent of those answers expected to equal float32's; below it the build says so in a warning.
    seed: which train questions are drawn.
    """

    activation_group_size: int = 64
    weights: str = "int8_sym"
    float_ffn_output: bool = True
    float_layers: tuple[int, ...] = ()
    validation_questions: int = 300
    min_identical: float = 97.0
    seed: int = 13

    def check(self) -> "Int8Recipe":
        if self.weights not in ("int8_sym", "int8_asym"):
            raise UserError(f"int8 recipe weights={self.weights!r}: expected int8_sym or int8_asym")
        if isinstance(self.activation_group_size, bool) or not isinstance(self.activation_group_size, int) \
                or self.activation_group_size < 0:
            raise UserError(f"int8 recipe activation_group_size={self.activation_group_size!r}: expected an integer >= 0")
        layers = self.float_layers
        if not isinstance(layers, (tuple, list)) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                                        for i in layers):
            raise UserError(f"int8 recipe float_layers={layers!r}: expected a tuple of layer indices >= 0")
        if isinstance(self.validation_questions, bool) or not isinstance(self.validation_questions, int) \
                or self.validation_questions < 0:
            raise UserError(f"int8 recipe validation_questions={self.validation_questions!r}: expected an integer >= 0")
        return self


def entry_key(reader_identity: str, recipe: Int8Recipe, sample_digest: str) -> str:
    import nncf
    import openvino

    return sha256_text(RECIPE_FORMAT, EXECUTION, reader_identity, json.dumps(asdict(recipe), sort_keys=True), sample_digest,
                       openvino.__version__, nncf.__version__)[:32]


def load_or_build(
    key: str,
    torch_model,
    example_inputs: dict,
    read_answers: Callable[[object, list[tuple[str, str]]], list[str]],
    validation_file: Path | None,
    recipe: Int8Recipe,
    threads: int,
    label: str = "",
) -> Int8Model:
    """The cached int8 model ``key`` (built first when missing or damaged).

    ``example_inputs``: one batch of model inputs (numpy int64 arrays) to trace the model with;
    ``validation_file``: the SQuAD train file of the validation sample (:func:`validation_source`; None: no validation);
    ``read_answers(model, pairs)`` reads pairs with a model (the torch model or a compiled one) and returns the answer texts.
    """

    def load(entry: Path) -> Int8Model:
        info, model = read_entry(entry)
        if model is None:
            raise DamagedEntry("no model.xml")
        return Int8Model(compile_model(model, recipe, threads), info)

    return cached_entry("reader-int8", key, "int8 reader", lambda staging: _build(
        staging, torch_model, example_inputs, read_answers, validation_file, recipe, threads, label), load)


def compile_model(model, recipe: Int8Recipe, threads: int):
    """``model`` compiled for this CPU with the recipe's run-time settings (float parts in float32: OpenVINO would
    pick bf16 on CPUs that have it, and the recipe's agreement was measured in float32)."""
    return compile_for_cpu(model, "float32", threads, recipe.activation_group_size)


FFN_OUTPUT = r".*\.layer\.\d+\.(output\.dense|ffn\.lin2)\b.*"  # not attention.output.dense


def layer_pattern(index: int) -> str:
    """The names of an encoder layer's operations in a converted model (``__module.bert.encoder.layer.0....``)."""
    return rf".*\.layer\.{int(index)}\..*"


def compress(model, recipe: Int8Recipe, label: str = ""):
    """``model`` with its weight matrices in int8, one scale per output channel (NNCF weight compression), except
    those of ``recipe.float_layers``."""
    import logging
    import re

    import nncf

    logging.getLogger("nncf").setLevel(logging.WARNING)
    names = [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    wanted = {f"encoder layer {i}": layer_pattern(i) for i in recipe.float_layers}
    if recipe.float_ffn_output:
        wanted["feed-forward output projections"] = FFN_OUTPUT
    missing = [what for what, pattern in wanted.items() if not any(re.fullmatch(pattern, n) for n in names)]
    if missing:
        warn(f"int8 reader of '{label}': no {', no '.join(missing)} in the converted model (found by module "
             f"path, '.layer.<i>.'); kept in int8")
    patterns = [pattern for what, pattern in wanted.items() if what not in missing]
    scope = nncf.IgnoredScope(patterns=patterns, validate=False) if patterns else None
    mode = nncf.CompressWeightsMode.INT8_SYM if recipe.weights == "int8_sym" else nncf.CompressWeightsMode.INT8_ASYM
    with contextlib.redirect_stdout(sys.stderr):  # NNCF draws a progress bar on stdout, which is the run's output
        return nncf.compress_weights(model, mode=mode, ignored_scope=scope)


def _build(staging: Path, torch_model, example_inputs, read_answers, validation_file, recipe: Int8Recipe,
           threads: int, label: str) -> None:
    import nncf
    import openvino as ov

    quantized = compress(convert(torch_model, example_inputs, label, what="reader dtype int8",
                                 hint="; read it in float32 or bfloat16"), recipe, label)
    in_int8, in_float = _matmul_precisions(quantized)
    info = {
        "recipe": {"format": RECIPE_FORMAT, **asdict(recipe)},
        "backend": {"openvino": ov.__version__, "nncf": nncf.__version__},
        "matmuls_int8_weights": in_int8,
        "matmuls_float": in_float,
        "validation": _validate(Int8Model(compile_model(quantized, recipe, threads), {}), torch_model, read_answers,
                                *validation_sample(validation_file, recipe), recipe, label),
    }
    save_entry(staging, quantized, info)


def _validate(model: Int8Model, torch_model, read_answers, validation, golds, recipe: Int8Recipe, label: str) -> dict:
    """How the int8 answers agree with float32's on the held-out train questions (and EM/F1 of each)."""
    from eval.answer_metrics import exact_match, f1

    if not validation:
        if recipe.validation_questions:  # asked for, but there is no train file to draw it from
            print(f"note: int8 reader of '{label}': no SQuAD train file under $QA_DATA_DIR, so its answers were not "
                  f"compared with float32's", file=sys.stderr)
        return {"questions": 0}
    reference = read_answers(torch_model, validation)
    answers = read_answers(model, validation)
    identical = 100.0 * float(np.mean([a == b for a, b in zip(answers, reference)]))

    def mean(metric, texts):
        return round(100.0 * float(np.mean([metric(t, gold) for t, gold in zip(texts, golds)])), 2)

    facts = {"questions": len(validation), "split": "squad train", "identical_percent": round(identical, 2),
             "em_float32": mean(exact_match, reference), "em_int8": mean(exact_match, answers),
             "f1_float32": mean(f1, reference), "f1_int8": mean(f1, answers)}
    if identical < recipe.min_identical:
        warn(f"int8 reader of '{label}': {identical:.1f}% of {len(validation)} held-out SQuAD train answers equal "
             f"float32's (the recipe expects >= {recipe.min_identical:g}%); EM {facts['em_int8']} vs "
             f"{facts['em_float32']} in float32")
    return facts


def _matmul_precisions(model) -> tuple[int, list[str]]:
    """(how many MatMuls take int8 weights, names of those that take none): a MatMul has int8 weights when a
    Constant of type i8/u8 feeds it through the decompression chain (Convert, Subtract, Multiply, Reshape)."""
    in_int8, in_float = 0, []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        if any(_fed_by_int8_constant(op.input_value(i).get_node()) for i in range(op.get_input_size())):
            in_int8 += 1
        else:
            in_float.append(op.get_friendly_name())
    return in_int8, in_float


def _fed_by_int8_constant(node, depth: int = 5) -> bool:
    if node.get_type_name() == "Constant":
        return node.get_output_element_type(0).get_type_name() in ("i8", "u8")
    if depth == 0 or node.get_type_name() not in ("Convert", "Subtract", "Multiply", "Reshape", "Transpose"):
        return False
    return any(_fed_by_int8_constant(node.input_value(i).get_node(), depth - 1) for i in range(node.get_input_size()))
