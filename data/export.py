"""Write a built dataset in BEIR layout (the command is ``python -m pipeline.export NAME --split dev --out DIR``).

``corpus.jsonl`` holds one line per candidate (``_id``, ``title`` = its
paragraph/context, ``text`` = the candidate sentence), ``queries.jsonl`` one
line per unique question (ReQA keys questions by their text) and
``qrels/<split>.tsv`` every candidate that is gold for any of that question's
query inputs, so BEIR/MTEB tools compute ReQA's MRR from it (ties aside).
Query ids are those of :mod:`eval.qrels` -- the same ids ``pipeline.run``
writes in ``run.trec``/``qrels.tsv``, so a run scores against an export.
"""

from __future__ import annotations

from data.io import write_jsonl


def export_beir(dataset, out) -> dict:
    """Write ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` (ids: :mod:`eval.qrels`)."""
    from eval.qrels import question_groups, write_qrels_tsv, write_queries_jsonl

    corpus, queries = dataset.corpus, dataset.queries
    write_jsonl(
        out / "corpus.jsonl",
        (
            {"_id": cid, "title": (corpus.titles[i] if corpus.titles else corpus.contexts[i]) or "", "text": text}
            for i, (cid, text) in enumerate(zip(corpus.ids, corpus.texts))
        ),
    )
    groups = question_groups(queries)
    write_queries_jsonl(out / "queries.jsonl", groups)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    n_qrels = write_qrels_tsv(out / "qrels" / f"{dataset.split}.tsv", groups, corpus.ids)
    return {"corpus": len(corpus), "queries": len(groups), "qrels": n_qrels}
