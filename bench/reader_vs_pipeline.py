"""Gold-paragraph reading: our ExtractiveReader vs transformers' question-answering pipeline.

Both read the same SQuAD v1.1 dev questions, each with its own paragraph, with
the same checkpoint, window length, stride, longest answer and longest
question, on the same CPU threads, in one run.  The pipeline only exists in
transformers 4.x, so it runs in a bench-only venv (see bench/README.md) as a
child process that answers blocks of questions over stdin/stdout; the blocks
alternate between the two sides so that load from other processes on the
machine hits both alike.  Model loading and a short warm-up are not timed.

    python bench/reader_vs_pipeline.py --limit 1000 --pipeline-batch-sizes 1,4,8,16

The pipeline runs at each of ``--pipeline-batch-sizes`` (its default is 1) and
the ratio is taken against its *best* configuration.  Prints EM / F1 (official
SQuAD v1.1 normalization, eval.answer_metrics), passages per second, executed
GFLOP/s of our reads as a share of the machine's float32 matmul ceiling
(bench/_machine.py), the CPU model, flags and load average before and after;
a run on a busy machine is marked NOT A RESULT and exits with status 3.
Goals (CPU): EM and F1 within +-0.3 points of the pipeline, passages/s at least
1.2x the pipeline's best configuration, at least 90% of the matmul ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
DEFAULT_MODEL = ROOT.parent / "shared" / "models" / "minilm-squad-reader"
DEFAULT_VENV = ROOT / ".venv-bench"


# ---------------------------------------------------------------- pipeline side (runs in the bench venv)


def serve_pipeline(model: str, threads: int) -> None:
    """Answer JSON requests on stdin with the transformers 4.x pipeline (one JSON line per request)."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    qa = transformers.pipeline("question-answering", model=model, tokenizer=model, device=-1)
    _reply({"transformers": transformers.__version__, "threads": torch.get_num_threads()})
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        outputs = qa(
            question=request["questions"],
            context=request["contexts"],
            max_seq_len=request["max_length"],
            doc_stride=request["stride"],
            max_answer_len=request["max_answer_tokens"],
            max_question_len=request["max_question_tokens"],
            batch_size=request["batch_size"],
        )
        seconds = time.perf_counter() - started
        if isinstance(outputs, dict):
            outputs = [outputs]
        _reply({"answers": [o["answer"] for o in outputs], "seconds": seconds})


