"""A cross-encoder pair scorer: the relevance of each (question, passage) pair from one sequence-classification head.

Nogueira & Cho (2019), "Passage Re-ranking with BERT": the question and the passage are encoded together and a
classification head gives one relevance logit.  Any sentence-transformers ``CrossEncoder`` directory (the same
files as a transformers checkpoint) or ``AutoModelForSequenceClassification`` checkpoint works: a local
directory, or a hub name (tried only when given; offline it must be in the local HF cache).  A head of one label
scores by its logit; a head of two by the log-odds ``logit[1] - logit[0]``; more labels are refused.

Batching follows the extractive reader (:mod:`readers.extractive`): a chunk of pairs is tokenized once, sorted by
length (longest first) and cut into batches capped by padded tokens on the CPU; under bf16 autocast on the CPU the
padded length is rounded up to a multiple of 16 (one oneDNN kernel per shape, see
``readers.extractive.CPU_AUTOCAST_SPAN_MULTIPLE``).  Precision: ``auto`` (CUDA: bf16 where supported; CPU: bf16
where the CPU has native bf16, :func:`hardware.cpu_has_native_bf16`, else float32), ``float32`` or ``bfloat16``.
Backend on the CPU: ``torch``, ``openvino`` or ``auto`` (OpenVINO where, on this CPU, it ranked the SQuAD train
check sample as torch float32 does and faster than torch; measured once and cached, :mod:`retrievers.rerank_openvino`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import hardware
from data.errors import UserError
from data.io import sha256_text, warn
from hardware.device import attention_kernels, auto_device, is_device_name

DTYPES = ("auto", "float32", "bfloat16")
BACKENDS = ("auto", "torch", "openvino")
CPU_TOKEN_BUDGET = 4096
CPU_MAX_PAIRS = 64
CUDA_BATCH_SIZE = 128


class CrossEncoderScorer:
    """Scores (question, passage) pairs with a sequence-classification checkpoint.

    Parameters
    ----------
    model: a local checkpoint directory or a hub name.
    max_length: tokens per pair (question + passage + special tokens); longer pairs are cut, longest part first.
    dtype: ``auto``, ``float32`` or ``bfloat16`` (autocast).
    backend: ``torch`` (default), ``openvino`` or ``auto`` (CPU only; CUDA scores with torch).
    batch_size: most pairs per forward pass (default 64 on the CPU, 128 on CUDA).
    max_batch_tokens: cap on pairs x padded length per pass (default 4096 on the CPU, none on CUDA).
    device: ``auto``, ``cpu``, ``cuda[:i]``.
    num_threads: CPU threads for torch (default: the cores this process may use).
    progress: a bar over pairs.

    Nothing is loaded until :meth:`load` or the first :meth:`score_pairs`.
    """

    def __init__(self, model: str, max_length: int = 256, dtype: str = "auto", batch_size: int | None = None,
                 max_batch_tokens: int | None = None, device: str = "auto", num_threads: int | None = None,
                 progress: bool = True, backend: str = "torch"):
        self.model = model
        self.backend = backend
        self.max_length = max_length
        self.dtype = dtype
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.device = device
        self.num_threads = num_threads
        self.progress = progress

    # ------------------------------------------------------------------ setup
    @property
    def _label(self) -> str:
        return os.fspath(self.model) if isinstance(self.model, os.PathLike) else str(self.model)

    def _check_params(self) -> None:
        for name in ("max_length", "batch_size", "max_batch_tokens"):
            value = getattr(self, name)
            if value is None and name != "max_length":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (8 if name == "max_length" else 1):
                raise UserError(f"rerank {name}={value!r}: must be a whole number >= {8 if name == 'max_length' else 1}")
        if self.max_batch_tokens is not None and self.max_batch_tokens < self.max_length:
            raise UserError(f"rerank max_batch_tokens={self.max_batch_tokens}: must be at least max_length={self.max_length}")
        if self.dtype not in DTYPES:
            raise UserError(f"rerank dtype={self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if not is_device_name(self.device):
            raise UserError(f"rerank device={self.device!r}: expected auto, cpu, cuda or cuda:<index>")
        if self.backend not in BACKENDS:
            raise UserError(f"rerank backend={self.backend!r}: expected one of {', '.join(BACKENDS)}")

    def _resolve_source(self) -> tuple[str, str | None, Path]:
        """(what from_pretrained loads, hub revision or None, a local directory holding config.json)."""
        name = self._label
        path = Path(name).expanduser()
        if path.exists():
            if not path.is_dir():
                raise UserError(f"rerank model '{name}': {path} is not a model directory")
            return str(path), None, path
        if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
            raise UserError(f"rerank model '{name}': no such directory")
        from data import hub

        try:
            from huggingface_hub import snapshot_download

            local = Path(snapshot_download(name, allow_patterns=["config.json"], local_files_only=hub.offline()))
        except Exception as err:  # offline and not cached, unknown repo, auth: all mean "cannot resolve"
            raise UserError(f"rerank model '{name}' cannot be resolved from the hub or the local HF cache "
                            f"({type(err).__name__}); pass a local checkpoint directory") from None
        return name, local.name, local

    def _resolve_device_dtype(self) -> tuple[str, str]:
        import torch

        dev = str(self.device)
        if dev == "auto":
            dev = auto_device()
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"rerank device={self.device!r}: CUDA is not available on this machine")
        if self.dtype != "auto":
            return dev, self.dtype
        if dev.startswith("cuda"):
            return dev, "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
        return dev, "bfloat16" if hardware.cpu_has_native_bf16() else "float32"

    def _check_head(self, local: Path) -> int:
        config_path = local / "config.json"
        if not config_path.is_file():
            raise UserError(f"rerank model '{self._label}': {config_path} is missing (not a transformers checkpoint)")
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UserError(f"{config_path}: unreadable config ({err})") from None
        architectures = [str(a) for a in config.get("architectures") or []]
        if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise UserError(f"rerank model '{self._label}': {config_path} architectures {architectures} have no "
                            "sequence-classification head; pass a cross-encoder (…ForSequenceClassification)")
        labels = config.get("num_labels") or len(config.get("id2label") or {}) or 2
        if int(labels) not in (1, 2):
            raise UserError(f"rerank model '{self._label}': a head of {labels} labels; a cross-encoder scores with 1 "
                            "(relevance) or 2 (not relevant, relevant)")
        return int(labels)

    def _settings(self) -> tuple:
        return (self._label, self.max_length, self.dtype, str(self.device), self.backend)

    def identity(self) -> str:
        """Model content (or hub revision) + max length + resolved precision (+ the backend when it is OpenVINO; with
        ``backend="auto"`` the choice recorded for this CPU decides, made first when none is): the score cache's
        key prefix.  Torch scores keep the keys they always had."""
        torch_identity = self._torch_identity()
        if self.resolved_backend() == "openvino":
            import openvino

            from hardware.openvino import EXECUTION

            return sha256_text(torch_identity, "backend:openvino", openvino.__version__, EXECUTION)
        return torch_identity

    def _backend_asked(self) -> str:
        """The backend asked for where it applies: CUDA, or OpenVINO not installed, mean torch."""
        device, _ = self._resolve_device_dtype()
        if self.backend == "torch" or device != "cpu":
            return "torch"
        if not _installed("openvino"):
            if self.backend == "openvino":
                raise UserError("rerank backend=openvino: the openvino package is not installed (pip install openvino)")
            return "torch"
        return self.backend

    def resolved_backend(self) -> str:
        """``torch`` or ``openvino``: what scores.  ``auto`` takes the choice recorded for this checkpoint, precision
        and CPU (the model is loaded and the choice made now when none is recorded); ``openvino`` falls back to
        torch where the checkpoint could not be converted."""
        if getattr(self, "model_", None) is not None and self._loaded_for_ == self._settings():
            return self.backend_
        asked = self._backend_asked()
        if asked == "torch":
            return "torch"
        recorded = self._recorded_entry()
        if recorded is None:
            return self.load().backend_
        if asked == "openvino":
            return "openvino" if "weights_bytes" in recorded else "torch"
        return recorded.get("chosen", "torch")

    def _recorded_entry(self) -> dict | None:
        from data.io import cache_dir
        from retrievers import rerank_openvino as rov

        _, dtype = self._resolve_device_dtype()
        check = rov.RerankCheck(precision=dtype)
        _, digest = rov.validation_source(check)
        entry = cache_dir("rerank-openvino") / rov.entry_key(self._torch_identity(), check, digest)
        try:
            info = json.loads((entry / "info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def _torch_identity(self) -> str:
        if getattr(self, "_identity_for_", None) != self._settings():
            from readers.extractive import _dir_content_hash

            self._check_params()
            source, revision, local = self._resolve_source()
            self.labels_ = self._check_head(local)
            _, dtype = self._resolve_device_dtype()
            model_id = f"hub:{source}@{revision}" if revision is not None else f"dir:{_dir_content_hash(local)}"
            if revision is None:  # the tokenizer's files too: the same weights read other tokens with another vocabulary
                tokenizer = _tokenizer_hash(local)
                model_id += f"+tokenizer:{tokenizer}" if tokenizer else ""
            self._source_ = (source, revision)
            self.model_identity_ = model_id
            self._identity_ = sha256_text("cross-encoder-v1", model_id,
                                          json.dumps({"max_length": int(self.max_length), "dtype": dtype}, sort_keys=True))
            self._identity_for_ = self._settings()
        return self._identity_

    def batch_shape(self, device: str) -> tuple[int, int | None]:
        on_cpu = not str(device).startswith("cuda")
        pairs = self.batch_size if self.batch_size is not None else (CPU_MAX_PAIRS if on_cpu else CUDA_BATCH_SIZE)
        tokens = self.max_batch_tokens
        if tokens is None and on_cpu:
            tokens = max(CPU_TOKEN_BUDGET, int(self.max_length))
        return int(pairs), (None if tokens is None else int(tokens))

    def facts(self) -> dict:
        """Model, its content identity, max length, precision and batch shape (what the manifest records)."""
        self.identity()
        device, dtype = (self.device_, self.dtype_) if getattr(self, "model_", None) is not None else self._resolve_device_dtype()
        pairs, tokens = self.batch_shape(device)
        facts = {"model": self._label, "model_identity": self.model_identity_, "max_length": int(self.max_length),
                 "dtype": dtype, "device": device, "labels": self.labels_, "batch_size": pairs, "max_batch_tokens": tokens,
                 "backend": self.resolved_backend()}
        if getattr(self, "openvino_info_", None):
            facts["openvino"] = self.openvino_info_
        return facts

    def load(self) -> "CrossEncoderScorer":
        if getattr(self, "model_", None) is not None and self._loaded_for_ == self._settings():
            return self
        self.model_ = None
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch_identity()
        source, revision = self._source_
        device, dtype = self._resolve_device_dtype()
        if device == "cpu":
            torch.set_num_threads(int(self.num_threads or hardware.available_cores()))
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
        except Exception as err:
            raise UserError(f"rerank model '{self._label}': cannot load its tokenizer ({type(err).__name__}: {err})") from None
        try:
            model, info = AutoModelForSequenceClassification.from_pretrained(source, revision=revision, output_loading_info=True)
        except Exception as err:
            raise UserError(f"rerank model '{self._label}': cannot load as a sequence classifier "
                            f"({type(err).__name__}: {str(err).splitlines()[0][:160]})") from None
        missing = [k for k in info.get("missing_keys") or [] if "classifier" in k or "score" in k]
        if missing:
            raise UserError(f"rerank model '{self._label}': checkpoint lacks its classification head {sorted(missing)[:4]} "
                            "(a random head would score); pass a trained cross-encoder")
        if device == "cpu" and dtype == "bfloat16" and not hardware.cpu_has_native_bf16():
            warn(f"rerank dtype bfloat16 on a CPU without native bf16 ({hardware.cpu_model()}): emulated, slower than float32")
        model.eval().to(device)
        self.tokenizer_, self.model_, self.device_, self.dtype_ = tokenizer, model, device, dtype
        self.openvino_, self.openvino_info_, self.backend_ = None, None, "torch"
        asked = self._backend_asked()
        if asked != "torch":
            self.openvino_, self.openvino_info_ = self._openvino_model(model, dtype)
            if self.openvino_ is not None and (asked == "openvino" or self.openvino_info_.get("chosen") == "openvino"):
                self.backend_ = "openvino"
            else:
                self.openvino_ = None
                if asked == "openvino":
                    print(f"note: rerank backend=openvino: {self.openvino_info_.get('reason', 'not converted')}; "
                          "scoring with torch", file=sys.stderr)
        self._loaded_for_ = self._settings()
        return self

    def _openvino_model(self, torch_model, dtype: str):
        """``(OpenVINO cross-encoder or None, info)``: the checkpoint converted for ``dtype`` and the backend choice
        measured on this CPU, from the cache or built now."""
        from retrievers import rerank_openvino as rov

        def score(handle, precision, questions, passages):
            return self._score(questions, passages, handle, precision, progress=False)

        example = self.tokenizer_(["Which passage answers?"] * 2, ["This passage answers it."] * 2, return_tensors="np")
        example = {k: np.asarray(v, dtype=np.int64) for k, v in example.items() if k in self.tokenizer_.model_input_names}
        threads = int(self.num_threads or hardware.available_cores())
        return rov.load_or_build(self._torch_identity(), torch_model, example, score, dtype, threads, self._label)

    def context_separator(self) -> str:
        """What goes between a sentence and its paragraph in a ``sentence+context`` passage: the tokenizer's separator
        token between spaces (``" [SEP] "`` for BERT-like models), else a blank line (:func:`context_separator`)."""
        if getattr(self, "tokenizer_", None) is not None and getattr(self, "_loaded_for_", None) == self._settings():
            return context_separator(self.tokenizer_)
        if getattr(self, "_separator_for_", None) != self._settings():
            from transformers import AutoTokenizer

            self._torch_identity()
            source, revision = self._source_
            try:
                self._separator_ = context_separator(AutoTokenizer.from_pretrained(source, revision=revision))
            except Exception as err:
                raise UserError(f"rerank model '{self._label}': cannot load its tokenizer ({type(err).__name__}: {err})") from None
            self._separator_for_ = self._settings()
        return self._separator_

    # ------------------------------------------------------------------ scoring
    def score_pairs(self, questions: list[str], passages: list[str]) -> np.ndarray:
        """float32 ``[P]`` relevance of each ``(questions[i], passages[i])`` (the head's logit or log-odds)."""
        if len(questions) != len(passages):
            raise UserError(f"rerank: {len(questions)} questions but {len(passages)} passages (one per pair)")
        if not questions:
            return np.zeros(0, np.float32)
        self.load()
        return self._score(list(questions), list(passages), self.openvino_, self.dtype_, progress=self.progress)

    def _score(self, questions: list[str], passages: list[str], openvino_model, dtype: str, progress: bool) -> np.ndarray:
        """Scores with the torch model at ``dtype`` (``openvino_model`` None) or with an OpenVINO cross-encoder."""
        import torch

        from readers.extractive import CPU_AUTOCAST_SPAN_MULTIPLE, _padded_span, window_batches

        tok = self.tokenizer_
        enc = tok(list(questions), list(passages), truncation="longest_first", max_length=int(self.max_length))
        ids = enc["input_ids"]
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        order = np.argsort(-lengths, kind="stable")  # longest first: memory peaks early
        device = self.device_
        autocast = openvino_model is None and dtype != "float32"
        multiple = CPU_AUTOCAST_SPAN_MULTIPLE if autocast and device == "cpu" else 1
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc and n in tok.model_input_names]
        pad_values = {"input_ids": tok.pad_token_id if tok.pad_token_id is not None else 0, "attention_mask": 0,
                      "token_type_ids": tok.pad_token_type_id}
        left = tok.padding_side == "left"  # a left-padding tokenizer: its pads go first
        out = np.zeros(len(ids), np.float32)
        bar = None
        if progress and len(ids) >= 256:
            from data.progress import tqdm

            bar = tqdm(total=len(ids), unit="pair", desc="re-ranking", leave=False, file=sys.stderr)
        pairs, tokens = self.batch_shape(device)
        width = int(lengths.max())

        def batches():  # (rows, padded inputs) per forward pass
            for batch in window_batches(lengths[order], pairs, tokens, multiple, width):
                rows = order[batch]
                span = _padded_span(int(lengths[rows].max()), multiple, width)
                inputs = {}
                for name in names:
                    block = np.full((len(rows), span), pad_values[name], np.int64)
                    for i, r in enumerate(rows):
                        seq = enc[name][r]
                        if left:
                            block[i, span - len(seq):] = seq
                        else:
                            block[i, : len(seq)] = seq
                    inputs[name] = block
                yield rows, inputs

        def relevance(logits: np.ndarray) -> np.ndarray:
            return logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]

        try:
            if openvino_model is not None:
                for rows, logits in openvino_model.run(batches()):
                    out[rows] = relevance(logits)
                    if bar is not None:
                        bar.update(len(rows))
            else:
                with torch.inference_mode():
                    for rows, inputs in batches():
                        inputs = {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}
                        with attention_kernels(device), torch.autocast(device_type=device.split(":")[0],
                                                                       dtype=torch.bfloat16, enabled=autocast):
                            logits = self.model_(**inputs).logits.float()
                        out[rows] = relevance(logits.cpu().numpy())
                        if bar is not None:
                            bar.update(len(rows))
        finally:
            if bar is not None:
                bar.close()
        return out


def context_separator(tokenizer) -> str:
    """The tokenizer's separator token between spaces, or a blank line for a tokenizer without one: what training
    (:mod:`retrievers.train_reranker`) and re-ranking put between a sentence and its paragraph."""
    sep = getattr(tokenizer, "sep_token", None)
    return f" {sep} " if sep else "\n\n"


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "merges.txt", "vocab.json",
                   "special_tokens_map.json", "sentencepiece.bpe.model", "spiece.model")


def _tokenizer_hash(directory: Path) -> str:
    """sha256 over the tokenizer files of a checkpoint directory ('' when it has none)."""
    import hashlib

    h, found = hashlib.sha256(), False
    for name in TOKENIZER_FILES:
        path = directory / name
        if path.is_file():
            found = True
            h.update(name.encode())
            h.update(path.read_bytes())
    return h.hexdigest() if found else ""


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None
