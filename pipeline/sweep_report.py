"""Markdown tables of a finished sweep: ``python -m pipeline.sweep_report DIR``.

Reads ``summary.csv`` and ``summary.json`` written by :mod:`pipeline.sweep`
and prints the tables the docs show for a sweep: per corpus size, answer
recall@n, answer-bearing passages in the top N and EM of fixed n next to the
best system; then the regret of the best fixed n, the best threshold, the
ordinal selector, the best of every other selector family, a few fixed n and
the oracle (Kratzwald & Feuerriegel 2018, "Adaptive Document Retrieval for
Deep Question Answering"); then what reading cost (cost.csv): EM against mean
passages read and each adaptive selector's saving at equal EM.  A sweep over
several seeds shows every value as mean ± std over the seeds.

Files hold fractions in [0, 1] (``"scale": "fraction"`` in summary.json);
sweeps written before that held EM, F1 and regret in percent and are migrated
on read (:func:`migrate`).  The printed tables show EM in percent and regret in
EM points, and say so in their headers.  A sweep judged by another metric
(``--objective has_answer``) shows that metric where these say EM: the best
system, regret, the cost table.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from data.errors import UserError
from pipeline.cli import main_guard


def load_summary(out: str | Path) -> tuple[dict, dict[tuple[int, str], dict]]:
    """(summary.json, summary.csv rows keyed by (corpus size, system)) of a sweep directory."""
    out = Path(out)
    for name in ("summary.json", "summary.csv"):
        if not (out / name).is_file():
            raise UserError(f"{out / name}: not found (is {out} the --out directory of a finished sweep?)")
    try:
        summary = json.loads((out / "summary.json").read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{out / 'summary.json'}: not valid JSON ({err.msg}, line {err.lineno})") from None
    rows: dict[tuple[int, str], dict] = {}
    with open(out / "summary.csv", newline="") as f:
        for row in csv.DictReader(f):
            try:
                rows[(int(row["corpus_size"]), row["system"])] = row
            except (KeyError, ValueError):
                raise UserError(f"{out / 'summary.csv'}: rows need corpus_size and system columns") from None
    return migrate(summary, rows)


def migrate(summary: dict, rows: dict) -> tuple[dict, dict]:
    """Bring a sweep written before ``"scale": "fraction"`` (EM, F1 and regret in percent) to fractions.

    Sweeps since then write fractions in [0, 1] everywhere; older ones are
    converted on read, so both print the same tables.
    """
    if summary.get("scale") == "fraction":
        return summary, rows
    from pipeline.tradeoff_sweep import PERCENT_COLUMNS

    pct = lambda v: float(v) / 100.0  # noqa: E731
    rows = {key: {k: (pct(v) if k in PERCENT_COLUMNS and v not in ("", None) else v) for k, v in row.items()}
            for key, row in rows.items()}
    summary = json.loads(json.dumps(summary))
    for best in summary.get("best_n", {}).values():
        if "em" in best:
            best["em"] = pct(best["em"])
    summary["em_by_size"] = {k: [pct(v) for v in vals] for k, vals in summary.get("em_by_size", {}).items()}
    regret = summary.get("regret", {})
    for info in regret.get("systems", {}).values():
        for k in ("mean", "std", "uniform_mean"):
            if k in info:
                info[k] = pct(info[k])
        if "ci95" in info:
            info["ci95"] = [pct(v) for v in info["ci95"]]
    for key in ("best_fixed", "best_threshold", "ordinal", "oracle"):
        if regret.get(key):
            regret[key]["regret"] = pct(regret[key]["regret"])
    summary["scale"] = "fraction"
    summary["migrated_from"] = "percent"
    return summary, rows


def _value(rows: dict, size: int, system: str, column: str) -> float:
    row = rows.get((size, system))
    if row is None:
        raise UserError(f"summary.csv: no row for corpus size {size}, system {system}")
    return float(row[column])


def _cell(rows: dict, size: int, system: str, metric: str, digits: int, seeds: int, scale: float = 1.0) -> str:
    """``metric``'s mean over seeds (times ``scale``), with `` ± std`` when the sweep ran more than one seed."""
    text = f"{scale * _value(rows, size, system, f'{metric}_mean'):.{digits}f}"
    if seeds > 1:
        text += f" ± {scale * _value(rows, size, system, f'{metric}_std'):.{digits}f}"
    return text


