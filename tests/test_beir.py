"""BEIR/MTEB loader (data.beir) and BEIR metrics (eval.beir_metrics)."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.beir import NO_ANSWERS_MESSAGE, build_beir, load_beir, load_mteb, read_beir_dir
from data.errors import UserError
from tests.conftest import DATA as DATA_DIR
from data.types import Queries
from eval.beir_metrics import beir_metrics, mrr_at_k, ndcg_at_k, recall_at_k
from retrievers.types import Ranking


def queries(gold, grades=None):
    n = len(gold)
    return Queries(
        ids=[f"q{i}" for i in range(n)],
        texts=[""] * n,
        gold=[np.asarray(g, dtype=np.int64) for g in gold],
        question_keys=[f"q{i}" for i in range(n)],
        question_ids=[f"q{i}" for i in range(n)],
        answers=[[] for _ in range(n)],
        gold_grades=None if grades is None else [np.asarray(g) for g in grades],
    )


# ------------------------------------------------------------ hand-computed
def test_metrics_on_hand_computed_cases():
    qs = queries(gold=[[2, 5], [1], []], grades=[[2, 1], [1], []])
    rk = Ranking(ids=[[5, 7, 2], [3, 4, 1], [0, 1, -1]], scores=[[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [2.0, 1.0, -np.inf]])
    # q0: DCG = 1/log2(2) + 2/log2(4) = 2; IDCG = 2/log2(2) + 1/log2(3)
    ideal0 = 2.0 + 1.0 / math.log2(3)
    np.testing.assert_allclose(ndcg_at_k(rk, qs, 10), [2.0 / ideal0, 0.5, 0.0])
    np.testing.assert_allclose(mrr_at_k(rk, qs, 10), [1.0, 1.0 / 3.0, 0.0])
    np.testing.assert_allclose(recall_at_k(rk, qs, 100), [1.0, 1.0, 0.0])
    # cutoffs: top 1 holds doc 5 (grade 1) only
    np.testing.assert_allclose(ndcg_at_k(rk, qs, 1), [1.0 / 2.0, 0.0, 0.0])
    np.testing.assert_allclose(recall_at_k(rk, qs, 2), [0.5, 0.0, 0.0])
    np.testing.assert_allclose(mrr_at_k(rk, qs, 2), [1.0, 0.0, 0.0])


def test_ties_follow_trec_eval_doc_id_descending():
    qs = queries(gold=[[0]])
    rk = Ranking(ids=[[0, 1]], scores=[[1.0, 1.0]])
    assert mrr_at_k(rk, qs, 10).tolist() == [1.0]  # ranking order kept without ids
    # trec_eval: equal scores -> doc id descending, so "b" (row 1) comes first
    assert mrr_at_k(rk, qs, 10, corpus_ids=["a", "b"]).tolist() == [0.5]
    assert mrr_at_k(rk, qs, 10, corpus_ids=["b", "a"]).tolist() == [1.0]


def test_beir_metrics_means_and_incomplete_cutoffs():
    qs = queries(gold=[[2, 5], [1], []], grades=[[2, 1], [1], []])
    pad = [-1] * 7
    ids = [[5, 7, 2] + pad, [3, 4, 1] + pad, [0, 1] + pad + [-1]]
    scores = [[3.0, 2.0, 1.0] + [-np.inf] * 7, [3.0, 2.0, 1.0] + [-np.inf] * 7, [2.0, 1.0] + [-np.inf] * 8]
    rk = Ranking(ids=ids, scores=scores)
    with pytest.warns(UserWarning, match="R@100 left out"):
        m = beir_metrics(rk, qs)
    assert set(m) == {"nDCG@10", "MRR@10"}  # a depth-10 ranking cannot give R@100 of a larger corpus
    assert m["MRR@10"] == pytest.approx((1.0 + 1.0 / 3.0) / 3)
    assert m["nDCG@10"] == pytest.approx((2.0 / (2.0 + 1.0 / math.log2(3)) + 0.5) / 3)
    # a ranking that holds the whole 8-document corpus is complete at any cutoff
    m = beir_metrics(rk, qs, corpus_ids=[f"d{i}" for i in range(8)])
    assert m["R@100"] == pytest.approx(2.0 / 3.0) and m["R@1000"] == pytest.approx(2.0 / 3.0)


# ------------------------------------------------------ against pytrec_eval
@st.composite
def judged_runs(draw):
    n_docs = draw(st.integers(2, 12))
    n_q = draw(st.integers(1, 5))
    depth = draw(st.integers(1, n_docs))
    ids, scores, gold, grades = [], [], [], []
    for _ in range(n_q):
        rows = draw(st.permutations(range(n_docs)))[:depth]
        sc = sorted(draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0]), min_size=depth, max_size=depth)), reverse=True)
        judged = draw(st.lists(st.tuples(st.integers(0, n_docs - 1), st.integers(0, 3)), max_size=6, unique_by=lambda t: t[0]))
        ids.append(rows)
        scores.append(sc)
        gold.append([d for d, g in judged if g > 0])
        grades.append([g for d, g in judged if g > 0])
    return n_docs, Ranking(ids, scores), queries(gold, grades)


@settings(max_examples=150, deadline=None)
@given(judged_runs())
def test_metrics_equal_pytrec_eval(case):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    n_docs, rk, qs = case
    doc_ids = [f"d{i:02d}" for i in range(n_docs)]
    qrels = {q: {doc_ids[r]: int(g) for r, g in zip(rows, gr)} or {"nothing": 0}
             for q, rows, gr in zip(qs.ids, qs.gold, qs.gold_grades)}
    run = {q: {doc_ids[r]: float(s) for r, s in zip(rk.ids[i], rk.scores[i])} for i, q in enumerate(qs.ids)}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3", "ndcg_cut.10", "recall.5", "recip_rank"})
    ref = ev.evaluate(run)
    np.testing.assert_allclose(ndcg_at_k(rk, qs, 3, doc_ids), [ref[q]["ndcg_cut_3"] for q in qs.ids], atol=1e-9)
    np.testing.assert_allclose(ndcg_at_k(rk, qs, 10, doc_ids), [ref[q]["ndcg_cut_10"] for q in qs.ids], atol=1e-9)
    np.testing.assert_allclose(recall_at_k(rk, qs, 5, doc_ids), [ref[q]["recall_5"] for q in qs.ids], atol=1e-9)
    # the whole run is within the cutoff, so MRR@k is trec_eval's recip_rank
    np.testing.assert_allclose(mrr_at_k(rk, qs, n_docs, doc_ids), [ref[q]["recip_rank"] for q in qs.ids], atol=1e-9)


# ------------------------------------------------------------------ loaders
def test_scifact_local_copy_counts(monkeypatch, tmp_path):
    test = load_beir("test", data_dir=None, data_file=None, arg="scifact")
    assert test.name == "beir:scifact" and test.level == "document"
    # /work/shared/data/README.md: corpus 5,183; test 300 queries / 339 qrels; train 809 / 919
    assert len(test.corpus) == 5183 and len(test.queries) == 300
    assert sum(len(g) for g in test.queries.gold) == 339
    assert all(len(g) == len(gg) and (gg >= 1).all() for g, gg in zip(test.queries.gold, test.queries.gold_grades))
    assert not test.queries.has_answers
    train = load_mteb("train", data_dir=None, data_file=None, arg="scifact")
    assert (len(train.queries), sum(len(g) for g in train.queries.gold)) == (809, 919)
    # first corpus record: _id 4983, title + "\n" + text, from the corpus store (lazy columns, not lists)
    from data.corpus_store import StoreColumn

    assert all(isinstance(c, StoreColumn) for c in (test.corpus.ids, test.corpus.texts, test.corpus.titles))
    row = 0
    assert test.corpus.ids[row] == "4983"
    title = "Microstructural development of human newborn cerebral white matter assessed in vivo by diffusion tensor magnetic resonance imaging."
    assert test.corpus.titles[row] == title
    assert test.corpus.texts[row].startswith(title + "\nAlterations of the architecture of cerebral white matter")
    assert test.corpus.bodies[row].startswith("Alterations of the architecture")
    # qrels order: the test file starts with query 1 -> doc 31715818
    assert test.queries.ids[0] == "1" and test.queries.texts[0] == "0-dimensional biomaterials show inductive properties."
    assert test.corpus.ids[int(test.queries.gold[0][0])] == "31715818"


def test_missing_split_and_offline_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="has splits: test, train"):
        load_beir("dev", data_dir=None, data_file=None, arg="scifact")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        load_mteb("test", data_dir=tmp_path, data_file=None, arg="nfcorpus")
    assert "\n" not in str(err.value) and str(tmp_path / "nfcorpus") in str(err.value)
    assert "{name}" in NO_ANSWERS_MESSAGE


def test_tiny_beir_dir_graded_qrels(tmp_path):
    d = tmp_path / "tiny"
    (d / "qrels").mkdir(parents=True)
    corpus = [{"_id": "a", "title": "Alpha", "text": "first doc"}, {"_id": "b", "title": "", "text": "second doc"},
              {"_id": "c", "text": "third doc"}]
    (d / "corpus.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in corpus).encode()))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in ("1", "2", "3")))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n2\tc\t2\n2\ta\t1\n2\tb\t0\n1\tzzz\t1\n1\tb\t1\n")
    ds = read_beir_dir(d, "test")
    assert list(ds.corpus.texts) == ["Alpha\nfirst doc", "second doc", "third doc"]  # title + "\\n" + text, as the store joins them
    assert ds.queries.ids == ["2", "1"] and ds.queries.texts == ["query 2", "query 1"]
    assert [g.tolist() for g in ds.queries.gold] == [[2, 0], [1]]
    assert [g.tolist() for g in ds.queries.gold_grades] == [[2, 1], [1]]
    assert ds.sources["qrels_unknown_docs"] == 1
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\ta\t1\n")
    with pytest.raises(UserError, match="not in the queries file"):
        read_beir_dir(d, "test")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n1\tb\n")
    with pytest.raises(UserError, match="line 3: expected 3"):
        read_beir_dir(d, "test")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n1\tb\tx\n")
    with pytest.raises(UserError, match="line 3: score 'x'"):
        read_beir_dir(d, "test")


def _store_both_ways(directory, tmp_path, monkeypatch):
    """(store read by Arrow's JSON reader or handed back, store built from the json reader's records) of a BEIR dir."""
    from data.beir import _find, read_jsonl
    from data.io import sha256_file

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "fast-cache"))
    ds = read_beir_dir(directory, "test")
    fast = ds.corpus
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "slow-cache"))
    corpus = _find(directory, "corpus.jsonl")
    slow = build_beir(read_jsonl(corpus), [{"_id": q} for q in ds.queries.ids], [(q, fast.ids[0], 1) for q in ds.queries.ids],
                      name="t", split="test", corpus_key=["file", sha256_file(corpus)]).corpus
    reader = fast.texts.store.manifest.get("reader")
    return reader, [list(c) for c in (fast.ids, fast.titles, fast.bodies)], [list(c) for c in (slow.ids, slow.titles, slow.bodies)]


def test_arrow_json_reader_stores_what_the_json_reader_keeps(tmp_path, monkeypatch):
    """beir:NAME corpora are stored by Arrow's JSON reader: the same ids, stripped titles and texts as the json
    reader's records give (SciFact, and odd whitespace), or the file is handed back to it."""
    from data.open_sources import _PY_WHITESPACE

    assert _PY_WHITESPACE == "".join(c for c in map(chr, range(0x110000)) if c.isspace())
    reader, fast, slow = _store_both_ways(DATA_DIR / "scifact", tmp_path / "scifact", monkeypatch)
    assert reader == "arrow" and fast == slow and len(fast[0]) == 5183
    d = tmp_path / "odd"
    (d / "qrels").mkdir(parents=True)
    (d / "queries.jsonl").write_text(json.dumps({"_id": "1", "text": "q"}) + "\n")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n")
    records = [{"_id": "a", "title": " \x1cAlpha\u3000", "text": "\u2028 body \x85\u200b"}, {"_id": " b ", "text": None},
               {"_id": "c", "title": None}, {"_id": "d", "title": "\t", "text": "x", "extra": {"n": [1]}}]
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    reader, fast, slow = _store_both_ways(d, tmp_path / "odd", monkeypatch)
    assert reader == "arrow" and fast == slow
    assert fast == [["a", " b ", "c", "d"], ["Alpha", "", "", ""], ["body \x85\u200b".strip(), "", "", "x"]]
    # what only the json reader decides: it builds the store
    for i, rec in enumerate(({"id": "a", "text": "x"}, {"_id": 5, "text": "x"})):
        (d / "corpus.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
        reader, fast, slow = _store_both_ways(d, tmp_path / f"back{i}", monkeypatch)
        assert reader == "python" and fast == slow and fast[0] == [str(rec.get("_id", rec.get("id")))]
    for i, rec in enumerate(({"_id": "", "text": "x"}, {"_id": None, "text": "x"})):  # (null was stored as 'None')
        (d / "corpus.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
        monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / f"bad-id{i}"))
        with pytest.raises(UserError, match="corpus.jsonl: line 1: '_id' must be a string or an integer"):
            read_beir_dir(d, "test")


def test_build_beir_rejects_duplicate_ids():
    with pytest.raises(UserError, match="id 'a' appears 2 times"):
        build_beir([{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}], [], [], name="t", split="test")


# ------------------------------------------------------ external reference
@pytest.mark.slow
def test_scifact_bm25_matches_pyserini_regression():
    """Pyserini's BEIR regression (bm25-flat, k1 0.9, b 0.4, title + text in one
    field) reports SciFact test nDCG@10 0.679 and R@100 0.925."""
    from retrievers.bm25 import BM25Retriever

    ds = load_beir("test", data_dir=None, data_file=None, arg="scifact")
    ranking = BM25Retriever(k1=0.9, b=0.4).index(ds.corpus).search(ds.queries.texts, 1000)
    m = beir_metrics(ranking, ds.queries, corpus_ids=ds.corpus.ids)
    assert m["nDCG@10"] == pytest.approx(0.679, abs=0.01)
    assert m["R@100"] == pytest.approx(0.925, abs=0.01)
