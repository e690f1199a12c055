"""SQuAD examples as fixed-length token windows, and best-span decoding.

Preprocessing follows BERT's SQuAD recipe (Devlin et al., 2019, "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding",
section 4.2): question + context packed into one sequence, long contexts split
into overlapping windows (``max_length``, ``stride``), and the answer labelled
by its first and last token inside the window, or by the CLS token when the
window does not hold the whole answer.  Decoding takes, per question, the span
of at most ``max_answer_tokens`` context tokens that maximises start logit +
end logit over all of the question's windows (:func:`readers.spans.best_spans`;
among equal scores the shortest span, then the earliest start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

from data.errors import UserError
from data.squad import load_squad_json
from readers.spans import SHORTEST, best_spans  # noqa: F401 - best_spans: kept importable from here

# the original BERT script cuts questions to 64 tokens so a window always has room for context
MAX_QUESTION_TOKENS = 64


@dataclass
class SquadExample:
    """One question with its paragraph and gold answers (character offsets)."""

    qid: str
    question: str
    context: str
    answer_texts: list[str]
    answer_starts: list[int]


def read_squad_examples(path: str | Path, limit: int | None = None) -> list[SquadExample]:
    """Questions of a SQuAD v1.1/v2.0-format file (JSON, .gz or .zip), in file order.

    ``limit`` keeps the first ``limit`` questions.  Bad files raise ``UserError``.
    """
    squad = load_squad_json(path)
    examples: list[SquadExample] = []
    for article in squad["data"]:
        for para in article["paragraphs"]:
            context = para["context"]
            for qa in para["qas"]:
                answers = [] if qa.get("is_impossible", False) else qa["answers"]
                examples.append(
                    SquadExample(
                        qid=str(qa["id"]),
                        question=qa["question"],
                        context=context,
                        answer_texts=[a["text"] for a in answers],
                        answer_starts=[int(a["answer_start"]) for a in answers],
                    )
                )
                if limit is not None and len(examples) >= limit:
                    return examples
    if not examples:
        raise UserError(f"{path}: no questions in the file")
    return examples


@dataclass
class Windows:
    """Token windows stored flat: window ``w`` is ``tokens[name][bounds[w]:bounds[w+1]]``.

    ``inputs`` holds the tokenizer's model inputs except the attention mask (all
    ones before padding); ``start_positions``/``end_positions`` are the answer's
    token labels (training windows); ``context_offsets[t]`` is the character span
    of token ``t`` in the context, ``(-1, -1)`` for question and special tokens.
    """

    inputs: dict[str, np.ndarray]
    bounds: np.ndarray  # int64 [W + 1]
    example_index: np.ndarray  # int64 [W]
    start_positions: np.ndarray  # int64 [W]
    end_positions: np.ndarray  # int64 [W]
    context_offsets: np.ndarray  # int32 [T, 2]

    def __len__(self) -> int:
        return len(self.example_index)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.bounds)

    def batch(self, rows, pad_token_id: int, pad_to_multiple: int = 8) -> dict[str, torch.Tensor]:
        """Right-padded tensors for ``rows`` (plus labels and ``attention_mask``)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        width = int(lengths.max())
        width = -(-width // pad_to_multiple) * pad_to_multiple
        out: dict[str, torch.Tensor] = {}
        mask = np.arange(width)[None, :] < lengths[:, None]
        for name, flat in self.inputs.items():
            fill = pad_token_id if name == "input_ids" else 0
            arr = np.full((len(rows), width), fill, dtype=np.int64)
            arr[mask] = np.concatenate([flat[self.bounds[r] : self.bounds[r + 1]] for r in rows])
            out[name] = torch.from_numpy(arr)
        out["attention_mask"] = torch.from_numpy(mask.astype(np.int64))
        out["start_positions"] = torch.from_numpy(self.start_positions[rows].copy())
        out["end_positions"] = torch.from_numpy(self.end_positions[rows].copy())
        return out

    def offsets(self, row: int) -> np.ndarray:
        return self.context_offsets[self.bounds[row] : self.bounds[row + 1]]


def build_windows(
    examples: list[SquadExample],
    tokenizer,
    max_length: int = 384,
    stride: int = 128,
    chunk: int = 1000,
    desc: str = "tokenize",
    progress: bool = True,
) -> Windows:
    """Tokenize question + context into overlapping windows with answer labels.

    Needs a fast (Rust) tokenizer for offset mappings.  The first gold answer is
    the training label; a window without the whole answer (or a question with
    no answer) is labelled with its CLS token.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"tokenizer {type(tokenizer).__name__}: a fast tokenizer is needed for offset mappings")
    question_first = tokenizer.padding_side == "right"
    context_seq = 1 if question_first else 0
    cls_id = tokenizer.cls_token_id
    names = [n for n in tokenizer.model_input_names if n != "attention_mask"]
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    lengths: list[int] = []
    example_index: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    offsets_parts: list[np.ndarray] = []
    for lo in tqdm(range(0, len(examples), chunk), desc=desc, unit="chunk", disable=not progress, leave=False):
        batch = examples[lo : lo + chunk]
        questions = _cut_questions([e.question.lstrip() for e in batch], tokenizer)
        contexts = [e.context for e in batch]
        pair = (questions, contexts) if question_first else (contexts, questions)
        enc = tokenizer(
            *pair,
            truncation="only_second" if question_first else "only_first",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
        )
        for w, sample in enumerate(enc["overflow_to_sample_mapping"]):
            ex = batch[sample]
            ids = enc["input_ids"][w]
            seq = np.array([-1 if s is None else s for s in enc.sequence_ids(w)], dtype=np.int64)
            offs = np.asarray(enc["offset_mapping"][w], dtype=np.int32).reshape(-1, 2)
            in_context = seq == context_seq
            offs[~in_context] = -1
            offsets_parts.append(offs)
            for n in names:
                parts[n].append(np.asarray(enc[n][w], dtype=np.int32))
            lengths.append(len(ids))
            example_index.append(lo + sample)
            cls_index = ids.index(cls_id) if cls_id in ids else 0
            start_tok = end_tok = cls_index
            if ex.answer_texts:
                start_char = ex.answer_starts[0]
                end_char = start_char + len(ex.answer_texts[0])
                ctx_tokens = np.flatnonzero(in_context)
                if len(ctx_tokens) and offs[ctx_tokens[0], 0] <= start_char and offs[ctx_tokens[-1], 1] >= end_char:
                    # last context token starting at or before the answer start,
                    # first context token ending at or after the answer end
                    start_tok = int(ctx_tokens[np.flatnonzero(offs[ctx_tokens, 0] <= start_char)[-1]])
                    end_tok = int(ctx_tokens[np.flatnonzero(offs[ctx_tokens, 1] >= end_char)[0]])
            starts.append(start_tok)
            ends.append(end_tok)
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    return Windows(
        inputs={n: np.concatenate(p) if p else np.zeros(0, np.int32) for n, p in parts.items()},
        bounds=bounds,
        example_index=np.asarray(example_index, dtype=np.int64),
        start_positions=np.asarray(starts, dtype=np.int64),
        end_positions=np.asarray(ends, dtype=np.int64),
        context_offsets=np.concatenate(offsets_parts) if offsets_parts else np.zeros((0, 2), np.int32),
    )


def _cut_questions(questions: list[str], tokenizer) -> list[str]:
    """Questions cut to ``MAX_QUESTION_TOKENS`` tokens (at a token's end offset)."""
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for q, offs in zip(questions, enc["offset_mapping"]):
        out.append(q if len(offs) <= MAX_QUESTION_TOKENS else q[: offs[MAX_QUESTION_TOKENS - 1][1]])
    return out


def decode_answers(
    examples: list[SquadExample],
    windows: Windows,
    start_logits: list[np.ndarray],
    end_logits: list[np.ndarray],
    max_answer_tokens: int = 30,
) -> dict[str, str]:
    """Best answer text per question id from per-window logits (one array per window)."""
    best_score = np.full(len(examples), -np.inf)
    best_text = [""] * len(examples)
    for w in range(len(windows)):
        offs = windows.offsets(w)
        allowed = (offs[:, 0] >= 0)[None, :]
        score, s, e = best_spans(start_logits[w][None, :], end_logits[w][None, :], allowed, max_answer_tokens,
                                 ties=SHORTEST)
        ex = int(windows.example_index[w])
        if score[0] > best_score[ex]:
            best_score[ex] = score[0]
            best_text[ex] = examples[ex].context[offs[s[0], 0] : offs[e[0], 1]]
    return {ex.qid: text for ex, text in zip(examples, best_text)}
