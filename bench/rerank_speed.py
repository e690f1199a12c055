"""Cross-encoder re-ranking speed by backend and precision, in one run (``retrievers.cross_encoder``).

Scores the (question, passage) pairs the re-ranking stage scores on the main job's data: ReQA SQuAD dev questions
with BM25's top ``--depth`` sentences, with one cross-encoder on each side: torch float32, torch bf16 autocast
(where the CPU has native bf16), OpenVINO float32 and OpenVINO bf16 (``--rerank-backend openvino``).  The pairs
are cut into blocks and every side scores each block in turn, the order rotating per block, so load from
elsewhere hits all sides alike; loading, converting and a warm-up are not timed.  Prints per side pairs/s, the
ratio to torch float32 and to ``auto``'s torch precision, the largest score difference to torch float32 and the
share of questions whose top-10 order equals torch float32's.

    python bench/rerank_speed.py --model models/minilm-reranker --questions 200 --depth 100
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _machine  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a cross-encoder directory (e.g. from python -m retrievers.train_reranker)")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--threads", type=int, default=None)
    _machine.add_guard_args(p)
    args = p.parse_args(argv)

    import numpy as np
    import torch

    import hardware
    from pipeline import api
    from retrievers.cross_encoder import CrossEncoderScorer

    threads = args.threads or hardware.available_cores()
    torch.set_num_threads(threads)
    guard = _machine.start(threads)  # the load before anything runs (loading and converting follow)
    ds = api.load_dataset("reqa_squad", "dev", limit=args.questions)
    ranking = api.retrieve("bm25", ds, depth=args.depth)
    questions, passages = [], []
    for q, text in enumerate(ds.queries.texts):
        for k in ranking.ids[q]:
            if k >= 0:
                questions.append(text)
                passages.append(ds.corpus.texts[int(k)])
    per_query = [int((ranking.ids[q] >= 0).sum()) for q in range(len(ds.queries.texts))]

    sides = {"torch float32": ("torch", "float32")}
    if hardware.cpu_has_native_bf16():
        sides["torch bf16"] = ("torch", "bfloat16")
    sides["OpenVINO float32"] = ("openvino", "float32")
    if hardware.cpu_has_native_bf16():
        sides["OpenVINO bf16"] = ("openvino", "bfloat16")
    scorers = {}
    for name, (backend, dtype) in sides.items():
        scorer = CrossEncoderScorer(args.model, max_length=args.max_length, dtype=dtype, backend=backend, device="cpu",
                                    num_threads=threads, progress=False)
        scorer.score_pairs(questions[:64], passages[:64])  # load, convert, warm up
        scorers[name] = scorer

    bounds = np.linspace(0, len(questions), args.blocks + 1).astype(int)
    seconds = {name: 0.0 for name in sides}
    scores = {name: np.zeros(len(questions), np.float32) for name in sides}
    names = list(sides)
    for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        for name in names[b % len(names):] + names[: b % len(names)]:
            t0 = time.perf_counter()
            scores[name][lo:hi] = scorers[name].score_pairs(questions[lo:hi], passages[lo:hi])
            seconds[name] += time.perf_counter() - t0

    def top10(values: np.ndarray) -> list[tuple]:
        out, start = [], 0
        for n in per_query:
            block = values[start:start + n]
            out.append(tuple(np.argsort(-block, kind="stable")[:10]))
            start += n
        return out

    reference = top10(scores["torch float32"])
    auto_torch = "torch bf16" if "torch bf16" in sides else "torch float32"
    print(f"{args.model}: {len(ds.queries.texts)} ReQA SQuAD dev questions x BM25 top {args.depth} = {len(questions)} pairs, "
          f"max length {args.max_length}, {threads} threads, {hardware.cpu_model()}")
    print(f"{'side':<20}{'pairs/s':>9}{'x fp32':>8}{'x ' + auto_torch:>18}{'max |score diff|':>18}{'same top-10':>13}")
    for name in sides:
        rate = len(questions) / seconds[name]
        same = np.mean([a == b for a, b in zip(top10(scores[name]), reference)]) * 100
        diff = float(np.abs(scores[name] - scores["torch float32"]).max())
        print(f"{name:<20}{rate:>9.1f}{seconds['torch float32'] / seconds[name]:>8.2f}"
              f"{seconds[auto_torch] / seconds[name]:>18.2f}{diff:>18.4f}{same:>12.1f}%")
    chosen = CrossEncoderScorer(args.model, max_length=args.max_length, backend="auto", device="cpu",
                                num_threads=threads, progress=False).load()
    info = chosen.openvino_info_ or {}
    check = info.get("check") or {}
    print(f"per-CPU choice: --rerank-backend auto scores with {chosen.backend_} in {chosen.dtype_} "
          f"(check: OpenVINO {check.get('speedup')}x torch, same ranking {check.get('openvino', {}).get('same_ranking_percent')}% "
          f"against torch's {check.get('torch', {}).get('same_ranking_percent')}%{'; ' + info['reason'] if 'reason' in info else ''})")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
