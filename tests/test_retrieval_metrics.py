"""ReQA metrics on hand-computed cases and against scipy's rankdata."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import rankdata

from data.types import Corpus, Queries
from eval.retrieval_metrics import average_ranks, first_relevant_rank, reqa_metrics
from retrievers.types import Ranking


def _corpus(pids):
    n = len(pids)
    return Corpus(ids=[f"c{i}" for i in range(n)], texts=[f"s{i}" for i in range(n)], contexts=[""] * n,
                  paragraph_ids=np.asarray(pids))


def _queries(golds, keys):
    n = len(golds)
    return Queries(ids=[f"q{i}" for i in range(n)], texts=list(keys), gold=[np.asarray(g) for g in golds],
                   question_keys=list(keys), question_ids=list(keys), answers=[[] for _ in range(n)])


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=30))
def test_average_ranks_equal_scipy(scores):
    s = np.asarray(scores, dtype=float)
    np.testing.assert_allclose(average_ranks(s), rankdata(-s))


def test_hand_computed_ties_questions_and_paragraphs():
    # corpus: 4 candidates, paragraphs 0,0,1,2
    corpus = _corpus([0, 0, 1, 2])
    # q0: gold c2, scores c0=3, c2=2, c1=2, c3=1 -> c2 tied with c1 at ranks 2,3 -> 2.5
    # q1 (same question text as q0): gold c3 at rank 1 -> question "a" keeps rank 1
    # q2: gold c1, ranking c3, c2, c1 -> rank 3
    ranking = Ranking(ids=[[0, 2, 1, 3], [3, 0, 1, 2], [3, 2, 1, -1]],
                      scores=[[3, 2, 2, 1], [5, 4, 3, 2], [3, 2, 1, -np.inf]])
    queries = _queries([[2], [3], [1]], ["a", "a", "b"])
    m = reqa_metrics(ranking, queries, corpus)
    assert m["questions"] == 2 and m["query_inputs"] == 3
    assert np.isclose(m["sentence"]["MRR"], (1 / 1 + 1 / 3) / 2)
    assert m["sentence"]["R@1"] == 0.5 and m["sentence"]["R@5"] == 1.0
    # paragraph level, q2: paragraphs by best sentence rank: p2 (1), p1 (2), p0 (3) -> gold p0 rank 3
    # q0: p0 best rank 1 (c0) -> p1 rank 2 ... gold paragraph of c2 is p1: best 2.5 -> paragraph rank 2
    # q1: gold p2 rank 1.  Question "a": min(2, 1) = 1; "b": 3
    assert np.isclose(m["paragraph"]["MRR"], (1 + 1 / 3) / 2)


def test_gold_beyond_depth_counts_as_miss():
    corpus = _corpus([0, 1, 2])
    ranking = Ranking(ids=[[0, 1]], scores=[[2, 1]])
    queries = _queries([[2]], ["x"])
    m = reqa_metrics(ranking, queries, corpus)
    assert m["sentence"]["MRR"] == 0 and m["not_found_within_depth"] == 1
    assert first_relevant_rank(ranking, queries).tolist() == [3]
    assert first_relevant_rank(Ranking(ids=[[2, 1]], scores=[[2, 1]]), queries).tolist() == [1]
