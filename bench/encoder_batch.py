"""Dense encoder throughput by token budget on this machine (``retrievers.encoder.encode_texts``).

Encodes the same texts (ReQA SQuAD dev sentences and SQuAD paragraphs) with
all-MiniLM-L6-v2 under several padded-token budgets per batch, blocks
alternating between budgets, and against ``SentenceTransformer.encode`` at
batch 32 and 64.  Embeddings must agree (max abs difference printed).

    QA_DATA_DIR=../shared/data python bench/encoder_batch.py --sentences 2000 --paragraphs 300

Used to pick the CPU default of ``--encoder-token-budget``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _machine  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=2000)
    p.add_argument("--paragraphs", type=int, default=300)
    p.add_argument("--budgets", default="1024,2048,4096,8192,16384")
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    _machine.add_guard_args(p)
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from data.registry import load_dataset
    from retrievers.encoder import encode_texts, load_sentence_encoder

    threads = args.threads or _machine.hardware.available_cores()
    torch.set_num_threads(threads)
    guard = _machine.start(threads)
    ds = load_dataset("reqa_squad", "dev")
    sents = list(ds.corpus.texts[: args.sentences])
    paras = list(dict.fromkeys(ds.corpus.contexts[i] for i in range(len(ds.corpus))))[: args.paragraphs]
    model = load_sentence_encoder(None, "cpu")
    budgets = [int(b) for b in args.budgets.split(",")]
    sides = [f"ours t{b}" for b in budgets] + ["ST b32", "ST b64"]

    def run(side, texts):
        if side.startswith("ours"):
            return encode_texts(model, texts, token_budget=int(side[6:]), show_progress=False)
        return model.encode(texts, batch_size=int(side[4:]), normalize_embeddings=True, convert_to_numpy=True)

    print(f"all-MiniLM-L6-v2, {threads} threads")
    print(f"{'texts':<11}{'side':<12}{'texts/s':>10}{'max |diff|':>12}")
    for kind, texts in (("sentences", sents), ("paragraphs", paras)):
        if not texts:
            continue
        run(sides[0], texts[:32])
        secs = {s: 0.0 for s in sides}
        embs = {s: [] for s in sides}
        bounds = np.linspace(0, len(texts), args.blocks + 1).astype(int)
        for blk, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            for side in sides if blk % 2 == 0 else sides[::-1]:
                t0 = time.perf_counter()
                embs[side].append(run(side, texts[lo:hi]))
                secs[side] += time.perf_counter() - t0
        ref = np.concatenate(embs["ST b64"])
        for side in sides:
            diff = float(np.abs(np.concatenate(embs[side]) - ref).max())
            print(f"{kind:<11}{side:<12}{len(texts) / secs[side]:>10.1f}{diff:>12.1e}")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
