"""Every selector x retriever kind x data-set kind through ``pipeline.run`` and ``pipeline.sweep``.

Guards the class of bug where a combination fails through the command while
the unit tests of its parts pass (``--selector ordinal`` once failed in
pipeline.run).  The commands are called in-process on a tiny slice built here
from ../shared/data (nothing is copied into the repository):

* ``reqa_squad``: a data dir with SQuAD dev = its first 2 articles and train =
  the first 3 articles of the reconstructed train file (``--limit 12
  --train-limit 40``);
* ``beir:scifact``: 200 SciFact docs (every doc judged for the first 10 test
  and 20 train queries, plus fillers) in BEIR layout under the same data dir;
* ``open:``: a DPR-style ``psgs_w100.tsv`` (100-word passages of the first
  SQuAD dev and train articles, ~140 passages) and ``{split}.qa.csv`` question
  files (12 dev, 30 train questions).

Selectors: top:3, threshold:0.8, ordinal, oracle.  Retrievers: bm25, dense,
rrf:bm25+dense, route:bm25+dense, mrrank:bm25+dense (the learned ones fitted
on 100 training questions: ``--fusion-opt max_train_queries=100``).  One
module-wide QA_CACHE_DIR, so BM25 indexes and embeddings are built once per
corpus, and one read cache per data set.  ``-m "not slow"`` keeps one
pipeline.run cell per selector and per retriever kind, the reqa sweeps of
bm25 and route and the refusals.

Every cell either runs (exit 0, sane metrics.json / summary.json) or refuses
with exactly one ``error:`` line and exit 2.  The refusals and notes, which
this table documents:

====================  ====================  =========  ===========================================================
command               data set              cells      outcome
====================  ====================  =========  ===========================================================
pipeline.run          beir:NAME             all        exit 0; stderr note ``beir:scifact: reader stage skipped:
                      (no answer strings)                  this BEIR/MTEB retrieval set has relevance judgements but
                                                           no answer strings; only retrieval metrics (...) are
                                                           reported``; metrics.json has retrieval (BEIR nDCG@10...)
                                                           and no reading; no selector.json
pipeline.sweep        beir:NAME             all        exit 2: ``error: dataset 'beir:scifact' has no answer
                                                           strings: a reading sweep needs answers``
pipeline.sweep        open: (questions      xR corpus  exit 2: ``error: --corpus-sizes x1: a noise ratio needs
                      without known gold    sizes      gold rows, and these questions have no known gold
                      passages)                        passages; use counts (10k), fractions (0.1) or all``;
                                                           the open sweeps here run on ``--corpus-sizes 50,all``
====================  ====================  =========  ===========================================================

The sweep's selector axis is internal (threshold grid, ordinal, oracle,
top:n; ``--selector SPEC`` adds others, tests/test_plugins.py): each sweep cell checks that every family is in summary.json's regret
block and that ordinal was fitted at every level.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DATA, READER

SCIFACT = DATA / "scifact"


# ------------------------------------------------------------------ tiny data
def write_reqa_dir(root: Path) -> Path:
    """A data dir laid out like ../shared/data: SQuAD dev (first 2 articles) and train (first 3 articles)."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        dev = json.loads(z.read("dev-v1.1.json"))
    with gzip.open(DATA / "squad" / "train-v1.1.reconstructed.json.gz", "rt", encoding="utf-8") as f:
        train = json.load(f)
    (root / "squad").mkdir(parents=True)
    (root / "squad" / "dev-v1.1.json").write_text(json.dumps({"version": "1.1", "data": dev["data"][:2]}), encoding="utf-8")
    (root / "squad" / "train-v1.1.json").write_text(json.dumps({"version": "1.1", "data": train["data"][:3]}), encoding="utf-8")
    return root


