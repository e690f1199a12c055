"""Kill matrix: real commands SIGKILLed at a seeded random point inside a named stage, rerun, compared.

We promise that a killed run resumes without losing or duplicating work and that
a rerun writes what an uninterrupted run writes.  This module checks it against
the commands users run (``python -m pipeline.run``, ``pipeline.sweep``,
``pipeline.export``, ``readers.train``) on small slices of real data
(SQuAD v1.1 dev paragraphs as an ``open:`` corpus, the shared reader):

1. an uninterrupted *reference* run of each command is made once and watched:
   how long each of its stages lasted and how many progress events (cache
   shards, read chunks, sweep levels, optimizer steps) each produced;
2. a *killed* run starts the same command; once on-disk or stderr evidence says
   it is inside stage X (a staging directory, a growing count of shards, a
   progress line), it is let run for a seeded random delay or a seeded random
   number of progress events, stopped (SIGSTOP), checked to be still inside X,
   and SIGKILLed;
3. what the kill left is recorded: temporary/staging entries, and whether any
   finished output (``metrics.json``, a published cache entry) is visible;
4. the same command is rerun to completion (``readers.train`` with
   ``--resume`` when a checkpoint was left, as its documentation says) and its
   outputs are compared with the reference: byte for byte, except files that
   carry times or resume counters (``manifest.json``, ``costs.jsonl``,
   ``train_log.jsonl``), which are compared with those fields left out.

A *plan* is a list of stages killed one after another in the same output and
cache directories (each rerun is killed in the next stage, the last one runs to
completion): ``tests/test_kill_matrix.py`` runs short chains (one kill per
stage, fast); the long form kills each stage on its own, N times::

    python -m tests.kill_matrix --kills 3 --seed 1 --out table.md

prints a Markdown table: stage | command | kills | recovered identically |
failures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("QA_DATA_DIR") or ROOT.parent / "shared" / "data").resolve()
READER = (ROOT.parent / "shared" / "models" / "minilm-squad-reader").resolve()
SHARD_ROWS = 4  # texts per embedding shard and pairs per read chunk: many shards to be killed between
SMALL_PARAGRAPHS = 60  # the open: corpus of the retrieval and reading commands
POLL_S = 0.002


# ------------------------------------------------------------------ data
@dataclass
class Data:
    """Small slices of real data, written once under ``root``."""

    root: Path
    all_corpus: Path = None  # all 2,067 SQuAD dev paragraphs, BEIR corpus.jsonl
    all_questions: Path = None
    small_corpus: Path = None  # the first SMALL_PARAGRAPHS of them
    small_questions: Path = None
    train_file: Path = None  # SQuAD-format slice for readers.train
    tiny_base: Path = None  # a 2-layer BERT with the reader's tokenizer

    @classmethod
    def make(cls, root: Path) -> "Data":
        root.mkdir(parents=True, exist_ok=True)
        d = cls(root)
        with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as zf:
            name = next(n for n in zf.namelist() if n.endswith(".json"))
            dev = json.loads(zf.read(name))
        d.all_corpus, d.all_questions = _write_slice(dev, None, root / "all.jsonl", root / "all-q.json")
        d.small_corpus, d.small_questions = _write_slice(dev, SMALL_PARAGRAPHS, root / "small.jsonl", root / "small-q.json")
        d.train_file = d.small_questions
        d.tiny_base = _tiny_bert(root / "tiny-bert")
        return d


def _write_slice(dev: dict, paragraphs: int | None, corpus: Path, questions: Path) -> tuple[Path, Path]:
    rows, articles, k = [], [], 0
    for article in dev["data"]:
        kept = []
        for i, p in enumerate(article["paragraphs"]):
            if paragraphs is not None and k >= paragraphs:
                break
            rows.append({"_id": f"{article['title']}-{i}", "title": article["title"], "text": p["context"]})
            kept.append(p)
            k += 1
        if kept:
            articles.append({"title": article["title"], "paragraphs": kept})
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    questions.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    return corpus, questions


def _tiny_bert(directory: Path) -> Path:
    """A seeded, randomly initialised 2-layer BERT saved with the shared reader's WordPiece tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(READER)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ------------------------------------------------------------------ commands
