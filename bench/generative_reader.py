"""A generative reader's speed, side by side in one run: n = 5 prompts (shared prefill, and whole prompts in padded
batches), one n = N read (padded), and every n = 0..N from the shared prompt prefix (answers compared with the
padded n = N read's and, on a sample, each n's); the time linear layers and causal attention alone take.

The questions are the first ``--questions`` of ``squad_open`` dev (paragraphs), their passages BM25's top N
over the whole corpus.  No generation cache is used: every prompt is really generated.  Prints questions per
second, the sweep's time over the single n = N read's, the share of answers identical to fresh prompts, and
the peak RSS (with its growth over the model's load).

With ``--shots K`` (a base model's few-shot prompt, its examples from the training split) it also times n = 1
and n = 5 with each question's prefill started afresh, as before the examples every prompt begins with were
shared across questions, beside the same reads sharing them.

    python bench/generative_reader.py --model smollm2-135m-instruct --questions 100 --n 10 --dtype float32
    python bench/generative_reader.py --model gemma3-270m --shots 3 --questions 24 --n 10 --max-new-tokens 16
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def linear_floor(model, prompt_tokens: float, rows: int = 8) -> dict:
    """The seconds per question that the model's linear layers alone take over a prompt of ``prompt_tokens``
    (prefill; the language-model head on one position), timed at this machine's threads and the model's dtype
    on ``rows`` prompts at once: a ceiling on questions/s that no scheduling of the rest can pass."""
    import collections

    import torch

    shapes = collections.Counter()
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            shapes[(module.in_features, module.out_features)] += 1
    dtype = next(model.parameters()).dtype
    tokens = int(prompt_tokens * rows)
    seconds, flops = 0.0, 0.0
    with torch.inference_mode():
        for (fan_in, fan_out), count in shapes.items():
            x, w = torch.randn(tokens, fan_in, dtype=dtype), torch.randn(fan_out, fan_in, dtype=dtype)
            torch.nn.functional.linear(x, w)
            t0 = time.perf_counter()
            for _ in range(3):
                torch.nn.functional.linear(x, w)
            seconds += count * (time.perf_counter() - t0) / 3
            flops += count * 2.0 * tokens * fan_in * fan_out
    per_question = seconds / rows
    return {"linear_seconds_per_question": round(per_question, 4), "linear_ceiling_questions_per_s": round(1 / per_question, 2),
            "linear_tflops": round(flops / seconds / 1e12, 3)}


def attention_floor(model, prompt_tokens: float) -> dict:
    """The seconds per question that causal attention alone takes over a prompt of ``prompt_tokens`` in every
    layer (torch's fused scaled-dot-product kernel at the model's heads, key-value heads and head size; one prompt,
    no padding, as the reader prefills): with :func:`linear_floor`, a ceiling on questions/s."""
    import torch

    from readers.kv_cache import decoder_config, num_layers

    text = decoder_config(model.config)
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    dtype = next(model.parameters()).dtype
    t = int(prompt_tokens)
    q = torch.randn(1, heads, t, dim, dtype=dtype)
    k, v = torch.randn(1, kv_heads, t, dim, dtype=dtype), torch.randn(1, kv_heads, t, dim, dtype=dtype)
    with torch.inference_mode():
        attend = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,  # noqa: E731
                                                                          enable_gqa=kv_heads != heads)
        attend()
        t0 = time.perf_counter()
        for _ in range(5):
            attend()
        seconds = (time.perf_counter() - t0) / 5 * num_layers(model.config)
    return {"attention_seconds_per_question": round(seconds, 4)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--check-every-n", type=int, default=20, help="questions whose every n is also generated afresh")
    p.add_argument("--shots", type=int, default=0, help="few-shot examples from the training split (base models)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import torch

    from pipeline import api, stages
    from readers.generative import GenerativeReader

    torch.set_num_threads(args.threads)
    ds = api.load_dataset("squad_open", "dev", limit=args.questions)
    ranking = api.retrieve("bm25", ds, depth=args.n)
    found = stages.candidates_for(ds, ranking, args.n, "paragraph")
    qs, passages = found.queries.texts, found.passages.texts
    reader = GenerativeReader(args.model, dtype=args.dtype, max_new_tokens=args.max_new_tokens, num_threads=args.threads,
                              shots=args.shots, progress=False)
    if args.shots:
        from pipeline.generation import few_shot_examples

        reader.set_examples(few_shot_examples(api.load_dataset("squad_open", "train"), args.shots), "train")
    reader.load()
    loaded = rss_mib()
    guard = _machine.start(args.threads)
    rows = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        rows[name] = time.perf_counter() - t0
        print(f"  {name:16s} {rows[name]:8.2f} s   {len(qs) / rows[name]:6.3f} questions/s", file=sys.stderr, flush=True)
        return out

    def padded(fn):  # whole prompts in left-padded batches (prefix sharing off)
        reader.prefix_reuse = False
        try:
            return fn()
        finally:
            reader.prefix_reuse = True

    def per_question(fn):  # each question's first prefill from scratch (nothing shared across questions)
        import readers.generative as generative

        plan = generative._Shared.plan

        def own(prompts):
            out = plan(prompts)
            for i in range(1, len(out.bases)):
                a, b = out.bases[i - 1], out.bases[i]
                if (a.head, a.tail) != (b.head, b.tail):
                    out.shared[i] = 0
            return out

        generative._Shared.plan = own
        try:
            return fn()
        finally:
            generative._Shared.plan = plan

    if args.shots:  # warm-up (the CPU kernels' first calls at each shape), not timed
        reader.generate(qs[:2], [p[:1] for p in passages[:2]])
        reader.generate(qs[:2], [p[:5] for p in passages[:2]])
        one = timed("n=1", lambda: reader.generate(qs, [p[:1] for p in passages]))
        one_own = timed("n=1 per question", lambda: per_question(lambda: reader.generate(qs, [p[:1] for p in passages])))
        rows_same = {"n1": sum(a == b for a, b in zip(one.raw, one_own.raw)) / len(qs)}
        timed("n=5 per question", lambda: per_question(lambda: reader.generate(qs, [p[:5] for p in passages])))
    five = timed("n=5", lambda: reader.generate(qs, [p[:5] for p in passages]))
    timed("n=5 padded", lambda: padded(lambda: reader.generate(qs, [p[:5] for p in passages])))
    single = timed(f"n={args.n} padded", lambda: padded(lambda: reader.generate(qs, [p[: args.n] for p in passages])))
    grid = timed(f"every n 0..{args.n}", lambda: reader.generate_every_n(qs, passages, args.n))
    floor = linear_floor(reader.model_, float(five.prompt_tokens.mean()))
    floor.update(attention_floor(reader.model_, float(five.prompt_tokens.mean())))
    floor["ceiling_questions_per_s"] = round(1 / (floor["linear_seconds_per_question"] + floor["attention_seconds_per_question"]), 2)
    guard.finish()
    same_top = sum(a == b for a, b in zip(grid[args.n].raw, single.raw)) / len(qs)
    sample = list(range(min(args.check_every_n, len(qs))))
    same_all, total = 0, 0
    for n in range(args.n + 1):
        fresh = padded(lambda: reader.generate([qs[i] for i in sample], [passages[i][:n] for i in sample]))
        same_all += sum(fresh.raw[k] == grid[n].raw[i] for k, i in enumerate(sample))
        total += len(sample)
    result = {
        "model": args.model, "shots": args.shots, "dtype": reader.dtype_, "questions": len(qs), "n": args.n, "max_new_tokens": args.max_new_tokens,
        "seconds": {k: round(v, 2) for k, v in rows.items()},
        "questions_per_s_n5": round(len(qs) / rows["n=5"], 3),
        "mean_prompt_tokens_n5": round(float(five.prompt_tokens.mean()), 1),
        "questions_per_s_n5_padded": round(len(qs) / rows["n=5 padded"], 3),
        "sweep_over_single": round(rows[f"every n 0..{args.n}"] / rows[f"n={args.n} padded"], 3),
        "identical_to_fresh_at_n": round(same_top, 4), "identical_to_fresh_every_n_sample": round(same_all / max(total, 1), 4),
        **({"n1_over_per_question": round(rows["n=1"] / rows["n=1 per question"], 3),
            "n5_over_per_question": round(rows["n=5"] / rows["n=5 per question"], 3),
            "identical_n1_shared_vs_per_question": round(rows_same["n1"], 4)} if args.shots else {}),
        **floor, "peak_rss_mib": round(rss_mib(), 1), "rss_after_load_mib": round(loaded, 1), "machine": guard.as_dict(),
    }
    print(guard.header())
    for name, seconds in rows.items():
        print(f"  {name:16s} {seconds:8.2f} s   {len(qs) / seconds:6.3f} questions/s")
    print(f"  every n / single n={args.n}: {result['sweep_over_single']:.2f}x;  identical answers at n={args.n}: "
          f"{same_top:.1%}, every n (sample of {len(sample)}): {result['identical_to_fresh_every_n_sample']:.1%}")
    if args.shots:
        print(f"  sharing the {args.shots} examples across questions: n=1 {result['n1_over_per_question']:.2f}x, n=5 "
              f"{result['n5_over_per_question']:.2f}x the time of per-question prefills; identical answers at n=1: "
              f"{result['identical_n1_shared_vs_per_question']:.1%}")
    print(f"  peak RSS {result['peak_rss_mib']:.0f} MiB ({result['peak_rss_mib'] - loaded:+.0f} MiB over the loaded model); "
          f"dtype {reader.dtype_}; mean prompt tokens at n=5: {result['mean_prompt_tokens_n5']}")
    print(f"  linear layers alone at n=5: {floor['linear_seconds_per_question']:.3f} s a question "
          f"({floor['linear_tflops']:.2f} TFLOP/s): at most {floor['linear_ceiling_questions_per_s']:.2f} questions/s")
    print(f"  causal attention alone at n=5: {floor['attention_seconds_per_question']:.3f} s a question; linear layers "
          f"and attention: at most {floor['ceiling_questions_per_s']:.2f} questions/s")
    print(guard.footer())
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