def write_beir_dir(root: Path, n_test: int = 10, n_train: int = 20, n_docs: int = 200) -> Path:
    """ROOT/scifact (where ``beir:scifact`` looks under a data dir): every doc judged for the first test/train queries, plus filler docs up to ``n_docs``."""
    out = root / "scifact"
    (out / "qrels").mkdir(parents=True)
    judged: set[str] = set()
    wanted_queries: set[str] = set()
    for split, n in (("test", n_test), ("train", n_train)):
        with open(SCIFACT / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
            lines = f.read().splitlines()
        keep, queries = [lines[0]], []
        for line in lines[1:]:
            qid, doc, _ = line.split("\t")
            if qid not in queries:
                if len(queries) == n:
                    break
                queries.append(qid)
            keep.append(line)
            judged.add(doc)
        wanted_queries.update(queries)
        (out / "qrels" / f"{split}.tsv").write_text("\n".join(keep) + "\n", encoding="utf-8")
    docs = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["_id"] in judged or len(docs) < n_docs - len(judged):
                docs.append(line if line.endswith("\n") else line + "\n")
    (out / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        queries = [line for line in f if json.loads(line)["_id"] in wanted_queries]
    (out / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    return root


def write_open_files(root: Path, n_dev: int = 12, n_train: int = 30) -> str:
    """A DPR-style ``psgs_w100.tsv`` (100-word passages of the first SQuAD dev and train articles) and
    ``{dev,train}.qa.csv`` (first question of a paragraph); returns the ``open:`` spec."""
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        dev = json.loads(z.read("dev-v1.1.json"))["data"][:1]
    with gzip.open(DATA / "squad" / "train-v1.1.reconstructed.json.gz", "rt", encoding="utf-8") as f:
        train = json.load(f)["data"][:1]
    root.mkdir(parents=True, exist_ok=True)
    tsv = root / "psgs_w100.tsv"
    pid = 1
    with open(tsv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["id", "text", "title"])
        for article in dev + train:
            words = " ".join(p["context"] for p in article["paragraphs"]).split()
            for lo in range(0, len(words), 100):
                w.writerow([str(pid), " ".join(words[lo: lo + 100]), article["title"].replace("_", " ")])
                pid += 1
    for split, articles, n in (("dev", dev, n_dev), ("train", train, n_train)):
        rows = []
        paras = [p for a in articles for p in a["paragraphs"]]
        step = max(1, len(paras) // n)
        for para in paras[::step][:n]:
            qa = para["qas"][0]
            answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
            rows.append(f"{qa['question'].replace(chr(9), ' ')}\t{answers!r}\n")
        (root / f"{split}.qa.csv").write_text("".join(rows), encoding="utf-8")
    return f"open:{tsv}+{root}/{{split}}.qa.csv"


# ---------------------------------------------------------------- the grid
RETRIEVERS = {
    "bm25": "bm25",
    "dense": "dense",
    "rrf": "rrf:bm25+dense",
    "route": "route:bm25+dense",
    "mrrank": "mrrank:bm25+dense",
}
SELECTORS = ["top:3", "threshold:0.8", "ordinal", "gap:8,2", "rlt:8", "confidence:5", "oracle"]
DATASETS = ["reqa", "beir", "open"]
LEARNED_RETRIEVERS = {"route", "mrrank"}

# pipeline.run cells that run without -m slow: every selector and every retriever kind at least once
FAST_RUN = {
    ("reqa", "bm25", "top:3"),
    ("reqa", "dense", "threshold:0.8"),
    ("reqa", "rrf", "ordinal"),
    ("reqa", "route", "oracle"),
    ("reqa", "mrrank", "ordinal"),
    ("open", "bm25", "ordinal"),
    ("reqa", "bm25", "gap:8,2"),
    ("reqa", "dense", "rlt:8"),
    ("open", "bm25", "confidence:5"),
    ("beir", "bm25", "top:3"),
}
FAST_SWEEP = {("reqa", "bm25"), ("reqa", "route"), ("beir", "bm25")}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Tiny data sets, ONE cache (BM25 indexes, embeddings, corpus stores) and one read cache per data set."""
    root = tmp_path_factory.mktemp("surfaces")
    data = root / "data"
    write_reqa_dir(data)
    write_beir_dir(data)
    open_spec = write_open_files(root / "open")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QA_CACHE_DIR", str(root / "cache"))
        yield {
            "root": root,
            "flags": {
                "reqa": ["--dataset", "reqa_squad", "--data-dir", str(data), "--limit", "12", "--train-limit", "40"],
                "beir": ["--dataset", "beir:scifact", "--data-dir", str(data), "--split", "test"],
                "open": ["--dataset", open_spec, "--limit", "12", "--train-limit", "30"],
            },
        }


def _call(main, argv, capfd):
    capfd.readouterr()  # drop what earlier cells printed
    rc = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return rc, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def _cells(fast: set, *axes):
    import itertools

    for cell in itertools.product(*axes):
        marks = () if cell in fast else (pytest.mark.slow,)
        yield pytest.param(*cell, marks=marks, id="-".join(cell))


def retriever_flags(retriever: str) -> list[str]:
    flags = ["--retriever", RETRIEVERS[retriever]]
    if retriever in LEARNED_RETRIEVERS:  # fit on 100 training questions, not the whole train split
        flags += ["--fusion-opt", "max_train_queries=100"]
    return flags


def check_learned_retriever(saved: Path, retriever: str) -> None:
    """The fitted router / re-ranker is saved with the run, and it learned something from the training split."""
    config = json.loads((saved / "config.json").read_text())
    if retriever == "route":
        # training queries whose gold one member ranks better than the other; 0 = fitted on no signal
        assert config["n_routed_queries"] > 0 and config["has_model"], {k: config[k] for k in config if k != "feature_names"}
    else:
        assert (saved / "model.pt").is_file()


# ------------------------------------------------------------- pipeline.run
def _run_argv(env, dataset, retriever, selector, out):
    return [*env["flags"][dataset], *retriever_flags(retriever), "--depth", "20", "--selector", selector,
            "--reader", READER, "--threads", "1", "--metrics", "em,f1", "--reader-batch-size", "8",
            "--read-cache", env["root"] / f"reads-{dataset}", "--out", out]


@pytest.mark.parametrize("dataset,retriever,selector", list(_cells(FAST_RUN, DATASETS, RETRIEVERS, SELECTORS)))
def test_run_cell(env, capfd, dataset, retriever, selector):
    from pipeline.run import main as run_main
    from selection import parse_selector

    out = env["root"] / "runs" / f"{dataset}-{retriever}-{selector.replace(':', '_')}"
    rc, stdout, err = _call(run_main, _run_argv(env, dataset, retriever, selector, out), capfd)
    assert rc == 0 and not error_lines(err), err[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["retriever"] == RETRIEVERS[retriever] and metrics["corpus_size"] > 0
    if retriever in LEARNED_RETRIEVERS:
        check_learned_retriever(out / "retriever", retriever)
    if dataset == "beir":
        # no answer strings: one note, the reader stage is skipped, retrieval is scored
        from data.beir import NO_ANSWERS_MESSAGE

        assert "note: " + NO_ANSWERS_MESSAGE.format(name="beir:scifact") in err.splitlines()
        assert "reading" not in metrics and not (out / "selector.json").exists()
        beir = metrics["retrieval"]["beir"]
        assert beir and all(0.0 <= v <= 1.0 for v in beir.values()), beir
        assert beir["nDCG@10"] > 0  # SciFact's judged docs are easy to find among 300
        return
    reading = metrics["reading"]
    spec = parse_selector(selector).spec
    assert reading["selector"] == spec
    assert reading["questions"] == 12
    assert 0.0 <= reading["em"] <= reading["f1"] <= 1.0, reading
    assert reading["mean_n"] >= 1, reading  # every question read something (answers exist)
    if selector == "top:3":
        assert reading["mean_n"] == 3
    else:
        assert reading["mean_n"] <= min(parse_selector(selector).max_depth or 20, 20)  # --depth 20
    saved = json.loads((out / "selector.json").read_text())["selector"]
    assert saved["spec"] == spec and saved["method"] == selector.split(":")[0]
    if selector == "ordinal":  # fitted on the training split
        fitted = saved["fitted"]
        assert fitted and len(fitted["coef"]) == parse_selector(selector).tau and fitted["n_train"] >= 2, fitted
    elif selector.startswith(("rlt", "confidence")):  # fitted on the training split (confidence: on its reads)
        fitted = saved["fitted"]
        assert fitted and fitted["n_train"] >= 2, fitted
        costs = [json.loads(line) for line in (out / "costs.jsonl").read_text().splitlines()]
        assert sum(c["passages_read"] for c in costs) / len(costs) == pytest.approx(reading["mean_n"])
    else:
        assert saved["fitted"] == {}
    preds = json.loads((out / "predictions.json").read_text())
    assert len(preds) == 12


# ----------------------------------------------------------- pipeline.sweep
def _sweep_argv(env, dataset, retriever, out, sizes="x1,all"):
    return [*env["flags"][dataset], *retriever_flags(retriever), "--reader", READER,
            "--n", "1-3", "--corpus-sizes", sizes, "--seeds", "1", "--depth", "10",
            "--selector", "gap:3,1", "--selector", "rlt:3", "--selector", "confidence:3",
            "--metrics", "em,f1", "--no-plots", "--bootstrap", "50", "--reader-batch-size", "8",
            "--read-cache", env["root"] / f"reads-{dataset}", "--out", out]


# open: questions have no known gold passage (gold = answer-bearing passages found by retrieval),
# so xR noise ratios are refused there and the sweep runs on counts
SWEEP_SIZES = {"reqa": "x1,all", "open": "50,all", "beir": "x1,all"}


@pytest.mark.parametrize("dataset,retriever", list(_cells(FAST_SWEEP, DATASETS, RETRIEVERS)))
def test_sweep_cell(env, capfd, dataset, retriever):
    from pipeline.sweep import main as sweep_main

    out = env["root"] / "sweeps" / f"{dataset}-{retriever}"
    rc, stdout, err = _call(sweep_main, _sweep_argv(env, dataset, retriever, out, SWEEP_SIZES[dataset]), capfd)
    if dataset == "beir":
        assert rc == 2 and error_lines(err) == [
            "error: dataset 'beir:scifact' has no answer strings: a reading sweep needs answers"], err[-3000:]
        assert not (out / "summary.json").exists()
        return
    assert rc == 0 and not error_lines(err), err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["questions"] == 12 and summary["n_max"] == 3
    sizes = summary["corpus_sizes"]
    assert len(sizes) == 2 and sizes[0] < sizes[1] == summary["pool_rows"]
    regret = summary["regret"]
    families = {"best_fixed": r"top:[123]", "best_threshold": r"threshold:0\.\d+,3", "ordinal": r"ordinal:3",
                "oracle": r"oracle"}
    for family, pattern in families.items():
        assert re.fullmatch(pattern, regret[family]["system"]), (family, regret[family])
        assert math.isfinite(regret[family]["regret"])
        if family != "oracle":  # regret against the best non-oracle system
            assert regret[family]["regret"] >= 0
    systems = summary["em_by_size"]
    assert {"top:1", "top:2", "top:3", "ordinal:3", "gap:3,1", "rlt:3,0.01", "confidence:3", "oracle"} <= set(systems)
    for family in ("gap", "rlt", "confidence"):  # the new selectors have their regret and their cost
        assert regret["by_family"][family]["regret"] >= 0
        for size in sizes:
            saving = summary["cost"]["by_size"][str(size)]["savings"][regret["by_family"][family]["system"]]
            assert 1 <= saving["mean_passages"] <= 3 and (saving["fixed_n"] == "" or 1 <= saving["fixed_n"] <= 3), saving
    assert all(0.0 <= v <= 1.0 for ems in systems.values() for v in ems if v == v), systems
    assert all(len(ems) == 2 for ems in systems.values())
    # the ordinal selector was fitted at every level (on training questions, τ = n_max)
    levels = sorted((out / "levels").glob("size*-seed1.json"))
    assert len(levels) == 2
    for level in levels:
        info = json.loads(level.read_text())["info"]
        fitted = info["ordinal"]
        assert fitted["spec"] == "ordinal:3" and len(fitted["fitted"]["coef"]) == 3, (level.name, fitted)
        assert info["fitted"]["confidence:3"]["fitted"]["n_train"] >= 2 and info["fitted"]["rlt:3,0.01"]["fitted"], info["fitted"]


def test_sweep_refuses_noise_ratios_on_an_open_set(env, capfd):
    from pipeline.sweep import main as sweep_main

    out = env["root"] / "sweeps" / "open-x1"
    rc, _, err = _call(sweep_main, _sweep_argv(env, "open", "bm25", out, "x1,all"), capfd)
    assert rc == 2 and error_lines(err) == [
        "error: --corpus-sizes x1: a noise ratio needs gold rows, and these questions have no known gold passages;"
        " use counts (10k), fractions (0.1) or all"], err[-3000:]
