"""Retriever and fusion registries: spec strings -> the same objects as before, declared facts, plugin retrievers.

The run-facts and plugin checks run real BM25 (Lucene), the default MiniLM
encoder and the example plugin's overlap retriever over the first sentences of
ReQA SQuAD dev and the questions answered in them.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from retrievers.base import Retriever, RetrieverBase, run_facts, walk
from retrievers.bm25 import BM25Retriever
from retrievers.dense import DenseRetriever
from retrievers.fusion import FUSION_METHODS, build_fused, method_learned, needs_fit
from retrievers.mrrank import MrRankRetriever
from retrievers.registry import FUSERS, RETRIEVERS, fusion_method, make_retriever
from retrievers.routing import RouterRetriever, StatisticalRouterRetriever
from retrievers.rrf import RRFRetriever
from retrievers.score_fusion import ScoreFusionRetriever
from tests.fusion_toys import ScrambleRetriever

ROOT = Path(__file__).resolve().parent.parent
N_ROWS = 300
METHODS = ("rrf", "fuse-minmax", "fuse-zscore", "fuse-sum", "route", "route-stat", "mrrank")


# ------------------------------------------------------------------ names
def test_registries_name_the_built_in_retrievers_and_fusion_methods():
    assert RETRIEVERS.builtin_names() == ["bm25", "dense"]
    assert RETRIEVERS.group == "qa_retrieval_eval.retrievers" and FUSERS.group == "qa_retrieval_eval.fusers"
    assert RETRIEVERS.get("bm25") is BM25Retriever and RETRIEVERS.get("dense") is DenseRetriever
    assert tuple(FUSERS.builtin_names()) == METHODS == FUSION_METHODS
    classes = {name: fusion_method(FUSERS.get(name)) for name in METHODS}
    assert classes == {"rrf": (RRFRetriever, {}), "fuse-minmax": (ScoreFusionRetriever, {"method": "minmax"}),
                       "fuse-zscore": (ScoreFusionRetriever, {"method": "zscore"}),
                       "fuse-sum": (ScoreFusionRetriever, {"method": "sum"}), "route": (RouterRetriever, {}),
                       "route-stat": (StatisticalRouterRetriever, {}), "mrrank": (MrRankRetriever, {})}
    with pytest.raises(UserError, match=r"^unknown retriever 'tfidf'; use bm25, dense, dense:MODEL.* or METHOD:a\+b "
                                        r"\(METHOD: .*fuse-minmax.*mrrank"):
        make_retriever("tfidf")
    with pytest.raises(UserError, match=r"^unknown retriever 'avg:bm25\+dense'"):
        make_retriever("avg:bm25+dense")
    with pytest.raises(UserError, match=r"^unknown fusion method 'avg' \(choose from .*rrf"):
        build_fused("avg", [BM25Retriever()])


# ------------------------------------------------------------------ specs
def test_single_specs_build_the_objects_their_constructors_build():
    assert vars(make_retriever("bm25", bm25_options={"k1": 1.2, "b": 0.75, "field": "context"})) == vars(
        BM25Retriever(k1=1.2, b=0.75, field="context"))
    # bracket options are typed from the constructor and override the flags for that member only
    got = make_retriever("bm25[k1=1.5,threads=2,index_path=none]", bm25_options={"k1": 1.2, "b": 0.75})
    assert vars(got) == vars(BM25Retriever(k1=1.5, b=0.75, threads=2, index_path=None))
    assert isinstance(got.k1, float) and isinstance(got.threads, int)
    got = make_retriever("dense:/m/e5[query_prompt=query: ,passage_prompt='',nprobe=8,refine=2.5,cache=false,ef_search=64,threads=2]",
                         dense_options={"device": "cpu", "model": "ignored: the spec argument wins"})
    want = DenseRetriever(model="/m/e5", query_prompt="query: ", passage_prompt="", nprobe=8, refine=2.5, cache=False,
                          ef_search=64, device="cpu", encoder_options={"threads": 2})  # unknown keys: the encoder's
    assert vars(got) == vars(want)
    assert vars(make_retriever("dense")) == vars(DenseRetriever())
    with pytest.raises(UserError, match=r"^retriever 'bm25:x': bm25 takes no argument"):
        make_retriever("bm25:x")
    with pytest.raises(UserError, match=r"^bm25: unknown option 'kk' \(allowed: k1, b, field"):
        make_retriever("bm25[kk=1]")
    with pytest.raises(UserError, match=r"^bm25 option k1: expected a number, got 'high'"):
        make_retriever("bm25[k1=high]")
    with pytest.raises(UserError, match=r"^dense: unknown option 'hnsw_ef_search'"):
        make_retriever("dense", dense_options={"hnsw_ef_search": 64})  # renamed: ef_search


def test_options_by_kind_equal_the_old_keyword_arguments():
    spec = "rrf:bm25[b=0.5]+dense:/m/e5"
    old = make_retriever(spec, bm25_options={"k1": 1.2}, dense_options={"device": "cpu"}, fusion_options={"depth": "20"})
    new = make_retriever(spec, {"bm25": {"k1": 1.2}, "dense": {"device": "cpu"}, "fusion": {"depth": "20"}})
    assert type(old) is type(new) is RRFRetriever and old.to_dict() == new.to_dict()
    assert [vars(m) for m in old.members] == [vars(m) for m in new.members]
    assert (new.members[0].k1, new.members[0].b, new.members[1].model, new.depth) == (1.2, 0.5, "/m/e5", 20)
    # keyword arguments are laid over the mapping
    both = make_retriever("bm25", {"bm25": {"k1": 1.2, "b": 0.3}}, bm25_options={"k1": 2.0})
    assert (both.k1, both.b) == (2.0, 0.3)
    with pytest.raises(UserError, match=r"^retriever options for 'bm52': not a retriever"):
        make_retriever("bm25", {"bm52": {"k1": 1}})


def test_fused_specs_and_renamed_rrf_constant():
    rrf = make_retriever("rrf:bm25+bm25", fusion_options={"rank_constant": "10", "weights": "1,3"})
    assert isinstance(rrf, RRFRetriever) and rrf.rank_constant == 10.0 and rrf.weights == [1.0, 3.0]
    assert rrf.to_dict()["rank_constant"] == 10.0 and "k" not in rrf.to_dict()
    with pytest.raises(UserError, match=r"^rrf: unknown option 'k' \(allowed: rank_constant, depth, weights\)"):
        make_retriever("rrf:bm25+bm25", fusion_options={"k": "10"})
    zscore = make_retriever("fuse-zscore:bm25+bm25", fusion_options={"depth": "50"})
    assert isinstance(zscore, ScoreFusionRetriever) and (zscore.method, zscore.depth) == ("zscore", 50)
    with pytest.raises(UserError, match=r"^fuse-zscore: unknown option 'method'"):
        make_retriever("fuse-zscore:bm25+bm25", fusion_options={"method": "minmax"})  # fixed by the method's name
    mrrank = make_retriever("mrrank:bm25+dense", fusion_options={"seed": "3", "lexical": "false", "learning_rate": "0.01",
                                                                 "hidden": "64,32"})
    assert (mrrank.seed, mrrank.lexical, mrrank.learning_rate, mrrank.hidden) == (3, False, 0.01, [64, 32])
    with pytest.raises(UserError, match=r"^retriever 'rrf:': rrf needs members"):
        make_retriever("rrf:")


# ---------------------------------------------------------- declared facts
def test_learned_and_members_are_declared():
    for cls in (BM25Retriever, DenseRetriever, RRFRetriever, ScoreFusionRetriever, RouterRetriever,
                StatisticalRouterRetriever, MrRankRetriever):
        assert issubclass(cls, RetrieverBase)
    assert BM25Retriever().members == () and DenseRetriever().members == ()
    assert not needs_fit(BM25Retriever()) and not needs_fit(DenseRetriever())
    for method in METHODS:
        members = [BM25Retriever(), DenseRetriever()]
        fused = make_retriever(f"{method}:bm25+dense")
        assert isinstance(fused, Retriever)
        assert needs_fit(fused) is fused.learned is method_learned(method) is (method in ("route", "mrrank"))
        assert [type(m) for m in fused.members] == [BM25Retriever, DenseRetriever]
        assert isinstance(build_fused(method, members).members, list)  # the Ray engine swaps members in place
    # a retriever that only satisfies the protocol: not learned, no members, no facts
    toy = ScrambleRetriever("toy")
    assert not needs_fit(toy) and run_facts(toy) == {}
    assert [r.name for r in walk(make_retriever("rrf:bm25+dense"))] == ["rrf(bm25+dense)", "bm25", "dense"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    old = os.environ.get("QA_CACHE_DIR")
    os.environ["QA_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("QA_CACHE_DIR", None)
    else:
        os.environ["QA_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def slice_(reqa_dev, cache):
    """(corpus of the first N_ROWS ReQA SQuAD dev sentences, the questions answered in them, their gold rows)."""
    corpus = reqa_dev.corpus.subset(np.arange(N_ROWS))
    qs = [(t, g) for t, g in zip(reqa_dev.queries.texts, reqa_dev.queries.gold) if len(g) and max(g) < N_ROWS]
    assert len(qs) >= 60
    return corpus, [t for t, _ in qs], [set(int(x) for x in g) for _, g in qs]


def recall_at(ranking, gold, k: int) -> float:
    return float(np.mean([bool(set(row[:k].tolist()) & g) for row, g in zip(ranking.ids, gold)]))


def _manifest_facts_as_before(retriever) -> dict:
    """What pipeline.run gathered before run_facts, by probing attributes (encoder_infos, embedding_shard_counts, index_infos)."""
    rs = list(walk(retriever))
    extra: dict = {}
    encoders = [r.encoder_info_ for r in rs if getattr(r, "encoder_info_", None)]
    if encoders:
        extra["encoders"] = encoders
    shards: dict = {}
    for r in rs:
        for k, v in (getattr(r, "encode_stats_", None) or {}).items():
            shards[k] = shards.get(k, 0) + int(v)
    if shards:
        extra["embedding_shards"] = shards
    indexes = []
    for r in rs:
        facts = getattr(r, "index_info_", None) or (r.describe() if callable(getattr(r, "describe", None)) else None)
        if facts:
            indexes.append(json.loads(json.dumps({"retriever": r.name, **facts}, default=str)))
    if indexes:
        extra["indexes"] = indexes
    return extra


@pytest.mark.slow
def test_run_facts_of_a_fused_bm25_and_dense_run(slice_):
    from retrievers import java

    corpus, questions, gold = slice_
    fused = make_retriever("rrf:bm25+dense", dense_options={"device": "cpu", "shard_texts": 100})
    assert run_facts(fused) == {}  # nothing indexed yet: no encoder, no shards, no index
    fused.index(corpus)
    ranking = fused.search(questions, 10)
    assert recall_at(ranking, gold, 10) > 0.8
    facts = run_facts(fused)
    assert facts == _manifest_facts_as_before(fused)
    assert list(facts) == ["encoders", "embedding_shards", "indexes"]
    assert len(facts["encoders"]) == 1 and facts["encoders"][0] == fused.members[1].encoder_info_
    assert facts["embedding_shards"] == {"shards": 3, "computed": 3, "reused": 0}
    bm25, dense = facts["indexes"]
    assert bm25["retriever"] == "bm25" and Path(bm25["index"]).is_dir() and bm25["jvm"]["heap_max"]
    assert dense["retriever"] == "dense" and dense == json.loads(json.dumps(dense))
    json.dumps(facts)
    # a second dense member over the same corpus reuses the cached shards; the counts add up
    again = make_retriever("fuse-zscore:dense+dense", dense_options={"device": "cpu", "shard_texts": 100}).index(corpus)
    assert run_facts(again)["embedding_shards"] == {"shards": 6, "computed": 0, "reused": 6}
    # the JVM BM25 started, for the hardware facts
    assert java.jvm_facts() == java.jvm_info() and java.jvm_facts()["heap_max"]


def test_jvm_facts_are_none_before_a_jvm_starts(monkeypatch):
    from retrievers import java

    monkeypatch.setattr(java, "_STARTED", {})
    assert java.jvm_facts() is None


# ------------------------------------------------------------------ plugins
@pytest.fixture
def plugin(plugin_package):
    """tests/qa_plugin on sys.path (its dist-info declares the entry points); the registry forgets it afterwards."""
    plugin_package(RETRIEVERS)
    return importlib.import_module("qa_plugin_example.retriever")


def test_plugin_retriever_by_entry_point(plugin):
    OverlapRetriever = plugin.OverlapRetriever
    assert "overlap" in RETRIEVERS.names() and "overlap" not in RETRIEVERS.builtin_names()
    assert RETRIEVERS.get("overlap") is OverlapRetriever
    plain = make_retriever("overlap")
    assert isinstance(plain, OverlapRetriever) and isinstance(plain, Retriever) and not needs_fit(plain)
    assert (plain.idf, plain.min_token_length) == (True, 2)
    typed = make_retriever("overlap[idf=false,min_token_length=3]")
    assert typed.idf is False and typed.min_token_length == 3
    assert make_retriever("overlap", {"overlap": {"idf": False}}).idf is False
    with pytest.raises(UserError, match=r"^retriever 'overlap:x': overlap takes no argument"):
        make_retriever("overlap:x")
    with pytest.raises(UserError, match=r"^overlap: unknown option 'nope' \(allowed: idf, min_token_length\)"):
        make_retriever("overlap[nope=1]")
    with pytest.raises(UserError, match=r"use bm25, dense, dense:MODEL, overlap or METHOD"):
        make_retriever("tfidf")


def test_plugin_retriever_ranks_a_real_slice_alone_and_fused_with_bm25(plugin, slice_):
    corpus, questions, gold = slice_
    idf = make_retriever("overlap").index(corpus)
    ranking = idf.search(questions, 20)
    assert ranking.ids.shape == (len(questions), 20) and ranking.ids.dtype == np.int64 and ranking.scores.dtype == np.float32
    valid = ranking.ids >= 0
    assert np.all(np.isneginf(ranking.scores[~valid])) and np.all(ranking.scores[valid] > 0)
    assert np.all(valid[:, :-1] | ~valid[:, 1:])  # padding only at the end of a row
    for row_ids, row_scores in zip(ranking.ids, ranking.scores):
        n = int((row_ids >= 0).sum())
        order = np.lexsort((row_ids[:n], -row_scores[:n]))
        assert order.tolist() == list(range(n))  # score descending, ties by corpus row
    plain = make_retriever("overlap[idf=false]").index(corpus).search(questions, 20)
    r_idf, r_plain = recall_at(ranking, gold, 10), recall_at(plain, gold, 10)
    assert r_idf > 0.6 and r_plain > 0.4 and r_idf >= r_plain
    # a count of shared tokens: the plain scores are whole numbers
    assert np.all(plain.scores[plain.ids >= 0] == np.round(plain.scores[plain.ids >= 0]))

    fused = make_retriever("rrf:bm25+overlap")
    assert isinstance(fused, RRFRetriever) and fused.name == "rrf(bm25+overlap)"
    assert isinstance(fused.members[1], plugin.OverlapRetriever)
    fused.index(corpus)
    got = fused.search(questions, 10)
    bm25_recall = recall_at(fused.members[0].search(questions, 10), gold, 10)
    assert recall_at(got, gold, 10) >= min(r_idf, bm25_recall) and recall_at(got, gold, 10) > 0.7
    indexes = run_facts(fused)["indexes"]
    assert [x["retriever"] for x in indexes] == ["bm25", "overlap"]
    assert indexes[1] == {"retriever": "overlap", "passages": N_ROWS, "terms": len(fused.members[1]._postings),
                          "idf": True, "min_token_length": 2}
