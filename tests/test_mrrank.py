"""MrRank re-ranker: learns planted signals, keeps train/dev apart, saves and reloads."""

from __future__ import annotations

import numpy as np
import pytest

from data.errors import UserError
from retrievers.mrrank import MrRankRetriever, _sibling_max, pool_features
from retrievers.pooling import pool_rankings
from retrievers.rrf import RRFRetriever
from retrievers.types import Ranking
from tests.fusion_toys import RecordingRetriever, ScrambleRetriever, WhRuleRetriever, mrr, planted_dataset

FAST = dict(depth=10, epochs=6, hidden=(32,), batch_size=256, seed=0)


def scramblers():
    return [ScrambleRetriever("a", gold_max_rank=10, seed=1), ScrambleRetriever("b", gold_max_rank=10, seed=2)]


def test_mrrank_learns_the_planted_lexical_signal_that_rank_fusion_cannot_see():
    # the query's one content word is a marker token found only in the gold
    # sentence (token overlap = 1 for the gold, 0 for the rest); both members
    # put the gold at a random rank in their top 10
    train = planted_dataset("train", n_queries=150, seed=1, query_fillers=0)
    dev = planted_dataset("dev", n_queries=60, seed=2, query_fillers=0)
    model = MrRankRetriever(scramblers(), **FAST).fit(train).index(dev.corpus)
    got = mrr(model.search(dev.queries.texts, 10), dev.queries.gold)
    assert got > 0.95
    rrf = RRFRetriever(scramblers(), depth=10).index(dev.corpus)
    assert mrr(rrf.search(dev.queries.texts, 10), dev.queries.gold) < 0.6
    # the same model without lexical features has no signal left
    blind = MrRankRetriever(scramblers(), lexical=False, **FAST).fit(train).index(dev.corpus)
    assert mrr(blind.search(dev.queries.texts, 10), dev.queries.gold) < 0.6


def test_mrrank_learns_which_member_to_trust_per_query_from_ranking_features():
    # who-queries: member 0 has the gold at rank 0, member 1 at rank 9; what-queries: reversed.
    # Scores are peaked when a member is right, so ranking features alone carry the signal.
    train, dev = planted_dataset("train", n_queries=120, seed=3), planted_dataset("dev", n_queries=60, seed=4)

    def members():
        return [WhRuleRetriever("who-expert", "who", peaked=True), WhRuleRetriever("what-expert", "what", peaked=True)]

    model = MrRankRetriever(members(), lexical=False, **FAST).fit(train).index(dev.corpus)
    assert mrr(model.search(dev.queries.texts, 10), dev.queries.gold) > 0.95
    rrf = RRFRetriever(members(), depth=10).index(dev.corpus)
    assert mrr(rrf.search(dev.queries.texts, 10), dev.queries.gold) < 0.7


def test_mrrank_fit_never_sees_dev_queries_or_corpus_and_refuses_dev_split():
    train, dev = planted_dataset("train", n_queries=60, seed=1), planted_dataset("dev", n_queries=30, seed=2)
    members = [RecordingRetriever(m) for m in scramblers()]
    model = MrRankRetriever(members, **FAST)
    with pytest.raises(UserError, match="training split"):
        model.fit(dev)
    model.fit(train)
    for m in members:
        assert m.indexed == [train.corpus.ids]
        assert set(m.searched) <= set(train.queries.texts)
        assert not set(m.searched) & set(dev.queries.texts)
    model.index(dev.corpus)
    model.search(dev.queries.texts, 5)
    for m in members:
        assert m.indexed[-1] == dev.corpus.ids


def test_mrrank_is_seeded_and_round_trips_through_save_load(tmp_path):
    train, dev = planted_dataset("train", n_queries=60, seed=1), planted_dataset("dev", n_queries=30, seed=2)
    a = MrRankRetriever(scramblers(), **FAST).fit(train).index(dev.corpus)
    b = MrRankRetriever(scramblers(), **FAST).fit(train).index(dev.corpus)
    ra, rb = a.search(dev.queries.texts, 10), b.search(dev.queries.texts, 10)
    assert ra.ids.tolist() == rb.ids.tolist()
    a.save(tmp_path)
    loaded = MrRankRetriever.load(tmp_path, scramblers()).index(dev.corpus)
    rl = loaded.search(dev.queries.texts, 10)
    assert rl.ids.tolist() == ra.ids.tolist()
    np.testing.assert_allclose(rl.scores, ra.scores, rtol=1e-5)
    assert loaded.to_dict() == a.to_dict()


