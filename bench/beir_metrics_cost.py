"""Cost of BEIR metrics through pytrec_eval (eval.beir_metrics): seconds per 1,000 queries at depth 1,000.

    python bench/beir_metrics_cost.py --queries 2000 --depth 1000

Random rankings over the SciFact corpus (5,183 documents; the qrels of its 300 test queries, repeated):
only the metric computation is timed.  Prints one line per repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--depth", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    from data.registry import load_dataset
    from eval.beir_metrics import beir_metrics
    from retrievers.types import Ranking

    ds = load_dataset("beir:scifact", "test")
    rows = [i % len(ds.queries) for i in range(args.queries)]
    queries = dataclasses.replace(ds.queries.subset(rows), ids=[str(i) for i in range(args.queries)])
    rng = np.random.default_rng(0)
    n = len(ds.corpus)
    ids = np.stack([rng.permutation(n)[: args.depth] for _ in range(args.queries)])
    scores = -np.sort(-rng.random((args.queries, args.depth)), axis=1).astype(np.float32)
    for r in range(args.repeats):
        t = time.perf_counter()
        beir_metrics(Ranking(ids, scores), queries, corpus_ids=ds.corpus.ids)
        dt = time.perf_counter() - t
        print(f"repeat {r + 1}: {dt:.2f} s for {args.queries} queries x {args.depth} = {1000 * dt / args.queries:.2f} s per 1,000 queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