def _reply(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class ChildProcess:
    """A child process that answers one JSON line per JSON request line (its first line is a greeting)."""

    def __init__(self, argv: list[str], label: str):
        self.label = label
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        self.hello = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"error: {self.label} process exited with status {self.proc.wait()} (see its stderr above)")
        return json.loads(line)

    def ask(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


class PipelineProcess(ChildProcess):
    def __init__(self, python: Path, model: str, threads: int):
        super().__init__([str(python), __file__, "--serve-pipeline", "--model", model, "--threads", str(threads)], "pipeline")


# ---------------------------------------------------------------- our side


def load_squad_dev(data_dir: Path, limit: int):
    """``limit`` questions spread evenly over SQuAD v1.1 dev: (questions, contexts, gold answer lists)."""
    with zipfile.ZipFile(data_dir / "squad" / "dev-v1.1.json.zip") as z:
        data = json.loads(z.read("dev-v1.1.json"))
    rows = [
        (qa["question"], paragraph["context"], [a["text"] for a in qa["answers"]])
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    step = max(1, len(rows) // limit)
    rows = rows[::step][:limit]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def add_reading_arguments(parser: argparse.ArgumentParser, *, limit: int, blocks: int) -> None:
    """The arguments every side of a reading bench shares: checkpoint, questions, timed blocks, windows, spans."""
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="QA checkpoint directory (every side)")
    parser.add_argument("--limit", type=int, default=limit, help="SQuAD dev questions, spread evenly")
    parser.add_argument("--blocks", type=int, default=blocks, help="timed blocks; every side reads each block")
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--stride", type=int, default=128)
    parser.add_argument("--max-answer-tokens", type=int, default=30)
    parser.add_argument("--max-question-tokens", type=int, default=64)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_reading_arguments(parser, limit=1000, blocks=8)
    parser.add_argument("--batch-size", type=int, default=None, help="our windows per forward pass (default: the reader's, by device)")
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="our cap on windows x length per pass (default: the reader's)")
    parser.add_argument("--dtype", default="auto", help="our dtype: auto (float32 on CPU), float32, bfloat16, float16")
    parser.add_argument("--pipeline-batch-sizes", default="1,4,8,16",
                        help="the pipeline's batch_size values to run (its default is 1); the ratio uses the fastest")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads, both sides (default: all cores)")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="bench venv with transformers 4.57.x")
    parser.add_argument("--data-dir", default=os.environ.get("QA_DATA_DIR") or str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--serve-pipeline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--allow-busy", action="store_true", help="exit 0 on a busy machine (the table is still marked NOT A RESULT)")
    args = parser.parse_args(argv)

    threads = args.threads or len(os.sched_getaffinity(0))
    if args.serve_pipeline:
        serve_pipeline(args.model, threads)
        return

    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch
    from transformers import AutoConfig

    import _machine

    guard = _machine.start(threads)
    ceil = _machine.ceilings(threads, ("float32",))

    from eval.answer_metrics import exact_match, f1
    from readers.extractive import ExtractiveReader

    python = Path(args.venv) / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"error: {python} not found; create the bench venv as bench/README.md says")
    questions, contexts, golds = load_squad_dev(Path(args.data_dir), args.limit)
    settings = dict(
        max_length=args.max_length,
        stride=args.stride,
        max_answer_tokens=args.max_answer_tokens,
        max_question_tokens=args.max_question_tokens,
    )

    pipe = PipelineProcess(python, args.model, threads)
    if not str(pipe.hello.get("transformers", "")).startswith("4."):
        raise SystemExit(f"error: {python} has transformers {pipe.hello.get('transformers')}; the bench venv needs 4.57.x")
    reader = ExtractiveReader(args.model, batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens, num_threads=threads, dtype=args.dtype, progress=False, **settings).load()
    torch.set_num_threads(threads)
    pipe_sizes = [int(x) for x in args.pipeline_batch_sizes.split(",")]
    sides = ["ours"] + [f"pipeline b{b}" for b in pipe_sizes]
    readers = {"ours": reader}

    warm = slice(0, 8)
    for b in pipe_sizes:
        pipe.ask(questions=questions[warm], contexts=contexts[warm], batch_size=b, **settings)
    reader.read_pairs(questions[warm], contexts[warm])

    answers = {side: [""] * len(questions) for side in sides}
    seconds = {side: 0.0 for side in sides}
    bounds = np.linspace(0, len(questions), args.blocks + 1).astype(int)
    for blk, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        for side in sides if blk % 2 == 0 else sides[::-1]:
            if side in readers:
                started = time.perf_counter()
                reads = readers[side].read_pairs(questions[lo:hi], contexts[lo:hi])
                seconds[side] += time.perf_counter() - started
                answers[side][lo:hi] = reads.text
            else:
                reply = pipe.ask(questions=questions[lo:hi], contexts=contexts[lo:hi], batch_size=int(side.split("b")[-1]), **settings)
                seconds[side] += reply["seconds"]
                answers[side][lo:hi] = reply["answers"]
        print(f"block {blk + 1}/{args.blocks}: {hi} questions, " + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()), file=sys.stderr)
    pipe.close()

    def score(ans):
        em = 100 * float(np.mean([exact_match(a, g) for a, g in zip(ans, golds)]))
        f = 100 * float(np.mean([f1(a, g) for a, g in zip(ans, golds)]))
        return em, f

    n = len(questions)
    rate = {side: n / seconds[side] for side in sides}
    best_pipe = max((k for k in sides if k.startswith("pipeline")), key=lambda k: rate[k])
    windows, tokens = reader.batch_shape(reader.device_)
    from reader_batch import executed_lengths

    padded, lengths = executed_lengths(reader, questions, contexts, windows, tokens)
    lengths = np.asarray(lengths)
    flops = _machine.encoder_flops(AutoConfig.from_pretrained(args.model), padded)
    print(
        f"\nSQuAD v1.1 dev, gold paragraph, {n} questions; model {args.model}\n"
        f"max_length {args.max_length}, stride {args.stride}, max answer {args.max_answer_tokens} tokens, "
        f"max question {args.max_question_tokens} tokens, {threads} CPU threads; "
        f"ours batch {windows} windows / {tokens} tokens, dtype {reader.dtype_} "
        f"(transformers {pipe.hello['transformers']} for the pipeline)\n{_machine.ceiling_line(ceil)}; "
        f"{len(lengths)} windows, mean {lengths.mean():.0f} tokens, {flops / n / 1e9:.2f} GFLOP per passage\n"
    )
    print(f"{'':<22}{'EM':>8}{'F1':>8}{'passages/s':>12}{'seconds':>9}{'GFLOP/s':>9}{'ceiling':>9}")
    for side in sides:
        em, f = score(answers[side])
        gf = flops / seconds[side] / 1e9
        print(f"{side:<22}{em:>8.2f}{f:>8.2f}{rate[side]:>12.2f}{seconds[side]:>9.1f}{gf:>9.1f}{100 * gf / ceil['float32']:>8.0f}%")
    (em_o, f1_o), (em_p, f1_p) = score(answers["ours"]), score(answers[best_pipe])
    print(f"{'ours - ' + best_pipe:<22}{em_o - em_p:>+8.2f}{f1_o - f1_p:>+8.2f}")
    ratio = rate["ours"] / rate[best_pipe]
    print(f"{'ours / ' + best_pipe:<22}{'':>16}{ratio:>11.2f}x   (ours / pipeline b1: {rate['ours'] / rate.get('pipeline b1', float('nan')):.2f}x)")
    same = float(np.mean([a.strip() == b.strip() for a, b in zip(answers["ours"], answers[best_pipe])]))
    print(f"\nidentical answer strings (ours vs {best_pipe}): {100 * same:.1f}%")
    share = flops / seconds["ours"] / 1e9 / ceil["float32"]
    ok_quality = abs(em_o - em_p) <= 0.3 and abs(f1_o - f1_p) <= 0.3
    print(f"goals: EM/F1 within +-0.3: {'yes' if ok_quality else 'NO'}; >= 1.2x the pipeline's best: "
          f"{'yes' if ratio >= 1.2 else 'NO'}; >= 90% of the matmul ceiling: {'yes' if share >= 0.9 else 'NO'} ({100 * share:.0f}%)")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
