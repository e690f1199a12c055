"""Corpus store builds from JSON lines: Arrow's JSON reader against Python's ``json`` reader, same file.

Two corpora of N passages: the JsonCollection JSONL of ``bench/retrieval_scale.py``
(recombined SQuAD sentences, written once under its cache) read as
``open:pyserini@DIR``, and the same passages as a BEIR ``corpus.jsonl``
(title = the first 40 characters, text = the rest) read as ``beir:DIR``.  Each
side builds the store from an empty cache (content hash included) in its own
process; the table gives seconds, passages/s and the process's peak RSS.  The
Python side is what the store build ran before the Arrow reader (and what it
falls back to for files only that reader decides).  A third side runs Arrow's
reader without the read-ahead thread (``data.io.read_ahead``) that parses the
next batches while the store writes the previous ones: what that thread buys.

    python bench/json_store.py --sizes 100k,1M --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def beir_dir(passages: Path) -> Path:
    """A BEIR directory of the JsonCollection passages (written once next to them)."""
    out = passages / "beir"
    if (out / "_COMPLETE").is_file():
        return out
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for shard in sorted((passages / "jsonl").glob("*.jsonl")):
            for line in open(shard, encoding="utf-8"):
                rec = json.loads(line)
                text = rec["contents"]
                f.write(json.dumps({"_id": rec["id"], "title": text[:40], "text": text[40:], "metadata": {}}) + "\n")
    (out / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "q"}) + "\n")
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\t0\t1\n")
    (out / "_COMPLETE").write_text("ok\n")
    return out


def child(kind: str, reader: str, path: Path, cache: Path) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["QA_CACHE_DIR"] = str(cache)
    t0 = time.perf_counter()
    if kind == "pyserini":
        from data.corpus_store import cached_store, tree_digest
        from data.open_domain import open_corpus_store
        from data.open_sources import BadRecords, corpus_files, parse_open_spec, read_corpus

        if reader == "arrow":
            store, _ = open_corpus_store(parse_open_spec(f"pyserini@{path}+squad").corpus)
        else:  # the key open_corpus_store uses, the records of its Python reader or of Arrow's without read-ahead
            key = ["pyserini", tree_digest(corpus_files(path, "pyserini"), path), False]
            serial = reader == "arrow-serial"
            store = cached_store(key, lambda: read_corpus(path, "pyserini", BadRecords(False), fast=serial),
                                 meta={"reader": "arrow-serial"} if serial else None)
        rows = len(store)
    else:
        from data.beir import build_beir, read_beir_dir, read_jsonl, read_qrels
        from data.io import sha256_file

        if reader == "arrow-serial":  # what build_beir stores from the file, without the read-ahead thread
            from data.corpus_store import cached_store
            from data.open_sources import json_corpus_batches

            corpus = path / "corpus.jsonl"
            store = cached_store(["beir", "file", sha256_file(corpus)], lambda: json_corpus_batches(corpus, "beir-dataset"),
                                 meta={"reader": "arrow-serial"})
        else:
            if reader == "arrow":
                ds = read_beir_dir(path, "test")
            else:  # build_beir from the json reader's records (no corpus_file)
                ds = build_beir(read_jsonl(path / "corpus.jsonl"), read_jsonl(path / "queries.jsonl"),
                                read_qrels(path / "qrels" / "test.tsv"), name="bench", split="test",
                                corpus_key=["file", sha256_file(path / "corpus.jsonl")])
            store = ds.corpus.texts.store
        rows = len(store)
    seconds = time.perf_counter() - t0
    assert store.manifest.get("reader", "python") == reader, store.manifest
    return {"seconds": seconds, "rows": rows, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100k,1M")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the passages' shard count follows it")
    p.add_argument("--repeat", type=int, default=1,
                   help="alternating builds per side; seconds are their medians (single builds on this VM vary +-20%%)")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    import _machine

    _machine.add_guard_args(p)
    args = p.parse_args()
    if args.child:
        kind, reader, path, cache = args.child
        print(json.dumps(child(kind, reader, Path(path), Path(cache))))
        return 0
    from data.io import cache_dir
    from retrieval_scale import parse_size, passages_dir
    from retrievers.lucene import shard_count

    cache = cache_dir("bench", "retrieval_scale")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    inputs = {n: passages_dir(cache, n, shard_count(n, args.threads)) for n in sizes}
    beirs = {n: beir_dir(inputs[n]) for n in sizes}
    guard = _machine.start(args.threads)
    rows = []
    for n in sizes:
        for kind, path in (("pyserini", inputs[n] / "jsonl"), ("beir", beirs[n])):
            runs: dict[str, list[dict]] = {"arrow": [], "arrow-serial": [], "python": []}
            for _ in range(args.repeat):  # alternating, so the VM's drift hits every side alike
                for reader in runs:
                    cmd = [sys.executable, __file__, "--child", kind, reader, str(path), str(cache / f"json-store-{reader}")]
                    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise SystemExit(f"error: {kind} {reader} failed:\n{proc.stderr[-3000:]}")
                    runs[reader].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            got = {reader: {"seconds": statistics.median(r["seconds"] for r in rs), "rss_mb": max(r["rss_mb"] for r in rs),
                            "all": [round(r["seconds"], 2) for r in rs]} for reader, rs in runs.items()}
            rows.append((n, kind, got))
            print(f"{n} {kind}: {got}", file=sys.stderr)
    print(f"\nseconds: medians of {args.repeat} alternating build(s) per side (each side's runs in the log); peak RSS: the highest")
    print("\n| passages | corpus | Arrow reader s | passages/s | peak RSS | without read-ahead s | peak RSS | read-ahead "
          "speed-up | json reader s | passages/s | peak RSS | speed-up over json |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, kind, got in rows:
        a, s, b = got["arrow"], got["arrow-serial"], got["python"]
        print(f"| {n:,} | {'JsonCollection (open:)' if kind == 'pyserini' else 'BEIR (beir:)'} | {a['seconds']:.1f} | "
              f"{n / a['seconds']:,.0f} | {a['rss_mb']:,.0f} MB | {s['seconds']:.1f} | {s['rss_mb']:,.0f} MB | "
              f"{s['seconds'] / a['seconds']:.2f}x | {b['seconds']:.1f} | {n / b['seconds']:,.0f} | "
              f"{b['rss_mb']:,.0f} MB | {b['seconds'] / a['seconds']:.2f}x |")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