def test_mrrank_search_deeper_than_pool_appends_remaining_candidates():
    train, dev = planted_dataset("train", n_queries=60, seed=1), planted_dataset("dev", n_queries=10, seed=2)
    model = MrRankRetriever(scramblers(), **FAST).fit(train).index(dev.corpus)
    shallow, deep = model.search(dev.queries.texts, 10), model.search(dev.queries.texts, 40)
    assert (deep.ids >= 0).all()
    assert all(len(set(row)) == 40 for row in deep.ids.tolist())
    # the re-ranked pool comes first, unchanged by the deeper search
    assert deep.ids[:, :10].tolist() == shallow.ids.tolist()


def test_mrrank_search_before_fit_is_a_user_error():
    dev = planted_dataset("dev", n_queries=5)
    with pytest.raises(UserError, match="fit"):
        MrRankRetriever(scramblers()).index(dev.corpus).search(dev.queries.texts, 5)


def test_sibling_max_excludes_self():
    keys = np.array([0, 0, 0, 1, 2, 2])
    vals = np.array([0.2, 0.9, 0.5, 0.7, 0.1, 0.1])
    assert _sibling_max(keys, vals).tolist() == [0.9, 0.5, 0.9, 0.0, 0.1, 0.1]


def test_pool_features_missing_candidate_values():
    a = Ranking(np.array([[0, 1, 2]]), np.array([[3.0, 2.0, 1.0]], dtype=np.float32))
    b = Ranking(np.array([[2, 3]]), np.array([[0.8, 0.4]], dtype=np.float32))
    pool = pool_rankings([a, b])
    feats, names = pool_features(pool, [a, b], paragraph_ids=np.array([0, 0, 1, 1]), depth=3)
    col = {n: feats[0, :, i].tolist() for i, n in enumerate(names)}
    assert pool.ids[0].tolist() == [0, 1, 2, 3]
    assert col["m0_present"] == [1, 1, 1, 0]
    assert col["m0_recip_rank"] == [1.0, 0.5, 1 / 3, 0.0]
    assert col["m0_minmax"] == [1.0, 0.5, 0.0, 0.0]
    assert col["m0_raw"] == [3.0, 2.0, 1.0, 1.0]  # missing: the member's last listed score
    assert col["m1_log_rank"][:2] == [1.0, 1.0]  # missing: rank = depth
    assert col["m1_paragraph_sibling_minmax"] == [0.0, 0.0, 0.0, 1.0]
    assert col["members_present_fraction"] == [0.5, 0.5, 1.0, 0.5]


def test_mrrank_on_a_real_reqa_squad_slice_with_bm25_members():
    """Real data, real BM25 (sentence field and paragraph field): fit on train, evaluate on dev."""
    import dataclasses

    from data.registry import load_dataset
    from retrievers.bm25 import BM25Retriever
    from retrievers.pooling import training_subset

    train, dev = load_dataset("reqa_squad", "train"), load_dataset("reqa_squad", "dev")
    train_corpus, train_queries = training_subset(train, max_queries=250, corpus_size=500, seed=0)
    train_slice = dataclasses.replace(train, corpus=train_corpus, queries=train_queries)
    dev_corpus, dev_queries = training_subset(dev, max_queries=200, corpus_size=500, seed=1)

    def members():
        return [RecordingRetriever(BM25Retriever(field="sentence")), RecordingRetriever(BM25Retriever(field="context"))]

    recorded = members()
    model = MrRankRetriever(recorded, depth=20, epochs=6, seed=0).fit(train_slice)
    for m in recorded:  # fitting saw the train slice only
        assert m.indexed == [train_corpus.ids]
        assert not set(m.searched) & set(dev.queries.texts)
    got = mrr(model.index(dev_corpus).search(dev_queries.texts, 10), dev_queries.gold)
    singles = [mrr(m.index(dev_corpus).search(dev_queries.texts, 10), dev_queries.gold) for m in members()]
    # the paragraph-field member cannot tell sentences of one paragraph apart, the sentence one
    # misses paraphrases; the re-ranker combines them (measured 0.78 vs 0.75 / 0.46 on a similar slice)
    assert got > max(singles) - 0.03
    assert got > min(singles) + 0.15
