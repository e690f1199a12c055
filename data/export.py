"""Write a built dataset in BEIR layout: ``python -m data.export NAME --split dev --out DIR``.

``corpus.jsonl`` holds one line per candidate (``_id``, ``title`` = its
paragraph/context, ``text`` = the candidate sentence), ``queries.jsonl`` one
line per unique question (ReQA keys questions by their text) and
``qrels/<split>.tsv`` every candidate that is gold for any of that question's
query inputs, so BEIR/MTEB tools compute ReQA's MRR from it (ties aside).
Query ids are those of :mod:`eval.qrels` -- the same ids ``pipeline.run``
writes in ``run.trec``/``qrels.tsv``, so a run scores against an export.
"""

from __future__ import annotations

import argparse
import sys

from data.io import staged_outputs, write_jsonl
from pipeline.cli import main_guard, make_out_dir, parse_with_config, write_manifest


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


@main_guard
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.export", description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--split", default="dev")
    p.add_argument("--out")
    p.add_argument("--data-dir")
    p.add_argument("--data-file")
    p.add_argument("--limit", type=int, help="export only the first N questions (the corpus stays whole)")
    p.add_argument("--config")
    args = parse_with_config(p, argv)
    from data.registry import load_dataset
    from pipeline.run import limit_queries

    ds = limit_queries(load_dataset(args.dataset, args.split, data_dir=args.data_dir, data_file=args.data_file), args.limit)
    out = make_out_dir(args.out, f"export-{args.dataset}-{args.split}")
    with staged_outputs(out, last="manifest.json") as stage:  # a failed export leaves nothing half-written
        counts = export_beir(ds, stage)
        write_manifest(stage, command="data.export", config=vars(args), seed=None, sources=ds.sources, timings={},
                       extra={"counts": counts})
    print(f"wrote {counts['corpus']} documents, {counts['queries']} queries, {counts['qrels']} qrels to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
