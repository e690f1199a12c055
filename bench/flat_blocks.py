"""Exact dense search: block size, FAISS's batch rule and exact ties, before and now.

``python bench/flat_blocks.py --out bench/results``     (the lead's run: real 100k, SYNTHETIC 1M; k = 100, 1000)
``python bench/flat_blocks.py --sizes 1000 --synthetic 20k --queries 200 --repeat 1``   (a small smoke run)

The embedding cache writes resumable shards of 4,096 rows.  Exact search used to
run one ``faiss.knn`` per shard and merge the results in a ``faiss.ResultHeap``
("before", re-implemented here as it was).  Three things cost there:

* every call selects and sorts a top k of its own, so at k = 1000 a 4,096-row
  shard costs about as much selection as scoring;
* FAISS scores a batch of fewer than ``distance_compute_blas_threshold / d``
  queries (333 at d = 384) one query at a time over the whole block, streaming
  the block from memory once per query;
* (correctness, not speed) FAISS's selection keeps an arbitrary subset of the
  rows tied at its k-th score, so "ties go to the lower row" failed at the cut.

``retrievers.faiss_index.flat_search`` now copies consecutive small shards into
one reused block of ``exact_block_bytes(k, d)`` (48 MB at k = 100, 188 MB at k = 1000),
uses FAISS's BLAS path for batches of >= 8 queries, and searches a margin deeper
to settle ties at the cut by row (``tests/test_faiss_index.py`` checks that
against numpy on exact-integer data).  This bench times the same queries over
the same memory-mapped shards: before, now with blocks from "each shard as it
is" (``block 0``) up, and FAISS's ``IndexFlatIP`` over the corpus copied into RAM
as the reference speed (its own ties).  "ids = default's" is the share of
result positions equal to the default configuration's; BLAS rounds the same
vector differently in different block shapes, so near-ties may swap (the max
score difference says by how much).

Corpora: the real 100k x 384 MiniLM embeddings of ``bench/dense_scale.py`` (its
cache; encoded there if missing, about 13 min at ``--words 32``) with SQuAD dev
questions, and its SYNTHETIC 1M x 384 Gaussian mixture (speed only), both as
4,096-row memory-mapped shards like the embedding cache's.  Each configuration
is timed ``--repeat`` times in alternating order; the table gives medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SHARD = 4096  # rows per embedding-cache shard (retrievers.dense.SHARD_ROWS)
MB = 1 << 20


def synthetic_shards(n: int, queries: int):
    """dense_scale's SYNTHETIC mixture, as 4,096-row memory-mapped slices."""
    from dense_scale import synthetic_embeddings

    from data.io import cache_dir
    from retrievers.faiss_index import EmbeddingShards

    whole, _, q = synthetic_embeddings(n, 384, queries, cache_dir("bench", "dense_scale"))
    data = np.load(whole.parts[0].filename, mmap_mode="r")
    return EmbeddingShards([data[lo : lo + SHARD] for lo in range(0, n, SHARD)]), q


def real_shards(n: int, words: int, queries: int, threads: int):
    """dense_scale's real MiniLM corpus (its embedding cache writes 4,096-row shards)."""
    from dense_scale import real_embeddings

    shards, _, q = real_embeddings(n, words, queries, threads)
    return shards, q


