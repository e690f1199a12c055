"""Reader throughput by batch shape on this machine: passages/s and share of the matmul ceiling.

Reads the same SQuAD v1.1 dev questions with ``ExtractiveReader.read_pairs`` under
several batch shapes, for two kinds of passage: gold *paragraphs* (one window of
about 180 tokens on average) and ReQA *sentences* (about 50 tokens).  Shapes are
given as windows per pass (``w8``) or padded tokens per pass (``t1024``; the
reader's own CPU default is ``default``).  Each shape reads the same pairs;
shapes alternate block by block so that any drift in the machine falls on all
alike.  Answers must be identical across shapes (batching pads, but attention
masks make the pad tokens inert).  Model loading and a warm-up are not timed.

    QA_DATA_DIR=../shared/data python bench/reader_batch.py --paragraphs 300 --sentences 600

Prints, per shape: passages/s, executed GFLOP/s (FLOPs from the model config
and the real padded lengths of every batch) and that as a share of the
machine's float32 matmul ceiling, plus the load and CPU header of
``bench/_machine.py``.  Used to pick ``readers.extractive.CPU_TOKEN_BUDGET``.
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

DEFAULT_MODEL = ROOT.parent / "shared" / "models" / "minilm-squad-reader"


def parse_shape(spec: str) -> tuple[int | None, int | None]:
    """``default`` -> (None, None); ``w8`` -> (8 windows, no token cap); ``t1024`` -> (cap 64 windows, 1024 tokens)."""
    if spec == "default":
        return None, None
    if spec.startswith("w"):
        return int(spec[1:]), 10**9
    if spec.startswith("t"):
        return 256, int(spec[1:])
    raise SystemExit(f"error: shape {spec!r}: use default, wN or tN")


def squad_pairs(data_dir: Path, n_paragraphs: int, n_sentences: int):
    from data.registry import load_dataset
    from data.squad import load_squad_json

    squad = load_squad_json(data_dir / "squad" / "dev-v1.1.json.zip")
    rows = [(qa["question"], p["context"]) for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    step = max(1, len(rows) // max(n_paragraphs, 1))
    para = rows[::step][:n_paragraphs]
    reqa = load_dataset("reqa_squad", "dev", data_dir=data_dir)
    q = reqa.queries
    step = max(1, len(q) // max(n_sentences, 1))
    sent = []
    for i in range(0, len(q), step):
        gold = q.gold[i]
        if len(gold):
            sent.append((q.texts[i], reqa.corpus.texts[int(gold[0])]))
        if len(sent) == n_sentences:
            break
    return {"paragraphs": para, "sentences": sent}


def executed_lengths(reader, questions, passages, windows, tokens):
    """Padded lengths of every window as the reader batches them (for the FLOP count)."""
    import numpy as np

    from readers.extractive import window_batches

    tok = reader.tokenizer_
    enc = tok(reader.cut_questions(list(questions)), list(passages), truncation="only_second", max_length=reader.max_length,
              stride=reader.stride, return_overflowing_tokens=True, padding=False)
    lengths = np.array([len(x) for x in enc["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    out = []
    for b in window_batches(lengths[order], windows, tokens):
        width = int(lengths[order][b].max())
        out += [width] * (b.stop - b.start)
    return out, lengths.tolist()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--paragraphs", type=int, default=300, help="gold-paragraph pairs (0: skip)")
    parser.add_argument("--sentences", type=int, default=600, help="ReQA sentence pairs (0: skip)")
    parser.add_argument("--shapes", default="w1,w4,w8,w16,w32,t512,t1024,t2048,t4096,default")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--data-dir", default=os.environ.get("QA_DATA_DIR") or str(ROOT.parent / "shared" / "data"))
    _machine.add_guard_args(parser)
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from transformers import AutoConfig

    from readers.extractive import ExtractiveReader

    threads = args.threads or _machine.hardware.available_cores()
    guard = _machine.start(threads)
    ceil = _machine.ceilings(threads, ("float32", "bfloat16") if args.dtype == "bfloat16" else ("float32",))
    config = AutoConfig.from_pretrained(args.model)
    kinds = squad_pairs(Path(args.data_dir), args.paragraphs, args.sentences)
    shapes = args.shapes.split(",")
    readers = {}
    for spec in shapes:
        w, t = parse_shape(spec)
        readers[spec] = ExtractiveReader(args.model, batch_size=w, max_batch_tokens=t, dtype=args.dtype, num_threads=threads,
                                         progress=False).load()
    torch.set_num_threads(threads)
    rows = []
    for kind, pairs in kinds.items():
        if not pairs:
            continue
        qs, ps = [p[0] for p in pairs], [p[1] for p in pairs]
        for r in readers.values():
            r.read_pairs(qs[:8], ps[:8])  # warm-up
        seconds = {s: 0.0 for s in shapes}
        answers = {s: [""] * len(qs) for s in shapes}
        bounds = np.linspace(0, len(qs), args.blocks + 1).astype(int)
        for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            order = shapes if b % 2 == 0 else shapes[::-1]
            for spec in order:
                t0 = time.perf_counter()
                reads = readers[spec].read_pairs(qs[lo:hi], ps[lo:hi])
                seconds[spec] += time.perf_counter() - t0
                answers[spec][lo:hi] = reads.text
        base = answers[shapes[0]]
        for spec in shapes:
            r = readers[spec]
            windows, tokens = r.batch_shape("cpu")
            padded, real = executed_lengths(r, qs, ps, windows, tokens)
            flops = _machine.encoder_flops(config, padded)
            gflops = flops / seconds[spec] / 1e9
            same = float(np.mean([a == b for a, b in zip(answers[spec], base)]))
            rows.append((kind, spec, windows, tokens, len(qs) / seconds[spec], gflops, gflops / ceil[args.dtype],
                         float(np.mean(real)), same))
    print(f"\nreader {args.model}, dtype {args.dtype}, {threads} threads; {_machine.ceiling_line(ceil)}")
    print(f"{'passages':<11}{'shape':<9}{'windows':>8}{'tokens':>8}{'passages/s':>12}{'GFLOP/s':>9}{'ceiling':>9}"
          f"{'mean len':>9}{'same ans':>9}")
    best = {}
    for kind, spec, w, t, rate, gf, share, mlen, same in rows:
        t = "none" if t is None or t >= 10**9 else str(t)
        print(f"{kind:<11}{spec:<9}{w:>8}{t:>8}{rate:>12.2f}{gf:>9.1f}{100 * share:>8.0f}%{mlen:>9.0f}{100 * same:>8.1f}%")
        if kind not in best or rate > best[kind][1]:
            best[kind] = (spec, rate)
    for kind in best:
        rates = {spec: rate for k, spec, _w, _t, rate, *_ in rows if k == kind}
        ref = rates.get("w32")
        dflt = rates.get("default")
        line = f"{kind}: fastest {best[kind][0]} ({best[kind][1]:.2f}/s)"
        if ref and dflt:
            line += f"; default / w32 (the old default) = {dflt / ref:.2f}x"
        print(line)
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
