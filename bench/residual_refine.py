"""Re-ranking with an in-memory residual code: can a dense index keep 0.95 of the top 100 in 1/8 of flat's memory?

``python bench/residual_refine.py --size 100k --words 16``

Issue 13's dense goal asks for recall@100 >= 0.95 relative to exact search at
>= 10x its queries/s in <= 1/8 of its memory.  bench/dense_scale.py shows that
a 4-bit fast-scan IVF index re-ranked with the exact vectors (``--dense-refine``)
reaches the recall and the speed, but the exact vectors come from the embedding
file (flat's bytes, paged in).  This bench measures the remaining candidate
for a resident set within 1/8: re-ranking with source coding (Jegou, Tavenard,
Douze, Amsaleg 2011, "Searching in one billion vectors: re-rank with source
coding", ICASSP; FAISS's ``IndexIVFPQR``, which FAISS implements for L2 only):
the base index proposes ``F x k`` candidates, and a second product quantizer
that encodes each vector's residual ``x - decode(base code of x)`` refines their
scores, ``score = base score + <q, decode(residual code)>``, from codes held in
memory.  Beside it, for the same candidates, the exact re-ranking (the ceiling
any refine code can reach) and a refine code of the same size on the raw vector
(FAISS's ``Refine(PQ..)``).

Memory per vector is what the search holds: the base code, the refine code, the
IVF list's 8-byte id, and the coarse centroids shared over the corpus; the
ratio is to flat's 4 x dim bytes.  Only recall is measured (the bases' speed
is in bench/dense_scale.py), so this bench need not run on an idle machine.

Beside the recalls, a noise model says how precise any refine stage must be:
the exact top ``4 k`` of each query with independent Gaussian noise of standard
deviation sigma added to its scores keeps a fraction of the exact top ``k``
that falls with sigma; the sigma at which it reaches the goal is set against
each code's measured score error (its estimate minus the exact score on those
same candidates, centred per query, since a per-query shift changes no
ranking), and beside it the recall of re-ranking those candidates by the
code's estimates: what the code reaches behind a perfect candidate stage.
Every bit per dimension added to a code at best halves that error
(rate-distortion: 6 dB a bit).  The model assumes the candidates hold the
whole exact top ``k``; the candidate stage's own loss comes on top.

The corpus is dense_scale's real-text corpus (SQuAD sentences recombined into
``--words``-word passages, MiniLM embeddings from the project's cache, encoded
once; ``--queries`` SQuAD dev questions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from dense_scale import GOAL_MEMORY, GOAL_RECALL, SEED, parse_size, real_embeddings, recall  # noqa: E402

DEFAULT_BASES = "IVF1024,PQ96x4fs;IVF1024,PQ192x4fs"
DEFAULT_CODES = "PQ64;PQ96;PQ48x12;PQ128"  # 8-bit PQ with M sub-quantizers, or PQ<M>x<bits>
NOISE_SIGMAS = (0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.010, 0.012, 0.016)
QUERY_BLOCK = 256


def parse_code(spec: str, dim: int) -> tuple[int, int]:
    """``PQ<M>`` or ``PQ<M>x<bits>`` -> (M, bits)."""
    text = spec.strip().upper()
    if not text.startswith("PQ"):
        raise SystemExit(f"error: refine code {spec!r}: expected PQ<M> or PQ<M>x<bits>")
    m, _, bits = text[2:].partition("X")
    m, nbits = int(m), int(bits or 8)
    if dim % m:
        raise SystemExit(f"error: refine code {spec!r}: {m} sub-quantizers do not divide {dim} dimensions")
    return m, nbits


def train_pq(vectors: np.ndarray, m: int, nbits: int, rows: np.ndarray):
    import faiss

    pq = faiss.ProductQuantizer(vectors.shape[1], m, nbits)
    pq.train(np.ascontiguousarray(vectors[rows]))
    return pq


def refine_scores(pq, codes: np.ndarray, q: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``<q, decode(codes[cand])>`` for each query's candidates (blocks of queries, decoded on the fly)."""
    out = np.empty(cand.shape, np.float32)
    for lo in range(0, len(q), QUERY_BLOCK):
        c = np.maximum(cand[lo : lo + QUERY_BLOCK], 0)
        dec = pq.decode(np.ascontiguousarray(codes[c.ravel()])).reshape(*c.shape, -1)
        out[lo : lo + QUERY_BLOCK] = np.einsum("qd,qkd->qk", q[lo : lo + QUERY_BLOCK], dec)
    return out


