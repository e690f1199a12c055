"""What a trade-off sweep costs, measured side by side in one run.

A. One corpus level, top N read once: the time to score every n = 1..N
   (EM, F1, recall@n, answer-bearing counts, the selectors) on top of reading
   the top N once, as a ratio to reading alone (goal: <= 1.1x).  For scale,
   reading the top n separately for every n would read N(N+1)/2 pairs per
   question instead of N (estimated from the measured read throughput).
B. Read reuse: a sweep over two corpus sizes, then the same sweep with one
   more size in a new output directory sharing the read cache: reads done vs
   reused per level.

    python bench/sweep_cost.py --reader /work/shared/models/minilm-squad-reader
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reader", default=str(Path(__file__).resolve().parents[2] / "shared" / "models" / "minilm-squad-reader"))
    p.add_argument("--questions", type=int, default=30, help="SQuAD dev questions (spread: every K-th)")
    p.add_argument("--n", type=int, default=10, help="N, the passages read per question")
    p.add_argument("--size", type=int, default=5000, help="corpus size of part A")
    p.add_argument("--sizes", default="2067,5000", help="corpus sizes of the first sweep of part B")
    p.add_argument("--extra-size", default="10000", help="the size the second sweep adds")
    _machine.add_guard_args(p)
    args = p.parse_args()
    guard = _machine.start(_machine.hardware.available_cores())
    os.environ.setdefault("QA_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

    from data.open_domain import corpus_levels, gold_rows, restrict_corpus
    from data.registry import load_dataset
    from pipeline import stages
    from pipeline.cli import print_table
    from pipeline.config import SelectorsConfig
    from pipeline.tradeoff_sweep import evaluate_level, every_kth_question, parse_thetas, selector_systems
    from pipeline.sweep import main as sweep_main
    from readers.extractive import ExtractiveReader, ReadCache

    ds = load_dataset("squad_open", "dev")
    every = max(1, len(ds.queries) // args.questions)
    ds = every_kth_question(ds, every)
    ds.queries = ds.queries.subset(range(min(args.questions, len(ds.queries))))
    rows = corpus_levels(len(ds.corpus), gold_rows(ds.queries), [args.size], seed=1)[0]
    level = restrict_corpus(ds, rows)
    ranking = stages.retrieve(stages.build_retriever("bm25", {}), level, args.n)
    reader = ExtractiveReader(args.reader, progress=False).load()
    selectors = selector_systems(parse_thetas(SelectorsConfig().thetas), min(25, args.n), None)

    # ---------------------------------------------------------------- part A
    with tempfile.TemporaryDirectory() as tmp:
        passages = stages.passages_for(ranking, level.corpus, args.n)
        t0 = time.perf_counter()
        reads = stages.read_top(reader, level.queries.texts, passages, cache=ReadCache(Path(tmp) / "reads"))
        t_read = time.perf_counter() - t0
        pairs = reads.n_read
        # the sweep's whole per-level evaluation on the cached reads minus the read itself
        t0 = time.perf_counter()
        result = evaluate_level(level, ranking, reader, ReadCache(Path(tmp) / "reads"), args.n, selectors)
        t_eval = time.perf_counter() - t0
        t_score = t_eval - result.info["read_s"]  # scoring every n and every selector (+ passages, recall counts)
        assert result.info["reads_done"] == 0
        # the same numbers through answers_for_n, one n at a time (no re-read)
        from eval.answer_metrics import exact_match

        t0 = time.perf_counter()
        for n in range(1, args.n + 1):
            answers, _ = stages.answers_for_n(reads, passages, np.full(len(level.queries), n))
            em = [exact_match(a, g) for a, g in zip(answers, level.queries.answers)]
            assert em == result.em[:, n - 1].tolist()
        t_loop = time.perf_counter() - t0
    naive_pairs = len(level.queries) * args.n * (args.n + 1) // 2
    rows_a = [
        ("questions x N", f"{len(level.queries)} x {args.n} (corpus {args.size})"),
        ("read top N once: pairs", pairs),
        ("read top N once: s", round(t_read, 2)),
        ("score every n 1..N + selectors: s", round(t_score, 4)),
        ("ratio (read + score all n) / read", round((t_read + t_score) / t_read, 4)),
        ("per-n answers_for_n loop on the same reads: s", round(t_loop, 4)),
        ("re-reading top n for each n: pairs", naive_pairs),
        ("re-reading top n for each n: s (estimated)", round(t_read * naive_pairs / max(pairs, 1), 1)),
    ]
    print_table(rows_a, title="A. scoring every n vs reading the top N once")

    # ---------------------------------------------------------------- part B
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        common = ["--dataset", "squad_open", "--reader", args.reader, "--n", str(args.n), "--every", str(every),
                  "--limit", str(args.questions), "--no-ordinal", "--no-plots", "--read-cache", str(tmp / "reads"), "--bootstrap", "100"]
        table = []
        for run, sizes in (("first", args.sizes), ("+1 size", f"{args.sizes},{args.extra_size}")):
            out = tmp / run.replace(" ", "").replace("+", "plus")
            rc = sweep_main(common + ["--corpus-sizes", sizes, "--out", str(out)])
            if rc != 0:
                return rc
            levels = json.loads((out / "manifest.json").read_text())["levels"]
            for key, info in sorted(levels.items(), key=lambda kv: int(kv[0].split("/")[0])):
                table.append((run, key.split("/")[0], info["pairs"], info["reads_done"], info["reads_reused"], info["read_s"]))
        print("B. read reuse across corpus sizes (shared read cache, new output dir)")
        print(f"  {'sweep':<9}{'size':>7}{'pairs':>8}{'done':>8}{'reused':>8}{'read s':>9}")
        for run, size, pairs_, done, reused, read_s in table:
            print(f"  {run:<9}{size:>7}{pairs_:>8}{done:>8}{reused:>8}{read_s:>9.1f}")
        first_done = sum(r[3] for r in table if r[0] == "first")
        second_done = sum(r[3] for r in table if r[0] != "first")
        second_reused = sum(r[4] for r in table if r[0] != "first")
        print(f"  second sweep: {second_done} reads done, {second_reused} reused (first sweep read {first_done})")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
