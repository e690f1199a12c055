"""The reader in the loop against the fixed n of equal EM: passages read and wall time, side by side in one run.

1. ``pipeline.sweep`` at the whole corpus (``--corpus-sizes all``) scores top:1..N and
   ``confidence:N`` on the same reads and names the smallest fixed n whose EM
   reaches confidence's (its cost.csv; the saving's bootstrap interval comes
   from there too); when no fixed n reaches it, the best fixed n is timed.
2. ``pipeline.run --selector confidence:N`` and ``pipeline.run --selector top:n``
   (that n), each with a fresh read cache so every passage is really read, run
   alternately ``--repeats`` times: EM, mean passages read, reading seconds
   (the run's ``read`` timing), wall seconds, and the ratio.  The confidence
   threshold is fitted once, on the training split's reads, and then given
   to every timed run (``threshold=``), so the timed runs compare reading only.

    python bench/confidence_cost.py --questions 500 --n 20
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reader", default=str(ROOT.parent / "shared" / "models" / "minilm-squad-reader"))
    p.add_argument("--dataset", default="reqa_squad")
    p.add_argument("--questions", type=int, default=500, help="dev questions (the first K)")
    p.add_argument("--n", type=int, default=20, help="N: fixed n runs 1..N; confidence reads at most N")
    p.add_argument("--fit-questions", type=int, default=500, help="training questions whose reads fit the threshold")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="alternating timed runs of each")
    _machine.add_guard_args(p)
    args = p.parse_args()
    guard = _machine.start(args.threads)
    os.environ.setdefault("QA_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    common = ["--dataset", args.dataset, "--limit", str(args.questions), "--reader", args.reader, "--metrics", "em,f1",
              "--depth", str(max(args.n, 100)), "--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # 1. fit the threshold once (train reads), then the sweep on the same reads names the fixed n of equal EM
        fit_dir = tmp / "fit"
        _cmd("pipeline.run", *common, "--selector", f"confidence:{args.n},fit_questions={args.fit_questions}",
             "--read-cache", str(tmp / "shared-reads"), "--out", str(fit_dir))
        fitted = json.loads((fit_dir / "selector.json").read_text())["selector"]["fitted"]
        confidence = f"confidence:{args.n},threshold={float(fitted['threshold'])!r}"
        sweep_dir = tmp / "sweep"
        sweep_common = common[: common.index("--threads")]  # the sweep sets no thread count of its own
        _cmd("pipeline.sweep", *sweep_common, "--corpus-sizes", "all", "--seeds", "1", "--n", f"1-{args.n}", "--no-ordinal",
             "--thetas", "0.8", "--selector", confidence, "--bootstrap", "1000", "--no-plots",
             "--read-cache", str(tmp / "shared-reads"), "--out", str(sweep_dir))
        cost = {r["system"]: r for r in csv.DictReader(open(sweep_dir / "cost.csv", newline=""))}
        row = cost[next(s for s in cost if s.startswith("confidence"))]
        if row["fixed_n"]:
            fixed = f"top:{row['fixed_n']}"
            verdict = (f"sweep on the same reads: {fixed} is the smallest fixed n whose EM reaches confidence's; saving "
                       f"{float(row['saving']):.2f} passages/question, 95% CI [{float(row['saving_ci_low']):.2f}, "
                       f"{float(row['saving_ci_high']):.2f}]")
        else:  # confidence beats every fixed n: time it against the best one
            best = max((r for r in cost.values() if r["family"] == "top"), key=lambda r: float(r["em"]))
            fixed = best["system"]
            verdict = (f"sweep on the same reads: no fixed n up to {args.n} reaches confidence's EM "
                       f"({100 * float(row['em']):.2f} reading {float(row['mean_passages']):.2f}); the best fixed n is {fixed} "
                       f"({100 * float(best['em']):.2f} reading {float(best['mean_passages']):.2f})")
        # 2. alternating timed runs, each with a fresh read cache
        timings: dict[str, list[dict]] = {confidence: [], fixed: []}
        for r in range(args.repeats):
            for spec in (confidence, fixed):
                out = tmp / f"{spec.split(':')[0]}-{r}"
                t0 = time.perf_counter()
                _cmd("pipeline.run", *common, "--selector", spec, "--read-cache", str(out / "fresh-reads"), "--out", str(out))
                wall = time.perf_counter() - t0
                metrics = json.loads((out / "metrics.json").read_text())["reading"]
                manifest = json.loads((out / "manifest.json").read_text())
                timings[spec].append({"wall": wall, "read": manifest["timings_s"]["read"], "em": metrics["em"], "f1": metrics["f1"],
                                      "mean_n": metrics["mean_n"], "reads_done": manifest["reading"]["reads_done"]})
    print(f"{args.dataset} dev, first {args.questions} questions, BM25, reader {Path(args.reader).name}, threads {args.threads}, "
          f"{args.repeats} alternating runs each (median)")
    print(f"confidence threshold {float(fitted['threshold']):.4f}, fitted on {fitted['n_train']} training questions' reads "
          f"(train EM {100 * fitted['train_em']:.2f}, mean n {fitted['train_mean_n']:.2f})")
    print(verdict)
    print()
    print("| selector | EM | F1 | mean passages read | reads done | read s | wall s |")
    print("|---|---|---|---|---|---|---|")
    med = {}
    for spec, runs in timings.items():
        med[spec] = {k: statistics.median(run[k] for run in runs) for k in ("wall", "read", "em", "f1", "mean_n", "reads_done")}
        m = med[spec]
        print(f"| {spec} | {100 * m['em']:.2f} | {100 * m['f1']:.2f} | {m['mean_n']:.2f} | {m['reads_done']:.0f} | {m['read']:.1f} | {m['wall']:.1f} |")
    c, f = med[confidence], med[fixed]
    print()
    print(f"confidence / {fixed}: passages read {c['mean_n'] / f['mean_n']:.3f}x, read time {c['read'] / f['read']:.3f}x, "
          f"wall time {c['wall'] / f['wall']:.3f}x, EM difference {100 * (c['em'] - f['em']):+.2f} points")
    print("per-run read s: " + "; ".join(f"{spec}: {[round(r['read'], 1) for r in runs]}" for spec, runs in timings.items()))
    return _machine.finish(guard, allow_busy=args.allow_busy)


def _cmd(module: str, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{module} failed (exit {proc.returncode})")


if __name__ == "__main__":
    raise SystemExit(main())
