"""Fine-tune any Hugging Face encoder into an extractive (span) reader on SQuAD.

``python -m readers.train --base MODEL_OR_PATH --train SQUAD_FILE [--dev SQUAD_FILE] --out DIR``

The recipe is BERT's SQuAD fine-tuning (Devlin et al., 2019, "BERT: Pre-training
of Deep Bidirectional Transformers for Language Understanding", NAACL, section
4.2): a linear start/end head on the encoder, cross-entropy over the start and
end token, AdamW (Loshchilov & Hutter, 2019, "Decoupled Weight Decay
Regularization", ICLR) with linear warm-up and linear decay, gradient clipping.
Windows are drawn in length-grouped batches (seeded), so padding stays small.

The output directory holds the final model (``save_pretrained``: loadable with
``AutoModelForQuestionAnswering.from_pretrained(DIR)`` and by
``readers.extractive.ExtractiveReader``), ``checkpoints/step-NNNNNNN/``
(model, tokenizer, optimizer, scheduler, RNG states, data position; written to a
temp dir and renamed), ``train_log.jsonl`` (one row per step, plus eval rows),
``loss.png``, ``manifest.json`` (config, versions, seed, data sha256),
``eval.json`` and ``dev_predictions.json`` when ``--dev`` is given.

Several GPUs: launch with ``torchrun --nproc_per_node N -m readers.train ...``;
the torchrun environment turns on ``torch.distributed`` +
``DistributedDataParallel``; every global batch is split over the ranks, rank 0
writes the files.  ``--batch-size`` is the global batch (windows per optimizer
step) whatever the number of devices and ``--grad-accum``, so a run's data
order and schedule do not depend on the hardware.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from data.errors import UserError
from data.io import sha256_file, write_json, write_jsonl

CHECKPOINT_DIR = "checkpoints"
LOG_FILE = "train_log.jsonl"
STATE_FILE = "trainer_state.pt"
# settings that fix the run's data order and schedule: a resume must keep them
PLAN_KEYS = (
    "train_sha256",
    "train_limit",
    "max_length",
    "stride",
    "batch_size",
    "seed",
    "lr",
    "weight_decay",
    "warmup_ratio",
    "epochs",
    "max_steps",
    "group_size",
)


class ReaderTrainer:
    """Fine-tunes ``base`` (hub name or local dir) into an extractive QA model.

    Plain parameters; :meth:`fit` does the work and sets ``history_`` (log
    rows), ``dev_metrics_`` (final EM/F1 or ``None``), ``step_`` (optimizer
    steps done) and ``stop_reason_``.
    """

    def __init__(
        self,
        base: str,
        max_length: int = 384,
        stride: int = 128,
        batch_size: int = 32,
        grad_accum: int = 1,
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        max_grad_norm: float = 1.0,
        epochs: float = 2.0,
        max_steps: int | None = None,
        max_minutes: float | None = None,
        checkpoint_every: int = 500,
        keep_checkpoints: int = 2,
        eval_every: int = 0,
        eval_limit: int | None = None,
        eval_batch_size: int = 64,
        train_limit: int | None = None,
        max_answer_tokens: int = 30,
        group_size: int = 50,
        bf16: str = "auto",
        device: str | None = None,
        threads: int | None = None,
        language: str = "en",
        seed: int = 13,
        progress: bool = True,
    ):
        self.base = base
        self.max_length = max_length
        self.stride = stride
        self.batch_size = batch_size
        self.grad_accum = grad_accum
        self.lr = lr
        self.weight_decay = weight_decay
        self.warmup_ratio = warmup_ratio
        self.max_grad_norm = max_grad_norm
        self.epochs = epochs
        self.max_steps = max_steps
        self.max_minutes = max_minutes
        self.checkpoint_every = checkpoint_every
        self.keep_checkpoints = keep_checkpoints
        self.eval_every = eval_every
        self.eval_limit = eval_limit
        self.eval_batch_size = eval_batch_size
        self.train_limit = train_limit
        self.max_answer_tokens = max_answer_tokens
        self.group_size = group_size
        self.bf16 = bf16
        self.device = device
        self.threads = threads
        self.language = language
        self.seed = seed
        self.progress = progress

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        positive = ("max_length", "stride", "batch_size", "grad_accum", "checkpoint_every", "keep_checkpoints",
                    "eval_batch_size", "max_answer_tokens", "group_size")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"--{name.replace('_', '-')}: must be a positive integer, got {value!r}")
        for name in ("max_steps", "eval_limit", "train_limit", "threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise UserError(f"--{name.replace('_', '-')}: must be a positive integer, got {value!r}")
        if self.eval_every < 0:
            raise UserError(f"--eval-every: must be >= 0, got {self.eval_every}")
        if not self.lr > 0:
            raise UserError(f"--lr: must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise UserError(f"--weight-decay: must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"--warmup-ratio: must be in [0, 1), got {self.warmup_ratio}")
        if not self.max_grad_norm > 0:
            raise UserError(f"--max-grad-norm: must be > 0, got {self.max_grad_norm}")
        if not self.epochs > 0:
            raise UserError(f"--epochs: must be > 0, got {self.epochs}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise UserError(f"--max-minutes: must be > 0, got {self.max_minutes}")
        if self.bf16 not in ("auto", "on", "off"):
            raise UserError(f"--bf16: must be auto, on or off, got {self.bf16!r}")
        from eval.answer_metrics import LANGUAGES
        from readers.squad_features import MAX_QUESTION_TOKENS

        if self.language not in LANGUAGES:
            raise UserError(f"--language: {self.language!r} is not one of {', '.join(LANGUAGES)}")

        if self.stride >= self.max_length - MAX_QUESTION_TOKENS - 3:
            raise UserError(
                f"--stride: {self.stride} leaves no room for context in windows of --max-length {self.max_length} "
                f"(need stride < max_length - {MAX_QUESTION_TOKENS + 3})"
            )

    # --------------------------------------------------------------------- fit
    def fit(self, train_file, out_dir, dev_file=None, resume: str | None = None) -> "ReaderTrainer":
        """Train on ``train_file`` (SQuAD JSON/.gz/.zip), write everything to ``out_dir``.

        ``resume``: ``"latest"`` (newest checkpoint in ``out_dir``) or a
        checkpoint directory; the run continues exactly where it stopped.
        """
        started = time.monotonic()
        self._check_params()
        train_file, out_dir = Path(train_file), Path(out_dir)
        dev_file = None if dev_file is None else Path(dev_file)
        for path in [train_file] + ([dev_file] if dev_file is not None else []):
            if not path.is_file():
                raise UserError(f"{path}: no such file")
        checkpoint = _find_resume_checkpoint(out_dir, resume)
        if checkpoint is None and _list_checkpoints(out_dir):
            raise UserError(f"{out_dir}: already holds checkpoints; pass --resume to continue or choose another --out")
        source = resolve_model_dir(self.base) if checkpoint is None else str(checkpoint)
        from readers.squad_features import read_squad_examples

        train_examples = read_squad_examples(train_file, limit=self.train_limit)
        dev_examples = None
        if dev_file is not None:
            dev_examples = read_squad_examples(dev_file)
            if self.eval_limit is not None and self.eval_limit < len(dev_examples):
                picks = np.unique(np.linspace(0, len(dev_examples) - 1, self.eval_limit).round().astype(int))
                dev_examples = [dev_examples[i] for i in picks]
        import torch

        if self.threads is not None:
            torch.set_num_threads(self.threads)
        dist = _Distributed.from_env(self.device)
        try:
            return self._fit(torch, dist, started, train_file, out_dir, dev_file, checkpoint, source,
                             train_examples, dev_examples)
        finally:
            dist.close()

    def _fit(self, torch, dist, started, train_file, out_dir, dev_file, checkpoint, source, train_examples,
             dev_examples):
        run = self._prepare(torch, dist, started, train_file, dev_file, checkpoint, source, train_examples,
                            dev_examples)
        self._build_optimizer(run)
        if run.state is not None:
            self._restore(run, checkpoint)
        run.train_model = run.model
        if dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            run.train_model = DistributedDataParallel(
                run.model, device_ids=[run.device.index] if run.device.type == "cuda" else None
            )
        manifest = self._start_outputs(run, out_dir, train_file, dev_file, checkpoint, source, train_examples)
        stop_reason = self._train(run, out_dir)
        metrics = self._finish(run, out_dir, manifest, stop_reason)
        self.history_ = run.history
        self.dev_metrics_ = metrics
        self.step_ = run.step
        self.stop_reason_ = stop_reason
        return self

    def _prepare(self, torch, dist, started, train_file, dev_file, checkpoint, source, train_examples,
                 dev_examples) -> "_Run":
        """Data hashes and the resume's plan check, seeds, the model on its device, the examples cut into windows."""
        from readers.squad_features import build_windows

        train_sha = sha256_file(train_file)
        dev_sha = sha256_file(dev_file) if dev_file is not None else None
        plan = {k: getattr(self, k) for k in PLAN_KEYS if hasattr(self, k)}
        plan["train_sha256"] = train_sha
        state = None
        if checkpoint is not None:
            state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
            _check_plan(json.loads(state["plan"]), plan, checkpoint)

        _seed_everything(self.seed + dist.rank, torch)
        model, tokenizer = load_model_and_tokenizer(source)
        limit = getattr(model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and self.max_length > limit:
            raise UserError(f"--max-length: {self.max_length} exceeds the model's {limit} positions ({self.base})")

        show = self.progress and dist.is_main
        train_windows = build_windows(train_examples, tokenizer, self.max_length, self.stride,
                                      desc="tokenize train", progress=show)
        steps_per_epoch = len(train_windows) // self.batch_size
        if steps_per_epoch < 1:
            raise UserError(f"{train_file}: {len(train_windows)} windows, fewer than one batch of {self.batch_size}")
        total_steps = self.max_steps or max(1, math.ceil(self.epochs * steps_per_epoch))
        micro = self.grad_accum * dist.world
        if self.batch_size % micro:
            raise UserError(f"--batch-size: {self.batch_size} is not divisible by grad-accum x devices = {micro}")
        dev_windows = None
        if dev_examples is not None:
            dev_windows = build_windows(dev_examples, tokenizer, self.max_length, self.stride,
                                        desc="tokenize dev", progress=show)

        device = dist.device
        use_bf16 = self.bf16 == "on" or (self.bf16 == "auto" and (
            (device.type == "cuda" and torch.cuda.is_bf16_supported())
            or (device.type == "cpu" and cpu_has_native_bf16())))
        model.to(device)
        return _Run(torch=torch, dist=dist, started=started, plan=plan, state=state, train_sha=train_sha,
                    dev_sha=dev_sha, model=model, tokenizer=tokenizer, show=show, train_windows=train_windows,
                    dev_examples=dev_examples, dev_windows=dev_windows, steps_per_epoch=steps_per_epoch,
                    total_steps=total_steps, device=device, use_bf16=use_bf16)

    def _build_optimizer(self, run: "_Run") -> None:
        """AdamW (no weight decay on biases and norms) with linear warm-up and decay."""
        from transformers import get_linear_schedule_with_warmup

        torch = run.torch
        decay = [p for n, p in run.model.named_parameters() if p.requires_grad and p.ndim >= 2]
        no_decay = [p for n, p in run.model.named_parameters() if p.requires_grad and p.ndim < 2]
        run.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.lr,
        )
        run.warmup = int(round(self.warmup_ratio * run.total_steps))
        run.scheduler = get_linear_schedule_with_warmup(run.optimizer, run.warmup, run.total_steps)

    def _restore(self, run: "_Run", checkpoint: Path) -> None:
        """Optimizer, schedule, step, elapsed time and RNG states of the checkpoint being resumed."""
        state = run.state
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
        run.step = int(state["step"])
        run.elapsed_before = float(state["elapsed_s"])
        epoch, index = divmod(run.step, run.steps_per_epoch)
        if (epoch, index) != (int(state["epoch"]), int(state["batch_in_epoch"])):
            raise UserError(f"{checkpoint}: data position {state['epoch']}/{state['batch_in_epoch']} "
                            f"does not match step {run.step} at {run.steps_per_epoch} steps per epoch")
        _restore_rng(state["rng"], run.dist.rank, run.torch)

    def _start_outputs(self, run: "_Run", out_dir, train_file, dev_file, checkpoint, source,
                       train_examples) -> dict:
        """The output directory, the log (a resume keeps its rows up to the checkpoint) and a running manifest."""
        dist = run.dist
        out_dir.mkdir(parents=True, exist_ok=True)
        run.log_path = out_dir / LOG_FILE
        run.history = _start_log(run.log_path, run.step if run.state is not None else 0) if dist.is_main else []
        manifest = {
            "command": "readers.train",
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "status": "running",
            "config": self.get_params(),
            "base_resolved": source if checkpoint is None else None,
            "resumed_from": None if checkpoint is None else str(checkpoint),
            "seed": self.seed,
            "data": {"train": {"path": str(train_file), "sha256": run.train_sha, "questions": len(train_examples),
                               "windows": len(run.train_windows)},
                     "dev": None if dev_file is None else {"path": str(dev_file), "sha256": run.dev_sha,
                                                           "questions": len(run.dev_examples),
                                                           "windows": len(run.dev_windows)}},
            "steps_per_epoch": run.steps_per_epoch,
            "total_steps": run.total_steps,
            "warmup_steps": run.warmup,
            "device": str(run.device),
            "world_size": dist.world,
            "bf16": run.use_bf16,
            "versions": _versions(run.torch),
        }
        if dist.is_main:
            write_json(out_dir / "manifest.json", manifest)
            _clean_temp_dirs(out_dir)
        return manifest

    def _train(self, run: "_Run", out_dir: Path) -> str:
        """Optimizer steps until the schedule ends or time runs out, evaluating and checkpointing on the way.

        Returns the stop reason: ``"finished"`` or ``"time limit"``.
        """
        torch, dist, device, train_windows = run.torch, run.dist, run.device, run.train_windows
        pad_id = run.tokenizer.pad_token_id if run.tokenizer.pad_token_id is not None else 0
        input_names = set(train_windows.inputs) | {"attention_mask", "start_positions", "end_positions"}
        orders: dict[int, np.ndarray] = {}
        stop_reason = "finished" if run.step >= run.total_steps else None
        bar = _progress(run.total_steps, run.step, run.show)
        run.train_model.train()
        while stop_reason is None:
            epoch, index = divmod(run.step, run.steps_per_epoch)
            if epoch not in orders:
                orders = {epoch: length_grouped_order(train_windows.lengths, self.batch_size, self.group_size,
                                                      self.seed, epoch)}
            batch_rows = orders[epoch][index]
            micro_batches = [
                {k: v.to(device, non_blocking=True)
                 for k, v in train_windows.batch(rows[dist.rank :: dist.world], pad_id).items() if k in input_names}
                for rows in np.split(batch_rows, self.grad_accum)
            ]
            step_loss, grad_norm, lr = optimizer_step(run.train_model, micro_batches, run.optimizer, run.scheduler,
                                                      self.max_grad_norm, run.autocast)
            run.step += 1
            step = run.step
            if dist.world > 1:
                torch.distributed.all_reduce(step_loss)
                step_loss /= dist.world
            elapsed = run.elapsed_before + time.monotonic() - run.started
            if dist.is_main:
                row = {"step": step, "epoch": epoch, "loss": float(step_loss), "lr": lr,
                       "grad_norm": float(grad_norm), "elapsed_s": round(elapsed, 3), "windows": len(batch_rows)}
                _append_log(run.log_path, row, run.history)
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{lr:.2e}")
            if step >= run.total_steps:
                stop_reason = "finished"
            elif self.max_minutes is not None and dist.agree(time.monotonic() - run.started > self.max_minutes * 60):
                stop_reason = "time limit"
            if self.eval_every and step % self.eval_every == 0 and run.dev_examples is not None and stop_reason is None:
                self._evaluate_logged(torch, run.model, run.tokenizer, run.dev_examples, run.dev_windows, dist, step,
                                      run.elapsed(), run.log_path, run.history, run.autocast)
                run.train_model.train()
            if step % self.checkpoint_every == 0 or stop_reason is not None:
                self._save_checkpoint(torch, run.model, run.tokenizer, run.optimizer, run.scheduler, dist, out_dir,
                                      run.plan, step, run.steps_per_epoch, run.elapsed())
                if dist.is_main:
                    plot_training_log(run.history, out_dir / "loss.png")
        bar.close()
        return stop_reason

    def _finish(self, run: "_Run", out_dir: Path, manifest: dict, stop_reason: str):
        """The final model, the final dev evaluation, the finished manifest; returns the dev metrics (or ``None``)."""
        dist = run.dist
        if dist.is_main:
            _save_final_model(run.model, run.tokenizer, out_dir)
        metrics = None
        if run.dev_examples is not None:
            metrics = self._evaluate_logged(run.torch, run.model, run.tokenizer, run.dev_examples, run.dev_windows,
                                            dist, run.step, run.elapsed(), run.log_path, run.history, run.autocast,
                                            final_dir=out_dir)
        if dist.is_main:
            plot_training_log(run.history, out_dir / "loss.png")
            manifest.update(status=stop_reason, steps_done=run.step, elapsed_s=round(run.elapsed(), 3),
                            finished=datetime.now(timezone.utc).isoformat(timespec="seconds"), dev_metrics=metrics)
            write_json(out_dir / "manifest.json", manifest)
        dist.barrier()
        return metrics

    def get_params(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.endswith("_")}

    # ------------------------------------------------------------- evaluation
    def _evaluate_logged(self, torch, model, tokenizer, examples, windows, dist, step, elapsed, log_path, history,
                         autocast, final_dir: Path | None = None):
        metrics = None
        if dist.is_main:
            predictions = predict_answers(model, tokenizer, examples, windows, self.eval_batch_size,
                                          self.max_answer_tokens, autocast, self.progress)
            metrics = squad_metrics(examples, predictions, self.language)
            _append_log(log_path, {"step": step, "elapsed_s": round(elapsed, 3), "eval": metrics}, history)
            if final_dir is not None:
                write_json(final_dir / "eval.json", {"step": step, **metrics})
                write_json(final_dir / "dev_predictions.json", predictions)
        dist.barrier()
        return metrics

    # ------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, torch, model, tokenizer, optimizer, scheduler, dist, out_dir, plan, step,
                         steps_per_epoch, elapsed):
        rng = dist.gather_objects(_rng_state(torch))
        if not dist.is_main:
            dist.barrier()
            return
        epoch, index = divmod(step, steps_per_epoch)
        final = out_dir / CHECKPOINT_DIR / f"step-{step:07d}"
        tmp = out_dir / CHECKPOINT_DIR / f".tmp-step-{step:07d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save(
            {"step": step, "epoch": epoch, "batch_in_epoch": index, "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "rng": rng, "elapsed_s": elapsed, "plan": json.dumps(plan),
             "world_size": dist.world},
            tmp / STATE_FILE,
        )
        (tmp / "trainer_state.json").write_text(
            json.dumps({"step": step, "epoch": epoch, "batch_in_epoch": index, "elapsed_s": elapsed,
                        "plan": plan}, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            trash = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.replace(final, trash)
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, final)
        for old in _list_checkpoints(out_dir)[: -self.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        dist.barrier()


@dataclass
class _Run:
    """One :meth:`ReaderTrainer.fit` call's state, handed between its steps."""

    torch: Any
    dist: "_Distributed"
    started: float  # time.monotonic() when fit() began
    plan: dict  # the settings a resume must keep (PLAN_KEYS)
    state: dict | None  # the checkpoint being resumed
    train_sha: str
    dev_sha: str | None
    model: Any
    tokenizer: Any
    show: bool  # progress bars (rank 0 only)
    train_windows: Any
    dev_examples: list | None
    dev_windows: Any
    steps_per_epoch: int
    total_steps: int
    device: Any
    use_bf16: bool
    train_model: Any = None  # the model, or its DistributedDataParallel wrapper
    optimizer: Any = None
    scheduler: Any = None
    warmup: int = 0
    step: int = 0  # optimizer steps done
    elapsed_before: float = 0.0  # seconds spent before a resume
    log_path: Path | None = None
    history: list = field(default_factory=list)

    def autocast(self):
        """bfloat16 autocast when the run uses it, else a no-op context."""
        if self.use_bf16:
            return self.torch.autocast(self.device.type, dtype=self.torch.bfloat16)
        return contextlib.nullcontext()

    def elapsed(self) -> float:
        """Training seconds so far, over resumes."""
        return self.elapsed_before + time.monotonic() - self.started


# ---------------------------------------------------------------------- model
def resolve_model_dir(base: str) -> str:
    """The directory (or hub name) holding the Hugging Face model files of ``base``.

    A sentence-transformers directory keeps them in the folder of its
    ``Transformer`` module (``modules.json``), often the directory itself.
    """
    path = Path(base).expanduser()
    if not path.exists():
        if base.startswith((".", "/", "~")) or base.count("/") > 1 or "\\" in base:
            raise UserError(f"--base {base}: no such directory")
        return base  # a hub name
    if not path.is_dir():
        raise UserError(f"--base {base}: not a model directory")
    if (path / "config.json").is_file():
        return str(path)
    modules = path / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text(encoding="utf-8"))
            sub = next(e.get("path", "") for e in entries if str(e.get("type", "")).endswith("models.Transformer"))
        except (ValueError, StopIteration, AttributeError, TypeError):
            raise UserError(f"{modules}: no sentence-transformers Transformer module listed") from None
        if (path / sub / "config.json").is_file():
            return str(path / sub)
    raise UserError(f"--base {base}: not a Hugging Face model directory (no config.json)")


def load_model_and_tokenizer(source: str):
    """``AutoModelForQuestionAnswering`` + fast tokenizer from a directory or hub name."""
    from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"--base {source}: cannot load a model config ({_first_line(e)})") from None
    try:
        model = AutoModelForQuestionAnswering.from_pretrained(source, config=config)
    except ValueError as e:
        raise UserError(f"--base {source}: no question-answering head for this model type ({_first_line(e)})") from None
    except OSError as e:
        raise UserError(f"--base {source}: cannot load model weights ({_first_line(e)})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"--base {source}: cannot load a tokenizer ({_first_line(e)})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"--base {source}: needs a fast tokenizer (tokenizer.json) for offset mappings")
    return model, tokenizer


