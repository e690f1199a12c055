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


# ---------------------------------------------------------------- mutation-driven additions
import pytest  # noqa: E402
import pytrec_eval  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

from eval.qrels import question_groups  # noqa: E402
from eval.retrieval_metrics import mrr_and_recall, query_ranks, reqa_per_question  # noqa: E402


@settings(max_examples=40)
@given(arrays(st.sampled_from([np.uint8, np.uint16, np.int8, np.int32, np.float32]), st.integers(1, 25),
              elements=st.integers(0, 6)))
def test_average_ranks_of_any_numeric_dtype_equal_scipy(scores):
    # unsigned scores must not wrap when negated: ranks are those of the values, whatever the dtype
    np.testing.assert_allclose(average_ranks(scores), rankdata(-scores.astype(np.float64)))


def _reference_ranks(ids, scores, gold, pids_all):
    """Independent ReQA ranks of one query input via scipy's rankdata (-1 ids are padding)."""
    keep = [j for j, i in enumerate(ids) if i >= 0]
    if not keep:
        return np.inf, np.inf
    ids = np.asarray(ids)[keep]
    r = rankdata(-np.asarray(scores, dtype=np.float64)[keep])
    gold = set(np.asarray(gold).tolist())
    sent = min([rr for i, rr in zip(ids.tolist(), r) if i in gold], default=np.inf)
    by_para: dict[int, float] = {}
    for i, rr in zip(ids.tolist(), r):
        p = int(pids_all[i])
        by_para[p] = min(by_para.get(p, np.inf), rr)
    paras = list(by_para)
    pr = rankdata([by_para[p] for p in paras])
    gold_p = {int(pids_all[g]) for g in gold}
    para = min([x for p, x in zip(paras, pr) if p in gold_p], default=np.inf)
    return sent, para


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_reqa_metrics_equal_a_scipy_reference_with_ties_padding_and_repeated_questions(data):
    n_cand = data.draw(st.integers(1, 7))
    pids = data.draw(st.lists(st.integers(0, 3), min_size=n_cand, max_size=n_cand))
    corpus = _corpus(pids)
    n_q = data.draw(st.integers(1, 6))
    depth = data.draw(st.integers(1, n_cand))
    ids, scores, golds, keys = [], [], [], []
    for _ in range(n_q):
        n_valid = data.draw(st.integers(0, depth))
        row = data.draw(st.permutations(range(n_cand)))[:n_valid]
        sc = sorted(data.draw(st.lists(st.integers(0, 3), min_size=n_valid, max_size=n_valid)), reverse=True)
        ids.append(list(row) + [-1] * (depth - n_valid))
        scores.append([float(x) for x in sc] + [-np.inf] * (depth - n_valid))
        golds.append(data.draw(st.lists(st.integers(0, n_cand - 1), min_size=1, max_size=2, unique=True)))
        keys.append(data.draw(st.sampled_from(["ก", "é", "问"])))  # a few keys: repeated questions
    ranking = Ranking(ids=ids, scores=scores)
    queries = _queries(golds, keys)
    ref = [_reference_ranks(i, s, g, corpus.paragraph_ids) for i, s, g in zip(ids, scores, golds)]
    sent, para = query_ranks(ranking, queries, corpus)
    np.testing.assert_array_equal(sent, [r[0] for r in ref])
    np.testing.assert_array_equal(para, [r[1] for r in ref])
    order = list(dict.fromkeys(keys))
    best_s = np.array([min(r[0] for r, k in zip(ref, keys) if k == key) for key in order])
    best_p = np.array([min(r[1] for r, k in zip(ref, keys) if k == key) for key in order])
    cutoffs = (1, 2, 3)
    m = reqa_metrics(ranking, queries, corpus, cutoffs=cutoffs)
    assert m["questions"] == len(order) and m["query_inputs"] == n_q and m["depth"] == depth
    assert m["not_found_within_depth"] == int(np.isinf(best_s).sum())
    assert set(m["sentence"]) == set(m["paragraph"]) == {"MRR", "R@1", "R@2", "R@3"}
    assert m["sentence"]["MRR"] == pytest.approx(np.mean(1 / best_s))
    assert m["paragraph"]["MRR"] == pytest.approx(np.mean(1 / best_p))
    per = reqa_per_question(ranking, queries, corpus, cutoffs=cutoffs)
    assert set(per) == {"rr", "r@1", "r@2", "r@3", "paragraph_rr"}
    np.testing.assert_allclose(per["rr"], 1 / best_s)
    np.testing.assert_allclose(per["paragraph_rr"], 1 / best_p)
    for k in cutoffs:
        np.testing.assert_array_equal(per[f"r@{k}"], (best_s <= k).astype(float))
        assert m["sentence"][f"R@{k}"] == pytest.approx(np.mean(best_s <= k))
        assert m["paragraph"][f"R@{k}"] == pytest.approx(np.mean(best_p <= k))
        assert m["sentence"][f"R@{k}"] == pytest.approx(per[f"r@{k}"].mean())
    assert m["sentence"]["MRR"] == pytest.approx(per["rr"].mean())
    assert m["paragraph"]["MRR"] == pytest.approx(per["paragraph_rr"].mean())