def before(shards, q: np.ndarray, k: int):
    """Exact search as it was before blocks: one ``faiss.knn`` per shard, FAISS's own selection and batch rule."""
    import faiss

    from retrievers.faiss_index import _ties_to_lower_row

    k = min(k, len(shards))
    heap = faiss.ResultHeap(len(q), k, keep_max=True)
    for lo, block in shards.blocks():
        d, i = faiss.knn(q, np.ascontiguousarray(block), min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        _ties_to_lower_row(d, i)
        heap.add_result(d, np.where(i >= 0, i + lo, -1))
    heap.finalize()
    _ties_to_lower_row(heap.D, heap.I)
    return heap.D, heap.I


def run_part(label: str, shards, q: np.ndarray, ks: list[int], blocks: list[int], repeat: int, queries: list[int]) -> list[dict]:
    import faiss

    from retrievers.faiss_index import exact_block_bytes, flat_search

    rows = []
    for nq in queries:
        qs = np.ascontiguousarray(q[:nq])
        for k in ks:
            default = exact_block_bytes(min(k, len(shards)), shards.dim)
            configs = ([("before: FAISS's selection, per shard", "before"), ("now, block 0 (each shard)", 0)]
                       + [(f"now, block {b} MB", b * MB) for b in blocks if b * MB != default]
                       + [(f"now, default block ({default / MB:.0f} MB)", default)]
                       + [("IndexFlatIP in RAM (FAISS's ties)", None)])
            flat = None
            times: dict[str, list[float]] = {name: [] for name, _ in configs}
            results: dict[str, tuple] = {}
            for rep in range(repeat):
                for name, size in (configs if rep % 2 == 0 else configs[::-1]):
                    if size is None:
                        if flat is None:
                            flat = faiss.IndexFlatIP(shards.dim)
                            for _, part in shards.blocks():
                                flat.add(np.ascontiguousarray(part))
                        run = lambda: flat.search(qs, k)  # noqa: E731
                    elif size == "before":
                        run = lambda: before(shards, qs, k)  # noqa: E731
                    else:
                        run = lambda size=size: flat_search(shards, qs, k, block_bytes=size)  # noqa: E731
                    if rep == 0:
                        run()  # warm-up: pages in, threads up
                    t0 = time.perf_counter()
                    results[name] = run()
                    times[name].append(time.perf_counter() - t0)
            ref_s, ref_i = results[next(name for name, size in configs if size == default)]
            base_t = statistics.median(times[configs[0][0]])
            for name, size in configs:
                s, i = results[name]
                t = statistics.median(times[name])
                buffer = "corpus copy" if size is None else ("none" if size in (0, "before") else f"{min(size, shards.nbytes) / MB:.0f} MB")
                rows.append({"part": label, "queries": nq, "k": k, "config": name, "qps": nq / t, "speedup": base_t / t,
                             "same_ids": float(np.mean(i == ref_i)), "max_score_diff": float(np.max(np.abs(s - ref_s))),
                             "buffer": buffer})
                print(f"{label} nq={nq} k={k}: {name} {nq / t:.0f} q/s ({base_t / t:.2f}x)", file=sys.stderr)
            del flat
    return rows


def table(rows: list[dict]) -> str:
    out = ["| corpus | queries | k | exact search | q/s | vs before | ids = default's | max score diff | extra memory |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['part']} | {r['queries']} | {r['k']} | {r['config']} | {r['qps']:,.0f} | {r['speedup']:.2f}x | "
                   f"{r['same_ids']:.4f} | {r['max_score_diff']:.1e} | {r['buffer']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from dense_scale import parse_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100k", help="real corpus sizes (dense_scale's MiniLM passages); '' for none")
    p.add_argument("--words", type=int, default=32, help="words per real passage (dense_scale's README run: 32)")
    p.add_argument("--synthetic", default="1M", help="SYNTHETIC vector counts; '' for none")
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--synthetic-queries", type=int, default=500)
    p.add_argument("--batches", default="2000,64", help="query batch sizes to time (each at most the queries available)")
    p.add_argument("--ks", default="100,1000")
    p.add_argument("--blocks", default="12,48,192", help="block sizes in MB besides 0 (each shard as it is)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="also write the table here (Markdown)")
    p.add_argument("--allow-busy", action="store_true", help="exit 0 on a busy machine (figures still marked NOT A RESULT)")
    args = p.parse_args(argv)
    os.environ.setdefault("QA_DATA_DIR", str((ROOT.parent / "shared" / "data").resolve()))
    import faiss

    import _machine

    faiss.omp_set_num_threads(args.threads)
    ks = [int(x) for x in args.ks.split(",") if x.strip()]
    blocks = [int(x) for x in args.blocks.split(",") if x.strip()]
    parts = []
    for size in [parse_size(s) for s in args.sizes.split(",") if s.strip()]:
        shards, q = real_shards(size, args.words, args.queries, args.threads)
        parts.append((f"real {size:,} x {shards.dim} (MiniLM)", shards, q))
    for size in [parse_size(s) for s in args.synthetic.split(",") if s.strip()]:
        shards, q = synthetic_shards(size, args.synthetic_queries)
        parts.append((f"SYNTHETIC {size:,} x 384", shards, q))
    guard = _machine.start(args.threads)  # after the (cached) encoding: the clocks start below
    rows = []
    for label, shards, q in parts:
        batches = sorted({min(len(q), int(b)) for b in args.batches.split(",") if b.strip()}, reverse=True)
        rows += run_part(label, shards, np.ascontiguousarray(q, dtype=np.float32), ks, blocks, args.repeat, batches)
    text = table(rows)
    print(guard.header())
    print(f"{args.threads} FAISS threads; memory-mapped 4,096-row shards; medians of {args.repeat} alternating runs; "
          "queries: SQuAD dev questions (real), mixture draws (SYNTHETIC)")
    print(text)
    status = _machine.finish(guard, allow_busy=args.allow_busy)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "flat_blocks.md").write_text(guard.header() + "\n\n" + text + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
