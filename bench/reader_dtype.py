"""Reader precision on the CPU: float32 vs bf16 autocast (``--reader-dtype``).

Reads every ``--every``-th SQuAD v1.1 dev question with its own paragraph,
with the same reader, threads and settings, once per dtype, in one run; model
loading and a short warm-up are not timed.

    python bench/reader_dtype.py --every 10

Prints passages per second, EM / F1 (eval.answer_metrics) and the share of
identical answers; bf16 pays off on CPUs with native bf16 (e.g. avx512_bf16).
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
DATA = Path(os.environ.get("QA_DATA_DIR", ROOT.parent / "shared" / "data"))
DEFAULT_MODEL = ROOT.parent / "shared" / "models" / "minilm-squad-reader"


def main() -> int:
    from data.squad import load_squad_json
    from eval.answer_metrics import exact_match, f1
    from pipeline.cli import print_table
    from readers.extractive import ExtractiveReader

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--every", type=int, default=10, help="every K-th dev question")
    p.add_argument("--threads", type=int, default=_machine.hardware.available_cores())
    _machine.add_guard_args(p)
    args = p.parse_args()
    guard = _machine.start(args.threads)
    ceil = _machine.ceilings(args.threads, ("float32", "bfloat16"))
    if not _machine.hardware.cpu_has_native_bf16():
        print("note: this CPU has no native bf16 (avx512_bf16/amx_bf16): bf16 is emulated here, so this ratio says "
              "nothing about CPUs that have it", file=sys.stderr)

    dev = load_squad_json(DATA / "squad" / "dev-v1.1.json.zip")
    items = [(qa["question"], par["context"], [a["text"] for a in qa["answers"]])
             for art in dev["data"] for par in art["paragraphs"] for qa in par["qas"]][:: args.every]
    questions, passages = [q for q, _, _ in items], [c for _, c, _ in items]

    answers, rows = {}, []
    for dtype in ("float32", "bfloat16"):
        reader = ExtractiveReader(args.model, dtype=dtype, num_threads=args.threads, progress=False).load()
        reader.read_pairs(questions[:32], passages[:32])  # warm-up
        t = time.perf_counter()
        answers[dtype] = reader.read_pairs(questions, passages).text
        seconds = time.perf_counter() - t
        em = 100 * sum(exact_match(a, g) for a, (_, _, g) in zip(answers[dtype], items)) / len(items)
        f = 100 * sum(f1(a, g) for a, (_, _, g) in zip(answers[dtype], items)) / len(items)
        rows += [(f"{dtype}: passages/s", round(len(items) / seconds, 1)), (f"{dtype}: EM", round(em, 2)), (f"{dtype}: F1", round(f, 2))]
    speed = dict(rows)
    rows += [
        ("speed-up bf16 / fp32", round(speed["bfloat16: passages/s"] / speed["float32: passages/s"], 2)),
        ("identical answers", round(sum(a == b for a, b in zip(answers["float32"], answers["bfloat16"])) / len(items), 4)),
    ]
    print_table(rows, title=f"reader dtype on the CPU: {len(items)} dev questions with their paragraphs, {args.threads} threads")
    print(_machine.ceiling_line(ceil))
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    raise SystemExit(main())