def _save_final_model(model, tokenizer, out_dir: Path) -> None:
    """``save_pretrained`` into a temp dir, then move the files in (config.json last)."""
    tmp = out_dir / f".tmp-final-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = sorted(tmp.iterdir(), key=lambda p: p.name == "config.json")
    for f in files:
        os.replace(f, out_dir / f.name)
    tmp.rmdir()


def span_loss(start_logits, end_logits, attention_mask, start_positions, end_positions):
    """Mean of the start- and end-token cross-entropies, over each window's real tokens only.

    Padding is masked out of the softmax, so a window's loss does not depend on
    how wide its batch was padded (nor on the split into micro-batches or ranks).
    """
    import torch.nn.functional as F

    pad = attention_mask == 0
    start = start_logits.float().masked_fill(pad, -1e9)
    end = end_logits.float().masked_fill(pad, -1e9)
    return (F.cross_entropy(start, start_positions) + F.cross_entropy(end, end_positions)) / 2


def optimizer_step(train_model, micro_batches: list[dict], optimizer, scheduler, max_grad_norm: float,
                   autocast=contextlib.nullcontext):
    """One optimizer step over ``micro_batches`` (gradient accumulation; DDP syncs on the last one).

    Each micro-batch holds the model inputs plus ``start_positions``/``end_positions``.
    Returns ``(mean loss tensor, gradient norm before clipping, learning rate used)``.
    """
    import torch

    sync_every = not hasattr(train_model, "no_sync")
    loss_sum = None
    for j, batch in enumerate(micro_batches):
        inputs = {k: v for k, v in batch.items() if k not in ("start_positions", "end_positions")}
        sync = sync_every or j == len(micro_batches) - 1
        with contextlib.nullcontext() if sync else train_model.no_sync():
            with autocast():
                out = train_model(**inputs)
            loss = span_loss(out.start_logits, out.end_logits, batch["attention_mask"], batch["start_positions"],
                             batch["end_positions"])
            (loss / len(micro_batches)).backward()
        loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum / len(micro_batches), grad_norm, lr


