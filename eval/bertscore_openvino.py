"""BERT-F1's token embeddings on OpenVINO, and the per-CPU choice between it and torch.

What.  bert-score embeds every distinct prediction and reference with the first ``num_layers`` layers of its
model (``BERTScorer._model``, truncated by bert-score) and matches the tokens greedily by cosine.  That model is
converted once to OpenVINO and called by bert-score in its place (:class:`OpenVINOTokenModel`).  Before bert-score
scores, every distinct sentence is embedded in batches of one token length (no padding) on all streams at once
(:meth:`OpenVINOTokenModel.prepare`); bert-score's own batches are then served from those embeddings.

How the choice is made (``backend="auto"``).  Building embeds the questions and gold answers of the held-out SQuAD
*train* check sample (:func:`hardware.openvino.validation_sample`: short texts like the answers BERT-F1 scores)
with torch float32 and with each OpenVINO candidate (float32; bf16 where the CPU has native bf16), timing each
after a warm-up, and keeps the fastest candidate whose every real token's embedding has cosine at least
:data:`MIN_COSINE` with torch's and that is at least :data:`MIN_SPEEDUP` times as fast; otherwise torch.  What
that moves (the main job's 10,119 answer pairs, Intel Xeon with AMX, OpenVINO bf16 chosen at min token cosine
0.99993): BERT-F1 per pair by at most 0.0028, its mean by 0.00004.  The converted model and the measurements are cached under ``$QA_CACHE_DIR/bertscore-openvino/``,
keyed by bert-score's setting (model, layer, versions), the check sample, the OpenVINO version and the CPU; the
pair cache of an OpenVINO scorer is keyed apart from torch's.
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

FORMAT = "bertscore-openvino-v2"  # v2: the check embeds through prepare(), as scoring does
BACKENDS = ("auto", "torch", "openvino")
MIN_COSINE = 0.999
MIN_SPEEDUP = 1.05
WARM_UP = 64
BATCH = 64  # bert-score's batch size, the pipeline's default
EMBEDDING = "prepared-exact-length-v1"  # how scored sentences are embedded (joins the pair cache's key)
TOKENS_PER_BATCH = 2048  # prepare(): tokens per exact-length batch (18,179 answers: 3.9 s; 8,192: 4.2 s)


@dataclass(frozen=True)
class TokenCheck:
    """The check sample the backends are compared on (part of the cache key)."""

    validation_questions: int = 300
    seed: int = 13


class OpenVINOTokenModel:
    """A compiled token encoder called as bert-score calls its model: ``model(ids, attention_mask=mask)`` ->
    ``(last hidden states,)`` as a torch tensor.  bert-score hands over one batch at a time: each is cut into as
    many parts as the model has streams, run at once (:class:`hardware.openvino.BatchRunner`)."""

    def __init__(self, compiled, precision: str):
        self.compiled = compiled
        self.precision = precision
        self.runner = BatchRunner(compiled)
        self._parts = max(1, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self._ready: dict[bytes, list] = {}  # token ids -> [embedding or None, calls left] (:meth:`prepare`)

    def eval(self) -> "OpenVINOTokenModel":
        return self

    def parameters(self):
        """One CPU tensor: bert-score takes the device to score on from the model's first parameter."""
        import torch

        yield torch.zeros(0)

    def prepare(self, tokenizer, sentences) -> None:
        """Embed ``sentences`` now, in batches of one exact token length (no padding) of up to :data:`TOKENS_PER_BATCH`
        tokens on every stream at once; bert-score's later calls for these sentences are served from them (each
        embedding handed over as many times as sentences tokenized to it, then dropped).

        bert-score batches 64 sentences ordered by word count, so its batches of short answers are mostly padding and
        one stream waits on Python between them: on the main job's 18,179 distinct answers this is 3.9 s of
        embedding against 8.1 s inside bert-score's batches (Intel Xeon with AMX, bf16, 2 threads).  A token row's
        embedding does not depend on the rows padded beside it (up to rounding)."""
        texts = [s.strip() for s in dict.fromkeys(sentences) if s.strip()]
        if not texts:
            return
        encoded = tokenizer(texts, add_special_tokens=True, truncation=True, max_length=tokenizer.model_max_length)["input_ids"]
        by_length: dict[int, list[tuple[bytes, np.ndarray]]] = {}
        for ids in encoded:
            row = np.asarray(ids, dtype=np.int64)
            key = row.tobytes()
            if key in self._ready:
                self._ready[key][1] += 1
                continue
            self._ready[key] = [None, 1]
            by_length.setdefault(len(row), []).append((key, row))
        parts, keys = [], []
        for length, rows in sorted(by_length.items(), reverse=True):
            chunk = max(1, TOKENS_PER_BATCH // length)
            for lo in range(0, len(rows), chunk):
                block = rows[lo:lo + chunk]
                ids = np.stack([r for _, r in block])
                keys.append([k for k, _ in block])
                parts.append((len(parts), {"input_ids": ids, "attention_mask": np.ones_like(ids)}))
        for tag, outputs in self.runner.run(parts):
            hidden = outputs[0].astype(np.float32, copy=False)
            for k, key in enumerate(keys[tag]):
                self._ready[key][0] = hidden[k]

    def release(self) -> None:
        """Drop what :meth:`prepare` embedded and no call took."""
        self._ready.clear()

    def __call__(self, input_ids, attention_mask=None, output_hidden_states=False):
        import torch

        if output_hidden_states:
            raise ValueError("the OpenVINO BERT-F1 model gives one layer's embeddings, not every layer's")
        ids = input_ids.cpu().numpy().astype(np.int64, copy=False)
        mask = attention_mask.cpu().numpy().astype(np.int64, copy=False)
        lengths = mask.sum(axis=1)
        served: dict[int, np.ndarray] = {}
        for k, length in enumerate(lengths):
            key = ids[k, :length].tobytes()
            entry = self._ready.get(key)
            if entry is not None and entry[0] is not None:
                served[k] = entry[0]
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._ready[key]
        if not served:
            return (torch.from_numpy(self._run(ids, mask)),)
        todo = [k for k in range(len(ids)) if k not in served]
        width = int(lengths[todo].max()) if todo else 0
        computed = self._run(ids[todo, :width], mask[todo, :width]) if todo else None
        dim = (computed if computed is not None else next(iter(served.values()))).shape[-1]
        hidden = np.zeros((len(ids), ids.shape[1], dim), np.float32)
        if computed is not None:
            hidden[todo, :width] = computed
        for k, rows in served.items():
            hidden[k, : len(rows)] = rows
        return (torch.from_numpy(hidden),)

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        bounds = np.linspace(0, len(ids), min(self._parts, len(ids)) + 1).astype(int)
        parts = [(k, {"input_ids": ids[lo:hi], "attention_mask": mask[lo:hi]})
                 for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]
        done = dict(self.runner.run(parts))
        return np.concatenate([done[k][0] for k, _ in parts], axis=0).astype(np.float32, copy=False)


def _traceable(model):
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids, attention_mask=attention_mask)[0]

    return Hidden(model).eval()


