"""One query-id scheme for every retrieval file: run.trec, qrels and queries.

The scheme is **one query per unique question**, the unit every metric we
report is averaged over:

* ReQA (Ahmad et al. 2019) keys a question by its text; a question asked in
  several query inputs (one per distinct answer sentence, or the same text
  asked of several SQuAD paragraphs) keeps its best rank over them.  All those
  inputs have the same text, hence the same ranking, so "best rank over the
  inputs' gold candidates" is exactly "rank of the best candidate in the union
  of their gold sets" -- which is what trec_eval's ``recip_rank`` computes from
  one ranking and the union qrels.  Per-input ids would make trec_eval average
  over 11,426 inputs instead of ReQA's 10,539 questions (SQuAD v1.1 dev) and
  disagree with ReQA's MRR.
* BEIR/MTEB sets have one query input per query, so the scheme is their own
  query ids and graded qrels, unchanged.

A question's id is the dataset id of its first query input's question
(``Queries.question_ids``: the SQuAD question id, the BEIR query id).  On
SQuAD v1.1 dev 31 question texts are asked of more than one paragraph; such a
text is one ReQA question, named by its first SQuAD id.

Files (all written atomically):

* ``qrels.tsv``: BEIR's layout (``query-id  corpus-id  score`` header, tab
  separated), what BEIR, MTEB and ``pipeline.export`` use;
* ``qrels.trec``: trec_eval's ``qid 0 docid rel``;
* ``queries.jsonl``: ``{"_id", "text"}`` per question (BEIR's layout).

trec_eval / pytrec_eval / ranx on ``run.trec`` + either qrels file give our
ReQA MRR up to ties (ReQA averages tied ranks, trec_eval breaks ties by
document id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.io import atomic_path
from data.types import Corpus, Queries


@dataclass
class QuestionGroups:
    """Unique questions of a query set: ids, a representative input row, union qrels."""

    ids: list[str]  # the question id (first input's question_id), one per unique question
    rows: list[int]  # first query-input row of each question (its ranking is the question's)
    texts: list[str]
    qrels: list[dict[int, int]]  # corpus row -> grade (max over the question's inputs)

    def __len__(self) -> int:
        return len(self.ids)


def question_groups(queries: Queries) -> QuestionGroups:
    """Group query inputs by ``question_keys`` (ReQA: the question text) in first-seen order."""
    index: dict[str, int] = {}
    ids, rows, texts, qrels = [], [], [], []
    used: set[str] = set()
    for i, key in enumerate(queries.question_keys):
        g = index.get(key)
        if g is None:
            g = index[key] = len(ids)
            qid = str(queries.question_ids[i])
            if qid in used:  # two different texts under one id cannot happen in our loaders; keep ids unique anyway
                qid = f"{qid}#{g}"
            used.add(qid)
            ids.append(qid)
            rows.append(i)
            texts.append(queries.texts[i])
            qrels.append({})
        grades = queries.gold_grades[i] if queries.gold_grades is not None else None
        cur = qrels[g]
        for j, row in enumerate(np.asarray(queries.gold[i]).tolist()):
            grade = int(grades[j]) if grades is not None else 1
            cur[int(row)] = max(cur.get(int(row), 0), grade)
    return QuestionGroups(ids, rows, texts, qrels)


def qrels_dict(groups: QuestionGroups, corpus_ids) -> dict[str, dict[str, int]]:
    """``{qid: {docid: grade}}`` (pytrec_eval's and ranx's in-memory qrels)."""
    return {qid: {corpus_ids[r]: g for r, g in rels.items()} for qid, rels in zip(groups.ids, groups.qrels)}


def write_qrels_tsv(path: str | Path, groups: QuestionGroups, corpus_ids) -> int:
    """BEIR-layout qrels; returns the number of judgements written."""
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for qid, rels in zip(groups.ids, groups.qrels):
                for row, g in rels.items():
                    f.write(f"{qid}\t{corpus_ids[row]}\t{g}\n")
                    count += 1
    return count


def write_qrels_trec(path: str | Path, groups: QuestionGroups, corpus_ids) -> None:
    """trec_eval qrels: ``qid 0 docid rel`` per line."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for qid, rels in zip(groups.ids, groups.qrels):
                for row, g in rels.items():
                    f.write(f"{qid} 0 {corpus_ids[row]} {g}\n")


def write_queries_jsonl(path: str | Path, groups: QuestionGroups) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for qid, text in zip(groups.ids, groups.texts):
                f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read ``qrels.tsv`` (BEIR, with header) or ``qrels.trec`` (trec_eval) into ``{qid: {docid: grade}}``."""
    from data.errors import UserError

    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts or (n == 1 and parts[0] == "query-id"):
                continue
            if len(parts) == 3:
                qid, did, grade = parts
            elif len(parts) == 4:
                qid, _, did, grade = parts
            else:
                raise UserError(f"{path}:{n}: expected 'qid docid grade' or 'qid 0 docid grade'")
            try:
                out.setdefault(qid, {})[did] = int(grade)
            except ValueError:
                raise UserError(f"{path}:{n}: grade {grade!r} is not an integer") from None
    return out


def write_question_files(directory: str | Path, queries: Queries, corpus: Corpus) -> QuestionGroups:
    """``qrels.tsv``, ``qrels.trec`` and ``queries.jsonl`` of a run directory; returns the groups."""
    directory = Path(directory)
    groups = question_groups(queries)
    write_qrels_tsv(directory / "qrels.tsv", groups, corpus.ids)
    write_qrels_trec(directory / "qrels.trec", groups, corpus.ids)
    write_queries_jsonl(directory / "queries.jsonl", groups)
    return groups
