"""Sentence-level answer retrieval datasets built the way ReQA builds them.

ReQA (Ahmad et al. 2019) turns a SQuAD-format reading-comprehension set into
an answer-retrieval task:

* every paragraph is split into sentences (:mod:`data.sentences` for English);
* the candidates are (sentence, paragraph) pairs, de-duplicated on the pair of
  texts, taken from every paragraph that has at least one question;
* there is one query input per question and *distinct* answer sentence (the
  sentence that contains an answer's ``answer_start``);
* a query input's gold set is every candidate whose sentence text equals its
  answer sentence (the same sentence can occur in several paragraphs);
* questions are keyed by their text: metrics keep, per unique question text,
  the best rank over its query inputs (see :mod:`eval.retrieval_metrics`).

On SQuAD v1.1 dev this gives 10,250 candidates and 11,426 query inputs.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from data.sentences import reqa_sentence_breaks
from data.types import Corpus, Dataset, Queries, RowParagraphs

SentenceBreaker = Callable[[str], list[tuple[int, int]]]


def build_reqa(
    squad: dict,
    *,
    name: str,
    split: str,
    sentence_breaks: SentenceBreaker = reqa_sentence_breaks,
    language: str = "en",
    sources: dict | None = None,
) -> Dataset:
    """Convert a (validated) SQuAD dict into a ReQA :class:`Dataset`.

    Answers whose ``answer_start`` falls outside every sentence span (in the
    white space between two sentences) cannot name an answer sentence; they are
    dropped and counted in ``dataset.sources["answers_between_sentences"]``
    (zero on SQuAD v1.1 dev and train).
    """
    cand_ids: list[str] = []
    cand_texts: list[str] = []
    cand_pids: list[int] = []
    paragraph_texts: list[str] = []
    paragraph_of_context: dict[str, int] = {}
    seen_pairs: set[tuple[str, str]] = set()
    rows_of_sentence: dict[str, list[int]] = {}

    q_ids: list[str] = []
    q_texts: list[str] = []
    q_sentences: list[str] = []
    q_qids: list[str] = []
    q_answers: list[list[str]] = []
    between = 0

    for article in squad["data"]:
        for para in article["paragraphs"]:
            context = para["context"]
            spans = sentence_breaks(context)
            sentences = [context[s:e] for s, e in spans]
            indexed = False
            for qa in para["qas"]:
                answer_sentences: list[str] = []
                for ans in qa["answers"]:
                    start = ans["answer_start"]
                    sentence = next((sentences[i] for i, (s, e) in enumerate(spans) if s <= start < e), None)
                    if sentence is None:
                        between += 1
                        continue
                    if sentence not in answer_sentences:
                        answer_sentences.append(sentence)
                for j, sentence in enumerate(answer_sentences):
                    qid = str(qa["id"])
                    q_ids.append(qid if len(answer_sentences) == 1 else f"{qid}#{j}")
                    q_texts.append(qa["question"])
                    q_sentences.append(sentence)
                    q_qids.append(qid)
                    q_answers.append([a["text"] for a in qa["answers"]])
                if answer_sentences and not indexed:
                    indexed = True
                    pid = paragraph_of_context.setdefault(context, len(paragraph_texts))
                    if pid == len(paragraph_texts):
                        paragraph_texts.append(context)
                    for k, sentence in enumerate(sentences):
                        if (sentence, context) in seen_pairs:
                            continue
                        seen_pairs.add((sentence, context))
                        rows_of_sentence.setdefault(sentence, []).append(len(cand_ids))
                        cand_ids.append(f"p{pid}s{k}")
                        cand_texts.append(sentence)
                        cand_pids.append(pid)

    gold = [np.asarray(rows_of_sentence[s], dtype=np.int64) for s in q_sentences]
    pids = np.asarray(cand_pids, dtype=np.int64)
    corpus = Corpus(
        ids=cand_ids,
        texts=cand_texts,
        contexts=RowParagraphs(paragraph_texts, pids),
        paragraph_ids=pids,
        paragraph_texts=paragraph_texts,
        language=language,
    )
    queries = Queries(
        ids=q_ids,
        texts=q_texts,
        gold=gold,
        question_keys=list(q_texts),
        question_ids=q_qids,
        answers=q_answers,
        answer_sentences=q_sentences,
        language=language,
    )
    meta = dict(sources or {})
    meta["answers_between_sentences"] = between
    return Dataset(name=name, split=split, corpus=corpus, queries=queries, sources=meta, level="sentence")