def _untied_ranking_of_real_questions(queries, pool, depth, seed):
    """One untied ranking per question text (a retriever ranks a text the same way for every input),
    drawn from ``pool`` rows; the first question gets no results, the second exactly one."""
    rng = np.random.default_rng(seed)
    by_key: dict[str, tuple[list, list]] = {}
    for key, gold in zip(queries.question_keys, queries.gold):
        if key in by_key:
            continue
        i = len(by_key)
        n_valid = 0 if i == 0 else 1 if i == 1 else int(rng.integers(1, depth + 1))
        cand = rng.choice(pool, size=n_valid, replace=False)
        if n_valid and rng.random() < 0.5:  # often put a gold in, anywhere in the list
            g = int(gold[0])
            if g not in cand:
                cand[rng.integers(n_valid)] = g
        scores = np.sort(rng.choice(10_000, size=n_valid, replace=False))[::-1].astype(np.float64)  # distinct
        by_key[key] = (cand.tolist() + [-1] * (depth - n_valid), scores.tolist() + [-np.inf] * (depth - n_valid))
    rows = [by_key[k] for k in queries.question_keys]
    return Ranking(ids=[r[0] for r in rows], scores=[r[1] for r in rows])


def test_per_question_and_means_equal_pytrec_eval_on_a_real_reqa_slice(reqa_dev):
    # 400 real ReQA SQuAD dev inputs: several inputs share a question text (one per answer sentence)
    queries = reqa_dev.queries.subset(range(400))
    corpus = reqa_dev.corpus
    assert len(set(queries.question_keys)) < len(queries)
    top = int(max(int(np.max(g)) for g in queries.gold))
    pool = np.arange(top + 1)  # includes corpus row 0
    depth = 10
    ranking = _untied_ranking_of_real_questions(queries, pool, depth, seed=7)
    groups = question_groups(queries)
    pids = corpus.paragraph_ids
    qrels = {qid: {f"c{r}": 1 for r in rel} for qid, rel in zip(groups.ids, groups.qrels)}
    pqrels = {qid: {f"p{pids[r]}": 1 for r in rel} for qid, rel in zip(groups.ids, groups.qrels)}
    run, prun = {}, {}
    for qid, row in zip(groups.ids, groups.rows):
        ids, sc = ranking.ids[row], ranking.scores[row]
        run[qid] = {f"c{i}": float(s) for i, s in zip(ids, sc) if i >= 0}
        best: dict[str, float] = {}
        for i, s in zip(ids, sc):
            if i >= 0:
                best[f"p{pids[i]}"] = max(best.get(f"p{pids[i]}", -np.inf), float(s))
        prun[qid] = best
    cutoffs = (1, 3, 5, 10)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "success.1,3,5,10"}).evaluate(run)
    pev = pytrec_eval.RelevanceEvaluator(pqrels, {"recip_rank"}).evaluate(prun)
    rr = np.array([ev.get(q, {}).get("recip_rank", 0.0) for q in groups.ids])
    prr = np.array([pev.get(q, {}).get("recip_rank", 0.0) for q in groups.ids])
    per = reqa_per_question(ranking, queries, corpus, cutoffs=cutoffs)
    assert len(per["rr"]) == len(groups.ids)
    np.testing.assert_allclose(per["rr"], rr, rtol=1e-12)
    np.testing.assert_allclose(per["paragraph_rr"], prr, rtol=1e-12)
    m = reqa_metrics(ranking, queries, corpus, cutoffs=cutoffs)
    for k in cutoffs:
        hit = np.array([ev.get(q, {}).get(f"success_{k}", 0.0) for q in groups.ids])
        np.testing.assert_array_equal(per[f"r@{k}"], hit)
        assert m["sentence"][f"R@{k}"] == pytest.approx(hit.mean(), rel=1e-12)
    assert m["sentence"]["MRR"] == pytest.approx(rr.mean(), rel=1e-12)
    assert m["paragraph"]["MRR"] == pytest.approx(prr.mean(), rel=1e-12)
    assert m["questions"] == len(groups.ids) and m["query_inputs"] == 400 and m["depth"] == depth
    assert m["not_found_within_depth"] == int((rr == 0).sum()) > 0
    assert 0 < m["sentence"]["MRR"] < 1