@dataclass
class Command:
    name: str
    argv: Callable[[Data, Path, Path], list[str]]  # (data, out, cache) -> argv after "python -m"
    outputs: str  # which comparison applies: "run", "sweep", "export", "train"
    cache_from: str | None = None  # reference whose cache a run of this command starts from (None: cold)


def _open_small(d: Data) -> str:
    return f"open:beir@{d.small_corpus}+squad@{d.small_questions}"


RETRIEVE = ["--retriever", "rrf:bm25+dense", "--dense-index", "IVF4,PQ96x4", "--depth", "20", "--limit", "8",
            "--threads", "1"]

COMMANDS = {
    "export": Command(
        "export",
        lambda d, out, cache: ["pipeline.export", f"open:beir@{d.all_corpus}+squad@{d.all_questions}", "--split", "dev",
                               "--limit", "50", "--out", str(out)],
        "export"),
    "read": Command(
        "read",
        lambda d, out, cache: ["pipeline.run", "--dataset", _open_small(d), *RETRIEVE, "--selector", "top:3",
                               "--reader", str(READER), "--metrics", "em,f1,bert_f1", "--out", str(out)],
        "run"),
    "sweep": Command(
        "sweep",
        lambda d, out, cache: ["pipeline.sweep", "--dataset", _open_small(d), "--retriever", "bm25", "--reader",
                               str(READER), "--limit", "4", "--n", "1-3", "--corpus-sizes", "20,40,all", "--no-ordinal",
                               "--metrics", "em,f1", "--no-plots", "--bootstrap", "50", "--out", str(out)],
        "sweep", cache_from="read"),
    "train": Command(
        "train",
        lambda d, out, cache: ["readers.train", "--base", str(d.tiny_base), "--train", str(d.train_file), "--dev",
                               str(d.small_questions), "--out", str(out), "--train-limit", "24", "--max-length", "128",
                               "--stride", "32", "--batch-size", "4", "--max-steps", "10", "--checkpoint-every", "3",
                               "--eval-limit", "8", "--lr", "3e-3", "--seed", "7", "--bf16", "off", "--threads", "1",
                               "--device", "cpu"],
        "train"),
}


