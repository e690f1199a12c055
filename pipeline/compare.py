"""Compare runs with paired significance tests: ``python -m pipeline.compare RUN_DIR RUN_DIR ...``.

Reads each run's ``per_query.jsonl`` (written by ``pipeline.run``) and prints,
like ranx's ``compare`` (Bassani 2022), one table with each run's mean per
metric, its 95% bootstrap interval and the letters of the runs it is
significantly better than, then every pairwise test (difference, p-value,
corrected p-value).  ``--out DIR`` also writes ``compare.md``, ``compare.csv``
(means), ``compare_pairs.csv`` (tests) and ``compare.tex``.

Tests (:mod:`eval.significance`, all scipy.stats, two-sided, seeded with
``--seed``): ``paired-t`` (default), ``randomization`` (Fisher's paired sign
flips) and ``bootstrap`` (paired bootstrap of the mean difference).  With
``--baseline RUN`` every run is tested against that one; otherwise every pair.
``--correction`` (Holm by default, Bonferroni, none) adjusts the p-values of
each metric's family of comparisons.

Runs must score the same questions: a metric whose per-query ids differ
between runs (another dataset, split or ``--limit``) is an error.

Given one ``pipeline.sweep`` directory instead, it compares the sweep's
systems at one corpus size (``--size``, default the largest) on the same
questions: ``--systems top:5;gap:25,5;confidence:20`` (default: the best
system of every family by regret), each with its per-question EM, F1 and
passages read (means over seeds), so the selectors' EM and reading cost are
tested pairwise like runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data.errors import UserError
from data.io import write_text
from pipeline.cli import main_guard, make_out_dir

RETRIEVAL_DEFAULTS = ("rr", "r@10", "ndcg@10", "r@100")


def default_metrics() -> tuple[str, ...]:
    """The per-query metrics compared by default, in this order: retrieval headlines, then every answer metric."""
    from eval.registry import answer_metric_names

    return RETRIEVAL_DEFAULTS + tuple(answer_metric_names())
NOT_METRICS = ("id", "n", "error")
LOWER_IS_BETTER = ("passages_read",)  # costs: the run that reads fewer passages is the better one


@dataclass
class Run:
    name: str
    path: Path
    metrics: dict
    rows: dict[str, dict]  # id -> per-query values
    kinds: dict[str, tuple[str, int]] = field(default_factory=dict)  # column -> ("number" or "text", first line)

    def values(self, metric: str) -> dict[str, float]:
        kind, line = self.kinds.get(metric, ("number", 0))
        if kind != "number":
            raise UserError(f"{self.path / 'per_query.jsonl'}:{line}: {metric} is text, not a per-query number")
        return {qid: float(r[metric]) for qid, r in self.rows.items() if r.get(metric) is not None}


def load_run(path: str | Path, name: str | None = None) -> Run:
    path = Path(path)
    pq = path / "per_query.jsonl"
    if not pq.is_file():
        raise UserError(f"{pq}: not found (is {path} the --out directory of pipeline.run?)")
    rows: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    kinds: dict[str, tuple[str, int]] = {}
    with open(pq, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                # a line that is not UTF-8 is named like any bad line (decoded here: json.loads of bytes lets an
                # encoded surrogate through, "surrogatepass")
                row = json.loads(line.decode("utf-8"))
                qid = row["id"]
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                raise UserError(f"{pq}:{n}: expected a JSON object with an 'id'") from None
            if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
                raise UserError(f"{pq}:{n}: 'id' is not a string or an integer")  # (null was the id 'None')
            qid = str(qid)
            if qid in first_line:  # (the later row replaced the first without a word)
                raise UserError(f"{pq}:{n}: query id {qid!r} appears again (first on line {first_line[qid]})")
            first_line[qid] = n
            for key, value in row.items():
                if key in NOT_METRICS or value is None:
                    continue
                if isinstance(value, float) and not math.isfinite(value):
                    raise UserError(f"{pq}:{n}: {key} is {value} (per-query values are finite numbers or null)")
                kind = "number" if isinstance(value, (int, float)) else "text" if isinstance(value, str) else None
                if kind is None:
                    raise UserError(f"{pq}:{n}: {key} is a JSON {type(value).__name__}, not a number")
                seen = kinds.setdefault(key, (kind, n))
                if seen[0] != kind:
                    raise UserError(f"{pq}:{n}: {key} is {'a number' if kind == 'number' else 'text'} here "
                                    f"but {'a number' if seen[0] == 'number' else 'text'} on line {seen[1]}")
            rows[qid] = row
    if not rows:  # (an emptied file compared as a run scored on no metric at all: no error, no comparison)
        raise UserError(f"{pq}: empty, no per-query rows (is {path} the --out directory of a finished pipeline.run?)")
    metrics = {}
    mj = path / "metrics.json"
    if mj.is_file():
        try:
            metrics = json.loads(mj.read_bytes().decode("utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{mj}:{e.lineno}: not valid JSON ({e.msg})") from None
        except UnicodeDecodeError as e:
            line = mj.read_bytes()[: e.start].count(b"\n") + 1
            raise UserError(f"{mj}:{line}: not UTF-8 text") from None
        if not isinstance(metrics, dict):
            raise UserError(f"{mj}:1: expected a JSON object of metrics")
    return Run(name or path.name, path, metrics, rows, kinds)


def is_sweep(path: str | Path) -> bool:
    """A ``pipeline.sweep`` output directory (summary.json and levels/), not a run's."""
    path = Path(path)
    return (path / "summary.json").is_file() and (path / "levels").is_dir()


