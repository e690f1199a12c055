"""Which all-MiniLM-L6-v2 layer to use for offline BERT-F1: correlation with SQuAD F1 per layer.

BERTScore (Zhang et al. 2020) picks each model's layer by correlation with
human judgements (WMT16); we have no human judgements for QA answers, so the
offline fallback's layer is the one whose per-question BERT-F1 correlates best
with the official token F1 on real predictions of the shared reader.

    python -m pipeline.run --dataset squad_open --split dev --retriever bm25 --limit 400 \\
        --reader ../shared/models/minilm-squad-reader --selector top:1 --metrics em,f1 --out runs/preds400
    python bench/bertscore_layer.py runs/preds400

Prints a Markdown table (layer, Pearson, Spearman, Kendall vs F1, mean BERT-F1)
over the questions whose prediction is not empty, and the layer with the
highest Spearman ρ (token F1 is bounded and heavily tied at 0 and 1, so a rank
correlation decides).  Not a speed benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a pipeline.run --out directory with details.jsonl")
    p.add_argument("--layers", default="1,2,3,4,5,6")
    args = p.parse_args(argv)
    from scipy import stats

    from eval.answer_metrics import f1
    from eval.bertscore import bert_f1, fallback_model

    rows = [json.loads(l) for l in (Path(args.run) / "details.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["answer"].strip() and r["gold"]]
    preds = [r["answer"] for r in rows]
    golds = [r["gold"] for r in rows]
    token_f1 = np.array([f1(p_, g) for p_, g in zip(preds, golds)])
    model, _ = fallback_model()
    print(f"{len(rows)} predictions of {args.run}; mean F1 {token_f1.mean():.4f}; model {model}\n")
    print("| layer | Pearson r | Spearman ρ | Kendall τ | mean BERT-F1 |")
    print("|---|---|---|---|---|")
    best = None
    for layer in [int(x) for x in args.layers.split(",")]:
        scores, _ = bert_f1(preds, golds, model=model, num_layers=layer, cache=False)
        r = stats.pearsonr(scores, token_f1).statistic
        rho = stats.spearmanr(scores, token_f1).statistic
        tau = stats.kendalltau(scores, token_f1).statistic
        print(f"| {layer} | {r:.4f} | {rho:.4f} | {tau:.4f} | {scores.mean():.4f} |")
        if best is None or rho > best[1]:
            best = (layer, rho)
    print(f"\nbest layer by Spearman ρ (the rule eval.bertscore.FALLBACK_LAYER follows): {best[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
