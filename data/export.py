"""Write a built dataset in BEIR layout: ``python -m data.export NAME --split dev --out DIR``.

``corpus.jsonl`` holds one line per candidate (``_id``, ``title`` = its
paragraph/context, ``text`` = the candidate sentence), ``queries.jsonl`` one
line per unique question (ReQA keys questions by their text) and
``qrels/<split>.tsv`` every candidate that is gold for any of that question's
query inputs, so BEIR/MTEB tools compute ReQA's MRR from it (ties aside).
"""

from __future__ import annotations

import argparse
import sys

from data.io import atomic_path, sha256_text, staged_outputs, write_jsonl
from pipeline.cli import main_guard, make_out_dir, parse_with_config, write_manifest


def export_beir(dataset, out) -> dict:
    corpus, queries = dataset.corpus, dataset.queries
    write_jsonl(
        out / "corpus.jsonl",
        (
            {"_id": cid, "title": (corpus.titles[i] if corpus.titles else corpus.contexts[i]) or "", "text": text}
            for i, (cid, text) in enumerate(zip(corpus.ids, corpus.texts))
        ),
    )
    qid_of_key: dict[str, str] = {}
    rels: dict[str, dict[str, int]] = {}
    for i, key in enumerate(queries.question_keys):
        qid = qid_of_key.setdefault(key, "q" + sha256_text(key)[:12])
        grades = queries.gold_grades[i] if queries.gold_grades is not None else None
        for j, row in enumerate(queries.gold[i]):
            g = int(grades[j]) if grades is not None else 1
            cur = rels.setdefault(qid, {})
            cur[corpus.ids[row]] = max(cur.get(corpus.ids[row], 0), g)
    write_jsonl(out / "queries.jsonl", ({"_id": qid, "text": key} for key, qid in qid_of_key.items()))
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "qrels" / f"{dataset.split}.tsv") as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for qid, docs in rels.items():
                for did, g in docs.items():
                    f.write(f"{qid}\t{did}\t{g}\n")
    return {"corpus": len(corpus), "queries": len(qid_of_key), "qrels": sum(len(d) for d in rels.values())}


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
