"""DPR top-k retrieval accuracy and the answer-bearing test behind it.

Karpukhin et al. 2020, "Dense Passage Retrieval for Open-Domain Question
Answering", EMNLP, §5.1: a question counts as answered at k when any of its
top-k passages *has an answer*.  The has-answer test is the one of DPR's
``qa_validation.has_answer`` and Pyserini's ``pyserini.eval.evaluate_dpr_retrieval``
(Lin et al. 2021), reproduced here behaviour for behaviour:

* passage text and answers are NFD-normalised (``unicodedata``);
* ``string`` matching: both are tokenized with DPR's SimpleTokenizer (tokens
  are runs of ``[\\p{L}\\p{N}\\p{M}]`` or any single character that is neither
  white space nor a control character; ``regex`` package, IGNORECASE |
  UNICODE | MULTILINE), lower-cased, and an answer matches when its tokens
  occur as a contiguous run of the passage tokens (an answer with no tokens
  matches every passage, as in both reference implementations);
* ``regex`` matching (CuratedTREC): each answer is a Python regular expression
  searched in the passage with IGNORECASE | UNICODE | MULTILINE; a pattern that
  does not compile matches nothing;
* the title is not part of the text tested (Pyserini tests the line after the
  title).

Top-k accuracy (:func:`top_k_accuracy`) is computed from a ``[Q, K]`` boolean
has-answer matrix in ranking order, as Pyserini's evaluator does: the first
answer-bearing position within the largest k, then the fraction of questions
whose first position is below each k.  Everything here takes plain arrays and
strings; the rows' texts come from a ``fetch(rows) -> list[str]`` callable.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

MATCHES = ("string", "regex")
DEFAULT_KS = (1, 5, 20, 100)

# DPR / DrQA SimpleTokenizer: alphanumeric runs, else one non-space non-control character.
# Non-capturing groups tokenize exactly as the reference's two capturing groups.
_TOKEN_PATTERN = r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]"
_SEP = "\x00"  # a control character: never inside a token, so it delimits whole tokens
_tokenizer = None


def _token_regex():
    global _tokenizer
    if _tokenizer is None:
        import regex

        _tokenizer = regex.compile(_TOKEN_PATTERN, flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)
    return _tokenizer


def simple_tokens(text: str) -> list[str]:
    """Lower-cased DPR SimpleTokenizer tokens of NFD-normalised ``text``."""
    return [t.lower() for t in _token_regex().findall(unicodedata.normalize("NFD", text))]


def _folded(text: str) -> str:
    # the prefilter's view of a text: NFD, lower-cased, final sigma folded (str.lower() maps a
    # capital sigma by its context; nothing else in it is context-dependent), so every lower-cased
    # token of the text is a substring of it
    return unicodedata.normalize("NFD", text).lower().replace("\u03c2", "\u03c3")


def _joined(text: str) -> str:
    # lower() of the joined tokens equals joining the lower-cased tokens: the separator is neither
    # cased nor case-ignorable, so each token's case mapping (final sigma included) is unchanged
    return _SEP + _SEP.join(_token_regex().findall(unicodedata.normalize("NFD", text))).lower() + _SEP


class AnswerMatcher:
    """The has-answer test for one question's answers (built once, applied to many passages)."""

    def __init__(self, answers: Sequence[str], match: str = "string"):
        if match not in MATCHES:
            raise ValueError(f"answer match {match!r}: use one of {', '.join(MATCHES)}")
        self.match = match
        self.always = False
        if match == "regex":
            self.patterns = []
            for a in answers:
                try:
                    self.patterns.append(re.compile(unicodedata.normalize("NFD", a), re.IGNORECASE | re.UNICODE | re.MULTILINE))
                except re.error:
                    continue  # the reference treats a bad pattern as no match
        else:
            self.needles = []
            self.parts = []  # per answer: its folded tokens, each of which must occur in a matching text
            for a in answers:
                tokens = _token_regex().findall(unicodedata.normalize("NFD", a))
                if not tokens:
                    self.always = True  # zero answer tokens match at position 0 of any passage
                self.needles.append(_SEP + _SEP.join(tokens).lower() + _SEP)
                self.parts.append(sorted({t.lower().replace("\u03c2", "\u03c3") for t in tokens}, key=len, reverse=True))

    def may_match(self, folded: str) -> bool:
        """Exact prefilter on :func:`_folded` text: False only when no answer can match."""
        return self.always or any(all(t in folded for t in part) for part in self.parts)

    def __call__(self, text: str) -> bool:
        if self.match == "regex":
            norm = unicodedata.normalize("NFD", text)
            return any(p.search(norm) is not None for p in self.patterns)
        if self.always:
            return True
        if not self.needles or not self.may_match(_folded(text)):
            return False
        hay = _joined(text)
        return any(n in hay for n in self.needles)


def has_answer(text: str, answers: Sequence[str], match: str = "string") -> bool:
    """DPR's ``has_answer``: does passage ``text`` (title excluded) contain one of ``answers``?"""
    return AnswerMatcher(answers, match)(text)


# passages whose texts one block holds (with their folded and tokenized forms): 16,384 of DPR's 100-word passages
# are about 10 MB of text, so a block is a few tens of MB at any depth (128 questions at depth 1000 were ~250 MB)
BLOCK_PASSAGES = 16_384


