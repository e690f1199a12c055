"""Retrieve, select, read and score: ``python -m pipeline.run``.

Without ``--reader`` it evaluates retrieval only (ReQA MRR/R@k, plus BEIR's
nDCG@10/MRR@10/R@100/R@1000 for BEIR/MTEB sets).  With a reader it selects n
passages per question (``--selector``), reads them and scores the answers
(EM, F1, ROUGE-L, METEOR, optionally BERT-F1).

Outputs in ``--out DIR``: metrics.json, run.trec (top 100), manifest.json and,
with a reader, predictions.json (SQuAD-style id -> answer), details.jsonl and
selector.json.  They are written together at the end (metrics.json last): a
run that fails or is killed leaves none of them half-written.

Long stages resume: corpus embeddings are cached in shards and reads in
``<out>/reads``, so rerunning the same command after a crash skips the work
already done and writes byte-identical outputs (timings only go to
manifest.json).  ``--engine ray`` runs encoding, reading and BM25 search on a
Ray cluster (:mod:`pipeline.ray_engine`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from data.errors import UserError
from data.io import write_json
from pipeline.cli import (
    Timer,
    add_reader_options,
    add_retriever_options,
    add_source_args,
    dense_index_options,
    dense_prompt_options,
    jsonable_config,
    main_guard,
    make_out_dir,
    parse_with_config,
    print_table,
    retrieval_levels,
    write_manifest,
)

TREC_DEPTH = 100
METRICS_SCALE = "fraction"  # every metric in metrics.json lies in [0, 1] (EM and F1 were percent before)
PERCENT_METRICS = ("em", "f1", "rouge_l", "meteor", "bert_f1", "answer_recall")  # printed as percent
LEARNED_FUSION = ("route", "mrrank")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line (via ``main_guard``), not usage text."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pipeline.run", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="YAML or TOML file with any of these flags")
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default="reqa_squad", help="reqa_squad, reqa_nq, squad_open, beir:NAME, mteb:NAME, iapp_wiki_qa_squad, squad_file:PATH")
    add_source_args(g)
    g.add_argument("--limit", type=int, help="evaluate only the first N questions")
    g = p.add_argument_group("retrieval")
    g.add_argument("--retriever", default="bm25", help="bm25, dense[:MODEL], or METHOD:a+b (rrf, fuse-minmax, fuse-zscore, fuse-sum, route, route-stat, mrrank)")
    g.add_argument("--depth", type=int, default=1000, help="results retrieved per query (metrics are computed within it)")
    add_retriever_options(g)
    g.add_argument("--encoder-token-budget", type=int, default=None,
                   help="padded tokens per encoder batch (default: 2048 on the CPU, 16384 on CUDA; halved on CUDA out-of-memory)")
    g.add_argument("--train-split", default="train", help="split that learned retrievers/selectors are fitted on")
    g.add_argument("--train-limit", type=int, default=5000, help="questions of the training split used for fitting selectors")
    g = p.add_argument_group("reading")
    g.add_argument("--reader", help="QA checkpoint path or alias (bert-base, bert-large, distilbert); omit for retrieval only")
    g.add_argument("--selector", default="top:5", help="top:N, threshold:THETA[,TAU], ordinal[:TAU], oracle")
    g.add_argument("--read-unit", default="sentence", choices=["sentence", "paragraph"])
    add_reader_options(g)
    g.add_argument("--metrics", default="em,f1,rouge_l,meteor,bert_f1", help="answer metrics (em, f1, rouge_l, meteor, bert_f1)")
    g.add_argument("--bertscore-model", help="BERTScore model name or path (default roberta-large for English, "
                                             "bert-score's multilingual default otherwise; offline: all-MiniLM-L6-v2)")
    g.add_argument("--bertscore-layers", type=int, help="BERTScore layer")
    g.add_argument("--bertscore-rescale", action="store_true", help="rescale BERT-F1 with bert-score's baseline for the model")
    g = p.add_argument_group("run")
    g.add_argument("--out", help="output directory (default: a new directory under runs/)")
    g.add_argument("--device", default="auto", help="auto, cpu or cuda[:i]")
    g.add_argument("--threads", type=int, help="CPU threads for torch (default: the cores this process may use)")
    g.add_argument("--seed", type=int, default=13)
    g = p.add_argument_group("engine")
    g.add_argument("--engine", default="local", help="local (this process) or ray (encoding, reading and BM25 search on Ray)")
    g.add_argument("--ray-address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray instance)")
    g.add_argument("--ray-actors", type=int, default=2, help="actors per encoder/reader pool (and BM25 query blocks)")
    g.add_argument("--ray-gpus-per-actor", type=float, default=0.0, help="GPUs each encoder/reader actor reserves")
    g.add_argument("--ray-cpus-per-actor", type=float, default=1.0, help="CPUs each actor or BM25 task reserves")
    return p


def _fusion_options(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UserError(f"--fusion-opt {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def retriever_options(args) -> dict:
    dense = {"field": args.dense_field, "index_type": args.dense_index, "device": args.device,
             "token_budget": args.encoder_token_budget}
    if args.encoder:
        dense["model"] = args.encoder
    dense.update(dense_prompt_options(args))
    dense.update(dense_index_options(args), seed=args.seed)  # the FAISS training sample follows --seed
    bm25 = {"k1": args.bm25_k1, "b": args.bm25_b, "field": args.bm25_field}
    if getattr(args, "bm25_index", None):
        bm25["index_path"] = args.bm25_index
    fusion = _fusion_options(args.fusion_opt)
    if args.retriever.split(":", 1)[0] in LEARNED_FUSION:
        fusion.setdefault("seed", str(args.seed))  # learned fusers follow the run's --seed
    return {"bm25": bm25, "dense": dense, "fusion": fusion}


def language_options(dataset, options: dict) -> dict:
    """Per-language retriever settings (Thai: pre-tokenized BM25)."""
    if dataset.corpus.language == "th":
        from data.thai import thai_word_tokens

        options = dict(options)
        options["bm25"] = dict(options["bm25"], pretokenize=thai_word_tokens)
    return options


from data.types import limit_queries  # noqa: E402,F401 - it lives in the data layer (pipeline.reading and pipeline.export use it too)


def write_trec(path: Path, ranking, queries, corpus, tag: str, depth: int = TREC_DEPTH) -> None:
    """Standard TREC run lines: ``qid Q0 docid rank score tag``, one qid per unique question.

    The ids are those of :mod:`eval.qrels` (the ``qrels.tsv``/``qrels.trec``/``queries.jsonl``
    written next to it); a question's ranking is that of its first query input.
    """
    from eval.qrels import question_groups
    from retrievers.trec import write_trec_run

    groups = question_groups(queries)
    write_trec_run(path, ranking.subset(groups.rows).top(depth), groups.ids, corpus.ids, tag)


def check_args(args) -> None:
    """Flag values that are wrong whatever the data (checked before any work)."""
    from pipeline.engine import ENGINES

    for flag, value, low in (("--depth", args.depth, 1), ("--limit", args.limit, 1), ("--max-length", args.max_length, 8),
                             ("--threads", args.threads, 1),
                             ("--reader-batch-size", args.reader_batch_size, 1), ("--encoder-token-budget", args.encoder_token_budget, 1),
                             ("--reader-token-budget", args.reader_token_budget, 1), ("--ray-actors", args.ray_actors, 1)):
        if value is not None and value < low:
            raise UserError(f"{flag} must be >= {low} (got {value})")
    if args.engine not in ENGINES:
        raise UserError(f"--engine {args.engine!r}: use {' or '.join(ENGINES)}")
    if args.reader and args.reader_token_budget is not None and args.reader_token_budget < args.max_length:
        raise UserError(f"--reader-token-budget {args.reader_token_budget}: must be at least --max-length {args.max_length}")
    device = str(args.device)
    if device not in ("auto", "cpu", "mps", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise UserError(f"--device {device!r}: use auto, cpu or cuda[:i]")
    if device.startswith("cuda") and args.engine == "local":
        from retrievers.encoder import resolve_device

        resolve_device(device)  # a GPU must be here
    if args.read_cache and Path(args.read_cache).exists() and not Path(args.read_cache).is_dir():
        raise UserError(f"--read-cache {args.read_cache}: not a directory")
    _fusion_options(args.fusion_opt)


@main_guard
def main(argv: list[str] | None = None) -> int:
    args = parse_with_config(build_parser(), argv)
    check_args(args)
    from pipeline.engine import make_engine

    engine = make_engine(args)
    if hasattr(engine, "check"):
        engine.check()
    try:
        return run(args, engine)
    finally:
        engine.close()


def run(args, engine) -> int:
    """One run (after the flags were checked); see the module docstring."""
    from data.io import staged_outputs
    from data.registry import load_dataset
    from pipeline import stages

    timer = Timer()
    notes: list[str] = []
    np.random.seed(args.seed)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = make_out_dir(args.out, f"{args.dataset}-{args.split}-{args.retriever}" + (f"-{Path(args.reader).name}" if args.reader else ""))
    from selection import parse_selector

    selector = parse_selector(args.selector) if args.reader else None  # bad specs fail before any work
    stages.build_retriever(args.retriever, retriever_options(args))  # so do bad retriever specs and options
    reader = None
    if args.reader:
        from pipeline.reading import make_reader

        with timer("load_reader"):
            reader = prepare_reader(make_reader(args), engine)  # a bad model name/path fails before retrieval
    with timer("load_data"):
        dataset = load_dataset(args.dataset, args.split, data_dir=args.data_dir, data_file=args.data_file,
                               skip_bad_records=args.skip_bad_records, answer_match=getattr(args, "answer_match", None),
                               language=getattr(args, "language", None))
        dataset = limit_queries(dataset, args.limit)
    depth = args.depth
    if depth > len(dataset.corpus):
        depth = len(dataset.corpus)
        notes.append(f"--depth {args.depth} is more than the {len(dataset.corpus)} candidates in the corpus: every query ranks all {depth}")
        print(f"note: {notes[-1]}", file=sys.stderr)
    options = language_options(dataset, retriever_options(args))

    def new_retriever():
        return engine.adapt_retriever(stages.build_retriever(args.retriever, options))

    retriever = new_retriever()
    train = None
    from retrievers.fusion import needs_fit

    if needs_fit(retriever) or (selector is not None and getattr(selector, "learned", False)):
        with timer("load_train"):
            train = load_dataset(args.dataset, args.train_split, data_dir=args.data_dir,
                                 skip_bad_records=args.skip_bad_records, answer_match=getattr(args, "answer_match", None),
                                 language=getattr(args, "language", None))
    if args.reader and not dataset.queries.has_answers:
        from data.beir import NO_ANSWERS_MESSAGE

        print(NO_ANSWERS_MESSAGE.format(name=dataset.name), file=sys.stderr)
        args.reader = None
    with timer("retrieve"):
        ranking = stages.retrieve(retriever, dataset, depth, train=train)
    with timer("retrieval_metrics"):
        metrics = {"dataset": dataset.name, "split": dataset.split, "retriever": args.retriever,
                   "corpus_size": len(dataset.corpus), "level": dataset.level, "scale": METRICS_SCALE}
        per_query: dict = {}
        metrics["retrieval"] = retrieval_metrics(ranking, dataset, per_query)
    saved = {}
    if hasattr(retriever, "to_dict"):
        saved["retriever"] = retriever.to_dict()
    from retrievers.dense import default_shard_rows

    extra: dict = {"engine": engine.info(), "shard_rows": default_shard_rows()}
    from retrievers.encoders import encoder_infos

    if encoder_infos(retriever):
        extra["encoders"] = encoder_infos(retriever)  # model, identity, prompts of every dense member
    shards = embedding_shard_counts(retriever)
    if shards:
        extra["embedding_shards"] = shards
    indexes = index_infos(retriever)
    if indexes:
        extra["indexes"] = indexes  # what each member searched: Lucene index and its build, FAISS index, refine
    if args.skip_bad_records:
        extra["skipped_records"] = skipped_records(dataset)
        if train is not None:
            extra["train_skipped_records"] = skipped_records(train)
    if notes:
        extra["notes"] = notes
    with staged_outputs(out) as stage:  # nothing reaches --out unless every file was written
        write_trec(stage / "run.trec", ranking, dataset.queries, dataset.corpus, tag=args.retriever)
        from eval.qrels import write_question_files

        write_question_files(stage, dataset.queries, dataset.corpus)  # the qrels run.trec is scored against
        if args.reader:
            from pipeline.reading import run_reader

            reading = run_reader(args, dataset, ranking, selector, train, reader=reader, timer=timer, out=out,
                                 retriever_factory=new_retriever, engine=engine, stage=stage)
            metrics["reading"] = reading["metrics"]
            per_query["reading"] = reading["per_query"]
            extra["reading"] = reading["info"]
            saved["selector"] = selector.to_dict()
        if saved:
            write_json(stage / "selector.json" if "selector" in saved else stage / "learned.json", saved)
        if callable(getattr(retriever, "save", None)):
            retriever.save(stage / "retriever")  # fitted router / re-ranker, loadable with its load()
        metrics["ci95"] = headline_intervals(per_query, seed=args.seed)
        write_per_query(stage / "per_query.jsonl", per_query)
        write_json(stage / "metrics.json", metrics)
        sources = dict(dataset.sources)
        if train is not None:
            sources.update({f"train:{k}": v for k, v in train.sources.items()})
        write_manifest(stage, command="pipeline.run", config=jsonable_config(args), seed=args.seed, sources=sources,
                       timings=timer.timings, extra=extra)
    _print_summary(metrics, out)
    return 0


def prepare_reader(reader, engine):
    """Load the reader here (local engine), or only check it (Ray: the actors load it)."""
    prepare = getattr(engine, "prepare_reader", None)
    if prepare is not None:
        return prepare(reader)
    return reader.load()


def embedding_shard_counts(retriever) -> dict:
    """Corpus-embedding shards computed and reused, summed over the dense retrievers of a run."""
    total: dict[str, int] = {}
    for r in _with_members(retriever):
        for k, v in (getattr(r, "encode_stats_", None) or {}).items():
            total[k] = total.get(k, 0) + int(v)
    return total


def _with_members(retriever):
    """``retriever`` and the members of fused ones, breadth first."""
    stack = [retriever]
    while stack:
        r = stack.pop(0)
        yield r
        stack.extend(getattr(r, "members", None) or [])


def index_infos(retriever) -> list[dict]:
    """The index facts of every BM25 (``describe()``) and dense (``index_info_``) retriever of a run, members included."""
    import json

    out = []
    for r in _with_members(retriever):
        facts = getattr(r, "index_info_", None) or (r.describe() if callable(getattr(r, "describe", None)) else None)
        if facts:
            out.append(json.loads(json.dumps({"retriever": getattr(r, "name", type(r).__name__), **facts}, default=str)))
    return out


def skipped_records(dataset) -> int | None:
    """Records dropped by ``--skip-bad-records`` in the dataset's SQuAD-format source files.

    Counted by validating the source files again (the dataset cache keeps the
    built dataset, not the count); ``None`` when the sources are not SQuAD files.
    """
    from data.squad import load_squad_json

    if "skipped_records" in dataset.sources:
        return int(dataset.sources["skipped_records"])
    count, seen = 0, False
    for key in dataset.sources:
        path = Path(str(key))
        if not path.is_file():
            continue
        stats: dict = {}
        try:
            load_squad_json(path, skip_bad_records=True, stats=stats)
        except UserError:
            continue  # not a SQuAD-format file
        seen = True
        count += stats.get("skipped_records", 0)
    return count if seen else None


def retrieval_metrics(ranking, dataset, per_query: dict | None = None) -> dict:
    """ReQA (and BEIR) means; ``per_query`` receives ``{"ids": [...], "rr": [...], ...}`` per unique question."""
    from eval.retrieval_metrics import reqa_metrics

    result = {"reqa": reqa_metrics(ranking, dataset.queries, dataset.corpus)}
    beir_values: dict = {}
    if dataset.queries.gold_grades is not None:
        from eval.beir_metrics import beir_metrics

        result["beir"] = beir_metrics(ranking, dataset.queries, corpus_ids=dataset.corpus.ids, per_query_out=beir_values)
    if per_query is not None:
        per_query["retrieval"] = retrieval_per_query(ranking, dataset, beir_values)
    if dataset.queries.has_answer is not None:  # open-domain: DPR top-k accuracy (pipeline.stages.open_metrics)
        from pipeline.stages import open_metrics

        result.update(open_metrics(ranking, dataset))
    return result


def retrieval_per_query(ranking, dataset, beir_values: dict) -> dict:
    """Per unique question (``eval.qrels`` ids): ReQA ``rr``/``r@k``/``paragraph_rr``, BEIR ``ndcg@10``... when graded."""
    from eval.qrels import question_groups
    from eval.retrieval_metrics import reqa_per_question

    groups = question_groups(dataset.queries)
    table = {"ids": groups.ids, **reqa_per_question(ranking, dataset.queries, dataset.corpus)}
    for name, values in beir_values.items():  # per query input; BEIR has one input per question
        table[name.lower()] = np.asarray(values)[groups.rows]
    return table


# per_query.jsonl name -> the metrics.json value it averages to (its bootstrap interval goes in "ci95")
HEADLINE = {
    "rr": "retrieval.reqa.sentence.MRR", "r@1": "retrieval.reqa.sentence.R@1", "r@5": "retrieval.reqa.sentence.R@5",
    "r@10": "retrieval.reqa.sentence.R@10", "paragraph_rr": "retrieval.reqa.paragraph.MRR",
    "ndcg@10": "retrieval.beir.nDCG@10", "mrr@10": "retrieval.beir.MRR@10", "r@100": "retrieval.beir.R@100",
    "r@1000": "retrieval.beir.R@1000",
}
READING_HEADLINE = ("em", "f1", "rouge_l", "meteor", "bert_f1", "answer_recall")


def headline_intervals(per_query: dict, seed: int = 0, n_resamples: int = 1000) -> dict:
    """95% percentile-bootstrap intervals over questions of the headline means (``eval.significance``)."""
    from eval.significance import bootstrap_ci

    out: dict = {"method": f"percentile bootstrap over questions, {n_resamples} resamples, seed {seed}"}
    for name, key in HEADLINE.items():
        if name in per_query.get("retrieval", {}):
            out[key] = list(bootstrap_ci(per_query["retrieval"][name], n_resamples, seed))
    for name in READING_HEADLINE:
        if name in per_query.get("reading", {}):
            out[f"reading.{name}"] = list(bootstrap_ci(per_query["reading"][name], n_resamples, seed))
    return out


def write_per_query(path: Path, per_query: dict) -> None:
    """``per_query.jsonl``: one row per question, ``id`` + every per-question metric (fractions; null = not scored).

    Retrieval values are keyed by the question ids of ``run.trec``/``qrels.tsv``
    (:mod:`eval.qrels`); answer values by the dataset question id of
    predictions.json.  The two coincide except for a question text asked of
    several paragraphs (31 on SQuAD v1.1 dev): its later ids carry answer
    values only.  Means over the non-null values of a column are metrics.json's.
    """
    from data.io import write_jsonl

    rows: dict[str, dict] = {}
    for part in ("reading", "retrieval"):
        table = per_query.get(part)
        if not table:
            continue
        for i, qid in enumerate(table["ids"]):
            row = rows.setdefault(str(qid), {"id": str(qid)})
            for name, values in table.items():
                if name == "ids":
                    continue
                row[name] = _json_cell(values[i])
    write_jsonl(path, rows.values())


def _json_cell(v):
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    v = float(v)
    return None if np.isnan(v) else v


def _print_summary(metrics: dict, out: Path) -> None:
    r = metrics["retrieval"]["reqa"]
    rows = [("corpus", metrics["corpus_size"]), ("query inputs", r["query_inputs"]), ("questions", r["questions"])]
    for level, label in retrieval_levels(metrics):
        for k, v in r[level].items():
            rows.append((f"{label} {k}", v))
    for k, v in metrics["retrieval"].get("beir", {}).items():
        rows.append((f"beir {k}", v))
    for k, v in metrics["retrieval"].get("dpr", {}).get("accuracy", {}).items():
        rows.append((f"dpr {k} accuracy", v))
    for k, v in metrics.get("reading", {}).items():
        if k in PERCENT_METRICS and isinstance(v, (int, float)):
            rows.append((f"reader {k} (%)", round(100.0 * v, 2)))  # metrics.json keeps the fraction
        elif isinstance(v, (int, float)):
            rows.append((f"reader {k}", v))
    errors = metrics.get("reading", {}).get("errors")
    if errors:  # the headline split of wrong answers (EM 0) into its two kinds
        rows.append(("wrong answers (%)", f"{100 * errors['wrong']:.2f} = retrieval misses {100 * errors['retrieval_misses']:.2f}"
                                          f" + reading misses {100 * errors['reading_misses']:.2f}"))
    print_table(rows, title=f"{metrics['dataset']} {metrics['split']} / {metrics['retriever']} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
