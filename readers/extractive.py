"""Extractive reader: the best answer span of each (question, passage) pair.

A span-extraction model in the style of BERT for SQuAD (Devlin et al., 2019,
"BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL): the question and the passage are encoded together, the
model gives every passage token a start and an end logit, and the answer is the
span ``i <= j < i + max_answer_tokens`` with the largest ``start[i] + end[j]``.
Passages longer than one window are cut into overlapping windows (``stride``
tokens of overlap, the Hugging Face convention) and the pair's answer is the
best span over its windows.

Any ``AutoModelForQuestionAnswering`` checkpoint works, by hub name, alias
(:data:`ALIASES`) or local directory.  Reads are plain arrays
(:class:`PassageReads`); a :class:`ReadCache` keeps them on disk keyed by a
content hash of (model, reader parameters, question, passage) so sweeps never
read the same pair twice.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import hardware
from data.errors import UserError
from data.io import atomic_path, cache_dir, sha256_text, warn
from hardware.device import attention_kernels, auto_device, is_device_name
from readers.openvino_backend import BACKENDS
from readers.spans import best_spans, context_mask

ALIASES: dict[str, str] = {
    "bert-base": "csarron/bert-base-uncased-squad-v1",
    "bert-large": "bert-large-uncased-whole-word-masking-finetuned-squad",
    "distilbert": "distilbert-base-cased-distilled-squad",
}

# files fetched from the hub before the weights: enough to check the
# architecture and to pin the revision (the identity of the model in cache keys)
_HUB_META_FILES = ["config.json"]
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")

# Batch shape by device when the caller sets none.  On the CPU a forward pass is
# fastest with few padded tokens per batch (activations stay in cache): batches are
# capped by padded tokens, not windows (bench/reader_batch.py measures the curve;
# docs/readers.md "Reader speed" has the figures).  On CUDA large batches keep the GPU busy.
CPU_TOKEN_BUDGET = 1024
CPU_MAX_WINDOWS = 64
CUDA_BATCH_SIZE = 64
# Under bf16/fp16 autocast on the CPU, oneDNN JIT-compiles and caches a kernel per matmul shape (its primitive
# cache holds 1,024): with spans of exact length a ReQA SQuAD dev run makes more shapes than that, and the cache
# grew by about 0.5 GB.  Spans rounded up to a multiple of 16 (an AMX tile's rows; masked pad tokens change no
# result) leave a few dozen shapes: the main job (docs/reproductions.md) peaked at 1,742 MiB instead of 2,323 MiB in bf16 on an
# Intel Xeon with AMX (`/usr/bin/time -v`; float32 1,751 MiB), EM 0.4521 against 0.4519.  Float32 keeps exact
# spans: it needs no rounding for memory, and padding only adds work there.
CPU_AUTOCAST_SPAN_MULTIPLE = 16


@dataclass
class PassageReads:
    """The best span of each (question, passage) pair, one entry per pair.

    ``score`` is start logit + end logit of the span (``-inf`` when the passage
    has no readable token, e.g. it is empty; then ``text`` is ``""`` and the
    offsets are ``-1``).  ``passage[start_char:end_char] == text``.
    ``n_read`` pairs went through the model in this call, ``n_reused`` came
    from the cache (duplicates within one call are read once and counted once).
    """

    text: list[str]
    score: np.ndarray  # float32 [P]
    start_char: np.ndarray  # int64 [P]
    end_char: np.ndarray  # int64 [P]
    n_read: int = 0
    n_reused: int = 0

    def __len__(self) -> int:
        return len(self.text)


class ReadCache:
    """Reads already done, keyed by content hash, stored as npz shards in ``directory``.

    Every :meth:`add` writes one new shard (``reads-<random>.<CRC-32 of its
    bytes, 8 hex>.npz``, written atomically), so several processes may share a
    directory.  A shard holds the keys and, per key, the span score and
    character offsets; the span text is re-cut from the passage (the passage
    text is part of the key).  A shard whose bytes no longer match the CRC-32
    in its name (or, written before names carried one, that its zip checks
    reject) is removed with one ``warning:`` line and its pairs are read again:
    a damaged shard is never served.  A shard's temporary file left by a killed
    writer is removed by a later load once it is an hour old.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = directory
        self._index: dict[str, int] | None = None
        self._score = np.zeros(0, np.float32)
        self._start = np.zeros(0, np.int64)
        self._end = np.zeros(0, np.int64)

    def __len__(self) -> int:
        self._load()
        return len(self._index)

    def _load(self) -> None:
        if self._index is not None:
            return
        self._index = {}
        directory = Path(self.directory)
        if directory.exists() and not directory.is_dir():
            raise UserError(f"{directory}: read cache must be a directory")
        if directory.is_dir():
            _remove_orphaned_shards(directory)
        keys, scores, starts, ends = [], [], [], []
        for shard in sorted(directory.glob("reads-*.npz")) if directory.is_dir() else []:
            try:
                k, s, b, e = _read_shard(shard)
            except FileNotFoundError:  # removed meanwhile by another run that found it damaged
                continue
            except Exception as err:  # a damaged shard is dropped (its pairs are read again), never served
                what = " ".join(str(err).split())[:100] or type(err).__name__
                warn(f"{shard}: read-cache shard is damaged ({what}); removed and rebuilt")
                shard.unlink(missing_ok=True)
                continue
            keys.append(k.astype(str))
            scores.append(s)
            starts.append(b)
            ends.append(e)
        if keys:
            self._score = np.concatenate(scores).astype(np.float32)
            self._start = np.concatenate(starts).astype(np.int64)
            self._end = np.concatenate(ends).astype(np.int64)
            self._index = {str(k): i for i, k in enumerate(np.concatenate(keys))}

    def lookup(self, keys: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(found bool [K], score [K], start_char [K], end_char [K]) for ``keys``.

        Rows not found hold score ``-inf`` and offsets ``-1``.
        """
        self._load()
        rows = np.array([self._index.get(k, -1) for k in keys], dtype=np.int64)
        found = rows >= 0
        score = np.full(len(keys), -np.inf, np.float32)
        start = np.full(len(keys), -1, np.int64)
        end = np.full(len(keys), -1, np.int64)
        hit = rows[found]
        score[found], start[found], end[found] = self._score[hit], self._start[hit], self._end[hit]
        return found, score, start, end

    def add(self, keys: list[str], score: np.ndarray, start_char: np.ndarray, end_char: np.ndarray) -> None:
        """Store reads for ``keys`` (one new shard)."""
        if len(keys) == 0:
            return
        self._load()
        score = np.asarray(score, np.float32)
        start_char = np.asarray(start_char, np.int64)
        end_char = np.asarray(end_char, np.int64)
        buf = io.BytesIO()
        np.savez(buf, keys=np.array(keys, dtype="U64"), score=score, start_char=start_char, end_char=end_char)
        data = buf.getvalue()
        shard = Path(self.directory) / f"reads-{uuid.uuid4().hex}.{zlib.crc32(data):08x}.npz"
        with atomic_path(shard) as tmp:
            tmp.write_bytes(data)
        base = len(self._score)
        self._score = np.concatenate([self._score, score])
        self._start = np.concatenate([self._start, start_char])
        self._end = np.concatenate([self._end, end_char])
        for i, k in enumerate(keys):
            self._index[k] = base + i


ORPHAN_AGE_S = 3600.0  # a shard is published within milliseconds of its temporary file's creation


def _remove_orphaned_shards(directory: Path) -> None:
    """Remove the temporary files of shards whose writer was killed before publishing them (``.reads-*.tmp``,
    left by a SIGKILL or a power cut): those older than :data:`ORPHAN_AGE_S`, so another run's shard being
    written now is never touched."""
    import time

    now = time.time()
    for tmp in directory.glob(".reads-*.tmp"):
        try:
            if now - tmp.stat().st_mtime > ORPHAN_AGE_S:
                tmp.unlink()
        except FileNotFoundError:  # published or removed meanwhile
            continue


def _read_shard(shard: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(keys, score, start_char, end_char) of a read-cache shard whose bytes match the CRC-32 in its name; raises
    (saying what is wrong) otherwise.  A shard named before names carried a CRC is checked by its zip's own CRCs."""
    data = shard.read_bytes()
    recorded = shard.name[: -len(".npz")].rpartition(".")[2]
    if len(recorded) == 8:
        if f"{zlib.crc32(data):08x}" != recorded:
            raise ValueError(f"CRC-32 {zlib.crc32(data):08x}, its name records {recorded}; {len(data)} bytes")
    with np.load(io.BytesIO(data), allow_pickle=False) as z:  # the zip checks each array's CRC-32 as it is read
        k, s, b, e = z["keys"], z["score"], z["start_char"], z["end_char"]
    if not (k.ndim == s.ndim == b.ndim == e.ndim == 1 and len(k) == len(s) == len(b) == len(e)):
        raise ValueError("its arrays differ in length")
    return k, s, b, e


@dataclass
class ReadPlan:
    """The reads a ``read_pairs`` call needs: distinct pairs, what the cache already holds, what is left.

    Duplicate pairs are read once: ``row_of[i]`` is pair i's row among the
    distinct ``keys`` and ``first[r]`` the first pair of distinct row r.
    Engines (local, Ray) read the rows of :meth:`chunks` their own way, hand
    each chunk's spans to :meth:`store`, then take :meth:`result`.
    """

    questions: list[str]
    passages: list[str]
    keys: list[str]
    row_of: np.ndarray
    first: np.ndarray
    found: np.ndarray
    score: np.ndarray
    start: np.ndarray
    end: np.ndarray
    todo: np.ndarray

    def chunks(self, size: int) -> list[np.ndarray]:
        return [self.todo[lo : lo + size] for lo in range(0, len(self.todo), size)]

    def texts(self, rows) -> tuple[list[str], list[str]]:
        return [self.questions[self.first[r]] for r in rows], [self.passages[self.first[r]] for r in rows]

    def store(self, rows, score, start, end, cache: "ReadCache | None" = None) -> None:
        self.score[rows], self.start[rows], self.end[rows] = score, start, end
        if cache is not None:
            cache.add([self.keys[r] for r in rows], score, start, end)

    def result(self) -> PassageReads:
        score, start, end = self.score[self.row_of], self.start[self.row_of], self.end[self.row_of]
        text = [p[b:e] if b >= 0 else "" for p, b, e in zip(self.passages, start.tolist(), end.tolist())]
        return PassageReads(text=text, score=score, start_char=start, end_char=end,
                            n_read=int(len(self.todo)), n_reused=int(self.found.sum()))


def plan_reads(reader: "ExtractiveReader", questions, passages, cache: "ReadCache | None" = None) -> ReadPlan:
    """Key the pairs, drop duplicates, look them up in ``cache``: what is left to read (blank passages never are)."""
    questions = _as_texts(questions, "questions")
    passages = _as_texts(passages, "passages")
    if len(questions) != len(passages):
        raise UserError(f"read_pairs: {len(questions)} questions but {len(passages)} passages (one per pair)")
    distinct: dict[str, int] = {}
    row_of = np.array([distinct.setdefault(k, len(distinct)) for k in reader.pair_keys(questions, passages)], dtype=np.int64)
    keys = list(distinct)
    first = np.unique(row_of, return_index=True)[1]
    found = np.zeros(len(keys), bool)
    score = np.full(len(keys), -np.inf, np.float32)
    start = np.full(len(keys), -1, np.int64)
    end = np.full(len(keys), -1, np.int64)
    if cache is not None:
        found, score, start, end = cache.lookup(keys)
    blank = np.array([not passages[i].strip() for i in first], dtype=bool)
    todo = np.flatnonzero(~found & ~blank)
    return ReadPlan(questions, passages, keys, row_of, first, found, score, start, end, todo)


class ExtractiveReader:
    """Reads the best answer span of (question, passage) pairs with a QA checkpoint.

    Parameters
    ----------
    model: hub name, alias (``bert-base``, ``bert-large``, ``distilbert``) or a
        local directory of an ``AutoModelForQuestionAnswering`` checkpoint.
    max_length: tokens per window (question + passage + special tokens).
    stride: tokens of overlap between consecutive windows of a long passage.
    max_answer_tokens: longest span, in tokens.
    max_question_tokens: longer questions are cut to this many tokens.
    batch_size: most windows per forward pass (default: :data:`CUDA_BATCH_SIZE`
        on CUDA, :data:`CPU_MAX_WINDOWS` on the CPU).
    max_batch_tokens: caps windows x padded length per pass (default: none on
        CUDA, :data:`CPU_TOKEN_BUDGET` on the CPU).  In float32 batching does not change
        an answer (scores may differ in their last bits); under bf16 or int8 a close call between two spans
        can go the other way with the windows a batch holds.
    device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda[:i]"``.
    dtype: ``"auto"`` (bfloat16 autocast on CUDA if supported, else float16; on
        the CPU bfloat16 autocast where the CPU has native bf16 instructions,
        see :func:`hardware.cpu_has_native_bf16`, else float32), ``"float32"``,
        ``"bfloat16"`` (forced on a CPU without native bf16 it works, emulated
        and several times slower, with a warning), ``"float16"`` or ``"int8"``
        (CPU only: the checkpoint quantized once per checkpoint and cached, see
        :mod:`readers.int8`; never chosen by ``"auto"``).
    int8_recipe: how the int8 model is built (:class:`readers.int8.Int8Recipe`; default when None).
    backend: what runs the model on the CPU in float32 or bf16: ``"torch"``, ``"openvino"`` (converted once per
        checkpoint and precision, cached; see :mod:`readers.openvino_backend`) or ``"auto"`` (OpenVINO where, on
        this CPU and at this precision, it read the SQuAD train check sample faster than torch with its answers
        agreeing with torch float32's; else torch).  CUDA and float16 read with torch; int8 is its own OpenVINO
        model whatever the backend.
    num_threads: CPU threads for torch (default: the cores this process may use).
    pairs_per_chunk: pairs tokenized together; each chunk's reads are added to
        the cache as soon as they are done.

    progress: show a tqdm bar over windows.

    Nothing is loaded until the first :meth:`read_pairs` (or :meth:`load`).
    """

    def __init__(
        self,
        model: str = "bert-base",
        max_length: int = 384,
        stride: int = 128,
        max_answer_tokens: int = 30,
        max_question_tokens: int = 64,
        batch_size: int | None = None,
        max_batch_tokens: int | None = None,
        device: str = "auto",
        dtype: str = "auto",
        num_threads: int | None = None,
        pairs_per_chunk: int = 4096,
        progress: bool = True,
        int8_recipe=None,
        backend: str = "torch",
    ):
        self.model = model
        self.max_length = max_length
        self.stride = stride
        self.max_answer_tokens = max_answer_tokens
        self.max_question_tokens = max_question_tokens
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.device = device
        self.dtype = dtype
        self.num_threads = num_threads
        self.pairs_per_chunk = pairs_per_chunk
        self.progress = progress
        self.int8_recipe = int8_recipe
        self.backend = backend

    # ------------------------------------------------------------------ setup
    @property
    def _label(self) -> str:
        return os.fspath(self.model) if isinstance(self.model, os.PathLike) else str(self.model)

    def _check_params(self) -> None:
        for name in ("max_length", "stride", "max_answer_tokens", "max_question_tokens", "batch_size", "pairs_per_chunk"):
            value = getattr(self, name)
            if value is None and name == "batch_size":
                continue
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < (0 if name == "stride" else 1):
                raise UserError(f"reader {name}={value!r}: must be a positive integer")
        if self.max_question_tokens + 4 + self.stride >= self.max_length:
            raise UserError(
                f"reader stride={self.stride} with max_question_tokens={self.max_question_tokens} leaves no passage "
                f"tokens in max_length={self.max_length}: need stride + max_question_tokens + 4 < max_length"
            )
        if self.max_batch_tokens is not None and self.max_batch_tokens < self.max_length:
            raise UserError(f"reader max_batch_tokens={self.max_batch_tokens}: must be at least max_length={self.max_length}")
        if self.dtype not in _DTYPES:
            raise UserError(f"reader dtype={self.dtype!r}: expected one of {', '.join(_DTYPES)}")
        if not is_device_name(self.device):
            raise UserError(f"reader device={self.device!r}: expected auto, cpu, cuda or cuda:<index>")
        if self.backend not in BACKENDS:
            raise UserError(f"reader backend={self.backend!r}: expected one of {', '.join(BACKENDS)}")

    def _resolve_device_dtype(self):
        import torch

        dev = str(self.device)
        if dev == "auto":
            dev = auto_device()
        if dev.startswith("cuda"):
            if self.dtype == "int8":
                raise UserError(f"reader dtype int8 runs on the CPU (OpenVINO); on device={self.device!r} use "
                                "auto (bf16/fp16 autocast) or pass --device cpu")
            if not torch.cuda.is_available():
                raise UserError(f"reader device={self.device!r}: CUDA is not available on this machine")
            index = int(dev[5:]) if ":" in dev else 0
            if index >= torch.cuda.device_count():
                raise UserError(f"reader device={self.device!r}: only {torch.cuda.device_count()} CUDA device(s)")
        if self.dtype == "auto":
            if dev.startswith("cuda"):
                dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
            else:
                dtype = "bfloat16" if hardware.cpu_has_native_bf16() else "float32"
        else:
            dtype = self.dtype
        return dev, dtype

    def _backend_asked(self, device: str, dtype: str) -> str:
        """What ``backend`` means for a reader on ``device`` at ``dtype``: ``torch``, ``openvino`` or ``auto`` (the
        choice measured on this CPU); int8 is its own OpenVINO model (:mod:`readers.int8`)."""
        if dtype == "int8":
            return "int8"
        if self.backend == "torch":
            return "torch"
        if device.startswith("cuda") or dtype == "float16":
            if self.backend == "openvino":
                raise UserError(f"reader backend=openvino reads float32 or bfloat16 on the CPU; not {dtype} on {device}")
            return "torch"
        if not _installed("openvino"):
            if self.backend == "openvino":
                raise UserError("reader backend=openvino needs OpenVINO: pip install 'qa-retrieval-eval[int8]'")
            return "torch"
        return self.backend

    def batch_shape(self, device: str) -> tuple[int, int | None]:
        """(most windows, most padded tokens) per forward pass on ``device``: the set values, else the device's defaults."""
        on_cpu = not str(device).startswith("cuda")
        windows = self.batch_size if self.batch_size is not None else (CPU_MAX_WINDOWS if on_cpu else CUDA_BATCH_SIZE)
        tokens = self.max_batch_tokens
        if tokens is None and on_cpu:
            tokens = max(CPU_TOKEN_BUDGET, int(self.max_length))
        return int(windows), (None if tokens is None else int(tokens))

    def facts(self) -> dict:
        """What a run's manifest records of this reader: its batch shape and, once loaded, the precision it reads
        in; an int8 reader adds its recipe and how its answers agreed with float32's on held-out train questions."""
        loaded = getattr(self, "model_", None) is not None
        windows, tokens = self.batch_shape(self.device_) if loaded else (self.batch_size, self.max_batch_tokens)
        facts = {"reader_batch_size": windows, "reader_max_batch_tokens": tokens}
        if loaded:
            facts["reader_dtype"] = self.dtype_
            facts["reader_backend"] = self.backend_
            info = getattr(self, "openvino_info_", None)
            if self.dtype_ == "int8":
                info = getattr(self.model_, "info", None)
            if isinstance(info, dict) and info:
                key = "reader_int8" if self.dtype_ == "int8" else "reader_openvino"
                facts[key] = {k: v for k, v in info.items() if k not in ("weights_bytes", "weights_crc32")}
        return facts

    def _resolve_source(self) -> tuple[str, str | None, Path]:
        """(what from_pretrained loads, hub revision or None, a local dir holding config.json)."""
        name = ALIASES.get(self._label, self._label)
        path = Path(name).expanduser()
        if path.exists():
            if not path.is_dir():
                raise UserError(f"reader model '{self._label}': {path} is not a model directory")
            return str(path), None, path
        looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
        if looks_like_path:
            raise UserError(f"reader model '{self._label}': no such directory")
        try:
            from huggingface_hub import snapshot_download

            local = Path(snapshot_download(name, allow_patterns=_HUB_META_FILES))
        except Exception as err:  # offline, unknown repo, auth: all mean "cannot resolve"
            kind = type(err).__name__
            raise UserError(
                f"reader model '{self._label}' ({name}) cannot be resolved from the hub or the local HF cache "
                f"({kind}); pass a local checkpoint directory or pre-fill the HF cache"
            ) from None
        return name, local.name, local

    def _model_identity(self, source: str, revision: str | None, local: Path) -> str:
        if revision is not None:
            return f"hub:{source}@{revision}"
        return f"dir:{_dir_content_hash(local)}"

    def _check_is_qa_checkpoint(self, local: Path) -> None:
        config_path = local / "config.json"
        if not config_path.is_file():
            raise UserError(f"reader model '{self._label}': {config_path} is missing (not a transformers checkpoint)")
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UserError(f"{config_path}: unreadable config ({err})") from None
        architectures = config.get("architectures") or []
        if architectures and not any(str(a).endswith("ForQuestionAnswering") for a in architectures):
            raise UserError(
                f"reader model '{self._label}': {config_path} architectures {architectures} have no "
                f"question-answering head; pass an extractive QA checkpoint (…ForQuestionAnswering)"
            )

    def _settings(self) -> tuple:
        """The parameters a loaded model and the cache keys depend on (batching is not among them)."""
        return (self._label, self.max_length, self.stride, self.max_answer_tokens, self.max_question_tokens, self.dtype, str(self.device),
                repr(self.int8_recipe))

    def _model_settings(self) -> tuple:
        return (self._label, self.dtype, str(self.device), repr(self.int8_recipe), self.backend)

    def identity(self) -> str:
        """Model identity + every parameter that changes a read (the cache-key prefix): torch reads keep the
        keys they always had; OpenVINO float reads are keyed apart, by its version (with ``backend="auto"`` the
        choice recorded for this CPU decides, made first, loading the model, when none is recorded)."""
        base = self._base_identity()
        _, dtype = self._resolve_device_dtype()
        if self.resolved_backend() == "openvino" and dtype != "int8":
            import openvino

            from hardware.openvino import EXECUTION

            return sha256_text(base, "backend:openvino", openvino.__version__, EXECUTION)
        return base

    def resolved_backend(self) -> str:
        """``torch`` or ``openvino``: what reads (int8 reads on OpenVINO).  ``backend="auto"`` takes the choice
        recorded for this checkpoint, precision and CPU; ``"openvino"`` falls back to torch where the checkpoint
        could not be converted; when nothing is recorded yet, the model is loaded and the choice made now."""
        if getattr(self, "model_", None) is not None and self._loaded_for_ == self._model_settings():
            return self.backend_
        device, dtype = self._resolve_device_dtype()
        asked = self._backend_asked(device, dtype)
        if asked in ("torch", "int8"):
            return "openvino" if asked == "int8" else "torch"
        recorded = self._recorded_entry(dtype)
        if recorded is None:
            return self.load().backend_
        if asked == "openvino":
            return "openvino" if "weights_bytes" in recorded else "torch"
        return recorded.get("chosen", "torch")

    def _recorded_entry(self, dtype: str) -> dict | None:
        """The cached OpenVINO entry's info for this checkpoint, precision and CPU (None when none is built yet)."""
        from readers import openvino_backend as ovb

        recipe = ovb.FloatRecipe(precision=dtype)
        _, digest = ovb.validation_source(recipe)
        entry = cache_dir("reader-openvino") / ovb.entry_key(self._base_identity(), recipe, digest)
        try:
            info = json.loads((entry / "info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def _base_identity(self) -> str:
        """The checkpoint and every parameter that changes a read, the backend left out."""
        if getattr(self, "_identity_for_", None) != self._settings():
            self._check_params()
            source, revision, local = self._resolve_source()
            self._check_is_qa_checkpoint(local)
            _, dtype = self._resolve_device_dtype()
            self._source_ = (source, revision)
            params = {
                "max_length": int(self.max_length),
                "stride": int(self.stride),
                "max_answer_tokens": int(self.max_answer_tokens),
                "max_question_tokens": int(self.max_question_tokens),
                "dtype": dtype,
            }
            if dtype == "int8":  # int8 reads are cached apart from float reads, and apart per recipe
                from dataclasses import asdict

                from hardware.openvino import EXECUTION

                params["int8_recipe"] = asdict(self._int8_recipe())
                params["openvino_execution"] = EXECUTION
            self._identity_ = sha256_text("extractive-reader-v1", self._model_identity(source, revision, local), json.dumps(params, sort_keys=True))
            self._identity_for_ = self._settings()
        return self._identity_

    def load(self) -> "ExtractiveReader":
        """Load tokenizer and model (once; again only if model, device or dtype were changed since)."""
        if getattr(self, "model_", None) is not None and self._loaded_for_ == self._model_settings():
            return self
        import torch
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        self._base_identity()
        source, revision = self._source_
        device, dtype = self._resolve_device_dtype()
        asked = self._backend_asked(device, dtype)
        if device == "cpu":
            torch.set_num_threads(int(self.num_threads or hardware.available_cores()))
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
        except Exception as err:
            raise UserError(f"reader model '{self._label}': cannot load its tokenizer ({type(err).__name__}: {err})") from None
        if not getattr(tokenizer, "is_fast", False):
            raise UserError(f"reader model '{self._label}': needs a fast tokenizer (tokenizer.json); none found")
        try:
            model, info = AutoModelForQuestionAnswering.from_pretrained(source, revision=revision, output_loading_info=True)
        except Exception as err:
            raise UserError(f"reader model '{self._label}': cannot load as a QA model ({type(err).__name__}: {err})") from None
        missing = sorted(info.get("missing_keys") or [])
        if missing:
            raise UserError(
                f"reader model '{self._label}': checkpoint lacks weights {missing[:4]} (a random QA head would be "
                f"used); pass an extractive QA checkpoint"
            )
        model.eval().to(device)
        self.tokenizer_ = tokenizer
        backend, self.openvino_info_ = "torch", None
        if dtype == "int8":
            model, backend = self._int8_model(model), "openvino"
        elif asked in ("openvino", "auto"):
            converted, info = self._openvino_model(model, dtype)
            self.openvino_info_ = info
            if converted is not None and (asked == "openvino" or info.get("chosen") == "openvino"):
                model, backend = converted, "openvino"
                if asked == "openvino" and info.get("chosen") != "openvino" and info.get("reason"):
                    print(f"note: reader backend openvino for '{self._label}' as asked; auto would read with torch: "
                          f"{info['reason']}", file=sys.stderr)
            elif asked == "openvino":
                print(f"note: reader backend openvino: {info.get('reason', 'not available')}; reading with torch",
                      file=sys.stderr)
        if device == "cpu" and dtype == "bfloat16" and not hardware.cpu_has_native_bf16():
            warn(f"reader dtype bfloat16 on a CPU without native bf16 ({hardware.cpu_model()}): emulated, "
                 f"several times slower than float32")
        self.tokenizer_ = tokenizer
        self.model_ = model
        self.device_ = device
        self.dtype_ = dtype
        self.backend_ = backend
        self.context_first_ = tokenizer.padding_side == "left"  # e.g. XLNet: passage, then question
        self._loaded_for_ = self._model_settings()
        return self

    def _int8_recipe(self):
        from readers.int8 import Int8Recipe

        return self.int8_recipe if self.int8_recipe is not None else Int8Recipe()

    def _int8_model(self, torch_model):
        """The int8 model of this checkpoint (:mod:`readers.int8`), from the cache or built there now."""
        
        from readers import int8

        try:
            import nncf  # noqa: F401
            import openvino  # noqa: F401
        except ImportError as err:
            raise UserError(f"reader dtype int8 needs OpenVINO and NNCF ({err.name} is missing): "
                            f"pip install 'qa-retrieval-eval[int8]'") from None
        recipe = self._int8_recipe().check()
        validation_file, digest = int8.validation_source(recipe)
        threads = int(self.num_threads or hardware.available_cores())
        reader = self._checking_copy(torch_model)  # reads the validation sample with either model, float32 around it

        def read_answers(model, pairs):
            reader.model_, reader.dtype_ = model, "float32" if model is torch_model else "int8"
            try:
                return reader.read_pairs([q for q, _ in pairs], [p for _, p in pairs]).text
            finally:
                reader.model_, reader.dtype_ = torch_model, "float32"

        key = int8.entry_key(self._base_identity(), recipe, digest)
        if self.progress and not (cache_dir("reader-int8") / key).is_dir():
            print(f"note: building the int8 reader of '{self._label}' once (weights to int8, then "
                  f"{recipe.validation_questions if validation_file else 0} held-out SQuAD train questions read in "
                  f"float32 and int8), cached for later runs",
                  file=sys.stderr)
        return int8.load_or_build(key, torch_model, self._example_inputs(), read_answers, validation_file, recipe,
                                  threads, self._label)

    def _openvino_model(self, torch_model, dtype: str):
        """``(OpenVINO model or None, info)``: this checkpoint converted for ``dtype`` and the backend choice measured
        on this CPU (:mod:`readers.openvino_backend`), from the cache or built there now."""
        from readers import openvino_backend as ovb

        recipe = ovb.FloatRecipe(precision=dtype)
        validation_file, digest = ovb.validation_source(recipe)
        key = ovb.entry_key(self._base_identity(), recipe, digest)
        if self.progress and not (cache_dir("reader-openvino") / key).is_dir():
            print(f"note: converting '{self._label}' to OpenVINO {dtype} once and timing it against torch on "
                  f"{recipe.validation_questions if validation_file else 0} held-out SQuAD train questions; cached "
                  f"for later runs", file=sys.stderr)
        reader = self._checking_copy(torch_model)

        def read(model, precision, pairs):
            reader.model_, reader.dtype_ = model, precision
            reader.backend_ = "torch" if model is torch_model else "openvino"
            try:
                return reader.read_pairs([q for q, _ in pairs], [p for _, p in pairs]).text
            finally:
                reader.model_, reader.dtype_, reader.backend_ = torch_model, "float32", "torch"

        threads = int(self.num_threads or hardware.available_cores())
        return ovb.load_or_build_float(key, torch_model, self._example_inputs(), read, validation_file, recipe,
                                       threads, self._label)

    def _checking_copy(self, torch_model) -> "ExtractiveReader":
        """A copy of this reader holding ``torch_model`` in float32 on the CPU, without progress bars: it reads a
        check sample with whichever model it is handed."""
        import copy

        reader = copy.copy(self)
        reader.dtype, reader.progress, reader.model_, reader.backend = "float32", False, torch_model, "torch"
        reader.device_, reader.dtype_, reader.backend_ = "cpu", "float32", "torch"
        reader.context_first_ = self.tokenizer_.padding_side == "left"
        reader._loaded_for_ = reader._model_settings()
        return reader

    def _example_inputs(self) -> dict:
        """One small batch of model inputs (numpy int64) to trace the checkpoint with."""
        example = self.tokenizer_(["Which model reads?"] * 2, ["The converted reader reads this passage."] * 2,
                                  return_tensors="np")
        return {k: np.asarray(v, dtype=np.int64) for k, v in example.items() if k in self.tokenizer_.model_input_names}

    # ------------------------------------------------------------------ keys
    def pair_keys(self, questions: list[str], passages: list[str]) -> list[str]:
        """Content-hash cache keys of the pairs (model + reader params + texts)."""
        prefix = self.identity()
        return [sha256_text(prefix, q, p) for q, p in zip(questions, passages)]

    # ------------------------------------------------------------------ reading
    def read_pairs(self, questions: list[str], passages: list[str], cache: ReadCache | None = None) -> PassageReads:
        """The best span of every ``(questions[i], passages[i])`` pair.

        With a ``cache``, pairs already read (same model, parameters and texts)
        are taken from it and new reads are added to it.
        """
        plan = plan_reads(self, questions, passages, cache)
        chunks = plan.chunks(self.pairs_per_chunk)
        if chunks:
            self.load()
            bar = _progress_bar(self.progress)
            try:
                for rows in chunks:
                    s, b, e = self._read_chunk(*plan.texts(rows), bar)
                    plan.store(rows, s, b, e, cache)
            finally:
                if bar is not None:
                    bar.close()
        return plan.result()

    def cut_questions(self, questions: list[str]) -> list[str]:
        """Questions longer than ``max_question_tokens`` cut to that many tokens."""
        distinct = list(dict.fromkeys(questions))
        enc = self.tokenizer_(distinct, add_special_tokens=False, return_offsets_mapping=True)
        cut = {}
        for q, offsets in zip(distinct, enc["offset_mapping"]):
            if len(offsets) > self.max_question_tokens:
                cut[q] = q[: offsets[self.max_question_tokens - 1][1]]
        return [cut.get(q, q) for q in questions] if cut else questions

    def _read_chunk(self, questions: list[str], passages: list[str], bar):
        import torch

        tok = self.tokenizer_
        questions = self.cut_questions(questions)
        first, second = (passages, questions) if self.context_first_ else (questions, passages)
        enc = tok(
            first,
            second,
            truncation="only_first" if self.context_first_ else "only_second",
            max_length=self.max_length,
            stride=self.stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        pad_left = tok.padding_side == "left"
        model_inputs, offsets, ctx_lo, ctx_hi = padded_windows(tok, enc, 0 if self.context_first_ else 1, pad_left)
        pair_of = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
        mask = model_inputs["attention_mask"]
        n_windows, width = mask.shape
        if "token_type_ids" in model_inputs and "token_type_ids" not in tok.model_input_names:
            del model_inputs["token_type_ids"]
        lengths = mask.sum(1)
        order = np.argsort(-lengths, kind="stable")  # longest first: memory peaks early
        win_score = np.full(n_windows, -np.inf, np.float32)
        win_start = np.zeros(n_windows, np.int64)
        win_end = np.zeros(n_windows, np.int64)
        if bar is not None:
            bar.total = (bar.total or 0) + n_windows
            bar.refresh()
        device = self.device_
        use_autocast = self.backend_ == "torch" and self.dtype_ not in ("float32", "int8")
        amp_dtype = getattr(torch, self.dtype_) if use_autocast else torch.float32
        multiple = CPU_AUTOCAST_SPAN_MULTIPLE if use_autocast and device == "cpu" else 1

        def batches():  # ((rows, first column), the rows' inputs cut to the batch's padded span)
            windows, tokens = self.batch_shape(device)
            for batch in window_batches(lengths[order], windows, tokens, multiple, width):
                rows = order[batch]
                span = _padded_span(int(lengths[rows].max()), multiple, width)
                col0 = width - span if pad_left else 0  # the batch's columns: [col0, col0 + span)
                yield (rows, col0), {k: v[rows, col0 : col0 + span] for k, v in model_inputs.items()}

        with torch.inference_mode():
            for (rows, col0), start_logits, end_logits in self._forward(batches(), use_autocast, amp_dtype):
                span = start_logits.shape[1]
                s, i, j = best_spans(
                    start_logits,
                    end_logits,
                    context_mask(
                        span,
                        torch.from_numpy(ctx_lo[rows] - col0).to(device),
                        torch.from_numpy(ctx_hi[rows] - col0).to(device),
                    ),
                    self.max_answer_tokens,
                )
                win_score[rows] = s.cpu().numpy()
                win_start[rows] = i.cpu().numpy() + col0
                win_end[rows] = j.cpu().numpy() + col0
                if bar is not None:
                    bar.update(len(rows))
        # the pair's answer: its best window
        n_pairs = len(questions)
        pick = np.lexsort((-win_score, pair_of))
        _, head = np.unique(pair_of[pick], return_index=True)
        best = pick[head]
        score = np.full(n_pairs, -np.inf, np.float32)
        start = np.full(n_pairs, -1, np.int64)
        end = np.full(n_pairs, -1, np.int64)
        ok = np.isfinite(win_score[best])
        best_ok = best[ok]
        pairs_ok = pair_of[best_ok]
        score[pairs_ok] = win_score[best_ok]
        start[pairs_ok] = offsets[best_ok, win_start[best_ok], 0]
        end[pairs_ok] = offsets[best_ok, win_end[best_ok], 1]
        return score, start, end


    def _forward(self, batches, use_autocast: bool, amp_dtype):
        """``(tag, inputs)`` batches in, ``(tag, start logits, end logits)`` (float32 tensors on the device) out.  An
        OpenVINO model runs the batches on all its streams at once and hands them back as they finish."""
        import torch

        if hasattr(self.model_, "run"):
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # torch only decodes spans here, beside OpenVINO's streams on every core
            try:
                for tag, start, end in self.model_.run(batches):
                    yield tag, torch.from_numpy(start).float(), torch.from_numpy(end).float()
            finally:
                torch.set_num_threads(threads)
            return
        device = self.device_
        for tag, inputs in batches:
            inputs = {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}
            with attention_kernels(device), torch.autocast(device_type=device.split(":")[0], dtype=amp_dtype,
                                                           enabled=use_autocast):
                out = self.model_(**inputs)
            yield tag, out.start_logits.float(), out.end_logits.float()


def padded_windows(tok, enc, context_id: int, pad_left: bool):
    """The windows of an unpadded fast-tokenizer batch as padded ``[W, L]`` arrays (``L``: the longest window).

    Returns ``(model inputs, offsets [W, L, 2], ctx_lo, ctx_hi)``: the inputs as the tokenizer's own
    ``padding="longest", return_tensors="np"`` gives them (pad id, pad type id, zero mask and offsets on the
    tokenizer's padding side), and each window's passage tokens ``[ctx_lo, ctx_hi]`` (``ctx_hi < ctx_lo``
    when it has none).  Filled here from the Rust encodings because transformers' padding and tensor
    conversion took twice as long as the tokenizing itself (1.5 against 0.65 s for 2,000 SQuAD pairs; this
    fill: 0.1 s), CPU time a GPU reader waits for.
    """
    encodings = enc.encodings
    n_windows = len(encodings)
    width = max((len(e.ids) for e in encodings), default=0)
    ids = np.full((n_windows, width), tok.pad_token_id if tok.pad_token_id is not None else 0, np.int64)
    mask = np.zeros((n_windows, width), np.int64)
    types = np.full((n_windows, width), tok.pad_token_type_id, np.int64)
    offsets = np.zeros((n_windows, width, 2), np.int64)
    ctx_lo = np.zeros(n_windows, np.int64)
    ctx_hi = np.full(n_windows, -1, np.int64)
    for w, e in enumerate(encodings):
        n = len(e.ids)
        lo = width - n if pad_left else 0
        cols = slice(lo, lo + n)
        ids[w, cols] = e.ids
        mask[w, cols] = e.attention_mask
        types[w, cols] = e.type_ids
        if n:
            offsets[w, cols] = e.offsets
        seq = e.sequence_ids
        if context_id in seq:
            ctx_lo[w] = lo + seq.index(context_id)
            ctx_hi[w] = lo + n - 1 - seq[::-1].index(context_id)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in enc:
        inputs["token_type_ids"] = types
    return inputs, offsets, ctx_lo, ctx_hi


def _padded_span(length: int, multiple: int, width: int) -> int:
    """A batch's padded length: its longest window rounded up to ``multiple``, at most the tokenized ``width``."""
    return min(width, -(-length // multiple) * multiple)


def window_batches(sorted_lengths: np.ndarray, batch_size: int, max_batch_tokens: int | None, multiple: int = 1,
                   width: int = 1 << 30):
    """Slices of consecutive windows (sorted by length, longest first) per forward pass."""
    n = len(sorted_lengths)
    lo = 0
    while lo < n:
        hi = min(n, lo + batch_size)
        if max_batch_tokens is not None:
            # longest first: the batch's padded width is its first window's length (rounded, see _padded_span)
            fit = max(1, int(max_batch_tokens // max(_padded_span(int(sorted_lengths[lo]), multiple, width), 1)))
            hi = min(hi, lo + fit)
        yield slice(lo, hi)
        lo = hi




def _progress_bar(enabled: bool):
    """A bar over windows (its total grows as each chunk of pairs is tokenized)."""
    if not enabled:
        return None
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    return tqdm(total=0, unit="window", desc="reading", leave=False)


def _as_texts(values, name: str) -> list[str]:
    if isinstance(values, str):
        raise UserError(f"read_pairs {name}: expected a list of strings, got one string")
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise UserError(f"read_pairs {name}[{i}]: expected a string, got {type(v).__name__}")
    return values


_DIR_HASHES: dict[tuple, str] = {}


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _dir_content_hash(directory: Path) -> str:
    """sha256 over config.json and the weight files of a checkpoint directory (memoized per process)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and (p.name == "config.json" or p.name.endswith(_WEIGHT_SUFFIXES)))
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    memo = (str(directory.resolve()), stamp)
    if memo not in _DIR_HASHES:
        h = hashlib.sha256()
        for p in files:
            h.update(p.name.encode())
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
        _DIR_HASHES[memo] = h.hexdigest()
    return _DIR_HASHES[memo]