def has_answer_matrix(
    rows: np.ndarray,
    fetch: Callable[[np.ndarray], Sequence[str]],
    answers: Sequence[Sequence[str]],
    match: str = "string",
    block: int | None = None,
    progress: bool = False,
) -> np.ndarray:
    """``[Q, K]`` bool: the passage at ``rows[q, j]`` (``-1`` = none) has an answer of question q.

    ``fetch(unique_rows)`` returns the texts of those corpus rows (title excluded);
    they are fetched one block of ``block`` questions at a time (default: as many as
    make :data:`BLOCK_PASSAGES` passages at this depth), so memory stays bounded
    whatever the depth and the number of questions.
    """
    from tqdm.auto import tqdm

    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 2 or rows.shape[0] != len(answers):
        raise ValueError(f"rows {rows.shape} must be [Q, K] with Q = {len(answers)} answer lists")
    if block is None:
        block = max(1, BLOCK_PASSAGES // max(rows.shape[1], 1))
    out = np.zeros(rows.shape, dtype=bool)
    starts = range(0, rows.shape[0], block)
    for lo in tqdm(starts, desc="has_answer", unit="block", disable=not progress, leave=False):
        hi = min(lo + block, rows.shape[0])
        part = rows[lo:hi]
        valid = part >= 0
        uniq, inverse = np.unique(part[valid], return_inverse=True)
        texts = list(fetch(uniq)) if uniq.size else []
        if match == "string":
            folded = [_folded(t) for t in texts]  # cheap substring prefilter per row
            joined: dict[int, str] = {}  # rows tokenized (once per block) when a prefilter passes
        pos = np.full(part.shape, -1, dtype=np.int64)
        pos[valid] = inverse
        for q in range(hi - lo):
            matcher = AnswerMatcher(answers[lo + q], match)
            cols = np.flatnonzero(pos[q] >= 0)
            if match == "string":
                if matcher.always:
                    out[lo + q, cols] = True
                    continue
                needles = matcher.needles
                for j in cols:
                    r = pos[q, j]
                    if not matcher.may_match(folded[r]):
                        continue
                    hay = joined.get(r)
                    if hay is None:
                        hay = joined[r] = _joined(texts[r])
                    if any(n in hay for n in needles):
                        out[lo + q, j] = True
            else:
                for j in cols:
                    out[lo + q, j] = matcher(texts[pos[q, j]])
    return out


def first_hit(mask: np.ndarray, max_k: int | None = None) -> np.ndarray:
    """0-based position of the first True per row within ``max_k`` (``max_k`` when none), as Pyserini counts."""
    mask = np.asarray(mask, dtype=bool)
    max_k = mask.shape[1] if max_k is None else int(max_k)
    m = mask[:, :max_k]
    if m.shape[1] == 0:  # no passages retrieved: argmax of an empty row would raise
        return np.full(m.shape[0], max_k, dtype=np.int64)
    return np.where(m.any(axis=1), m.argmax(axis=1), max_k).astype(np.int64)


def top_k_accuracy(mask: np.ndarray, ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
    """DPR top-k accuracy ``{"Top1": ..., ...}`` from a ``[Q, K]`` has-answer matrix in ranking order.

    A k above the ranking depth K counts positions up to K only (as Pyserini's
    evaluator does when a question has fewer contexts than k).
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError("top-k accuracy needs ks >= 1")
    first = first_hit(mask, ks[-1])
    return {f"Top{k}": float(np.mean(first < k)) if first.size else 0.0 for k in ks}


def dpr_metrics(mask: np.ndarray, depth: int | None = None, ks: Iterable[int] = DEFAULT_KS) -> dict:
    """Top-k accuracy at ``ks`` and at the depth, plus the questions without any answer-bearing passage."""
    mask = np.asarray(mask, dtype=bool)
    depth = mask.shape[1] if depth is None else int(depth)
    ks = sorted({k for k in ks if k <= depth} | {depth})
    out: dict = {"accuracy": top_k_accuracy(mask, ks), "questions": int(mask.shape[0]), "depth": depth}
    out["no_answer_within_depth"] = int((~mask[:, :depth].any(axis=1)).sum()) if mask.size else int(mask.shape[0])
    return out


def write_dpr_retrieval_json(
    path: str | Path,
    question_ids: Sequence[str],
    questions: Sequence[str],
    answers: Sequence[Sequence[str]],
    rows: np.ndarray,
    scores: np.ndarray,
    doc_ids: Callable[[np.ndarray], Sequence[str]],
    titles: Callable[[np.ndarray], Sequence[str]],
    texts: Callable[[np.ndarray], Sequence[str]],
    mask: np.ndarray | None = None,
) -> None:
    """Write a run as DPR's retrieval JSON (the input of Pyserini's ``evaluate_dpr_retrieval``).

    ``{qid: {"question", "answers", "contexts": [{"docid", "score", "text": "title\\ntext"[, "has_answer"]}]}}``;
    line breaks inside a text become spaces (the reader of that file takes the
    line after the title).  With ``mask`` the has-answer decisions are stored too.
    """
    from data.io import write_json

    rows = np.asarray(rows, dtype=np.int64)
    out = {}
    for q, qid in enumerate(question_ids):
        valid = rows[q][rows[q] >= 0]
        ids, tis, txs = list(doc_ids(valid)), list(titles(valid)), list(texts(valid))
        contexts = []
        for j in range(len(valid)):
            ctx = {"docid": str(ids[j]), "score": float(scores[q, j]),
                   "text": f"{str(tis[j]).replace(chr(10), ' ')}\n{str(txs[j]).replace(chr(10), ' ')}"}
            if mask is not None:
                ctx["has_answer"] = bool(mask[q, j])
            contexts.append(ctx)
        out[str(qid)] = {"question": questions[q], "answers": list(answers[q]), "contexts": contexts}
    write_json(path, out)
