"""The writing stage: run.trec, per_query.jsonl and the counts the manifest carries."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data.errors import UserError

def write_trec(path: Path, ranking, queries, corpus, tag: str, depth: int | None = None) -> None:
    """Standard TREC run lines: ``qid Q0 docid rank score tag``, one qid per unique question.

    The whole ranking by default (``--depth`` hits per question): what metrics.json is computed from, so
    trec_eval, pytrec_eval or ranx on run.trec + qrels.tsv give its R@k and MRR up to the depth, R@1000 too
    (about 50 bytes a line: ``--depth 1000`` on SQuAD dev's 10,539 questions writes ~0.5 GB).  ``depth`` cuts it.
    The ids are those of :mod:`eval.qrels` (the ``qrels.tsv``/``qrels.trec``/``queries.jsonl``
    written next to it); a question's ranking is that of its first query input.
    """
    from eval.qrels import question_groups
    from retrievers.trec import write_trec_run

    groups = question_groups(queries)
    ranking = ranking.subset(groups.rows)
    write_trec_run(path, ranking if depth is None else ranking.top(depth), groups.ids, corpus.ids, tag)


def skipped_records(dataset) -> int | None:
    """Records dropped by ``--skip-bad-records`` in the dataset's SQuAD-format source files.

    Counted by validating the source files again (the dataset cache keeps the
    built dataset, not the count); ``None`` when the sources are not SQuAD files.
    """
    from data.squad import load_squad_json

    if "skipped_records" in dataset.sources:
        return int(dataset.sources["skipped_records"])
    count, seen = 0, False
    for key in dataset.sources:
        path = Path(str(key))
        if not path.is_file():
            continue
        stats: dict = {}
        try:
            load_squad_json(path, skip_bad_records=True, stats=stats)
        except UserError:
            continue  # not a SQuAD-format file
        seen = True
        count += stats.get("skipped_records", 0)
    return count if seen else None


def write_per_query(path: Path, per_query: dict) -> None:
    """``per_query.jsonl``: one row per question, ``id`` + every per-question metric (fractions; null = not scored).

    Retrieval values are keyed by the question ids of ``run.trec``/``qrels.tsv``
    (:mod:`eval.qrels`); answer values by the dataset question id of
    predictions.json.  The two coincide except for a question text asked of
    several paragraphs (31 on SQuAD v1.1 dev): its later ids carry answer
    values only.  Means over the non-null values of a column are metrics.json's.
    """
    from data.io import write_jsonl

    rows: dict[str, dict] = {}
    for part in ("reading", "retrieval"):
        table = per_query.get(part)
        if not table:
            continue
        for i, qid in enumerate(table["ids"]):
            row = rows.setdefault(str(qid), {"id": str(qid)})
            for name, values in table.items():
                if name == "ids":
                    continue
                row[name] = _json_cell(values[i])
    write_jsonl(path, rows.values())


def _json_cell(v):
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    v = float(v)
    return None if np.isnan(v) else v


