"""A sentence-transformers encoder on OpenVINO, and the per-CPU choice between it and torch.

What.  The whole ``SentenceTransformer`` forward (transformer, pooling and the model's own normalization, if any)
is converted once to OpenVINO and run in float32 or, on a CPU with native bf16, in bf16.  On the CPU torch
encodes in float32 (no autocast), so these are the candidates: OpenVINO float32 (the same arithmetic, fused) and
OpenVINO bf16 (faster where the CPU multiplies bf16, vectors a little apart).

How the choice is made (``backend="auto"``).  Building encodes the questions and paragraphs of the held-out SQuAD
*train* check sample (:func:`hardware.openvino.validation_sample`, the reader's) with torch and with each
candidate, timing each after a warm-up, and keeps the fastest candidate whose every vector has cosine at least
:data:`MIN_COSINE` with torch's and that encodes at least :data:`MIN_SPEEDUP` times as fast as torch; otherwise
torch.  The converted model and the measurements are cached under ``$QA_CACHE_DIR/encoder-openvino/``, keyed by
the encoder's identity, the sample, the OpenVINO version and the CPU; the embeddings an OpenVINO encoder writes
are keyed apart from torch's (its identity says backend and precision).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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

FORMAT = "encoder-openvino-v1"
MIN_COSINE = 0.999  # every check vector of a chosen OpenVINO encoder against torch float32's
MIN_SPEEDUP = 1.05
WARM_UP = 32  # texts encoded by each side before the timed encodings


@dataclass(frozen=True)
class EncoderCheck:
    """The check sample the backends are compared on (part of the cache key)."""

    validation_questions: int = 300
    seed: int = 13


class OpenVINOEmbedder:
    """A compiled OpenVINO sentence encoder.  ``embedder.run(batches)`` encodes ``(tag, features)`` batches on all
    its streams at once and yields ``(tag, embeddings)`` (float32 ``[B, D]``, numpy) as each finishes
    (:class:`hardware.openvino.BatchRunner`); ``embedder(features)`` encodes one batch."""

    def __init__(self, compiled, precision: str):
        self.compiled = compiled
        self.precision = precision
        self.runner = BatchRunner(compiled)

    def run(self, batches):
        for tag, (embeddings,) in self.runner.run(
                (tag, {name: np.asarray(value, dtype=np.int64) for name, value in features.items()})
                for tag, features in batches):
            yield tag, np.asarray(embeddings, dtype=np.float32)

    def __call__(self, features: dict) -> np.ndarray:
        ((_, embeddings),) = list(self.run([(None, features)]))
        return embeddings


def _traceable(model):
    """``model`` (a SentenceTransformer) as a module of tensors in, sentence embeddings out."""
    import torch

    class Embed(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            features = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                features["token_type_ids"] = token_type_ids
            return self.st(features)["sentence_embedding"]

    return Embed(model).eval()


def example_features(model) -> dict:
    tok = model.tokenizer
    enc = tok(["Which encoder reads?", "The converted encoder reads this passage."], padding=True, return_tensors="np")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]
    return {n: np.asarray(enc[n], dtype=np.int64) for n in names}


def entry_key(encoder_identity: str, check: EncoderCheck, sample_digest: str) -> str:
    import openvino

    return sha256_text(FORMAT, EXECUTION, encoder_identity, str(sorted(asdict(check).items())), sample_digest, openvino.__version__,
                       cpu_identity())[:32]


def load_or_build(encoder_identity: str, model, encode, threads: int, label: str = "") -> tuple[OpenVINOEmbedder | None, dict]:
    """``(embedder or None, info)``: the cached OpenVINO encoder of ``model`` (at the chosen precision; float32 when
    torch was chosen; None when it could not be converted) and the choice measured on this CPU (``info["chosen"]``:
    ``openvino-float32``, ``openvino-bfloat16`` or ``torch``), built first when missing.

    ``encode(texts, embedder_or_None)`` encodes texts with the torch model (None) or an OpenVINO embedder and
    returns normalized float32 vectors.
    """
    import hardware

    check_sample = EncoderCheck()
    path, digest = validation_source(check_sample)
    key = entry_key(encoder_identity, check_sample, digest)
    precisions = ["float32"] + (["bfloat16"] if hardware.cpu_has_native_bf16() else [])

    def build(staging: Path) -> None:
        import openvino as ov

        info = {"format": FORMAT, "check_sample": asdict(check_sample), "backend": {"openvino": ov.__version__},
                "cpu": cpu_identity()}
        print(f"note: converting encoder '{label}' to OpenVINO once and timing it against torch on the SQuAD train "
              f"check sample; cached for later runs", file=sys.stderr)

        def check(converted) -> dict:
            pairs, _ = validation_sample(path, check_sample)
            return measure(converted, encode, [t for pair in pairs for t in pair], precisions, threads)

        build_checked(staging, info, _traceable(model), example_features(model), label, "encoder backend openvino",
                      "encoding with torch", check)

    def load(entry: Path):
        info, converted = read_entry(entry)
        if converted is None:
            return None, info
        chosen = info.get("chosen", "torch")
        precision = chosen.split("-", 1)[1] if chosen.startswith("openvino-") else "float32"
        return OpenVINOEmbedder(compile_for_cpu(converted, precision, threads), precision), info

    return cached_entry("encoder-openvino", key, "OpenVINO encoder", build, load)


def measure(converted, encode, texts: list[str], precisions: list[str], threads: int) -> dict:
    """Cosine with torch's vectors and the time of torch and of each OpenVINO precision on ``texts``; the choice."""
    if not texts:
        return {"chosen": "torch", "reason": "no SQuAD train file under $QA_DATA_DIR to check its vectors against torch's"}
    warm = texts[:WARM_UP]
    encode(warm, None)
    t0 = time.perf_counter()
    reference = encode(texts, None)
    torch_seconds = time.perf_counter() - t0
    sides = {}
    for precision in precisions:
        embedder = OpenVINOEmbedder(compile_for_cpu(converted, precision, threads), precision)
        encode(warm, embedder)
        t0 = time.perf_counter()
        vectors = encode(texts, embedder)
        seconds = time.perf_counter() - t0
        cosine = np.sum(reference * vectors, axis=1) / (
            np.linalg.norm(reference, axis=1) * np.linalg.norm(vectors, axis=1) + 1e-12)
        sides[precision] = {"seconds": round(seconds, 3), "speedup": round(torch_seconds / max(seconds, 1e-9), 3),
                            "min_cosine": round(float(cosine.min()), 6), "mean_cosine": round(float(cosine.mean()), 6)}
    facts = {"check": {"texts": len(texts), "split": "squad train", "torch_seconds": round(torch_seconds, 3),
                       "openvino": sides}}
    passing = [p for p, s in sides.items() if s["min_cosine"] >= MIN_COSINE and s["speedup"] >= MIN_SPEEDUP]
    if passing:
        best = max(passing, key=lambda p: sides[p]["speedup"])
        facts["chosen"] = f"openvino-{best}"
    else:
        facts["chosen"] = "torch"
        facts["reason"] = "; ".join(f"{p}: min cosine {s['min_cosine']:.5f}, {s['speedup']:.2f}x torch's speed"
                                    for p, s in sides.items()) + f" (needs >= {MIN_COSINE} and >= {MIN_SPEEDUP}x)"
    return facts