def load_sweep_runs(path: str | Path, systems: list[str] | None = None, size: str | None = None) -> list[Run]:
    """Systems of a sweep at one corpus size as runs: per question EM, F1 and passages read (means over seeds).

    ``systems`` default to the best of every family (fixed n, each selector) by regret, the oracle left out;
    ``size`` to the largest corpus size.  Question ids come from the sweep's question_ids.json (positions when
    the sweep predates it).
    """
    from pipeline.tradeoff_sweep import columns, fixed_n_read, stored_passages

    path = Path(path)
    summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    sizes = [int(s) for s in summary.get("corpus_sizes", [])]
    if size is None:
        chosen = max(sizes)
    else:
        try:
            chosen = max(sizes) if str(size) == "all" else int(size)
        except ValueError:
            raise UserError(f"--size {size!r}: a corpus size of the sweep ({', '.join(map(str, sizes))}) or all") from None
        if chosen not in sizes:
            raise UserError(f"--size {size}: {path} has corpus sizes {', '.join(map(str, sizes))}")
    if not systems:
        families = (summary.get("regret") or {}).get("by_family") or {}
        systems = [best["system"] for fam, best in families.items() if best and fam != "oracle"]
    tables: dict[str, list] = {name: [] for name in systems}
    for seed in summary.get("seeds", [1]):
        stem = path / "levels" / f"size{chosen}-seed{seed}"
        try:
            meta = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
            with np.load(stem.with_suffix(".npz"), allow_pickle=False) as z:
                em, f1, sys_n = z["em"], z["f1"], z["sys_n"]
                have = stored_passages(z, meta.get("info", {}), em.shape)
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"{stem}: cannot read the sweep level ({e})") from None
        for name in systems:
            if name.startswith("top:") and name[4:].isdigit() and 1 <= int(name[4:]) <= em.shape[1]:
                if have is None:
                    raise UserError(f"{stem}: saved before a sweep level kept the passages per question, so top:n's passages "
                                    f"read are unknown: run the same pipeline.sweep command again (it updates that level)")
                n = fixed_n_read(have, em.shape[1])[:, int(name[4:]) - 1]  # top:n reads n, never past a question's passages
            elif name in meta["systems"]:
                n = sys_n[:, meta["systems"].index(name)]
            else:
                raise UserError(f"--systems {name}: not a system of {path} (top:1..top:{em.shape[1]}, {', '.join(meta['systems'])})")
            rows = np.arange(em.shape[0])
            tables[name].append((em[rows, columns(n)], f1[rows, columns(n)], n))
    ids_file = path / "question_ids.json"
    q_count = len(next(iter(tables.values()))[0][0])
    ids = json.loads(ids_file.read_text(encoding="utf-8")) if ids_file.is_file() else [f"q{i}" for i in range(q_count)]
    if len(ids) != q_count:
        raise UserError(f"{ids_file}: {len(ids)} ids for {q_count} questions")
    out = []
    for name, per_seed in tables.items():
        em, f1, n = (np.mean([t[k] for t in per_seed], axis=0) for k in range(3))
        rows = {str(q): {"id": str(q), "em": float(e), "f1": float(f), "passages_read": float(k)} for q, e, f, k in zip(ids, em, f1, n)}
        out.append(Run(name, path, {"dataset": summary.get("dataset"), "split": summary.get("split")}, rows))
    return out