def entry_key(setting: str, check: TokenCheck, sample_digest: str) -> str:
    import openvino

    return sha256_text(FORMAT, EXECUTION, setting, str(sorted(asdict(check).items())), sample_digest,
                       openvino.__version__, cpu_identity())[:32]


def embed(model, tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Each text's real-token embeddings (float32 ``[tokens, D]``), in batches of :data:`BATCH` sorted by length."""
    import torch

    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(texts)
    prepared = isinstance(model, OpenVINOTokenModel)
    if prepared:  # as bert_f1 scores: every text embedded first, without padding
        model.prepare(tokenizer, texts)
    try:
        with torch.inference_mode():
            for lo in range(0, len(order), BATCH):
                rows = order[lo:lo + BATCH]
                enc = tokenizer([texts[i] for i in rows], padding=True, truncation=True, return_tensors="pt")
                hidden = model(enc["input_ids"], attention_mask=enc["attention_mask"])[0].float().numpy()
                for k, i in enumerate(rows):
                    out[i] = hidden[k, : int(enc["attention_mask"][k].sum())]
    finally:
        if prepared:
            model.release()
    return out


def load_or_build(setting: str, torch_model, tokenizer, threads: int, label: str = ""):
    """``(OpenVINO model or None, info)``: the cached OpenVINO token encoder at the chosen precision (float32 when
    torch was chosen; None when it could not be converted) and the choice measured on this CPU
    (``info["chosen"]``: ``openvino-float32``, ``openvino-bfloat16`` or ``torch``), built first when missing."""
    import hardware

    check_sample = TokenCheck()
    path, digest = validation_source(check_sample)
    key = entry_key(setting, check_sample, digest)
    precisions = ["float32"] + (["bfloat16"] if hardware.cpu_has_native_bf16() else [])

    def build(staging: Path) -> None:
        import openvino as ov

        info = {"format": FORMAT, "check_sample": asdict(check_sample), "backend": {"openvino": ov.__version__},
                "cpu": cpu_identity()}
        print(f"note: converting BERT-F1's model '{label}' to OpenVINO once and timing it against torch on the "
              f"SQuAD train check sample; cached for later runs", file=sys.stderr)
        example = tokenizer(["Which answer?", "The converted model embeds this answer."], padding=True, return_tensors="np")
        def check(converted) -> dict:
            pairs, answers = validation_sample(path, check_sample)
            texts = [q for q, _ in pairs] + [a for golds in answers for a in golds[:1]]
            return measure(converted, torch_model, tokenizer, texts, precisions, threads)

        inputs = {k: np.asarray(example[k], dtype=np.int64) for k in ("input_ids", "attention_mask")}
        build_checked(staging, info, _traceable(torch_model), inputs, label, "bertscore backend openvino",
                      "BERT-F1 with torch", check)

    def load(entry: Path):
        info, converted = read_entry(entry)
        if converted is None:
            return None, info
        chosen = info.get("chosen", "torch")
        precision = chosen.split("-", 1)[1] if chosen.startswith("openvino-") else "float32"
        return OpenVINOTokenModel(compile_for_cpu(converted, precision, threads), precision), info

    return cached_entry("bertscore-openvino", key, "OpenVINO BERT-F1 model", build, load)


def measure(converted, torch_model, tokenizer, texts: list[str], precisions: list[str], threads: int) -> dict:
    """The smallest token cosine with torch's embeddings and the time of torch and of each OpenVINO precision on
    ``texts``; the choice."""
    if not texts:
        return {"chosen": "torch", "reason": "no SQuAD train file under $QA_DATA_DIR to check its embeddings against torch's"}
    embed(torch_model, tokenizer, texts[:WARM_UP])
    t0 = time.perf_counter()
    reference = embed(torch_model, tokenizer, texts)
    torch_seconds = time.perf_counter() - t0
    sides = {}
    for precision in precisions:
        model = OpenVINOTokenModel(compile_for_cpu(converted, precision, threads), precision)
        embed(model, tokenizer, texts[:WARM_UP])
        t0 = time.perf_counter()
        got = embed(model, tokenizer, texts)
        seconds = time.perf_counter() - t0
        a, b = np.concatenate(reference), np.concatenate(got)
        cosine = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
        sides[precision] = {"seconds": round(seconds, 3), "speedup": round(torch_seconds / max(seconds, 1e-9), 3),
                            "min_cosine": round(float(cosine.min()), 6), "mean_cosine": round(float(cosine.mean()), 6)}
    facts = {"check": {"texts": len(texts), "split": "squad train", "torch_seconds": round(torch_seconds, 3),
                       "openvino": sides}}
    passing = [p for p, s in sides.items() if s["min_cosine"] >= MIN_COSINE and s["speedup"] >= MIN_SPEEDUP]
    if passing:
        facts["chosen"] = f"openvino-{max(passing, key=lambda p: sides[p]['speedup'])}"
    else:
        facts["chosen"] = "torch"
        facts["reason"] = "; ".join(f"{p}: min token cosine {s['min_cosine']:.5f}, {s['speedup']:.2f}x torch's speed"
                                    for p, s in sides.items()) + f" (needs >= {MIN_COSINE} and >= {MIN_SPEEDUP}x)"
    return facts