# ----------------------------------------------------------------- data order
def length_grouped_order(lengths: np.ndarray, batch_size: int, group_size: int, seed: int, epoch: int) -> np.ndarray:
    """Batches of window rows for one epoch, ``[steps, batch_size]``.

    A seeded shuffle, cut into groups of ``batch_size * group_size`` windows;
    each group sorted by length (longest first) and cut into batches; the
    batches shuffled.  The last incomplete batch is dropped.  The order depends
    only on (lengths, batch size, group size, seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(lengths))
    group = batch_size * group_size
    chunks = [perm[i : i + group] for i in range(0, len(perm), group)]
    ordered = np.concatenate([c[np.argsort(-lengths[c], kind="stable")] for c in chunks])
    steps = len(ordered) // batch_size
    batches = ordered[: steps * batch_size].reshape(steps, batch_size)
    return batches[rng.permutation(steps)]


# ----------------------------------------------------------------- evaluation
def predict_answers(model, tokenizer, examples, windows, batch_size: int = 64, max_answer_tokens: int = 30,
                    autocast=contextlib.nullcontext, progress: bool = True) -> dict[str, str]:
    """Best span per question (start + end logit, at most ``max_answer_tokens``) over its windows."""
    import torch
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    from readers.squad_features import decode_answers

    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    order = np.argsort(-windows.lengths, kind="stable")
    starts: list[np.ndarray] = [None] * len(windows)  # type: ignore[list-item]
    ends: list[np.ndarray] = [None] * len(windows)  # type: ignore[list-item]
    names = set(windows.inputs) | {"attention_mask"}
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for lo in tqdm(range(0, len(order), batch_size), desc="evaluate", unit="batch", disable=not progress,
                       leave=False):
            rows = order[lo : lo + batch_size]
            inputs = {k: v.to(device) for k, v in windows.batch(rows, pad_id).items() if k in names}
            with autocast():
                out = model(**inputs)
            s = out.start_logits.float().cpu().numpy()
            e = out.end_logits.float().cpu().numpy()
            for i, r in enumerate(rows):
                n = windows.lengths[r]
                starts[r], ends[r] = s[i, :n], e[i, :n]
    model.train(was_training)
    return decode_answers(examples, windows, starts, ends, max_answer_tokens)


def squad_metrics(examples, predictions: dict[str, str], language: str = "en") -> dict:
    """Mean EM and F1 (x100) over questions with gold answers.

    Scores come from ``eval.answer_metrics`` (official SQuAD v1.1 normalization).
    """
    from eval.answer_metrics import exact_match, f1

    scored = [e for e in examples if e.answer_texts]
    em = [exact_match(predictions[e.qid], e.answer_texts, language) for e in scored]
    f = [f1(predictions[e.qid], e.answer_texts, language) for e in scored]
    return {"exact_match": 100.0 * float(np.mean(em)) if scored else float("nan"),
            "f1": 100.0 * float(np.mean(f)) if scored else float("nan"), "questions": len(scored)}


# ------------------------------------------------------------------- plotting
def plot_training_log(rows: list[dict], path: Path) -> None:
    """Training loss per step (and its running mean), dev F1 on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from data.io import atomic_path

    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval" in r]
    if not train:
        return
    steps = np.array([r["step"] for r in train])
    loss = np.array([r["loss"] for r in train])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, loss, color="tab:blue", alpha=0.3, linewidth=0.8, label="loss")
    window = max(1, min(50, len(loss) // 10))
    if window > 1:
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, color="tab:blue", label=f"loss, mean of {window} steps")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (start + end cross-entropy / 2)")
    ax.grid(alpha=0.3)
    if evals:
        ax2 = ax.twinx()
        ax2.plot([r["step"] for r in evals], [r["eval"]["f1"] for r in evals], "o-", color="tab:red", label="dev F1")
        ax2.set_ylabel("dev F1")
        ax2.legend(loc="upper right")
    ax.legend(loc="upper left")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ plumbing
class _Distributed:
    """torchrun environment → process group; a no-op for one process."""

    def __init__(self, rank: int, world: int, device, initialized: bool):
        self.rank, self.world, self.device, self.initialized = rank, world, device, initialized

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str | None) -> "_Distributed":
        import torch

        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1:
            import torch.distributed as td

            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            use_cuda = torch.cuda.is_available() and device != "cpu"
            if use_cuda:
                torch.cuda.set_device(local_rank)
            td.init_process_group(backend="nccl" if use_cuda else "gloo")
            dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
            return cls(td.get_rank(), td.get_world_size(), dev, True)
        if device:
            try:
                dev = torch.device(device)
            except RuntimeError:
                raise UserError(f"--device: unknown device {device!r}") from None
            if dev.type == "cuda" and not torch.cuda.is_available():
                raise UserError(f"--device {device}: CUDA is not available")
        else:
            dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return cls(0, 1, dev, False)

    def barrier(self) -> None:
        if self.initialized:
            import torch.distributed as td

            td.barrier()

    def agree(self, flag: bool) -> bool:
        """True on every rank when rank 0 says so."""
        if not self.initialized:
            return flag
        import torch
        import torch.distributed as td

        t = torch.tensor([1.0 if (flag and self.is_main) else 0.0], device=self.device)
        td.all_reduce(t)
        return bool(t.item() > 0)

    def gather_objects(self, obj) -> list:
        if not self.initialized:
            return [obj]
        import torch.distributed as td

        out = [None] * self.world
        td.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self.initialized:
            import torch.distributed as td

            td.destroy_process_group()
            self.initialized = False


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16; Linux flags).

    There bf16 autocast trains faster than fp32 (measured x1.3-1.6 on a 2-core AMD EPYC
    with avx512_bf16, see bench/train_speed.py); without them it is emulated and slower.
    """
    import hardware

    return hardware.cpu_has_native_bf16()


def _seed_everything(seed: int, torch) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state(torch) -> dict:
    np_state = np.random.get_state()
    state = {
        "python": repr(random.getstate()),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]),
                  float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(states: list, rank: int, torch) -> None:
    import ast

    if rank >= len(states):  # more ranks than when saved: fresh, distinct seeds for the new ones
        return
    state = states[rank]
    random.setstate(ast.literal_eval(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _list_checkpoints(out_dir: Path) -> list[Path]:
    root = out_dir / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir()
             if p.is_dir() and re.fullmatch(r"step-\d+", p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _find_resume_checkpoint(out_dir: Path, resume: str | None) -> Path | None:
    if resume is None:
        return None
    if resume == "latest":
        found = _list_checkpoints(out_dir)
        if not found:
            raise UserError(f"--resume: no checkpoint in {out_dir / CHECKPOINT_DIR}")
        return found[-1]
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise UserError(f"--resume {resume}: not a checkpoint directory (no {STATE_FILE})")
    return path


def _check_plan(saved: dict, now: dict, checkpoint: Path) -> None:
    for key in PLAN_KEYS:
        if saved.get(key) != now.get(key):
            raise UserError(f"--resume {checkpoint}: {key} was {saved.get(key)!r}, now {now.get(key)!r}; "
                            f"a resumed run must keep the data order and schedule")


def _clean_temp_dirs(out_dir: Path) -> None:
    """Remove what a killed run left half-written: checkpoints being saved or replaced, and the final model being
    saved (``.tmp-final-PID``, whose files are moved into ``out_dir`` only once all were written)."""
    root = out_dir / CHECKPOINT_DIR
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(p, ignore_errors=True)
    for p in out_dir.glob(".tmp-final-*"):
        shutil.rmtree(p, ignore_errors=True)


def _start_log(path: Path, keep_until: int) -> list[dict]:
    """Rows of an existing log up to step ``keep_until`` (a resume), rewritten atomically."""
    rows: list[dict] = []
    if keep_until > 0 and path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get("step", 0) <= keep_until:
                    rows.append(row)
    write_jsonl(path, rows)
    return rows


def _append_log(path: Path, row: dict, history: list[dict]) -> None:
    history.append(row)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _progress(total: int, initial: int, show: bool):
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    return tqdm(total=total, initial=initial, desc="train", unit="step", disable=not show)


def _versions(torch) -> dict:
    import tokenizers
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "cuda": torch.version.cuda if torch.cuda.is_available() else None}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


# ------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m readers.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="hub name or local directory of a Hugging Face encoder "
                                                 "(a sentence-transformers directory works)")
    p.add_argument("--train", required=True, help="SQuAD-format training file (.json, .json.gz or .zip)")
    p.add_argument("--dev", help="SQuAD-format dev file for EM/F1")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--max-length", type=int, default=384)
    p.add_argument("--stride", type=int, default=128, help="tokens of overlap between a context's windows")
    p.add_argument("--batch-size", type=int, default=32, help="windows per optimizer step, over all devices")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--max-steps", type=int, help="optimizer steps (overrides --epochs; sets the schedule length)")
    p.add_argument("--max-minutes", type=float, help="stop cleanly (checkpoint + model) after this many minutes")
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument("--keep-checkpoints", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=0, help="evaluate on --dev every N steps (0: only at the end)")
    p.add_argument("--eval-limit", type=int, help="evaluate on N evenly spaced dev questions")
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--train-limit", type=int, help="train on the first N questions")
    p.add_argument("--max-answer-tokens", type=int, default=30)
    p.add_argument("--group-size", type=int, default=50, help="length grouping: batches sorted together")
    p.add_argument("--bf16", choices=["auto", "on", "off"], default="auto",
                   help="bfloat16 autocast (auto: on for GPUs that support it and for CPUs with "
                        "AVX512-BF16/AMX-BF16, off otherwise)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--language", default="en", help="answer normalization for EM/F1 (en, th)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--resume", nargs="?", const="latest",
                   help="continue from the newest checkpoint in --out, or from the given checkpoint dir")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" bars would cut through the training bar
    try:
        params = {k: v for k, v in vars(args).items() if k not in ("train", "dev", "out", "resume", "no_progress")}
        trainer = ReaderTrainer(**params, progress=not args.no_progress)
        trainer.fit(args.train, args.out, dev_file=args.dev, resume=args.resume)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = {"out": args.out, "steps": trainer.step_, "stopped": trainer.stop_reason_}
    if trainer.dev_metrics_ is not None:
        summary.update(trainer.dev_metrics_)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