def objective_of(summary: dict) -> tuple[str, str]:
    """(the metric a sweep was judged by, its label): ``em`` for sweeps written before ``--objective``."""
    from pipeline.tradeoff_sweep import metric_label

    objective = summary.get("objective", "em")
    return objective, metric_label(objective)


def size_table(summary: dict, rows: dict, ns: list[int]) -> str:
    """Per corpus size: answer recall@n, answer-bearing count in the top N, EM (and the objective) of top-n, best n
    and best system by the objective."""
    n_max = int(summary["n_max"])
    objective, label = objective_of(summary)
    judged = [] if objective == "em" else [f"{label} top-{n} (%)" for n in ns if n <= n_max]
    ns = [n for n in ns if n <= n_max] or [n_max]
    bearing = summary.get("answer_bearing_by_size") or {}  # uniform levels of a corpus without known gold
    head = (["corpus", "noise ×"] + [f"answer recall@{n}" for n in ns] + [f"answer-bearing in top {n_max}"]
            + (["questions with an answer-bearing passage retrieved"] if bearing else [])
            + [f"EM top-{n} (%)" for n in ns] + judged + ["best n", f"best system ({label} %)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seeds = len(summary.get("seeds") or [1])
    for size, ratio in zip(summary["corpus_sizes"], summary["noise_ratios"]):
        best = summary["best_n"][str(size)]
        best_system = best.get("best_system", f"top:{best['n']}")
        cells = [f"{size:,}", "—" if ratio is None else f"{ratio:.1f}"]  # no known gold: no noise ratio
        cells += [_cell(rows, size, f"top:{n}", "answer_recall", 3, seeds) for n in ns]
        cells += [_cell(rows, size, f"top:{n_max}", "answer_bearing", 2, seeds)]
        if bearing:
            found = bearing.get(str(size), {}).get("answer_bearing_questions")
            cells += ["—" if found is None else f"{found:,.0f} of {summary['questions']:,}"]
        cells += [_cell(rows, size, f"top:{n}", "em", 2, seeds, 100.0) for n in ns]
        if judged:
            cells += [_cell(rows, size, f"top:{n}", objective, 2, seeds, 100.0) for n in ns]
        best_n = str(best["n"])
        if seeds > 1:  # the n that is best on the seed-averaged EM, then each seed's own best n
            best_n += f" (per seed {', '.join(map(str, best['per_seed']))})"
        cells += [best_n, f"{best_system} ({100 * _value(rows, size, best_system, f'{objective}_mean'):.2f})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def regret_table(summary: dict, fixed: list[int]) -> str:
    """Regret (EM points, or the objective's: the fractions of summary.json x 100) of the headline systems, with the
    bootstrap interval."""
    regret = summary["regret"]
    label = objective_of(summary)[1]
    systems = regret["systems"]
    picks = [(label, regret[key]["system"]) for label, key in
             (("best fixed n", "best_fixed"), ("best threshold", "best_threshold"), ("ordinal regression", "ordinal"))
             if regret.get(key)]  # --no-ordinal sweeps have no ordinal regression
    known = {"top", "threshold", "ordinal", "oracle"}
    picks += [(f"best {family}", best["system"]) for family, best in (regret.get("by_family") or {}).items()
              if best and family not in known]  # gap, rlt, confidence, plugins' selectors
    picks += [(f"top-{n}", f"top:{n}") for n in fixed if f"top:{n}" in systems]
    picks += [("oracle (reads to the first answer-bearing passage)", "oracle")]
    seeds = len(summary.get("seeds") or [1])
    spread = " ± std over seeds" if seeds > 1 else ""
    lines = [f"| system | spec | regret, {label} points ({regret['weighting']}){spread} | 95% interval | uniform mean |",
             "|---|---|---|---|---|"]
    for label, system in picks:
        info = systems.get(system)
        if info is None:
            continue
        low, high = (100 * v for v in info["ci95"])
        mean = f"{100 * info['mean']:.2f}" + (f" ± {100 * info['std']:.2f}" if seeds > 1 else "")
        lines.append(f"| {label} | `{system}` | {mean} | [{low:.2f}, {high:.2f}] | {100 * info['uniform_mean']:.2f} |")
    return "\n".join(lines)


def cost_table(out: str | Path, summary: dict) -> str | None:
    """Per corpus size, for the best fixed n and the best system of every selector family: EM (or the sweep's
    objective), mean passages read, whether it is on the Pareto front, and (adaptive selectors) the fixed n that
    reaches it and the passages per question it saves against that n.  None for sweeps without cost.csv."""
    path = Path(out) / "cost.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        cost = {(int(r["corpus_size"]), r["system"]): r for r in csv.DictReader(f)}
    regret = summary["regret"]
    objective, label = objective_of(summary)
    systems = [best["system"] for best in (regret.get("by_family") or {}).values() if best]
    head = ["corpus", "system", f"{label} (%)", "mean passages read", "Pareto front", f"fixed n of equal {label}",
            "its passages", "saving, passages/question [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in summary["corpus_sizes"]:
        for system in systems:
            r = cost.get((int(size), system))
            if r is None:
                continue
            adaptive = r["family"] not in ("top", "oracle")
            saving = "—"
            if adaptive:
                saving = f"no fixed n reaches its {label}" if r["saving"] == "" else \
                    f"{float(r['saving']):+.2f} [{float(r['saving_ci_low']):+.2f}, {float(r['saving_ci_high']):+.2f}]"
            lines.append("| " + " | ".join([
                f"{int(size):,}", f"`{system}`", f"{100 * float(r[objective]):.2f}", f"{float(r['mean_passages']):.2f}",
                "yes" if r["pareto_front"] == "True" else "no",
                (f"top:{r['fixed_n']}" if r["fixed_n"] else "—") if adaptive else "—",
                f"{float(r['fixed_n_passages']):.2f}" if adaptive and r["fixed_n_passages"] else "—", saving]) + " |")
    return "\n".join(lines)


def retrieval_recall_table(summary: dict, ks: list[int] = (1, 5, 20, 100, 1000)) -> str:
    """Open datasets: the ranking's answer recall@k (DPR top-k accuracy, %) per corpus size, for the k within the
    retrieval depth; empty when the sweep did not record it."""
    by_size = summary.get("answer_recall_at_k_by_size") or {}
    sizes = [s for s in summary["corpus_sizes"] if str(s) in by_size]
    if not sizes:
        return ""
    depth = min(len(by_size[str(s)]) for s in sizes)
    ks = [k for k in ks if k <= depth] or [depth]
    head = ["corpus"] + [f"answer recall@{k} (%)" for k in ks]
    lines = [f"Retrieval, {summary['questions']:,} questions, depth {depth}:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        lines.append("| " + " | ".join([f"{size:,}"] + [f"{100 * by_size[str(size)][k - 1]:.1f}" for k in ks]) + " |")
    return "\n".join(lines)


DEFAULT_NS = (1, 5, 10, 20)  # the fixed n the tables show unless asked for others (those the sweep scored)


def report(out: str | Path, ns: list[int] = DEFAULT_NS) -> str:
    summary, rows = load_summary(out)
    tables = [size_table(summary, rows, list(ns)), retrieval_recall_table(summary), regret_table(summary, list(ns)),
              cost_table(out, summary)]
    return "\n\n".join(t for t in tables if t)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.sweep_report", description=__doc__.split("\n")[0])
    p.add_argument("out", help="the --out directory of a finished pipeline.sweep")
    p.add_argument("--n", type=_int_list, default=None, help="fixed n shown in the tables (default 1,5,10,20: those the"
                                                                " sweep scored)")
    return p


@main_guard
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.n is not None:  # asked for: each must have been scored (the defaults are cut to the sweep's n)
        n_max = load_summary(args.out)[0].get("n_max")
        beyond = [n for n in args.n if isinstance(n_max, int) and n > n_max]
        if beyond:
            raise UserError(f"--n {','.join(map(str, beyond))}: {args.out} scored n up to {n_max} (its --n)")
    print(report(args.out, args.n or DEFAULT_NS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