def noise_tolerance(scores: np.ndarray, ids: np.ndarray, k: int, seed: int) -> list[tuple[float, float]]:
    """``(sigma, recall@k)``: the exact top ``ids`` re-ordered by ``scores`` + N(0, sigma^2) noise."""
    rng = np.random.default_rng(seed)
    exact = ids[:, :k]
    out = []
    for sigma in NOISE_SIGMAS:
        noisy = scores + rng.normal(0.0, sigma, scores.shape)
        order = np.argsort(-noisy, axis=1, kind="stable")[:, :k]
        out.append((sigma, recall(np.take_along_axis(ids, order, 1), exact)))
    return out


def sigma_at(curve: list[tuple[float, float]], goal: float) -> float:
    """The noise sigma at which the recall of :func:`noise_tolerance` falls to ``goal`` (linear between points)."""
    for (s0, r0), (s1, r1) in zip(curve, curve[1:]):
        if r0 >= goal >= r1:
            return s0 + (s1 - s0) * (r0 - goal) / (r0 - r1) if r0 != r1 else s0
    return curve[0][0] if curve[0][1] < goal else curve[-1][0]


def score_error(q: np.ndarray, vectors: np.ndarray, ids: np.ndarray, exact_scores: np.ndarray,
                k: int) -> tuple[float, float]:
    """On each query's exact top candidates ``ids``: the std of ``<q, vectors[ids]> - exact score``, centred per
    query (a per-query shift changes no ranking), and the recall@k of ordering them by ``<q, vectors[ids]>``
    (a perfect candidate stage re-ranked with these vectors)."""
    sq, found = 0.0, []
    for lo in range(0, len(q), QUERY_BLOCK):
        block = slice(lo, lo + QUERY_BLOCK)
        est = np.einsum("qd,qkd->qk", q[block], vectors[ids[block]])
        err = est - exact_scores[block]
        sq += float(((err - err.mean(axis=1, keepdims=True)) ** 2).sum())
        found.append(top_by(est, ids[block], k))
    return float(np.sqrt(sq / ids.size)), recall(np.concatenate(found), ids[:, :k])