def available_metrics(runs: list[Run]) -> list[str]:
    """Metrics every run has per query, in the default order, then any others alphabetically."""
    common = None
    for run in runs:
        names = {k for r in run.rows.values() for k, v in r.items() if k not in NOT_METRICS and isinstance(v, (int, float))}
        common = names if common is None else common & names
    common = common or set()
    defaults = default_metrics()
    return [m for m in defaults if m in common] + sorted(common - set(defaults))


def aligned(runs: list[Run], metric: str) -> tuple[list[str], np.ndarray]:
    """``(ids, scores [runs, Q])`` of ``metric``; refuses runs scored on different questions."""
    first = runs[0].values(metric)
    if not first:
        raise UserError(f"{runs[0].path / 'per_query.jsonl'}: no per-query values of {metric!r}")
    ids = list(first)
    table = [np.array([first[q] for q in ids])]
    for run in runs[1:]:
        vals = run.values(metric)
        if set(vals) != set(first):
            shared = len(set(vals) & set(first))
            raise UserError(f"{run.path / 'per_query.jsonl'}: {metric} is scored on other questions than in {runs[0].path} "
                            f"({len(vals)} vs {len(first)}, {shared} shared): compare runs over the same question set")
        table.append(np.array([vals[q] for q in ids]))
    return ids, np.vstack(table)


def compare(runs: list[Run], metrics: list[str], test: str = "paired-t", correction: str = "holm",
            baseline: int | None = None, alpha: float = 0.05, n_resamples: int = 10000, seed: int = 0) -> dict:
    """Means, intervals and corrected pairwise tests; the structure the tables are printed from."""
    from eval.significance import bootstrap_ci, correct, paired_test

    for a in runs[1:]:
        for key in ("dataset", "split"):
            if runs[0].metrics.get(key) is not None and a.metrics.get(key) not in (None, runs[0].metrics.get(key)):
                raise UserError(f"{a.path}: {key} {a.metrics.get(key)!r} differs from {runs[0].path}'s {runs[0].metrics.get(key)!r}")
    letters = string.ascii_lowercase
    if len(runs) > len(letters):
        raise UserError(f"at most {len(letters)} runs at once")
    pairs = [(baseline, j) for j in range(len(runs)) if j != baseline] if baseline is not None else \
        [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs))]
    result = {"test": test, "correction": correction, "alpha": alpha, "seed": seed, "resamples": n_resamples,
              "runs": [r.name for r in runs], "letters": list(letters[: len(runs)]), "metrics": {}}
    for metric in metrics:
        ids, table = aligned(runs, metric)
        means = table.mean(axis=1)
        cis = [bootstrap_ci(row, 1000, seed) for row in table]
        raw = [paired_test(table[i], table[j], test, n_resamples, seed) for i, j in pairs]
        adj = correct(raw, correction)
        better = [[] for _ in runs]
        tests = []
        for (i, j), p, q in zip(pairs, raw, adj):
            significant = q < alpha
            if significant and means[i] != means[j]:
                higher_wins = metric not in LOWER_IS_BETTER
                winner, loser = (i, j) if (means[i] > means[j]) == higher_wins else (j, i)
                better[winner].append(letters[loser])
            tests.append({"a": runs[i].name, "b": runs[j].name, "mean_a": float(means[i]), "mean_b": float(means[j]),
                          "diff": float(means[j] - means[i]), "p": float(p), "p_corrected": float(q), "significant": bool(significant)})
        result["metrics"][metric] = {
            "questions": len(ids),
            "means": [float(m) for m in means],
            "ci95": [[float(lo), float(hi)] for lo, hi in cis],
            "better_than": [sorted(b) for b in better],
            "tests": tests,
        }
    return result