# ------------------------------------------------------------------ evidence
class Probe:
    """What a running command has left on disk and printed so far (its output and cache directories, stderr)."""

    def __init__(self, out: Path, cache: Path, stderr: Path):
        self.out, self.cache, self.stderr_path = out, cache, stderr
        # the reference's counts of shards, read chunks, levels and steps (unknown while the reference runs)
        self.total_shards = self.total_reads = self.total_levels = self.total_steps = 1 << 30

    def any(self, root: Path, pattern: str) -> bool:
        return next(iter(root.glob(pattern)), None) is not None

    def count(self, root: Path, pattern: str) -> int:
        return sum(1 for _ in root.glob(pattern))

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def staging(self) -> Path | None:
        return next(iter(self.out.glob(".staging-*")), None)

    def train_steps(self) -> int:
        try:
            lines = (self.out / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
        except OSError:
            return 0
        return sum(1 for line in lines if line.endswith("}") and '"loss"' in line)


@dataclass
class Stage:
    name: str
    command: str
    evidence: str  # how "inside" is told, in words (the table's)
    inside: Callable[[Probe], bool]
    published: Callable[[Probe], list[str]]  # this stage's finished outputs visible now: none after a kill inside it
    events: Callable[[Probe], int] | None = None  # progress events: killed after a seeded number of them
    drop: tuple[str, ...] = ()  # cache entries taken out of the starting cache, so that the stage has work to do


def _names(paths) -> list[str]:
    return sorted(str(p) for p in paths)


def _faiss_training(p: Probe) -> bool:
    """From the index's cache folder appearing (under its lock) to the fill progress line that follows training."""
    folders = [f for f in p.cache.glob("faiss-index/*") if f.is_dir()]
    return bool(folders) and not any((f / "meta.json").exists() for f in folders) and "fill IVF" not in p.stderr()


def _bert_f1(p: Probe) -> bool:
    staging = p.staging()
    reads = p.count(p.out / "reads", "reads-*.npz")
    return staging is not None and reads >= p.total_reads and not (staging / "predictions.json").exists()


STAGES = {s.name: s for s in [
    Stage("corpus store", "export", "a `.KEY.*.tmp` build directory under `corpus_store/`",
          lambda p: p.any(p.cache / "corpus_store", ".*.tmp"),
          lambda p: _names(d for d in p.cache.glob("corpus_store/[!.]*") if d.is_dir()), drop=("corpus_store",)),
    Stage("export writing", "export", "a `.staging-*` directory in the output",
          lambda p: p.staging() is not None,
          lambda p: _names(p.out.glob("manifest.json"))),
    Stage("bm25 index", "read", "a `.KEY.build.*` directory under `bm25/`",
          lambda p: p.any(p.cache / "bm25", ".*.build.*"),
          lambda p: _names(p.cache.glob("bm25/*/_COMPLETE")), drop=("bm25",)),
    Stage("dense encoding", "read", "embedding shards `rows-*.npy` appearing (killed after a seeded count)",
          lambda p: p.count(p.cache / "embeddings", "*/rows-*.npy") < p.total_shards,
          lambda p: [], events=lambda p: p.count(p.cache / "embeddings", "*/rows-*.npy"),
          drop=("embeddings", "faiss-index")),
    Stage("dense index training", "read", "a `faiss-index/KEY/` folder, no `fill IVF4,PQ96x4` progress line yet",
          _faiss_training, lambda p: _names(p.cache.glob("faiss-index/*/index.*.faiss")), drop=("faiss-index",)),
    Stage("retrieval", "read", "the `bm25 search` progress line on stderr, no `.staging-*` yet",
          lambda p: p.staging() is None and not (p.out / "run.trec").exists() and "bm25 search" in p.stderr(),
          lambda p: _names(p.out.glob("run.trec"))),
    Stage("reading", "read", "read-cache chunks `reads/reads-*.npz` appearing (killed after a seeded count)",
          lambda p: p.count(p.out / "reads", "reads-*.npz") < p.total_reads,
          lambda p: _names(p.out.glob("predictions.json")), events=lambda p: p.count(p.out / "reads", "reads-*.npz")),
    Stage("BERT-F1", "read", "every read chunk written, `predictions.json` not yet in `.staging-*`",
          _bert_f1, lambda p: _names(p.out.glob("metrics.json")), drop=("bertscore",)),
    Stage("sweep levels", "sweep", "level files `levels/size*-seed*.json` appearing (killed after a seeded count)",
          lambda p: p.count(p.out / "levels", "*.json") < p.total_levels,
          lambda p: _names(p.out.glob("summary.json")), events=lambda p: p.count(p.out / "levels", "*.json")),
    Stage("training steps", "train", "rows of `train_log.jsonl` (killed after a seeded number of optimizer steps)",
          lambda p: p.train_steps() < p.total_steps,
          lambda p: _names(p.out.glob("eval.json")), events=lambda p: p.train_steps()),
    Stage("final model", "train", "a `.tmp-final-*` directory in the output (the model saved, then moved in)",
          lambda p: p.any(p.out, ".tmp-final-*"), lambda p: _names(p.out.glob("config.json"))),
]}
# the CI form's plans: the stages of one command killed one after another in the same directories
CHAINS = [("corpus store", "export writing"),
          ("bm25 index", "dense encoding", "dense index training", "retrieval", "reading", "BERT-F1"),
          ("sweep levels",), ("training steps", "final model")]


# ------------------------------------------------------------------ running
def environment(cache: Path) -> dict:
    env = dict(os.environ)
    env.update(QA_CACHE_DIR=str(cache), QA_SHARD_ROWS=str(SHARD_ROWS), QA_DATA_DIR=str(DATA), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")  # one thread per command: on a shared 2-core machine more threads only thrash
    env.pop("QA_PROGRESS", None)  # progress lines on (log mode): the retrieval stage is told by one
    return env


def start(command: Command, data: Data, out: Path, cache: Path, log: Path, extra: tuple = ()) -> subprocess.Popen:
    argv = [sys.executable, "-m", *command.argv(data, out, cache), *extra]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as err, open(log.with_suffix(".out"), "w") as std:
        return subprocess.Popen(argv, cwd=ROOT, env=environment(cache), stdout=std, stderr=err, start_new_session=True)


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return True


def _leftovers(*roots: Path) -> list[str]:
    """Temporary and staging entries (hidden names, lock files aside) under ``roots``."""
    found = []
    for root in roots:
        for p in root.rglob(".*") if root.is_dir() else []:
            if not p.name.endswith(".lock") and not any(q.name.startswith(".") for q in p.relative_to(root).parents
                                                         if q.name):
                found.append(str(p.relative_to(root.parent)))
    return sorted(found)


def clone_cache(src: Path | None, dst: Path, drop: tuple[str, ...] = (), java: Path | None = None) -> Path:
    """A copy of cache ``src`` (files over 1 MiB hard-linked) without the top-level entries ``drop``; with
    ``src=None`` a cold cache holding only the compiled Java helper and class-data archive of ``java``."""
    def copy(s, d):
        return os.link(s, d) if os.path.getsize(s) > (1 << 20) else shutil.copy2(s, d)

    if src is None:
        dst.mkdir(parents=True)
        if java is not None and (java / "java").is_dir():
            shutil.copytree(java / "java", dst / "java", copy_function=copy)
        return dst
    shutil.copytree(src, dst, copy_function=copy, ignore=lambda d, names: [n for n in names if Path(d) == src and
                                                                           (n in drop or any(n.startswith(x + ".") for x in drop))])
    return dst


@dataclass
class Reference:
    command: str
    out: Path
    cache: Path
    wall_s: float
    spans: dict[str, tuple[float, float]]  # stage -> (first, last) time inside it, seconds after the start
    events: dict[str, int]  # stage -> progress events at the end


@dataclass
class Kill:
    stage: str
    command: str
    seed: int
    index: int
    attempts: int = 1  # runs it took to land the kill inside the stage (the long form draws again after a miss)
    kill_s: float | None = None  # seconds after the start of the killed run
    at: str = ""  # where, in the stage's terms
    inside: bool | None = None
    visible: list[str] = field(default_factory=list)  # this stage's finished outputs visible after the kill
    left: list[str] = field(default_factory=list)  # temporary / staging entries the kill left
    left_after_rerun: list[str] = field(default_factory=list)
    rerun_rc: int | None = None
    differences: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def recovered(self) -> bool:
        return (self.inside is True and self.rerun_rc == 0 and not self.differences and not self.visible
                and not self.left_after_rerun and not self.error)

    def problems(self) -> list[str]:
        out = [self.error] if self.error else []
        if self.inside is False:
            out.append(f"kill landed outside the stage ({self.at})")
        if self.visible:
            out.append(f"finished output visible after the kill: {', '.join(self.visible)}")
        if self.rerun_rc not in (None, 0):
            out.append(f"rerun exit status {self.rerun_rc}")
        out += self.differences
        if self.left_after_rerun:
            out.append(f"left after the rerun: {', '.join(self.left_after_rerun)}")
        return out


class Matrix:
    """References (made once, on demand) and kills, under one work directory."""

    def __init__(self, work: Path, data: Data | None = None, log=None):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.data = data or Data.make(self.work / "data")
        self.refs: dict[str, Reference] = {}
        self.log = log or (lambda msg: None)
        self._n = 0
        # plans may run in two threads (a 2-core machine): one reference per command, made once
        self._lock = threading.Lock()
        self._ref_locks = {name: threading.Lock() for name in [*COMMANDS, "java"]}

    def _fresh(self, name: str) -> Path:
        with self._lock:
            self._n += 1
            return self.work / f"{self._n:03d}-{name.replace(' ', '-')}"

    def java_seed(self) -> Path:
        """A cache holding the compiled BM25 helper and the JVM's class-data archive (``python -m retrievers.java``,
        as install.sh makes them), copied into every cold cache: a reference's BM25 stage then lasts as long as a
        killed run's."""
        seed = self.work / "java-seed"
        with self._ref_locks["java"]:
            if not (seed / "java").is_dir():
                subprocess.run([sys.executable, "-m", "retrievers.java"], cwd=ROOT, env=environment(seed), check=True,
                               capture_output=True, timeout=600)
        return seed

    def start_cache(self, command: Command, dst: Path) -> Path:
        """A reference's starting cache: cold (the Java helper only), or the cache another reference left."""
        if command.cache_from is None:
            return clone_cache(None, dst, java=self.java_seed())
        return clone_cache(self.reference(command.cache_from).cache, dst)

    def probe(self, out: Path, cache: Path, log: Path, command: str) -> Probe:
        p = Probe(out, cache, log)
        ref = self.refs.get(command)
        if ref is not None:
            p.total_shards = ref.events.get("dense encoding", 0)
            p.total_reads = ref.events.get("reading", 0)
            p.total_levels = ref.events.get("sweep levels", 0)
            p.total_steps = ref.events.get("training steps", 0)
        return p

    def reference(self, name: str) -> Reference:
        """The uninterrupted run of command ``name``, watched: when each of its stages began and ended."""
        with self._ref_locks[name]:
            if name not in self.refs:
                self.refs[name] = self._reference(name)
            return self.refs[name]

    def _reference(self, name: str) -> Reference:
        command = COMMANDS[name]
        base = self._fresh(f"ref-{name}")
        cache = self.start_cache(command, base / "cache")
        out, log = base / "out", base / "stderr.log"
        stages = [s for s in STAGES.values() if s.command == name]
        probe = Probe(out, cache, log)
        t0 = time.monotonic()
        proc = start(command, self.data, out, cache, log)
        spans: dict[str, list[float]] = {}
        events: dict[str, int] = {}
        changed: dict[str, float] = {}  # stage -> when its event count last changed
        while proc.poll() is None:
            now = time.monotonic() - t0
            for s in stages:
                if s.name == "BERT-F1":  # from the last read chunk to predictions.json in the staging directory
                    staging = probe.staging()
                    if staging is not None and (staging / "predictions.json").exists() and "reading" in changed:
                        spans.setdefault(s.name, [changed["reading"], now])
                elif s.events is not None:
                    n = s.events(probe)
                    if n != events.get(s.name, 0):
                        changed[s.name] = now
                    events[s.name] = n
                    if n > 0:
                        spans.setdefault(s.name, [now, now])[1] = now
                elif s.inside(probe):
                    spans.setdefault(s.name, [now, now])[1] = now
            time.sleep(POLL_S)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"reference {name} failed ({proc.returncode}): {log.read_text()[-3000:]}")
        for s in stages:
            if s.events is not None:
                events[s.name] = s.events(probe)
        ref = Reference(name, out, cache, wall, {k: tuple(v) for k, v in spans.items()}, events)
        self.log(f"reference {name}: {wall:.1f} s, stages {ref.spans}, events {events}")
        return ref

    def run_plan(self, plan: tuple[str, ...], seed: int, index: int = 0, timeout: float = 600,
                 attempt: int = 0) -> list[Kill]:
        """Kill each stage of ``plan`` (all of one command) in turn in the same directories, then run to the end
        and compare with the reference.  Returns one :class:`Kill` per stage."""
        stages = [STAGES[s] for s in plan]
        (name,) = {s.command for s in stages}
        command, ref = COMMANDS[name], self.reference(name)
        base = self._fresh("+".join(plan))
        drop = tuple(x for s in stages for x in s.drop)
        # the reference's cache without what the killed stages build: earlier stages' entries are there, finished
        cache, out = clone_cache(ref.cache, base / "cache", drop), base / "out"
        kills = []
        for k, stage in enumerate(stages):
            kill = Kill(stage.name, name, seed, index)
            kills.append(kill)
            rng = random.Random(f"{seed}/{stage.name}/{index}" + (f"/{attempt}" if attempt else ""))
            log = base / f"stderr-{k}.log"
            probe = self.probe(out, cache, log, name)
            proc = start(command, self.data, out, cache, log, self._resume(command, out))
            try:
                self._kill_inside(proc, probe, stage, ref, rng, kill, timeout, 0.5 ** attempt)
            except Exception as e:  # noqa: BLE001 - recorded, the table shows it
                _killpg(proc)
                kill.error = f"{type(e).__name__}: {e}"[:400]
                return kills
            kill.visible = stage.published(probe)
            kill.left = _leftovers(out, cache)
            self.log(f"  killed {stage.name} at {kill.kill_s:.2f} s ({kill.at}); inside={kill.inside}; left {kill.left}")
        log = base / "stderr-final.log"
        proc = start(command, self.data, out, cache, log, self._resume(command, out))
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc)
        for kill in kills:
            kill.rerun_rc = proc.returncode
        if proc.returncode != 0:
            kills[-1].error = f"rerun failed: {log.read_text(errors='replace')[-600:]}"
            return kills
        differences = compare(command.outputs, ref, out, cache)
        left = _leftovers(out, cache)
        for kill in kills:
            kill.differences, kill.left_after_rerun = differences, left
        self.log(f"  rerun: {'identical' if not differences else differences}; left {left}")
        return kills

    @staticmethod
    def _resume(command: Command, out: Path) -> tuple:
        """readers.train continues from a checkpoint with --resume (its documented way); with none left, the same
        command starts again."""
        if command.outputs == "train" and any((out / "checkpoints").glob("step-*/trainer_state.pt")):
            return ("--resume",)
        return ()

    def kill_once(self, stage: str, seed: int, index: int, tries: int = 4) -> Kill:
        """One kill inside ``stage``, rerun and compared.  A time-placed kill can land after the stage when this
        run is faster than the reference was, or a stage of a few milliseconds can pass between two polls on a
        loaded machine (the run ends without it being seen); either is drawn again (earlier), up to ``tries``
        runs."""
        for attempt in range(tries):
            (kill,) = self.run_plan((stage,), seed, index, attempt=attempt)
            kill.attempts = attempt + 1
            missed = (kill.error or "").startswith(f"RuntimeError: the run ended (exit 0) before {stage}")
            if not missed and (kill.inside is not False or kill.error):
                break
        return kill

    def _kill_inside(self, proc, probe: Probe, stage: Stage, ref: Reference, rng: random.Random, kill: Kill,
                     timeout: float, scale: float = 1.0) -> None:
        t0 = time.monotonic()

        def wait_for(condition, what):
            while not condition():
                if proc.poll() is not None:
                    raise RuntimeError(f"the run ended (exit {proc.returncode}) before {what}: "
                                       f"{probe.stderr()[-300:]}")
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"{what} not reached in {timeout} s")
                time.sleep(POLL_S)

        if stage.events is not None:
            total = ref.events[stage.name]
            if total < 2:
                raise RuntimeError(f"the reference made {total} {stage.name} events: nothing to kill between")
            target = rng.randint(1, total - 1)
            wait_for(lambda: stage.events(probe) >= target, f"{stage.name} event {target}")
            where = lambda: f"after event {stage.events(probe)} of {total}"  # noqa: E731
        else:
            first, last = ref.spans.get(stage.name, (0.0, 0.0))
            # early in the stage rather than late: a loaded machine can run it faster than the reference did
            delay = rng.uniform(0.05, 0.6) * scale * max(last - first, 0.0)
            wait_for(lambda: stage.inside(probe), f"{stage.name}")
            entered = time.monotonic()
            while time.monotonic() - entered < delay and stage.inside(probe) and proc.poll() is None:
                time.sleep(POLL_S)
            where = lambda: f"{time.monotonic() - entered:.2f} s into it (reference: {last - first:.2f} s)"  # noqa: E731
        try:
            os.killpg(proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
        # a process caught forking (vfork, as subprocess spawns) waits uninterruptibly for its stopped child and never
        # shows as stopped itself: after a bound, the SIGKILL below ends both
        stopping = time.monotonic()
        while proc.poll() is None and not _stopped(proc.pid) and time.monotonic() - stopping < STOP_WAIT_S:
            time.sleep(0.0005)
        kill.kill_s = round(time.monotonic() - t0, 3)
        kill.inside = proc.poll() is None and stage.inside(probe)
        kill.at = where()
        _killpg(proc)
        if proc.returncode not in (-signal.SIGKILL,) and kill.inside:
            kill.error = f"exit status {proc.returncode} instead of SIGKILL"


STOP_WAIT_S = 5.0  # longest wait for the SIGSTOPped run to show as stopped


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# ------------------------------------------------------------------ comparing
# fields that carry times, the host, or how much a resumed run found done already: left out of the comparison
VOLATILE = {"argv", "timings_s", "peak_rss_mb", "host", "finished", "started", "elapsed_s", "seconds", "build_s",
            "passages_per_s", "write_seconds", "id_order_seconds", "index_check", "cache", "computed", "reused",
            "reads_done", "reads_reused", "reader_s", "bert_f1_pairs", "resumed", "resumed_from", "base_resolved",
            "jvm_started_early", "read_s", "score_s", "retrieve_s", "pairs_scored", "pairs_cached",
            "seconds_per_read", "git_commit"}  # git_commit: others commit to the same tree while the matrix runs


def normalized(obj, paths: dict[str, str]):
    """``obj`` (parsed JSON) without :data:`VOLATILE` fields, run-specific directories replaced by their role."""
    if isinstance(obj, dict):
        return {k: normalized(v, paths) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [normalized(v, paths) for v in obj]
    if isinstance(obj, str):
        for path, role in paths.items():
            obj = obj.replace(path, role)
    return obj


def _json_diff(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}/{k}: only in {'the rerun' if k in b else 'the reference'}")
            else:
                out += _json_diff(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _json_diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:80]} != {str(b)[:80]}"]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(root).parts)}


def _jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_contents(cache: Path) -> dict[str, str]:
    """The cache entries whose bytes must not depend on a kill: the corpus store's Arrow file, the embedding shards
    (named by their checksums), the FAISS index (named by its checksum)."""
    found = {}
    for pattern in ("corpus_store/*/passages.arrow", "embeddings/*/rows-*.npy", "faiss-index/*/index.*.faiss"):
        for p in cache.glob(pattern):
            found[str(p.relative_to(cache))] = _digest(p)
    return found


def compare(kind: str, ref: Reference, out: Path, cache: Path) -> list[str]:
    """How the outputs of a resumed run in ``out`` (cache ``cache``) differ from the reference's: [] when the same."""
    paths = {str(ref.out): "<out>", str(ref.cache): "<cache>"}
    mine = {str(out): "<out>", str(cache): "<cache>"}
    skip = {"reads", "loss.png", "checkpoints"}  # read caches; a plot; checkpoints (their steps are compared)
    a_files = {f for f in _files(ref.out) if f.split("/")[0] not in skip}
    b_files = {f for f in _files(out) if f.split("/")[0] not in skip}
    diffs = [f"{f}: only in the reference" for f in sorted(a_files - b_files)]
    diffs += [f"{f}: only in the rerun" for f in sorted(b_files - a_files)]
    for f in sorted(a_files & b_files):
        a, b = ref.out / f, out / f
        if f in ("manifest.json", "summary.json") or (kind == "sweep" and f.startswith("levels/") and f.endswith(".json")):
            d = _json_diff(normalized(json.loads(a.read_text()), paths), normalized(json.loads(b.read_text()), mine))
        elif f in ("costs.jsonl", "train_log.jsonl"):  # reader seconds per question; seconds per step
            d = _json_diff(normalized(_jsonl(a), paths), normalized(_jsonl(b), mine))
            d += _json_diff([{k: v for k, v in r.items() if k not in ("reader_s", "elapsed_s")} for r in _jsonl(a)],
                            [{k: v for k, v in r.items() if k not in ("reader_s", "elapsed_s")} for r in _jsonl(b)])
        elif f.endswith(".npz"):
            d = _npz_diff(a, b)
        else:
            d = [] if a.read_bytes() == b.read_bytes() else ["bytes differ"]
        diffs += [f"{f}{x if x.startswith('/') or x.startswith('[') else ': ' + x}" for x in d[:3]]
    if kind == "train":
        steps = lambda root: sorted(p.name for p in (root / "checkpoints").glob("step-*"))  # noqa: E731
        if steps(ref.out) != steps(out):
            diffs.append(f"checkpoints {steps(out)} != {steps(ref.out)}")
    ours, theirs = cache_contents(cache), cache_contents(ref.cache)
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            diffs.append(f"cache {key}: " + ("missing" if key not in ours else "extra" if key not in theirs
                                              else "bytes differ"))
    return diffs


def _npz_diff(a: Path, b: Path) -> list[str]:
    import numpy as np

    with np.load(a) as x, np.load(b) as y:
        if sorted(x.files) != sorted(y.files):
            return [f"arrays {sorted(y.files)} != {sorted(x.files)}"]
        return [f"array {k} differs" for k in x.files if not np.array_equal(x[k], y[k], equal_nan=True)]


# ------------------------------------------------------------------ the long form
def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def table(kills: list[Kill], plans: list[tuple[str, ...]]) -> str:
    rows = ["| stage | command | kills | recovered identically | failures |", "|---|---|---|---|---|"]
    for plan in plans:
        for name in plan:
            mine = [k for k in kills if k.stage == name]
            command = "python -m " + COMMANDS[STAGES[name].command].argv(Data(Path("DATA")), Path("OUT"), Path())[0]
            failures = "; ".join(f"seed {k.seed} kill {k.index}: {' / '.join(k.problems())}"
                                 for k in mine if not k.recovered) or "none"
            rows.append(f"| {name} | `{command}` | {len(mine)} | {sum(k.recovered for k in mine)} | "
                        f"{failures.replace('|', '/')} |")
    return "\n".join(rows)


def details(kills: list[Kill]) -> str:
    rows = ["| stage | seed | kill | runs | killed at (s) | where | inside | left by the kill | rerun |",
            "|---|---|---|---|---|---|---|---|---|"]
    for k in kills:
        left = ", ".join(x.split("/", 1)[-1] for x in k.left) or "nothing"
        rerun = "identical" if k.recovered else "; ".join(k.problems()).replace("|", "/")
        rows.append(f"| {k.stage} | {k.seed} | {k.index} | {k.attempts} | {k.kill_s} | {k.at} | {k.inside} | {left} | "
                    f"{rerun} |")
    return "\n".join(rows)


def kill_record(kill: Kill) -> dict:
    """One kill as JSON: its fields, whether it recovered, and its problems (empty when it did)."""
    record = {k: v for k, v in vars(kill).items()}
    record.update(recovered=kill.recovered, problems=kill.problems())
    return record


def stage_name(text: str) -> str:
    """A stage by its name, case and hyphens aside (``dense-encoding`` is ``dense encoding``)."""
    wanted = text.replace("-", " ").replace("_", " ").strip().lower()
    for name in STAGES:
        if name.lower() == wanted:
            return name
    raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(s.replace(' ', '-') for s in STAGES)}")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``python -m tests.kill_matrix``."""
    p = argparse.ArgumentParser(prog="python -m tests.kill_matrix",
                                description="SIGKILL real commands inside named stages, rerun them, compare with an "
                                            "uninterrupted run; prints a Markdown table.")
    p.add_argument("--kills", type=int, default=1, help="kills per stage, each followed by a rerun (default 1)")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill points (default 1)")
    p.add_argument("--stages", nargs="+", type=stage_name, metavar="STAGE", default=list(STAGES),
                   help="stages to kill (default all): " + ", ".join(s.replace(" ", "-") for s in STAGES))
    p.add_argument("--out", help="also write the table and the per-kill details to this Markdown file")
    p.add_argument("--json", help="append each kill, as it finishes, to this JSON-lines file (one object per kill: "
                                  "stage, command, seed, index, recovered, problems...), so that a run cut short "
                                  "keeps what it did")
    p.add_argument("--work", help="work directory, kept (default: a temporary one, removed at the end)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.kills < 1:
        p.error("--kills must be >= 1")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kill-matrix-"))
    t0 = time.monotonic()
    try:
        matrix = Matrix(work, log=lambda msg: print(msg, file=sys.stderr, flush=True))
        kills: list[Kill] = []
        # round by round (kill i of every stage, then kill i + 1): a run cut short has killed every stage alike
        for i in range(args.kills):
            for name in args.stages:
                print(f"kill {i + 1}/{args.kills} in {name}", file=sys.stderr, flush=True)
                kills.append(matrix.kill_once(name, args.seed, i))
                if args.json:
                    with open(args.json, "a", encoding="utf-8") as f:
                        f.write(json.dumps(kill_record(kills[-1])) + "\n")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = (f"{table(kills, [(s,) for s in args.stages])}\n\nkills: {len(kills)}, recovered identically: "
            f"{sum(k.recovered for k in kills)}; {time.monotonic() - t0:.0f} s on {machine()}\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n" + details(kills) + "\n", encoding="utf-8")
    return 0 if all(k.recovered for k in kills) else 1


if __name__ == "__main__":
    sys.exit(main())