def top_by(scores: np.ndarray, cand: np.ndarray, k: int) -> np.ndarray:
    s = np.where(cand >= 0, scores, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(cand, order, 1)


def main(argv: list[str] | None = None) -> int:
    import faiss

    import _machine
    from retrievers.faiss_index import build_index, flat_search, ivf_nlist, refine_search, train_rows

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="100k", help="real-text passages")
    p.add_argument("--words", type=int, default=16, help="words per passage")
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--bases", default=DEFAULT_BASES, help="';'-separated FAISS factory strings of the candidate index")
    p.add_argument("--nprobe", default="128", help="comma-separated")
    p.add_argument("--factors", default="2,4,8", help="candidates per result (F), comma-separated")
    p.add_argument("--codes", default=DEFAULT_CODES, help="';'-separated refine codes: PQ<M> or PQ<M>x<bits>")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="also write the table (Markdown) and rows (JSON) here")
    args = p.parse_args(argv)

    os.environ.setdefault("QA_DATA_DIR", str((ROOT.parent / "shared" / "data").resolve()))
    guard = _machine.start(args.threads)
    faiss.omp_set_num_threads(args.threads)
    n = parse_size(args.size)
    shards, key, q = real_embeddings(n, args.words, args.queries, args.threads)
    q = np.ascontiguousarray(q, dtype=np.float32)
    dim, k = shards.dim, args.k
    # the exact top 4k (its first k: the exact top k, ties by row) and the noise model on it
    deep_scores, deep_ids = flat_search(shards, q, 4 * k)
    exact = deep_ids[:, :k]
    x = shards.to_array()
    curve = noise_tolerance(deep_scores, deep_ids, k, SEED)
    sigma_goal = sigma_at(curve, GOAL_RECALL)
    # how tightly the scores pack around rank k: the median query's k-th score minus its (1.5 k)-th
    spread = float(np.median(deep_scores[:, k - 1] - deep_scores[:, (3 * k) // 2 - 1]))
    print("noise model: " + ", ".join(f"sigma {s:.3f} -> {r:.4f}" for s, r in curve), file=sys.stderr)
    errors = []
    flat_bytes = 4 * dim
    rows = train_rows(n, min(n, 65536), SEED)
    out_rows = []
    for factory in [s.strip() for s in args.bases.split(";") if s.strip()]:
        # built here, not loaded from the index cache: FAISS 1.15's sa_decode crashes on a fast-scan index read back
        index, _ = build_index(factory, shards, None, SEED)
        nlist = ivf_nlist(index)
        t0 = time.perf_counter()
        recon = index.sa_decode(index.sa_encode(x))  # the base index's reconstruction of every vector
        residual = x - recon
        shared = (4 * dim * nlist) / n  # coarse centroids, per vector
        base_bytes = index.code_size if hasattr(index, "code_size") else faiss.extract_index_ivf(index).code_size
        sigma, perfect = score_error(q, recon, deep_ids, deep_scores, k)
        errors.append({"code": factory, "bytes": base_bytes + 8 + shared, "error": sigma, "perfect_candidates_recall": perfect})
        codes = {}
        for spec in [s.strip() for s in args.codes.split(";") if s.strip()]:
            m, nbits = parse_code(spec, dim)
            res_pq = train_pq(residual, m, nbits, rows)
            raw_pq = train_pq(x, m, nbits, rows)
            codes[spec] = (res_pq, res_pq.compute_codes(residual), raw_pq, raw_pq.compute_codes(x))
            sigma, perfect = score_error(q, recon + res_pq.decode(codes[spec][1]), deep_ids, deep_scores, k)
            errors.append({"code": f"{factory} + residual {spec}", "bytes": base_bytes + res_pq.code_size + 8 + shared,
                           "error": sigma, "perfect_candidates_recall": perfect})
        print(f"{factory}: residual codes trained in {time.perf_counter() - t0:.0f} s "
              f"(mean residual norm {float(np.linalg.norm(residual[:10000], axis=1).mean()):.3f})", file=sys.stderr)
        del residual, recon
        for nprobe in [int(v) for v in args.nprobe.split(",")]:
            faiss.extract_index_ivf(index).nprobe = min(nprobe, nlist)
            _, alone = index.search(q, k)
            for factor in [int(v) for v in args.factors.split(",")]:
                d, cand = index.search(q, k * factor)
                _, ceiling = refine_search(shards, q, cand, k)
                row = {"corpus": f"real {n:,} x {dim}", "base": factory, "nprobe": nprobe, "F": factor,
                       "base_recall": recall(alone, exact), "exact_refine_recall": recall(ceiling, exact),
                       "base_bytes": int(base_bytes), "codes": {}}
                for spec, (res_pq, res_codes, raw_pq, raw_codes) in codes.items():
                    resid = top_by(d + refine_scores(res_pq, res_codes, q, cand), cand, k)
                    raw = top_by(refine_scores(raw_pq, raw_codes, q, cand), cand, k)
                    per_vector = base_bytes + res_pq.code_size + 8 + shared
                    row["codes"][spec] = {"bytes": int(res_pq.code_size), "per_vector": per_vector,
                                          "memory_ratio": per_vector / flat_bytes, "residual_recall": recall(resid, exact),
                                          "raw_recall": recall(raw, exact)}
                out_rows.append(row)
                print(f"{factory} nprobe {nprobe} F {factor}: ceiling {row['exact_refine_recall']:.4f} "
                      + " ".join(f"{s} {c['residual_recall']:.4f}" for s, c in row["codes"].items()), file=sys.stderr)
        del index
    text = table(out_rows, k) + "\n\n" + noise_table(curve, sigma_goal, spread, errors, flat_bytes, k)
    print(guard.header())
    print(text)
    _machine.finish(guard, allow_busy=True)  # recall only: the load changes no figure here
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python bench/residual_refine.py " + " ".join(sys.argv[1:] if argv is None else argv)
        (out / "residual_refine.md").write_text(f"# {cmd}\n\n{guard.header()}\n\n{text}\n", encoding="utf-8")
        (out / "residual_refine.json").write_text(json.dumps({"rows": out_rows, "machine": guard.as_dict(),
                                                             "noise_model": {"curve": curve, "sigma_goal": sigma_goal,
                                                                             "median_score_spread_k_to_1.5k": spread},
                                                             "score_errors": errors},
                                                            indent=1, default=float) + "\n", encoding="utf-8")
    return 0


def table(rows: list[dict], k: int) -> str:
    specs = list(rows[0]["codes"]) if rows else []
    head = (f"| corpus | base index | nprobe | F | base alone | exact re-rank (ceiling) | "
            + " | ".join(f"{s}: residual / raw (B/vec, / flat)" for s in specs) + " |")
    out = [head, "|" + "---|" * (6 + len(specs))]
    for r in rows:
        cells = [f"{c['residual_recall']:.3f} / {c['raw_recall']:.3f} ({c['per_vector']:.0f}, {c['memory_ratio']:.3f})"
                 for c in r["codes"].values()]
        out.append(f"| {r['corpus']} | {r['base']} ({r['base_bytes']} B) | {r['nprobe']} | {r['F']} | {r['base_recall']:.3f} | "
                   f"{r['exact_refine_recall']:.3f} | " + " | ".join(cells) + " |")
    out.append(f"\nrecall@{k} relative to exact search; goal {GOAL_RECALL} in <= {GOAL_MEMORY:.3f} of flat's bytes per vector "
               "(base code + refine code + 8-byte id + the coarse centroids' share)")
    return "\n".join(out)


def noise_table(curve, sigma_goal: float, spread: float, errors: list[dict], flat_bytes: int, k: int) -> str:
    out = [f"Noise model: recall@{k} of the exact top {4 * k} re-ordered by score + N(0, sigma^2): "
           + ", ".join(f"{s:.3f} -> {r:.3f}" for s, r in curve)
           + f"; recall {GOAL_RECALL} at sigma = {sigma_goal:.4f}. The median query's score at rank {k} minus "
           f"its score at rank {(3 * k) // 2}: {spread:.4f}.", "",
           f"| scores from | B/vec (/ flat) | score error sigma (centred per query) | / the noise model's sigma | "
           f"recall@{k} re-ranking the exact top {4 * k} (a perfect candidate stage) |",
           "|---|---|---|---|---|"]
    for e in errors:
        ratio = e["error"] / sigma_goal
        size = f"{e['bytes']:.0f} ({e['bytes'] / flat_bytes:.3f})"
        out.append(f"| {e['code']} | {size} | {e['error']:.4f} | {ratio:.2f} | {e['perfect_candidates_recall']:.3f} |")
    out.append("\nThe model and the last column assume every exact top-k row among the candidates; the candidate "
               "stage's own loss (base index, nprobe, F: the exact re-rank column above) comes on top.")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