def markdown(result: dict) -> str:
    metrics = list(result["metrics"])
    head = ["", "run"] + [f"{m} (mean [95% CI])" for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, (name, letter) in enumerate(zip(result["runs"], result["letters"])):
        cells = [f"{letter}", f"`{name}`"]
        for m in metrics:
            info = result["metrics"][m]
            lo, hi = info["ci95"][k]
            sup = "".join(info["better_than"][k])
            cells.append(f"{info['means'][k]:.4f}{('<sup>' + sup + '</sup>') if sup else ''} [{lo:.4f}, {hi:.4f}]")
        lines.append("| " + " | ".join(cells) + " |")
    q = {m: result["metrics"][m]["questions"] for m in metrics}
    note = (f"Superscripts: the runs a run is significantly better than ({result['test']} test, {result['correction']} "
            f"correction, alpha {result['alpha']}; for {', '.join(LOWER_IS_BETTER)} fewer is better); values are fractions "
            f"in [0, 1] (passages_read: passages per question); questions per metric: "
            + ", ".join(f"{m} {n}" for m, n in q.items()) + ".")
    pair_head = "| metric | a | b | mean a | mean b | b − a | p | p corrected | significant |"
    pair_lines = [pair_head, "|---|---|---|---|---|---|---|---|---|"]
    for m in metrics:
        for t in result["metrics"][m]["tests"]:
            pair_lines.append(f"| {m} | `{t['a']}` | `{t['b']}` | {t['mean_a']:.4f} | {t['mean_b']:.4f} | {t['diff']:+.4f} | "
                              f"{t['p']:.3g} | {t['p_corrected']:.3g} | {'yes' if t['significant'] else 'no'} |")
    return "\n".join(lines) + "\n\n" + note + "\n\n" + "\n".join(pair_lines) + "\n"


def latex(result: dict) -> str:
    metrics = list(result["metrics"])
    esc = lambda s: str(s).replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&").replace("%", "\\%").replace("#", "\\#")  # noqa: E731
    lines = ["\\begin{tabular}{ll" + "r" * len(metrics) + "}", "\\toprule",
             " & run & " + " & ".join(esc(m) for m in metrics) + " \\\\", "\\midrule"]
    for k, (name, letter) in enumerate(zip(result["runs"], result["letters"])):
        cells = []
        for m in metrics:
            info = result["metrics"][m]
            sup = "".join(info["better_than"][k])
            cells.append(f"{info['means'][k]:.4f}" + (f"$^{{{sup}}}$" if sup else ""))
        lines.append(f"{letter} & {esc(name)} & " + " & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}",
              f"% superscripts: significantly better than ({result['test']}, {result['correction']} correction, alpha {result['alpha']})"]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, result: dict) -> list[Path]:
    from data.io import atomic_path

    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "compare.md", markdown(result))
    write_text(out / "compare.tex", latex(result))
    with atomic_path(out / "compare.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["metric", "run", "letter", "questions", "mean", "ci_low", "ci_high", "better_than"])
        for m, info in result["metrics"].items():
            for k, name in enumerate(result["runs"]):
                w.writerow([m, name, result["letters"][k], info["questions"], repr(info["means"][k]),
                            repr(info["ci95"][k][0]), repr(info["ci95"][k][1]), "".join(info["better_than"][k])])
    with atomic_path(out / "compare_pairs.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["metric", "a", "b", "mean_a", "mean_b", "diff", "test", "p", "correction", "p_corrected", "significant"])
        for m, info in result["metrics"].items():
            for t in info["tests"]:
                w.writerow([m, t["a"], t["b"], repr(t["mean_a"]), repr(t["mean_b"]), repr(t["diff"]), result["test"],
                            repr(t["p"]), result["correction"], repr(t["p_corrected"]), t["significant"]])
    return [out / n for n in ("compare.md", "compare.csv", "compare_pairs.csv", "compare.tex")]


def split_systems(text: str | None) -> list[str] | None:
    """``top:5;gap:25,5`` or ``top:5,top:10,confidence:20``: specs split at ';' when there is one, else at commas
    that start a new spec (a name followed by ':' or the end)."""
    if not text:
        return None
    if ";" in text:
        return [t.strip() for t in text.split(";") if t.strip()]
    from selection import selector_names

    names = set(selector_names()) | {"top"}
    parts: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        head = piece.split(":")[0].split("=")[0]
        if parts and (head not in names or "=" in piece.split(":")[0]):
            parts[-1] += "," + piece  # a parameter of the previous spec
        elif piece:
            parts.append(piece)
    return parts


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    from eval.significance import CORRECTIONS, TESTS

    p = _Parser(prog="python -m pipeline.compare", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="pipeline.run --out directories (two or more), or one pipeline.sweep directory")
    p.add_argument("--systems", help="with a sweep directory: comma-separated systems to compare (top:5,gap:25,5,...; "
                   "separate them with ';' when a spec has commas; default: the best of every family by regret)")
    p.add_argument("--size", help="with a sweep directory: the corpus size (default: the largest)")
    p.add_argument("--metrics", help=f"comma-separated per-query metrics (default: those of {','.join(RETRIEVAL_DEFAULTS)} and the answer metrics all runs have)")
    p.add_argument("--test", default="paired-t", choices=TESTS)
    p.add_argument("--correction", default="holm", choices=CORRECTIONS)
    p.add_argument("--baseline", help="a run directory (or its name) every other run is tested against")
    p.add_argument("--names", help="comma-separated display names (default: the directory names)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--resamples", type=int, default=10000, help="resamples of the randomization/bootstrap tests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write compare.md, compare.csv, compare_pairs.csv, compare.tex here")
    return p


@main_guard
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if len(args.runs) == 1 and is_sweep(args.runs[0]):
        runs = load_sweep_runs(args.runs[0], split_systems(args.systems), args.size)
        if len(runs) < 2:
            raise UserError(f"{args.runs[0]}: give two or more --systems to compare")
    elif args.systems or args.size:
        raise UserError("--systems and --size apply to one pipeline.sweep directory")
    elif len(args.runs) < 2:
        raise UserError("pipeline.compare: give two or more run directories (or one sweep directory)")
    else:
        names = [n.strip() for n in args.names.split(",")] if args.names else [None] * len(args.runs)
        if len(names) != len(args.runs):
            raise UserError(f"--names: {len(names)} names for {len(args.runs)} runs")
        runs = [load_run(p, n) for p, n in zip(args.runs, names)]
    if len({r.name for r in runs}) != len(runs):
        raise UserError("runs need distinct names (pass --names)")
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else available_metrics(runs)
    if not metrics:
        raise UserError("the runs share no per-query metric")
    baseline = None
    if args.baseline:
        match = [k for k, r in enumerate(runs) if r.name == args.baseline or r.path.resolve() == Path(args.baseline).resolve()]
        if not match:
            raise UserError(f"--baseline {args.baseline}: not one of the runs")
        baseline = match[0]
    if args.resamples < 1 or not 0 < args.alpha < 1:
        raise UserError("--resamples must be >= 1 and --alpha in (0, 1)")
    if args.out:
        make_out_dir(args.out, "compare")  # an unusable --out is one line before any work
    result = compare(runs, metrics, args.test, args.correction, baseline, args.alpha, args.resamples, args.seed)
    print(markdown(result))
    if args.out:
        for path in write_outputs(Path(args.out), result):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
