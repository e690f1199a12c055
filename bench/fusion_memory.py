"""Where a fused retriever's memory goes: tracemalloc peaks per phase of one search.

Builds ``--retriever`` (default ``rrf:bm25+dense``), indexes the corpus, then
runs one ``search`` of the dataset's queries at ``--depth`` under
``tracemalloc`` (Python and numpy allocations; the JVM's heap and FAISS's C++
buffers are not traced, so the process RSS is printed too).  Every
fusion-stage function (member search, pooling, the fusion formula, the final
sort) is wrapped so the table shows each phase's peak above what was live when
it started, and the 8 allocation sites still holding the most memory after the search.

    python bench/fusion_memory.py --dataset reqa_squad --limit 2000 --depth 1000
    python bench/fusion_memory.py --retriever fuse-zscore:bm25+dense --limit 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_mb() -> tuple[float, float]:
    """``(current RSS, peak RSS)`` of this process in MB (Linux ``/proc``)."""
    cur = peak = float("nan")
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return cur, peak


class Phases:
    """Peak traced memory of each wrapped call (nested calls too), above what was live when it began."""

    def __init__(self):
        self.rows: list[tuple[str, float, float, float]] = []
        self.stack: list[list[float]] = []  # [start bytes, peak bytes so far, start time]

    def enter(self) -> None:
        cur, peak = tracemalloc.get_traced_memory()
        if self.stack:
            self.stack[-1][1] = max(self.stack[-1][1], peak)
        self.stack.append([cur, cur, time.perf_counter()])
        tracemalloc.reset_peak()

    def exit(self, label: str) -> None:
        cur, peak = tracemalloc.get_traced_memory()
        start, high, t0 = self.stack.pop()
        high = max(high, peak)
        if self.stack:
            self.stack[-1][1] = max(self.stack[-1][1], high)
        self.rows.append((label, (high - start) / 2**20, (cur - start) / 2**20, time.perf_counter() - t0))

    def call(self, label: str, fn, *a, **kw):
        self.enter()
        try:
            return fn(*a, **kw)
        finally:
            self.exit(label)

    def wrap(self, owner, name: str, label: str | None = None) -> None:
        fn = getattr(owner, name)
        label = label or f"{getattr(owner, '__name__', owner)}.{name}"

        def wrapped(*a, **kw):
            return self.call(label, fn, *a, **kw)

        setattr(owner, name, wrapped)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="reqa_squad")
    p.add_argument("--split", default="dev")
    p.add_argument("--limit", type=int, default=2000, help="first N questions (0: all)")
    p.add_argument("--depth", type=int, default=1000)
    p.add_argument("--retriever", default="rrf:bm25+dense")
    p.add_argument("--fusion-opt", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)

    from data.registry import load_dataset
    from data.types import limit_queries
    from retrievers import pooling, rrf, score_fusion
    from retrievers.registry import make_retriever

    ds = limit_queries(load_dataset(args.dataset, args.split), args.limit or None)
    fusion = dict(item.split("=", 1) for item in args.fusion_opt)
    fusion.setdefault("depth", str(args.depth))
    retriever = make_retriever(args.retriever, fusion_options=fusion)
    retriever.index(ds.corpus)
    texts = ds.queries.texts
    print(f"{args.retriever}: {len(texts)} query inputs, corpus {len(ds.corpus)}, depth {args.depth}", file=sys.stderr)

    phases = Phases()
    for member in getattr(retriever, "members", []):
        phases.wrap(member, "search", f"member search {member.name}")  # instance attribute: this member only
    for module, name in ((pooling, "pool_rankings"), (pooling, "rank_pool"), (rrf, "reciprocal_rank_fusion"),
                         (score_fusion, "normalized_pool_scores"), (score_fusion, "score_fusion")):
        phases.wrap(module, name)
    # the fused modules imported these names at import time: patch their references too
    for module in (rrf, score_fusion):
        for name in ("pool_rankings", "rank_pool"):
            if hasattr(module, name):
                setattr(module, name, getattr(pooling, name))

    tracemalloc.start(8)
    ranking = phases.call("whole search", retriever.search, texts, args.depth)
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    cur_rss, peak_rss = rss_mb()

    print("| phase | calls | peak traced above its start (MB, max over calls) | still held after (MB, max) | s (total) |")
    print("|---|---|---|---|---|")
    agg: dict[str, list[float]] = {}
    for label, pk, held, secs in phases.rows:  # one row per phase: fused searches run block by block
        a = agg.setdefault(label, [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1], a[2], a[3] = max(a[1], pk), max(a[2], held), a[3] + secs
    for label, (calls, pk, held, secs) in agg.items():
        print(f"| {label} | {calls} | {pk:.1f} | {held:.1f} | {secs:.1f} |")
    print(f"result: ids {ranking.ids.nbytes / 2**20:.1f} MB + scores {ranking.scores.nbytes / 2**20:.1f} MB; "
          f"process RSS now {cur_rss:.0f} MB, peak {peak_rss:.0f} MB (includes the JVM and FAISS)")
    print("largest live allocations after the search (traceback's innermost project frame):")
    for stat in snap.statistics("lineno")[:8]:
        print(f"  {stat.size / 2**20:8.1f} MB  {stat.traceback[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
