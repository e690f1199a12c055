"""Where the answer sits: ``python -m pipeline.position`` puts each question's answer-bearing paragraph at every
position among n passages and reads them with a generative reader.

The experiment of *Lost in the Middle* (Liu et al., TACL 2023): the gold paragraph at position 1..n, the
other n - 1 passages distractors; accuracy against position is U-shaped for many language models.  With
``--distractors random`` it is the setting of *The Power of Noise* (Cuconasu et al., SIGIR 2024), where
unrelated passages hurt less than related ones.

Distractors:

* ``bm25``: the question's BM25 top paragraphs that are neither its gold paragraph nor contain a gold answer
  (normalized, whole tokens), in BM25's order: related passages without the answer ("hard negatives");
* ``random``: paragraphs drawn at random from the corpus (seeded per question) that contain no gold answer.

Per question and setting the distractors are the same at every position; only the gold paragraph moves.
``--positions`` reads only some positions (those up to n): ``1,5,10`` is the paper's choice for 10 passages
(1, 5, 10, 15, 20 for 20), a third of the prompts of every position.
Besides the positions it reads the closed book (n = 0) and the gold paragraph alone (n = 1) as references.
A question is left out (and counted) when its gold paragraph holds no gold answer or it has too few
distractors.

Outputs in ``--out``: ``position.csv`` (one row per n, distractors and position: each metric's mean and 95%
bootstrap interval, mean prompt tokens), ``per_question.jsonl`` (every generation: question id, setting,
position, answer, metrics), ``position.png``/``.svg`` (has answer, or the first metric, against position),
``manifest.json`` and ``position.json`` (the summary, written last).  Generations are cached in
``<out>/generations`` (or ``--read-cache``): a killed run resumes where it stopped and writes the same files.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np

from data.errors import UserError
from data.io import write_json, write_jsonl
from pipeline.cli import main_guard, make_out_dir, parse_with_config, write_manifest

DISTRACTORS = ("bm25", "random")
OUTPUTS = ("position.csv", "per_question.jsonl", "position.png", "position.svg", "manifest.json", "position.json")
BM25_DEPTH = 100  # distractors are drawn from this many BM25 paragraphs per question


def _int_list(text: str, flag: str, low: int) -> list[int]:
    try:
        values = sorted({int(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise UserError(f"{flag} {text!r}: comma-separated whole numbers, e.g. 5,10") from None
    if not values or values[0] < low:
        raise UserError(f"{flag} {text!r}: each value must be >= {low}")
    return values


def _names(text: str, flag: str, known: tuple[str, ...]) -> list[str]:
    values = [v.strip() for v in str(text).split(",") if v.strip()]
    bad = [v for v in values if v not in known]
    if not values or bad:
        raise UserError(f"{flag} {text!r}: use {', '.join(known)} (comma-separated)")
    return list(dict.fromkeys(values))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.position", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="YAML or TOML file of these flags")
    p.add_argument("--dataset", default="squad_open", help="an open-domain set whose corpus holds each question's gold"
                   " paragraph (squad_open, open:...)")
    p.add_argument("--split", default="dev")
    p.add_argument("--data-dir", default=None, help="where the data are (default: the documented search order)")
    p.add_argument("--limit", type=int, default=500, help="questions (the first of the split, after --every)")
    p.add_argument("--every", type=int, default=None, help="keep every K-th question (spread over all articles)")
    p.add_argument("--reader", required=True, help="a generative reader spec, generative:MODEL[opts]")
    p.add_argument("--reader-opt", action="append", default=[], metavar="KEY=VALUE", help="a reader option (repeatable)")
    p.add_argument("--reader-dtype", default="auto", help="auto, float32, bfloat16, float16")
    p.add_argument("--reader-batch-size", type=int, default=None)
    p.add_argument("--reader-token-budget", type=int, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n", default="5,10", help="passages per prompt (comma-separated)")
    p.add_argument("--distractors", default="bm25,random", help="bm25, random or both")
    p.add_argument("--positions", default="all", help="positions of the gold paragraph to read: all (default) or a"
                   " comma-separated list, each n reading those up to n (1,5,10: Lost in the Middle's for 10)")
    p.add_argument("--metrics", default="has_answer,em,f1", help="per-answer metrics (the first is plotted)")
    p.add_argument("--seed", type=int, default=1, help="seed of the random distractors and the intervals")
    p.add_argument("--read-cache", default=None, help="directory of cached generations (default: <out>/generations)")
    p.add_argument("--out", default=None)
    return p


# ------------------------------------------------------------------ settings
def _paragraph(corpus, key: int) -> str:
    """The text of paragraph ``key`` (a corpus row where the corpus has no paragraph table)."""
    return corpus.paragraph_texts[key] if corpus.paragraph_texts else corpus.texts[key]


def _paragraph_key(corpus, row: int) -> int:
    return int(corpus.paragraph_ids[row]) if corpus.paragraph_texts else int(row)


def build_settings(dataset, ranking, ns: list[int], kinds: list[str], seed: int) -> tuple[list[dict], dict]:
    """Per kept question: its gold paragraph and its distractors of each kind (``max(ns) - 1`` of them)."""
    from eval.answer_metrics import has_answer
    from pipeline import stages

    corpus = dataset.corpus
    rows = stages.unique_question_rows(dataset.queries)
    queries = dataset.queries.subset(rows)
    passages = stages.passages_for(ranking.subset(rows), corpus, ranking.depth, "paragraph")
    bearing = stages.answer_bearing(passages, queries.answers, queries.language)
    size = len(corpus.paragraph_texts) if corpus.paragraph_texts else len(corpus.texts)
    need = max(ns) - 1
    kept, left_out = [], {"gold paragraph holds no answer": 0, "no single gold paragraph": 0, "too few distractors": 0}
    for i in range(len(rows)):
        golds = [g for g in queries.answers[i] if str(g).strip()]
        gold_keys = sorted({_paragraph_key(corpus, int(r)) for r in np.asarray(queries.gold[i]).reshape(-1)})
        if len(gold_keys) != 1:
            left_out["no single gold paragraph"] += 1
            continue
        gold_key = gold_keys[0]
        gold_text = _paragraph(corpus, gold_key)
        if not golds or not has_answer(gold_text, golds, queries.language):
            left_out["gold paragraph holds no answer"] += 1
            continue
        distractors = {}
        if "bm25" in kinds:
            hard = [t for k, t, b in zip(passages.keys[i], passages.texts[i], bearing[i]) if k != gold_key and not b]
            distractors["bm25"] = hard[:need]
        if "random" in kinds:
            qid = queries.question_ids[i]
            rng = np.random.default_rng([seed, zlib.crc32(str(qid).encode())])
            chosen: list[str] = []
            for key in rng.permutation(size):
                if len(chosen) == need:
                    break
                if int(key) == gold_key:
                    continue
                text = _paragraph(corpus, int(key))
                if not has_answer(text, golds, queries.language):
                    chosen.append(text)
            distractors["random"] = chosen
        if any(len(d) < need for d in distractors.values()):
            left_out["too few distractors"] += 1
            continue
        kept.append({"id": str(queries.question_ids[i]), "question": queries.texts[i], "answers": golds,
                     "gold": gold_text, "distractors": distractors})
    return kept, {k: v for k, v in left_out.items() if v}


def positions_for(n: int, positions: list[int] | None) -> list[int]:
    """The positions read among ``n`` passages: every one (``positions`` None) or those of ``positions`` up to n."""
    return list(range(1, n + 1)) if positions is None else [p for p in positions if p <= n]


def prompts_for(kept: list[dict], ns: list[int], kinds: list[str], positions: list[int] | None = None) -> list[tuple[dict, dict]]:
    """``(cell, passages)`` per prompt: the references (closed book, gold alone), then every n, kind and position
    (every position, or those of ``positions`` up to n)."""
    cells = []
    for q, item in enumerate(kept):
        cells.append(({"q": q, "setting": "closed book", "n": 0, "distractors": "", "position": 0}, []))
        cells.append(({"q": q, "setting": "gold only", "n": 1, "distractors": "", "position": 1}, [item["gold"]]))
        for n in ns:
            for kind in kinds:
                others = item["distractors"][kind][: n - 1]
                for pos in positions_for(n, positions):
                    texts = others[: pos - 1] + [item["gold"]] + others[pos - 1:]
                    cells.append(({"q": q, "setting": f"n={n} {kind}", "n": n, "distractors": kind, "position": pos}, texts))
    return cells


# ------------------------------------------------------------------ scoring
def summarize(rows: list[dict], metrics: list[str], seed: int) -> list[dict]:
    """One row per (setting, position): mean and 95% bootstrap interval of each metric, mean prompt tokens."""
    from eval.significance import bootstrap_ci

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["n"], r["distractors"], r["position"], r["setting"]), []).append(r)
    out = []
    for (n, kind, pos, setting), items in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        row = {"setting": setting, "n": n, "distractors": kind, "position": pos, "questions": len(items)}
        for m in metrics:
            values = np.array([r[m] for r in items], dtype=np.float64)
            lo, hi = bootstrap_ci(values, seed=seed)
            row.update({m: round(float(values.mean()), 4), f"{m}_lo": round(lo, 4), f"{m}_hi": round(hi, 4)})
        row["mean_prompt_tokens"] = round(float(np.mean([r["prompt_tokens"] for r in items])), 1)
        out.append(row)
    return out


def shape(rows: list[dict], per_question: list[dict], metric: str, seed: int) -> dict:
    """Per setting: the metric at the first, the worst middle and the last position read, and paired tests of
    first vs worst middle and last vs worst middle (a U shape has both significant and positive)."""
    from eval.significance import paired_test

    out = {}
    by_setting: dict[str, list[dict]] = {}
    for r in rows:
        if r["distractors"]:
            by_setting.setdefault(r["setting"], []).append(r)
    for setting, items in by_setting.items():
        items.sort(key=lambda r: r["position"])
        if len(items) < 3:
            continue
        middle = min(items[1:-1], key=lambda r: r[metric])
        values = {}
        for r in per_question:
            if r["setting"] == setting:
                values.setdefault(r["position"], {})[r["id"]] = r[metric]

        def paired(a: int, b: int) -> float:
            ids = sorted(values[a])
            return round(paired_test([values[a][i] for i in ids], [values[b][i] for i in ids], seed=seed), 4)

        first, last = items[0]["position"], items[-1]["position"]
        out[setting] = {"first": items[0][metric], "first_position": first, "worst_middle": middle[metric],
                        "worst_middle_position": middle["position"], "last": items[-1][metric], "last_position": last,
                        "best": max(r[metric] for r in items),
                        "p_first_vs_middle": paired(first, middle["position"]), "p_last_vs_middle": paired(last, middle["position"])}
    return out


def plot(rows: list[dict], metric: str, stem: Path, title: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.plots import save_figure
    from eval.registry import answer_metric

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    settings = [s for s in dict.fromkeys(r["setting"] for r in rows) if s not in ("closed book", "gold only")]
    for setting in settings:
        items = sorted((r for r in rows if r["setting"] == setting), key=lambda r: r["position"])
        x = [r["position"] for r in items]
        style = "-" if items[0]["distractors"] == "bm25" else "--"
        line, = ax.plot(x, [r[metric] for r in items], style, marker="o", label=setting)
        ax.fill_between(x, [r[f"{metric}_lo"] for r in items], [r[f"{metric}_hi"] for r in items],
                        color=line.get_color(), alpha=0.15)
    for ref, style in (("gold only", ":"), ("closed book", "-.")):
        found = [r for r in rows if r["setting"] == ref]
        if found:
            ax.axhline(found[0][metric], color="grey", linestyle=style, label=ref)
    ax.set_xlabel("position of the answer-bearing paragraph")
    ax.set_ylabel(answer_metric(metric).display)
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)  # a reader spec can be long
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, stem)


# ------------------------------------------------------------------ command
def main(argv: list[str] | None = None) -> int:
    args = parse_with_config(build_parser(), argv)
    ns = _int_list(args.n, "--n", 2)
    kinds = _names(args.distractors, "--distractors", DISTRACTORS)
    positions = None if str(args.positions).strip() == "all" else _int_list(args.positions, "--positions", 1)
    if positions is not None and positions[0] > min(ns):
        raise UserError(f"--positions {args.positions!r}: no position up to n = {min(ns)} (--n {args.n})")
    from eval.registry import answer_metric

    metrics = [m.strip() for m in str(args.metrics).split(",") if m.strip()]
    for m in metrics:
        if answer_metric(m).sweep != "cell":
            raise UserError(f"--metrics {m}: only per-answer metrics scored one answer at a time (em, f1, has_answer,"
                            " rouge_l, meteor) apply here")
    if not metrics:
        raise UserError("--metrics: name at least one metric")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit {args.limit}: must be >= 1")
    from pipeline.config import ReaderConfig
    from pipeline.reading import make_reader
    from readers.registry import reader_kind

    if reader_kind(args.reader) != "generative":
        raise UserError(f"--reader {args.reader}: the position experiment needs a generative reader (generative:MODEL)")
    options = {}
    for item in args.reader_opt:
        key, eq, value = str(item).partition("=")
        if not eq or not key.strip():
            raise UserError(f"--reader-opt {item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    try:
        config = ReaderConfig(model=args.reader, options=options, dtype=args.reader_dtype, batch_size=args.reader_batch_size,
                              token_budget=args.reader_token_budget)
    except Exception as e:  # pydantic's message, first error only
        errors = getattr(e, "errors", None)
        first = errors()[0] if callable(errors) else {"loc": ("reader",), "msg": str(e)}
        raise UserError(f"{'.'.join(map(str, first.get('loc', ())))}: {first.get('msg')}") from None
    reader = make_reader(config, device=args.device, threads=args.threads)
    if getattr(reader, "order", "rank") != "rank":
        raise UserError("--reader order: the position experiment places passages itself; leave order=rank")
    out = make_out_dir(args.out, "position")

    from pipeline import api
    from readers.generative import GenerationCache

    timings = {}
    t0 = time.perf_counter()
    options = {"data_dir": args.data_dir} if args.data_dir else {}
    from data.types import limit_queries
    from pipeline.tradeoff_sweep import every_kth_question, write_csv

    dataset = limit_queries(every_kth_question(api.load_dataset(args.dataset, args.split, **options), args.every), args.limit)
    if "bm25" in kinds:
        ranking = api.retrieve("bm25", dataset, depth=BM25_DEPTH)
    else:
        from data.types import Ranking

        q = len(dataset.queries.ids)
        ranking = Ranking(np.full((q, 1), -1, dtype=np.int64), np.full((q, 1), -np.inf, dtype=np.float32))
    kept, left_out = build_settings(dataset, ranking, ns, kinds, args.seed)
    if not kept:
        raise UserError(f"{args.dataset}: no question has a gold paragraph with its answer and enough distractors")
    timings["prepare"] = round(time.perf_counter() - t0, 2)
    cells = prompts_for(kept, ns, kinds, positions)
    print(f"position: {len(kept)} questions ({sum(left_out.values())} left out), {len(cells)} prompts", file=sys.stderr)

    t0 = time.perf_counter()
    reader.load()
    cache = GenerationCache(Path(args.read_cache) if args.read_cache else out / "generations")
    gens = reader.generate([kept[c["q"]]["question"] for c, _ in cells], [texts for _, texts in cells], cache=cache)
    timings["generate"] = round(time.perf_counter() - t0, 2)

    per_question = []
    language = dataset.queries.language
    for k, (cell, _) in enumerate(cells):
        item = kept[cell["q"]]
        row = {"id": item["id"], "setting": cell["setting"], "n": cell["n"], "distractors": cell["distractors"],
               "position": cell["position"], "answer": gens.text[k]}
        for m in metrics:
            row[m] = float(answer_metric(m).score(gens.text[k], item["answers"], language))
        row["prompt_tokens"] = int(gens.prompt_tokens[k])
        row["generated_tokens"] = int(gens.generated_tokens[k])
        per_question.append(row)
    rows = summarize(per_question, metrics, args.seed)
    summary = {"dataset": args.dataset, "split": args.split, "questions": len(kept), "left_out": left_out, "n": ns,
               "positions": positions or "all", "distractors": kinds, "metrics": metrics, "reader": args.reader, "reader_facts": reader.facts(),
               "shape": shape(rows, per_question, metrics[0], args.seed), "rows": rows}

    from data.io import staged_outputs

    with staged_outputs(out, last="position.json", outputs=OUTPUTS) as stage:
        write_csv(stage / "position.csv", rows)
        write_jsonl(stage / "per_question.jsonl", per_question)
        title = f"{args.reader} on {args.dataset} {args.split}, {len(kept)} questions ({reader.facts().get('reader_dtype')})"
        plot(rows, metrics[0], stage / "position", title)
        write_manifest(stage, command="pipeline.position", config=vars(args), seed=args.seed, sources=dataset.sources,
                       timings=timings, extra={"reader": reader.facts()})
        write_json(stage / "position.json", summary)
    _print(rows, metrics, summary)
    return 0


def _print(rows: list[dict], metrics: list[str], summary: dict) -> None:
    m = metrics[0]
    print(f"{summary['questions']} questions; {m} (95% interval) by position")
    for r in rows:
        print(f"  {r['setting']:18s} pos {r['position']:2d}  {r[m]:.3f} [{r[f'{m}_lo']:.3f}, {r[f'{m}_hi']:.3f}]  "
              f"prompt tokens {r['mean_prompt_tokens']:.0f}")
    for setting, s in summary["shape"].items():
        print(f"  {setting}: first {s['first']:.3f}, worst middle {s['worst_middle']:.3f} (pos {s['worst_middle_position']}),"
              f" last {s['last']:.3f} (pos {s['last_position']}); p first>middle {s['p_first_vs_middle']}, last>middle {s['p_last_vs_middle']}")


run = main_guard(main)

if __name__ == "__main__":
    sys.exit(run())
