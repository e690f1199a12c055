"""The answer-metric stage of a run, timed as the pipeline runs it, BERT-F1 on each backend, in one run.

Takes a finished run's ``predictions.json`` (the main job's: 10,570 answers) and its dataset's gold answers and
scores all five answer metrics (EM, F1, ROUGE-L, METEOR, BERT-F1) the way ``pipeline.run`` does, each time in a
fresh process that has already imported torch and transformers (as the pipeline has by then, from the reader) and
with an empty BERT-F1 pair cache: BERT-F1's load, its backend check (cached after the first run) and the per-answer
metrics forked beside it are all inside the time.  The sides alternate (``--rounds`` times), so load from elsewhere
hits them alike.  Prints per side the median stage seconds, the ratio to torch, each metric's mean and BERT-F1's
largest per-answer difference to torch's.

    python -m pipeline.run --dataset reqa_squad --split dev --retriever bm25 --depth 100 --selector top:5 \\
      --reader ../shared/models/minilm-squad-reader --out runs/main
    python bench/answer_metrics_stage.py --run runs/main --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _machine  # noqa: E402

SIDES = ("torch", "auto")


def child(run: Path, backend: str, out: Path) -> None:
    """One side in this (fresh) process: the stage's time, each metric's mean, BERT-F1 per answer."""
    import time

    import numpy as np
    import torch  # noqa: F401  (imported before the clock, as in the pipeline)
    import transformers  # noqa: F401

    from data.registry import load_dataset
    from eval.answer_metrics import answer_metrics
    from pipeline.config import MetricsConfig

    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    flags = manifest.get("flags", {})
    dataset = load_dataset(flags.get("dataset", "reqa_squad"), split=flags.get("split", "dev"))
    gold = dict(zip(dataset.queries.question_ids, dataset.queries.answers))
    predictions = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    ids = list(predictions)
    config = MetricsConfig()
    options = config.options(dataset.queries.language, "cpu")
    options["bert_f1"] = {**options["bert_f1"], "backend": backend, "cache": str(out.parent / f"pairs-{out.stem}")}
    t0 = time.perf_counter()
    scores = answer_metrics([predictions[i] for i in ids], [gold[i] for i in ids], language=dataset.queries.language,
                            metrics=tuple(config.answer), options=options, progress=False)
    seconds = time.perf_counter() - t0
    np.save(out.with_suffix(".npy"), scores["bert_f1"])
    out.write_text(json.dumps({"seconds": seconds, "backend": scores.info["bert_f1"].get("backend", "torch"),
                               "means": {m: float(np.nanmean(v)) for m, v in scores.items()}, "answers": len(ids)}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a pipeline.run directory with predictions.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("BACKEND", "OUT"), help=argparse.SUPPRESS)
    _machine.add_guard_args(p)
    args = p.parse_args(argv)
    if args.child:
        child(args.run, args.child[0], Path(args.child[1]))
        return 0
    if not (args.run / "predictions.json").is_file():
        print(f"{args.run}: no predictions.json (run pipeline.run with --reader first)", file=sys.stderr)
        return 2
    import numpy as np

    import hardware

    guard = _machine.start(hardware.available_cores())
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="answer-metrics-bench-") as tmp:
        for r in range(args.rounds):
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            for side in order:
                out = Path(tmp) / f"{side}-{r}.json"
                subprocess.run([sys.executable, __file__, "--run", str(args.run), "--child", side, str(out)], check=True)
                facts = json.loads(out.read_text())
                facts["bert_f1"] = np.load(out.with_suffix(".npy"))
                results[side].append(facts)
                print(f"round {r + 1} {side:5s} {facts['seconds']:6.2f} s (BERT-F1 on {facts['backend']})", flush=True)
    torch_median = statistics.median(f["seconds"] for f in results["torch"])
    reference = results["torch"][0]["bert_f1"]
    print(f"\n{results['torch'][0]['answers']:,} answers of {args.run}; median of {args.rounds} runs per side, alternating")
    metrics = list(results["torch"][0]["means"])
    print(f"{'side':6s} {'BERT-F1 on':18s} {'stage s':>8s} {'x torch':>8s} {'max |dBERT-F1|':>15s}  " + "  ".join(metrics))
    for side in SIDES:
        median = statistics.median(f["seconds"] for f in results[side])
        got = results[side][0]["bert_f1"]
        ok = ~np.isnan(reference)
        diff = float(np.abs(got[ok] - reference[ok]).max()) if ok.any() else 0.0
        means = "  ".join(f"{results[side][0]['means'][m]:.4f}" for m in metrics)
        print(f"{side:6s} {results[side][0]['backend']:18s} {median:8.2f} {torch_median / median:7.2f}x {diff:15.4f}  {means}")
    return _machine.finish(guard, allow_busy=args.allow_busy)


if __name__ == "__main__":
    raise SystemExit(main())
