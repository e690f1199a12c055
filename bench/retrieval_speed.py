"""Retrieval stage speed, side by side in one run.

* BM25: our ``BM25Retriever.search`` (hits -> [Q, K] id/score arrays) against a
  bare Pyserini ``LuceneSearcher.batch_search`` on the same index, queries, k
  and threads.  Goal: ours <= 1.2x bare.
* Dense encoding: our ``encode_texts`` (one tokenizer pass, token-length
  sorted, token-budget batches) against ``SentenceTransformer.encode`` on the
  same texts and model.  Goal: ours >= 1.0x sentence-transformers throughput.

    python bench/retrieval_speed.py --queries 2000 --k 100 --texts 3000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--texts", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=64, help="sentence-transformers batch size")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--allow-busy", action="store_true", help="exit 0 on a busy machine (figures still marked NOT A RESULT)")
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _machine

    guard = _machine.start(args.threads)

    import torch

    from data.registry import load_dataset
    from retrievers.bm25 import BM25Retriever
    from retrievers.encoder import encode_texts, load_sentence_encoder

    ds = load_dataset("reqa_squad", "dev")
    queries = ds.queries.texts[: args.queries]
    rows = []

    bm25 = BM25Retriever(threads=args.threads).index(ds.corpus)
    searcher = bm25._searcher  # the same LuceneSearcher, same index and BM25 parameters
    qids = [str(i) for i in range(len(queries))]
    ours = bm25.search(queries, args.k)
    bare_hits = searcher.batch_search(queries, qids, k=args.k, threads=args.threads)
    assert all(int(bare_hits[q][0].docid) == ours.ids[int(q), 0] for q in qids if bare_hits[q]), "different results"
    t_bare = best_of(lambda: searcher.batch_search(queries, qids, k=args.k, threads=args.threads), args.repeats)
    t_ours = best_of(lambda: bm25.search(queries, args.k), args.repeats)
    rows.append(("BM25 search", f"{len(queries)} queries, k={args.k}", len(queries) / t_bare, len(queries) / t_ours, "queries/s", t_ours / t_bare, "ours/bare time <= 1.2"))

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = load_sentence_encoder(None, "cpu")
    texts = ds.corpus.texts[: args.texts]
    a = encode_texts(model, texts, show_progress=False)
    b = model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    assert np.abs(a - b).max() < 1e-4, "different embeddings"
    t_st = best_of(lambda: model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True), args.repeats)
    t_ours = best_of(lambda: encode_texts(model, texts, show_progress=False), args.repeats)
    rows.append(("dense encode", f"{len(texts)} sentences, all-MiniLM-L6-v2", len(texts) / t_st, len(texts) / t_ours, "texts/s", (len(texts) / t_ours) / (len(texts) / t_st), "ours/ST throughput >= 1.0"))

    print(f"{'stage':<14} {'workload':<36} {'reference':>11} {'ours':>11} {'unit':<10} {'ratio':>6}  goal")
    for stage, work, ref, ours_rate, unit, ratio, goal in rows:
        print(f"{stage:<14} {work:<36} {ref:>11.1f} {ours_rate:>11.1f} {unit:<10} {ratio:>6.2f}  {goal}")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
