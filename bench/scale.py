"""Scale benchmark of the open-domain path: corpus store, BM25 index, retrieval at depth, reading.

``python -m bench.scale --sizes 10k,100k,1M``

For each corpus size N it writes (once, cached under ``--cache``) a DPR-format
``psgs_w100``-style TSV of N passages built from real text: the sentences of
SQuAD v1.1 train and dev (``$QA_DATA_DIR/squad``) recombined, deterministically
(seeded), into 100-word passages titled by the article of their first
sentence; and a DPR ``qa.csv`` of SQuAD dev questions.  Then, each stage in its
own subprocess (so its peak RSS, ``ru_maxrss`` from ``os.wait4``, is its own),
on a cache directory of its own (nothing is reused from earlier runs):

1. ``store``: build the out-of-core corpus store (:mod:`data.corpus_store`);
2. ``index``: build the BM25 index (``retrievers.bm25``; timed after the
   in-process JVM started and our batch helper was compiled -- once per
   install -- as Pyserini's side is timed after its JVM started);
3. ``retrieve``: search ``--questions`` (2,000) questions at each of ``--depths``
   (1000; e.g. ``100,1000``: each timed on its own) and decide DPR has-answer
   over every passage retrieved at the deepest (top-k accuracy);
4. ``read``: read the top 5 passages of ``--read-questions`` (500) questions
   with the extractive reader (``../shared/models/minilm-squad-reader``).

5. ``pyserini`` (unless ``--no-pyserini``): Pyserini's own indexer
   (``python -m pyserini.index.lucene``, same threads, our index options) on
   the same passages as JsonCollection JSONL shards (``title\ntext``, as our
   store indexes them; converted from the TSV once, untimed: Pyserini cannot
   read the TSV), against our store + index from the TSV -- the goal
   "corpus store + index at >= 0.9x the docs/s of Pyserini's own indexer";
   and search: bare Pyserini ``LuceneSearcher.batch_search`` (BM25 0.9/0.4, all
   threads, a 4 GB heap as in ``bench/retrieval_scale.py``) against our
   ``BM25Retriever.search`` on our index, at each depth, on the first
   ``--bare-questions`` (500) questions, each side in its own process after a
   50-question warm-up (bare: the ``batch_search`` call alone is timed): q/s,
   peak RSS, and whether the rankings (ids, scores, order) are identical.

It prints a table (seconds, peak RSS, growth ratio per 10x of N), disk use,
and an extrapolation to DPR's 21,015,324 passages from the measured growth
between the two largest sizes: a power law per stage (time and RSS), disk
linear in N; hours on 2 cores as measured, and on 16 cores assuming the
multi-threaded stages (index, retrieve, read) scale linearly with cores and
the store build (one Python reader) does not.  Results go to ``--out``
(Markdown + JSON).  Numbers from a loaded machine are not results.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DPR_PASSAGES = 21_015_324
STAGES = ("store", "index", "retrieve", "read")
PARALLEL = {"store": False, "index": True, "retrieve": True, "read": True}
# stages whose work grows at least linearly with N (every passage is stored/indexed; a query's postings
# grow with N): their time is extrapolated with an exponent of at least 1 -- a measured exponent
# below 1 only reflects fixed costs that dominate the small sizes
LINEAR = {"store": True, "index": True, "retrieve": True, "read": False}
WORDS = 100
SEED = 12


# ------------------------------------------------------------------ corpus
def parse_size(text: str) -> int:
    """A corpus size: a count with an optional k/M suffix, or ``dpr`` (DPR's 21,015,324 Wikipedia passages)."""
    if text.strip().lower() == "dpr":
        return DPR_PASSAGES
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not m:
        raise SystemExit(f"error: --sizes {text!r}: expected counts like 10k,100k,1M or dpr")
    return int(round(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()]))


def squad_sentences(data_dir: Path) -> tuple[list[str], list[int], list[str]]:
    """Sentences of SQuAD dev + train (ReQA's splitter), their article index, and the article titles."""
    from data.registry import load_squad_any
    from data.sentences import reqa_sentences

    sentences, article_of, titles = [], [], []
    for split in ("dev", "train"):
        squad, _ = load_squad_any(split, data_dir=data_dir, data_file=None)
        for article in squad["data"]:
            titles.append(str(article.get("title", "")).replace("_", " "))
            for para in article["paragraphs"]:
                for s in reqa_sentences(para["context"]):
                    s = " ".join(s.split())
                    if s:
                        sentences.append(s)
                        article_of.append(len(titles) - 1)
    return sentences, article_of, titles