def test_mrr_and_recall_edge_cases():
    assert mrr_and_recall([]) == {"MRR": 0.0, "R@1": 0.0, "R@5": 0.0, "R@10": 0.0}
    # computed in float64 whatever the ranks' dtype (float32 ranks from a caller must not round the mean)
    got = mrr_and_recall(np.array([3, 7, np.inf], dtype=np.float32), cutoffs=(3,))
    assert got["MRR"] == pytest.approx((1 / 3 + 1 / 7) / 3, rel=1e-12, abs=0)
    assert got["R@3"] == pytest.approx(1 / 3, rel=1e-12, abs=0)


def test_query_ranks_rejects_a_ranking_of_other_queries():
    corpus = _corpus([0, 1])
    with pytest.raises(ValueError, match="1 rows for 2 queries"):
        query_ranks(Ranking(ids=[[0, 1]], scores=[[2, 1]]), _queries([[0], [1]], ["a", "b"]), corpus)


def test_first_relevant_rank_equals_pytrec_eval_per_input_on_a_real_reqa_slice(reqa_dev):
    queries = reqa_dev.queries.subset(range(300))
    pool = np.arange(int(max(int(np.max(g)) for g in queries.gold)) + 1)
    depth = 8
    ranking = _untied_ranking_of_real_questions(queries, pool, depth, seed=3)
    # row 0 is a gold sentence of a real question: put it first for that input's text
    q0 = next(i for i, g in enumerate(queries.gold) if 0 in g.tolist())
    ranking.ids[q0] = [0, *[r for r in pool[1:] if r not in queries.gold[q0]][: depth - 1]]
    ranking.scores[q0] = np.arange(depth, 0, -1)
    qrels = {f"q{i}": {f"c{r}": 1 for r in g.tolist()} for i, g in enumerate(queries.gold)}
    run = {f"q{i}": {f"c{r}": float(s) for r, s in zip(ranking.ids[i], ranking.scores[i]) if r >= 0}
           for i in range(len(queries))}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    rr = np.array([ev.get(f"q{i}", {}).get("recip_rank", 0.0) for i in range(len(queries))])
    first = first_relevant_rank(ranking, queries)
    assert first.dtype == np.int64 and first[q0] == 1
    found = rr > 0
    assert 0 < found.sum() < len(queries)
    np.testing.assert_array_equal(first[found], np.rint(1 / rr[found]).astype(np.int64))
    assert np.all(first[~found] == depth + 1)
    none = first_relevant_rank(ranking, queries, none=0)
    assert np.all(none[~found] == 0) and np.array_equal(none[found], first[found])