def write_corpus(n: int, path: Path, source: tuple[list[str], list[int], list[str]]) -> None:
    """``n`` 100-word passages as a DPR TSV (header ``id text title``), deterministic for SEED.

    ``source``: :func:`squad_sentences` (sentences, their article, article titles).
    """
    sentences, article_of, titles = source
    words = [s.split() for s in sentences]
    rng = np.random.default_rng(np.random.SeedSequence([SEED, n]))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["id", "text", "title"])
        pid = 0
        # passages run through seeded permutations of the sentences: the first pass keeps
        # SQuAD's own order (real paragraphs), later passes recombine sentences at random
        order = np.arange(len(sentences))
        while pid < n:
            buf: list[str] = []
            first = None
            for i in order:
                if first is None:
                    first = int(i)
                buf.extend(words[i])
                if len(buf) >= WORDS:
                    pid += 1
                    w.writerow([str(pid), " ".join(buf[:WORDS]), titles[article_of[first]]])
                    buf, first = [], None
                    if pid >= n:
                        break
            order = rng.permutation(len(sentences))
    os.replace(tmp, path)


def write_jsonl(tsv: Path, n: int, out_dir: Path, shards: int) -> None:
    """The TSV's ``n`` passages as JsonCollection shards (``{"id", "contents": "title\\ntext"}``), for Pyserini's indexer."""
    if (out_dir / "_COMPLETE").is_file():
        return
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    per = math.ceil(n / shards)
    out = None
    with open(tsv, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t")
        next(reader)
        for i, (pid, text, title) in enumerate(reader):
            if i % per == 0:
                if out is not None:
                    out.close()
                out = open(tmp / f"docs-{i // per:03d}.jsonl", "w", encoding="utf-8")
            out.write(json.dumps({"id": pid, "contents": f"{title}\n{text}" if title else text}, ensure_ascii=False) + "\n")
    if out is not None:
        out.close()
    (tmp / "_COMPLETE").write_text("ok\n")
    os.replace(tmp, out_dir)


def _pyserini_index(jsonl: str, threads: int) -> dict:
    """Pyserini's own indexer with our index options on the JSONL shards (see bench/retrieval_scale.py)."""
    from bench.retrieval_scale import pyserini_index
    from data.io import cache_dir
    from retrievers.lucene import index_args

    return {"index_s": round(pyserini_index(jsonl, cache_dir("pyserini-index"), threads, index_args()), 3)}


def write_questions(path: Path, data_dir: Path, count: int) -> None:
    """SQuAD dev questions (every k-th, spread over all articles) as a DPR qa.csv."""
    from data.registry import load_squad_any

    squad, _ = load_squad_any("dev", data_dir=data_dir, data_file=None)
    qs = [(qa["question"].replace("\t", " ").replace("\n", " "), list(dict.fromkeys(a["text"] for a in qa["answers"])))
          for article in squad["data"] for para in article["paragraphs"] for qa in para["qas"]]
    step = max(1, len(qs) // count)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for q, answers in qs[::step][:count]:
            f.write(f"{q}\t{answers!r}\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------ stages
def child(stage: str, tsv: str, qa: str, depths: list[int], questions: int, read_questions: int, reader: str,
          threads: int) -> dict:
    """One stage in this (child) process; returns its internal timings."""
    from pipeline import stages

    if stage == "read":
        return _read(reader, threads)
    if stage == "pyserini":
        return _pyserini_index(tsv, threads)
    if stage == "bare-search":
        return _bare_search(qa, depths[0], questions, threads)
    from data.registry import load_dataset

    t0 = time.perf_counter()
    ds = load_dataset(f"open:{tsv}+{qa}", "dev")
    info = {"load_s": round(time.perf_counter() - t0, 3), "passages": len(ds.corpus)}
    if stage == "store":
        from data.corpus_store import open_store

        store = open_store(ds.sources["corpus_store"])
        info["store_bytes"] = store.disk_bytes
        info["passages_per_s"] = store.manifest.get("passages_per_s")
        return info
    from retrievers.java import ensure_jvm

    ensure_jvm()  # JVM up and the batch helper compiled (once per install) before the clock, as on Pyserini's side
    retriever = stages.build_retriever("bm25", {"bm25": {"threads": threads}})
    t0 = time.perf_counter()
    retriever.index(ds.corpus)
    info["index_s"] = round(time.perf_counter() - t0, 3)
    if stage == "index":
        return info
    if stage == "ours-search":
        def search(texts: list[str], depth: int):
            ranking = retriever.search(texts, depth)
            return ranking.ids, ranking.scores, None

        return {**info, **_timed_search(search, qa, depths[0], questions, "ours")}
    if stage == "retrieve":
        from data.types import limit_queries

        ds = limit_queries(ds, questions)
        info["search_s_at"] = {}
        for depth in sorted(depths):  # the deepest last: its ranking is judged and read
            t0 = time.perf_counter()
            ranking = retriever.search(ds.queries.texts, depth)
            info["search_s_at"][str(depth)] = round(time.perf_counter() - t0, 3)
        info["search_s"] = info["search_s_at"][str(max(depths))]
        t0 = time.perf_counter()
        stages.resolve_open_gold(ds.queries, ds.corpus, ranking)
        info["has_answer_s"] = round(time.perf_counter() - t0, 3)
        info["questions"] = len(ds.queries)
        from eval.retrieval_families import retrieval_metrics

        info["dpr"] = retrieval_metrics(ranking, ds, families=["dpr"])["dpr"]["accuracy"]
        top = stages.passages_for(ranking.subset(range(min(read_questions, len(ds.queries)))), ds.corpus, 5)
        from data.io import cache_dir, write_json

        write_json(cache_dir() / "read_input.json", {"questions": ds.queries.texts[: len(top.texts)], "passages": top.texts,
                                                      "keys": top.keys, "scores": top.retriever_scores})
        return info
    raise ValueError(stage)


WARMUP = 50  # questions searched before the clock on each side of the search comparison


def _qa_questions(qa: str, count: int) -> list[str]:
    """The first ``count`` questions of a DPR qa.csv, read as ``open:`` reads them."""
    from data.open_sources import BadRecords, read_questions

    return [q.text for q in read_questions(Path(qa), "dpr-csv", BadRecords(False))[:count]]


def _timed_search(search, qa: str, k: int, count: int, side: str) -> dict:
    """Search the first ``count`` questions of ``qa`` at depth ``k`` after a warm-up; their [Q, k] rows and scores
    are saved under the cache for the identity check.  ``search(texts, k)`` returns ids, scores and the seconds
    to count (None: the whole call, as for ours, whose call returns the arrays; bare ``batch_search``: the call
    alone, not turning its hits into arrays)."""
    from data.io import cache_dir

    qs = _qa_questions(qa, count)
    search(qs[:WARMUP], k)
    t0 = time.perf_counter()
    ids, scores, call = search(qs, k)
    seconds = time.perf_counter() - t0 if call is None else call
    np.save(cache_dir() / f"{side}-{k}.ids.npy", ids)
    np.save(cache_dir() / f"{side}-{k}.scores.npy", scores)
    return {"search_s": round(seconds, 3), "questions": len(qs), "k": k}


def _bare_search(qa: str, k: int, count: int, threads: int) -> dict:
    """Bare Pyserini: ``LuceneSearcher.batch_search`` on our index (its docids are our rows)."""
    from bench.retrieval_scale import BARE_HEAP, hits_as_arrays
    from data.io import cache_dir

    os.environ["QA_JAVA_XMX"] = BARE_HEAP
    from retrievers.java import import_pyserini_lucene

    index = next((cache_dir() / "bm25").glob("*/_COMPLETE")).parent
    searcher = import_pyserini_lucene()[0].LuceneSearcher(str(index))
    searcher.set_bm25(0.9, 0.4)

    def search(texts: list[str], depth: int):
        qids = [str(i) for i in range(len(texts))]
        t0 = time.perf_counter()
        hits = searcher.batch_search(texts, qids, k=depth, threads=threads)
        seconds = time.perf_counter() - t0  # the call alone, as bench/retrieval_scale.py times it
        return (*hits_as_arrays(hits, qids, depth), seconds)

    return {**_timed_search(search, qa, k, count, "bare"), "torch": "torch" in sys.modules}


def _read(reader: str, threads: int) -> dict:
    """The read stage: the top 5 the retrieve stage found, without starting Lucene's JVM in this process."""
    from data.io import cache_dir
    from pipeline import stages
    from readers.extractive import ExtractiveReader

    saved = json.loads((cache_dir() / "read_input.json").read_text(encoding="utf-8"))
    passages = stages.Passages(np.asarray(saved["keys"], dtype=np.int64), saved["passages"],
                               np.asarray(saved["scores"], dtype=np.float32), "sentence")
    reader_obj = ExtractiveReader(model=reader, device="cpu", num_threads=threads).load()
    t0 = time.perf_counter()
    reads = stages.read_top(reader_obj, saved["questions"], passages)
    return {"read_s": round(time.perf_counter() - t0, 3), "pairs": int(reads.n_read), "questions": len(saved["questions"])}


def own_peak_rss() -> dict:
    """This process's own peak RSS since it started (``VmHWM``) and its children's (the indexer JVM), in MiB.

    The parent's ``os.wait4`` figure is not enough: Linux carries a forked process's RSS across ``exec``, so a
    child's ``ru_maxrss`` is at least what the bench's own process held when it forked the child.
    """
    import resource

    own = float("nan")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                own = int(line.split()[1]) / 1024
    except OSError:
        pass
    return {"own_peak_rss_mib": round(own, 1),
            "children_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}


class StageFailed(SystemExit):
    """A stage's process failed (its stderr went to ours)."""


def run_stage(stage: str, cache: Path, args, tsv: Path, qa: Path, depths: list[int] | None = None,
              questions: int | None = None) -> dict:
    """Run ``stage`` in a subprocess; wall seconds, peak RSS (MiB) and the child's own report."""
    env = dict(os.environ, QA_CACHE_DIR=str(cache), TOKENIZERS_PARALLELISM="false")
    depths = depths or args.depth_list
    cmd = [sys.executable, "-m", "bench.scale", "--child", stage, "--tsv", str(tsv), "--qa", str(qa),
           "--depths", ",".join(map(str, depths)), "--questions", str(questions or args.questions),
           "--read-questions", str(args.read_questions),
           "--reader", str(args.reader), "--threads", str(args.threads)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise StageFailed(f"error: stage {stage} failed (exit {proc.returncode}); command: {' '.join(cmd)}")
    report = json.loads(out.strip().splitlines()[-1])
    return {"stage": stage, "wall_s": round(wall, 3), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), **report}


def compare_search(cache: Path, args, tsv: Path, qa: Path, k: int) -> dict:
    """``--search-repeat`` pairs of our search and bare ``batch_search`` at depth ``k``, alternating which side
    goes first (the first process to search a cold index pays for its page faults); each side's median seconds,
    its highest peak RSS, every pair's ratio, and whether every run's rankings are identical."""
    runs: dict[str, list[dict]] = {"ours": [], "bare": []}
    identical = True
    for r in range(max(1, args.search_repeat)):
        for side in (("ours", "bare") if r % 2 == 0 else ("bare", "ours")):
            runs[side].append(run_stage(f"{side}-search", cache, args, tsv, qa, depths=[k], questions=args.bare_questions))
        identical &= all(np.array_equal(np.load(cache / f"ours-{k}.{what}.npy"), np.load(cache / f"bare-{k}.{what}.npy"))
                         for what in ("ids", "scores"))
    got = {}
    for side, rs in runs.items():
        got[side] = dict(rs[-1], search_s=float(np.median([x["search_s"] for x in rs])),
                         own_peak_rss_mib=max(peak_rss(x) for x in rs), children_peak_rss_mib=0.0)
    got["ratios"] = [round(b["search_s"] / o["search_s"], 3) for o, b in zip(runs["ours"], runs["bare"])]
    got["identical"] = identical
    return got


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# -------------------------------------------------------------- reporting
def stage_seconds(r: dict) -> float:
    """The stage's own cost: the wall time minus loading what earlier stages built."""
    key = {"store": "load_s", "index": "index_s", "retrieve": None, "read": "read_s"}[r["stage"]]
    if r["stage"] == "retrieve":
        return r["search_s"] + r["has_answer_s"]
    return r[key]


def extrapolate(sizes: list[int], values: list[float], target: int, min_exponent: float | None = None) -> tuple[float, float]:
    """(growth per 10x, value at target) from the two largest sizes: a power law through them.

    ``min_exponent``: the extrapolation's exponent is at least this (1 for work linear in N);
    the growth returned is the measured one.
    """
    if len(sizes) < 2 or values[-2] <= 0 or values[-1] <= 0:
        return float("nan"), float("nan")
    exponent = math.log(values[-1] / values[-2]) / math.log(sizes[-1] / sizes[-2])
    used = exponent if min_exponent is None else max(exponent, min_exponent)
    return 10 ** exponent, values[-1] * (target / sizes[-1]) ** used


def build_pairs(runs: dict) -> list[tuple[float, float]]:
    """(ours: store + index s, Pyserini's indexer s) of every build comparison at one size (first run, then repeats)."""
    first = (stage_seconds(runs["store"]) + stage_seconds(runs["index"]), runs["pyserini"]["index_s"])
    return [first] + [tuple(p) for p in runs.get("build_repeats", [])]


def peak_rss(r: dict) -> float:
    """A stage's peak RSS in MiB: the larger of its own process's and its children's (:func:`own_peak_rss`); for
    runs saved before the stages reported them, the parent's ``wait4`` figure (an upper bound)."""
    if "own_peak_rss_mib" in r:
        return max(r["own_peak_rss_mib"], r.get("children_peak_rss_mib", 0.0))
    return r["peak_rss_mib"]


def spread(ratios: list[float], unit: str = "pairs") -> str:
    """`` (lowest–highest, N pairs)`` of per-pair ratios, or nothing for a single pair."""
    return f" ({min(ratios):.2f}–{max(ratios):.2f}, {len(ratios)} {unit})" if len(ratios) > 1 else ""


def search_table(results: dict, sizes: list[int]) -> list[str]:
    """Our search against bare Pyserini ``batch_search`` on the same index (the runs that have the comparison)."""
    rows = []
    for n in sizes:
        for k, got in sorted(results["runs"][str(n)].get("search", {}).items(), key=lambda kv: int(kv[0])):
            if "error" in got:
                rows.append(f"| {n:,} | {k} | – | – | failed | – | – | – | – | – |")
                continue
            ours, bare = got["ours"], got["bare"]
            q = ours["questions"]
            rows.append(f"| {n:,} | {k} | {q:,} | {q / ours['search_s']:,.1f} | {q / bare['search_s']:,.1f} | "
                        f"{bare['search_s'] / ours['search_s']:.2f}{spread(got.get('ratios', []))} | {peak_rss(ours):,.0f} | {peak_rss(bare):,.0f} | "
                        f"{peak_rss(ours) / peak_rss(bare):.2f} | {'yes' if got['identical'] else 'NO'} |")
    if not rows:
        return []
    return ["", f"Search on our index: our `BM25Retriever.search` vs bare Pyserini `LuceneSearcher.batch_search` (each in its "
            f"own process, after a {WARMUP}-question warm-up; bare: the `batch_search` call alone, not turning its hits into "
            "arrays; peak RSS of the whole process; identical = ids, scores and order):", "",
            "| N | k | questions | ours q/s | bare q/s | speed-up | ours RSS MiB | bare RSS MiB | RSS ratio | identical |",
            "|---|---|---|---|---|---|---|---|---|---|", *rows]


def report(results: dict, sizes: list[int], threads: int) -> str:
    lines = [f"Scale benchmark (`python -m bench.scale`), {threads} threads; questions: retrieve "
             f"{results['args']['questions']} at depth {results['args']['depth']}, read top 5 of {results['args']['read_questions']}", ""]
    head = "| stage | " + " | ".join(f"N={n:,} s" for n in sizes) + " | x per 10x | " + " | ".join(f"N={n:,} RSS MiB" for n in sizes) + " | RSS x per 10x |"
    lines += [head, "|" + "---|" * (2 * len(sizes) + 3)]
    extra = {}
    for stage in STAGES:
        rs = [results["runs"][str(n)][stage] for n in sizes]
        secs = [stage_seconds(r) for r in rs]
        rss = [peak_rss(r) for r in rs]
        g_t, t_full = extrapolate(sizes, secs, DPR_PASSAGES, 1.0 if LINEAR[stage] else None)
        g_m, m_full = extrapolate(sizes, rss, DPR_PASSAGES)
        extra[stage] = (t_full, m_full)
        lines.append(f"| {stage} | " + " | ".join(f"{s:.1f}" for s in secs) + f" | {g_t:.2f} | " + " | ".join(f"{m:.0f}" for m in rss) + f" | {g_m:.2f} |")
    depths = results["args"].get("depths") or [results["args"]["depth"]]
    if len(depths) > 1:
        lines += ["", "Retrieval alone (seconds of `search` at each depth, all questions; the deepest is judged):", "",
                  "| N | " + " | ".join(f"depth {d} s" for d in depths) + " |", "|---|" + "---|" * len(depths)]
        for n in sizes:
            at = results["runs"][str(n)]["retrieve"].get("search_s_at", {})
            lines.append(f"| {n:,} | " + " | ".join(f"{at[str(d)]:.1f}" if str(d) in at else "–" for d in depths) + " |")
    disk = [results["runs"][str(n)]["disk"] for n in sizes]
    lines += ["", "| N | TSV (MiB) | store (MiB) | BM25 index (MiB) | (store + index) / TSV | passages/s (store) | "
              "top-20 / top-100 accuracy |", "|---|---|---|---|---|---|---|"]
    for n, d in zip(sizes, disk):
        r = results["runs"][str(n)]
        acc = r["retrieve"].get("dpr", {})
        tsv = d.get("tsv") or float("nan")
        lines.append(f"| {n:,} | {tsv / 2**20:,.0f} | {d['store'] / 2**20:,.0f} | {d['bm25'] / 2**20:,.0f} | "
                     f"{(d['store'] + d['bm25']) / tsv:.2f} | {r['store'].get('passages_per_s') or 0:,.0f} |"
                     f" {acc.get('Top20', float('nan')):.4f} / {acc.get('Top100', float('nan')):.4f} |")
    if all("pyserini" in results["runs"][str(n)] for n in sizes):
        lines += ["", "Building from the file: our corpus store + BM25 index from the TSV vs Pyserini's own indexer "
                  "(`pyserini.index.lucene`, same threads and index options) on the same passages as JSONL:", "",
                  "| N | ours: store + index s | docs/s | Pyserini's indexer s | docs/s | ratio (ours / Pyserini docs/s) |",
                  "|---|---|---|---|---|---|"]
        for n in sizes:
            pairs = build_pairs(results["runs"][str(n)])
            ours, theirs = (float(np.median([p[i] for p in pairs])) for i in (0, 1))
            ratios = [t / o for o, t in pairs]
            lines.append(f"| {n:,} | {ours:.1f} | {n / ours:,.0f} | {theirs:.1f} | {n / theirs:,.0f} | "
                         f"{theirs / ours:.2f}{spread(ratios, 'runs each')} |")
        if any(len(build_pairs(results["runs"][str(n)])) > 1 for n in sizes):
            lines += ["", "Seconds are medians of alternating runs (`--repeat`); the ratio is the medians', with the lowest "
                      "and highest ratio of a run pair."]
    lines += search_table(results, sizes)
    per_passage = (disk[-1]["store"] + disk[-1]["bm25"]) / sizes[-1]
    measured = sizes[-1] == DPR_PASSAGES
    if all("wall_s" in results["runs"][str(n)][st] for n in sizes for st in STAGES):
        walls = [sum(results["runs"][str(n)][st]["wall_s"] for st in STAGES) for n in sizes]
        lines += ["", "Whole run (the four stages' wall seconds, each a fresh process that opens what the stage before "
                  "built): " + ", ".join(f"N={n:,}: {w / 60:.1f} min" for n, w in zip(sizes, walls))]
    if measured:
        lines += ["", f"At {DPR_PASSAGES:,} passages (DPR's Wikipedia count), measured on {threads} cores; the 16-core "
                  "column is an estimate (see below):", "",
                  "| stage | hours, 2 cores | hours, 16 cores (estimate) | peak RSS GiB |", "|---|---|---|---|"]
    else:
        lines += ["", f"Extrapolation to {DPR_PASSAGES:,} passages (power law through the two largest sizes, time at least linear"
                  " in N for store, index and retrieve; disk linear):", "",
                  "| stage | hours, 2 cores | hours, 16 cores | peak RSS GiB |", "|---|---|---|---|"]
    total2 = total16 = 0.0
    for stage in STAGES:
        t, m = extra[stage]
        h2 = t / 3600 * (threads / 2 if PARALLEL[stage] else 1)
        h16 = h2 * (2 / 16) if PARALLEL[stage] else h2
        total2, total16 = total2 + h2, total16 + h16
        lines.append(f"| {stage} | {h2:.2f} | {h16:.2f} | {m / 1024:.1f} |")
    lines += [f"| all | {total2:.2f} | {total16:.2f} | |", "",
              f"Disk at {DPR_PASSAGES:,} passages: {'' if measured else 'about '}{per_passage * DPR_PASSAGES / 2**30:.1f} GiB "
              "(store + index), plus the TSV itself.",
              "16 cores: the index, retrieve and read stages assumed to scale linearly with cores, the store build (one Python reader) not at all."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10k,100k,1M", help="corpus sizes (passages): counts with k/M suffixes")
    p.add_argument("--questions", type=int, default=2000, help="questions retrieved at --depth")
    p.add_argument("--depths", default="1000", help="search depths of the retrieve stage, each timed (the deepest is judged)")
    p.add_argument("--bare-questions", type=int, default=500,
                   help="questions of the search comparison with bare Pyserini batch_search at each depth (0: none)")
    p.add_argument("--read-questions", type=int, default=500, help="questions whose top 5 passages are read")
    p.add_argument("--reader", default=str(ROOT.parent / "shared" / "models" / "minilm-squad-reader"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="threads for the index, search and reader")
    p.add_argument("--data-dir", default=os.environ.get("QA_DATA_DIR") or str(ROOT.parent / "shared" / "data"))
    p.add_argument("--cache", help="where corpora and per-run caches go (default: $QA_CACHE_DIR/scale)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help="stages to run (default: all; with --reuse also 'search', the comparison with bare batch_search)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale"), help="output stem (.md and .json)")
    p.add_argument("--report-only", action="store_true", help="re-render --out's tables from its saved JSON")
    p.add_argument("--allow-busy", action="store_true", help="exit 0 on a busy machine (the table is still marked NOT A RESULT)")
    p.add_argument("--no-pyserini", action="store_true", help="skip the comparison with Pyserini's own indexer")
    p.add_argument("--search-repeat", type=int, default=1,
                   help="search comparisons per depth (ours and bare alternating which goes first); medians reported")
    p.add_argument("--reuse", action="store_true",
                   help="keep each size's cache (store and index of an earlier run) and update --out's saved results "
                        "with the stages run now (e.g. --stages retrieve after a change to it)")
    p.add_argument("--repeat", type=int, default=1,
                   help="build comparisons per size (store + index vs Pyserini's indexer, alternating); medians reported")
    p.add_argument("--child", choices=STAGES + ("pyserini", "ours-search", "bare-search"), help=argparse.SUPPRESS)
    p.add_argument("--tsv", help=argparse.SUPPRESS)
    p.add_argument("--qa", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.depth_list = sorted({int(d) for d in args.depths.split(",") if d.strip()})
    except ValueError:
        raise SystemExit(f"error: --depths {args.depths!r}: expected depths like 100,1000") from None
    if not args.depth_list or min(args.depth_list) < 1:
        raise SystemExit(f"error: --depths {args.depths!r}: expected depths like 100,1000")
    if args.child:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        info = child(args.child, args.tsv, args.qa, args.depth_list, args.questions, args.read_questions, args.reader,
                     args.threads)
        info.update(own_peak_rss())
        print(json.dumps(info))
        return 0
    from data.io import cache_dir, write_json, write_text

    out = Path(args.out)
    if args.report_only:  # re-render the tables of a finished run (e.g. after a change to the extrapolation)
        results = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        sizes = sorted(int(n) for n in results["runs"])
        text = report(results, sizes, results["args"]["threads"]) + results.get("machine", "") + "\n"
        write_text(out.with_suffix(".md"), text)
        print(text)
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    import _machine

    guard = _machine.start(args.threads)
    os.environ.setdefault("QA_DATA_DIR", args.data_dir)
    sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    wanted = [s.strip() for s in args.stages.split(",") if s.strip()]
    root = Path(args.cache) if args.cache else cache_dir("scale")
    root.mkdir(parents=True, exist_ok=True)
    qa = root / f"squad-dev-{args.questions}.qa.csv"
    if not qa.is_file():
        write_questions(qa, Path(args.data_dir), max(args.questions, args.read_questions))
    results = {"args": {"questions": args.questions, "depth": max(args.depth_list), "depths": args.depth_list,
                        "bare_questions": args.bare_questions, "read_questions": args.read_questions,
                        "threads": args.threads, "reader": args.reader}, "runs": {}}
    if args.reuse and out.with_suffix(".json").is_file():
        results["runs"] = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))["runs"]
    source = None
    for n in sizes:
        tsv = root / f"psgs_squad_{n}.tsv"
        if not tsv.is_file():
            t0 = time.perf_counter()
            source = source or squad_sentences(Path(args.data_dir))
            write_corpus(n, tsv, source)
            print(f"wrote {tsv} ({n:,} passages, {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        cache = root / f"run-{n}"
        if args.reuse:
            runs: dict = results["runs"].get(str(n), {})
        else:
            shutil.rmtree(cache, ignore_errors=True)  # every stage is measured from nothing
            runs = {}
        for stage in STAGES:
            if stage not in wanted:
                continue
            runs[stage] = run_stage(stage, cache, args, tsv, qa)
            print(f"N={n:,} {stage}: {json.dumps(runs[stage])}", file=sys.stderr)
        runs["disk"] = {"store": du(cache / "corpus_store"), "bm25": du(cache / "bm25"), "tsv": tsv.stat().st_size}
        if not args.no_pyserini and args.bare_questions > 0 and "index" in runs and (not args.reuse or "search" in wanted):
            runs["search"] = {}
            for k in args.depth_list:  # ours and bare Pyserini on the same index and questions, alternating
                try:
                    got = compare_search(cache, args, tsv, qa, k)
                except StageFailed as e:  # the peer failing at this size is a result, not the end of the run
                    runs["search"][str(k)] = {"error": str(e)}
                    print(f"N={n:,} search k={k}: {e}", file=sys.stderr)
                    continue
                runs["search"][str(k)] = got
                print(f"N={n:,} search k={k}: {json.dumps(got)}", file=sys.stderr)
        results["runs"][str(n)] = runs
        write_json(out.with_suffix(".json"), results)  # a long run keeps what it measured so far
        if not args.no_pyserini and {"store", "index"} <= set(wanted):
            from retrievers.lucene import shard_count

            jsonl = root / f"psgs_squad_{n}.jsonl"
            write_jsonl(tsv, n, jsonl, shard_count(n, args.threads))  # as many files as our index build writes
            try:
                runs["pyserini"] = run_stage("pyserini", cache, args, jsonl, qa)
            except StageFailed as e:
                runs["pyserini_error"] = str(e)
                print(f"N={n:,} pyserini: {e}", file=sys.stderr)
                continue
            finally:
                shutil.rmtree(cache / "pyserini-index", ignore_errors=True)
                results["runs"][str(n)] = runs
                write_json(out.with_suffix(".json"), results)  # a long run keeps what it measured so far
            print(f"N={n:,} pyserini: {json.dumps(runs['pyserini'])}", file=sys.stderr)
            runs["build_repeats"] = []
            for r in range(1, args.repeat):  # more build comparisons, alternating which side goes first
                build = root / f"build-{n}"
                got = {}
                for side in (("pyserini", "ours") if r % 2 else ("ours", "pyserini")):
                    shutil.rmtree(build, ignore_errors=True)
                    if side == "ours":
                        got[side] = sum(stage_seconds(run_stage(st, build, args, tsv, qa)) for st in ("store", "index"))
                    else:
                        got[side] = run_stage("pyserini", build, args, jsonl, qa)["index_s"]
                shutil.rmtree(build, ignore_errors=True)
                runs["build_repeats"].append([round(got["ours"], 3), round(got["pyserini"], 3)])
                print(f"N={n:,} build repeat {r}: ours {got['ours']:.1f} s, Pyserini {got['pyserini']:.1f} s", file=sys.stderr)
        results["runs"][str(n)] = runs
    _machine.finish(guard, allow_busy=True, file=sys.stderr)
    results["machine"] = f"{guard.header()}; after {guard.load_after:.2f}" + ("" if not guard.busy else " (busy: NOT A RESULT)")
    write_json(out.with_suffix(".json"), results)
    if all(set(STAGES) <= set(r) for r in results["runs"].values()):
        text = report(results, sizes, args.threads) + results["machine"] + "\n"
        write_text(out.with_suffix(".md"), text)
        print(text)
    return 3 if guard.busy and not args.allow_busy else 0


if __name__ == "__main__":
    sys.exit(main())
