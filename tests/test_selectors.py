"""Passage-count selectors: hand-computed cut-offs, properties, the ordinal toy problem, persistence."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from selection import Oracle, Ordinal, Threshold, TopN, parse_selector, selector_from_dict

LN = math.log
# softmax of these scores is exactly [4, 2, 1, 1] / 8 = [0.5, 0.25, 0.125, 0.125]
SCORES = np.array([[LN(4), LN(2), LN(1), LN(1)]])


# ---------------------------------------------------------------- threshold ----
@pytest.mark.parametrize(
    "theta, expected",
    # cumulative confidences: 0.5, 0.75, 0.875, 1.0
    [(0.0, 1), (0.3, 1), (0.5, 1), (0.6, 2), (0.75, 2), (0.8, 3), (0.875, 3), (0.9, 4), (1.0, 4)],
)
def test_threshold_cumulative_softmax_cutoff(theta, expected):
    assert Threshold(theta).predict(SCORES).tolist() == [expected]


def test_threshold_renormalizes_within_tau_and_caps_at_tau():
    # top-2 only: softmax [4, 2] / 6 = [2/3, 1/3], cumulative [0.667, 1.0]
    assert Threshold(0.6, tau=2).predict(SCORES).tolist() == [1]  # 2 with τ=25 (0.5 < 0.6)
    assert Threshold(0.6, tau=25).predict(SCORES).tolist() == [2]
    assert Threshold(0.7, tau=2).predict(SCORES).tolist() == [2]
    assert Threshold(1.0, tau=3).predict(SCORES).tolist() == [3]
    assert Threshold(1.0, tau=1).predict(SCORES).tolist() == [1]


def test_threshold_sum_normalization_of_the_notebook():
    # divided by their sum: [4, 2, 1, 1] / 8, the same confidences as the softmax case
    scores = np.array([[4.0, 2.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    sel = Threshold(0.8, normalization="sum")
    np.testing.assert_allclose(sel.confidences(scores)[0, :4], [0.5, 0.25, 0.125, 0.125])
    assert sel.predict(scores).tolist() == [3, 1]
    with pytest.raises(UserError, match="non-negative"):
        sel.predict(np.array([[1.0, -1.0]]))


def test_threshold_equal_scores_and_rows_are_independent():
    scores = np.array([[0.0, 0.0, 0.0, 0.0], [10.0, 0.0, 0.0, 0.0]])
    # row 0: 0.25 each -> cumulative 0.25, 0.5, 0.75, 1; row 1: first confidence 1/(1+3e^-10)
    assert Threshold(0.5).predict(scores).tolist() == [2, 1]
    assert Threshold(0.51).predict(scores).tolist() == [3, 1]


def test_threshold_never_reads_padding():
    scores = np.array([[3.0, 1.0, -np.inf, -np.inf], [2.0, np.nan, np.nan, np.nan]])
    assert Threshold(1.0).predict(scores).tolist() == [2, 1]


def test_threshold_rejects_bad_parameters():
    with pytest.raises(UserError, match="threshold"):
        Threshold(1.5).predict(SCORES)
    with pytest.raises(UserError, match="τ"):
        Threshold(0.5, tau=0).predict(SCORES)
    with pytest.raises(UserError, match=r"\[queries, K>=1\]"):
        Threshold(0.5).predict(np.array([1.0, 2.0]))


# ---------------------------------------------------------------- top / oracle ----
def test_top_is_fixed_and_clipped_to_k():
    scores = np.zeros((3, 4))
    assert TopN(2).predict(scores).tolist() == [2, 2, 2]
    assert TopN(10).predict(scores).tolist() == [4, 4, 4]


def test_oracle_reads_to_first_relevant_and_needs_gold():
    scores = np.zeros((3, 5))
    assert Oracle().predict(scores, first_relevant_rank=np.array([1, 3, 7])).tolist() == [1, 3, 5]
    with pytest.raises(UserError, match="first_relevant_rank"):
        Oracle().predict(scores)
    with pytest.raises(UserError, match="1-based"):
        Oracle().predict(scores, first_relevant_rank=np.array([0, 1, 2]))


# ---------------------------------------------------------------- ordinal ----
def _toy_problem(n_queries: int, seed: int):
    """Scores whose sum-normalized top feature is x and first relevant rank 1 + round(9(1 - x))."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, n_queries)
    scores = np.zeros((n_queries, 12))
    scores[:, 0] = x
    scores[:, 1] = 1.0 - x
    ranks = 1 + np.round(9 * (1 - x)).astype(np.int64)  # 1..10, decreasing in x
    return x, scores, ranks


def test_ordinal_recovers_a_monotone_toy_problem():
    x, scores, ranks = _toy_problem(2000, seed=1)
    sel = Ordinal(tau=10, normalization="sum").fit(scores, ranks)
    x_test, scores_test, ranks_test = _toy_problem(500, seed=2)
    predicted = sel.predict_rank(scores_test)
    assert np.mean(predicted == ranks_test) > 0.9
    assert np.max(np.abs(predicted - ranks_test)) <= 1
    # the learned rank never increases as the top result's confidence grows
    assert np.all(np.diff(predicted[np.argsort(x_test)]) <= 0)
    # n = predicted rank + b (b = 1), clipped to [1, τ]
    assert sel.predict(scores_test).tolist() == np.clip(predicted + 1, 1, 10).tolist()


def test_ordinal_matches_mord_and_sklearn_ridge():
    _, scores, ranks = _toy_problem(300, seed=3)
    sel = Ordinal(tau=10, normalization="sum").fit(scores, ranks)
    features = sel.features(scores)
    from sklearn.linear_model import Ridge

    ridge = Ridge(alpha=1.0).fit(features, np.minimum(ranks, 10))
    np.testing.assert_allclose(sel.coef_, ridge.coef_, atol=1e-10)
    assert sel.intercept_ == pytest.approx(ridge.intercept_)
    mord = pytest.importorskip("mord")
    reference = mord.OrdinalRidge(alpha=1.0).fit(features, np.minimum(ranks, 10)).predict(features)
    assert sel.predict_rank(scores).tolist() == reference.astype(int).tolist()


def test_ordinal_labels_are_capped_at_tau_and_features_zero_padded():
    scores = np.array([[3.0, 1.0, -np.inf], [1.0, 1.0, 1.0]])
    sel = Ordinal(tau=5)
    feats = sel.features(scores)
    assert feats.shape == (2, 5)
    np.testing.assert_allclose(feats[0], [math.exp(2) / (math.exp(2) + 1), 1 / (math.exp(2) + 1), 0, 0, 0])
    np.testing.assert_allclose(feats[1], [1 / 3, 1 / 3, 1 / 3, 0, 0])
    sel.fit(scores, np.array([1, 99]))
    assert sel.label_max_ == 5


def test_ordinal_needs_fitting_and_valid_ranks():
    with pytest.raises(UserError, match="not fitted"):
        Ordinal().predict(np.zeros((2, 3)))
    with pytest.raises(UserError, match="shape"):
        Ordinal().fit(np.zeros((2, 3)), np.array([1, 2, 3]))
    with pytest.raises(UserError, match="integer"):
        Ordinal().fit(np.zeros((2, 3)), np.array([1.5, 2.0]))


# ---------------------------------------------------------------- parsing ----
@pytest.mark.parametrize(
    "spec, cls, params",
    [
        ("top:5", TopN, {"n": 5}),
        ("threshold:0.8", Threshold, {"theta": 0.8, "tau": 25, "normalization": "softmax"}),
        ("threshold:0.8,25", Threshold, {"theta": 0.8, "tau": 25, "normalization": "softmax"}),
        ("threshold: 0.5 , 10", Threshold, {"theta": 0.5, "tau": 10, "normalization": "softmax"}),
        ("ordinal", Ordinal, {"tau": 25, "offset": 1, "alpha": 1.0, "normalization": "softmax"}),
        ("ordinal:250", Ordinal, {"tau": 250, "offset": 1, "alpha": 1.0, "normalization": "softmax"}),
        ("oracle", Oracle, {}),
    ],
)
def test_parse_selector(spec, cls, params):
    sel = parse_selector(spec)
    assert type(sel) is cls and sel.get_params() == params
    assert parse_selector(sel.spec).get_params() == params


@pytest.mark.parametrize(
    "spec", ["", "top", "top:-1", "top:2.5", "threshold", "threshold:1.2", "threshold:x", "threshold:0.5,0",
             "threshold:0.1,2,3", "ordinal:0", "ordinal:a", "oracle:3", "bm25", "selectors:3"],
)
def test_parse_selector_rejects_bad_specs_in_one_line(spec):
    with pytest.raises(UserError) as err:
        parse_selector(spec)
    message = str(err.value)
    assert "\n" not in message and repr(spec) in message


def test_from_dict_rejects_unknown_method():
    with pytest.raises(UserError, match="unknown method"):
        selector_from_dict({"method": "magic"})


# ---------------------------------------------------------------- properties ----
@st.composite
def score_matrices(draw):
    q = draw(st.integers(1, 8))
    k = draw(st.integers(1, 12))
    rows = []
    for _ in range(q):
        real = draw(st.integers(0, k))
        values = sorted(draw(st.lists(st.floats(-30, 30), min_size=real, max_size=real)), reverse=True)
        rows.append(values + [-np.inf] * (k - real))
    return np.array(rows, dtype=np.float64).reshape(q, k)


def _fitted_ordinal(tau: int, seed: int) -> Ordinal:
    rng = np.random.default_rng(seed)
    scores = -np.sort(-rng.normal(size=(40, 30)), axis=1) * rng.uniform(0.1, 10)
    return Ordinal(tau=tau).fit(scores, rng.integers(1, 40, size=40))


@settings(max_examples=60, deadline=None)
@given(scores=score_matrices(), theta=st.floats(0, 1), tau=st.integers(1, 30), seed=st.integers(0, 3))
def test_every_selector_stays_within_one_and_min_tau_k(scores, theta, tau, seed):
    k = scores.shape[1]
    ranks = np.arange(1, scores.shape[0] + 1) * 3
    for sel, upper in [
        (Threshold(theta, tau), min(tau, k)),
        (_fitted_ordinal(tau, seed), min(tau, k)),
        (TopN(tau), k),
        (Oracle(), k),
    ]:
        n = sel.predict(scores, first_relevant_rank=ranks)
        assert n.dtype == np.int64 and n.shape == (scores.shape[0],)
        assert np.all(n >= 1) and np.all(n <= upper), (sel, n)


@settings(max_examples=80, deadline=None)
@given(scores=score_matrices(), thetas=st.lists(st.floats(0, 1), min_size=2, max_size=2), tau=st.integers(1, 30),
       normalization=st.sampled_from(["softmax", "sum"]))
def test_threshold_n_is_monotone_in_theta(scores, thetas, tau, normalization):
    if normalization == "sum":
        scores = np.where(np.isfinite(scores), np.abs(scores), scores)
    low, high = sorted(thetas)
    n_low = Threshold(low, tau, normalization).predict(scores)
    n_high = Threshold(high, tau, normalization).predict(scores)
    assert np.all(n_low <= n_high)


@settings(max_examples=30, deadline=None)
@given(scores=score_matrices(), theta=st.floats(0, 1), tau=st.integers(1, 30), seed=st.integers(0, 3))
def test_to_dict_round_trip_gives_identical_predictions(scores, theta, tau, seed):
    ranks = np.full(scores.shape[0], 2)
    for sel in [TopN(tau), Threshold(theta, tau), _fitted_ordinal(tau, seed), Oracle()]:
        saved = json.loads(json.dumps(sel.to_dict()))
        loaded = selector_from_dict(saved)
        assert type(loaded) is type(sel) and loaded.to_dict() == sel.to_dict()
        np.testing.assert_array_equal(
            loaded.predict(scores, first_relevant_rank=ranks), sel.predict(scores, first_relevant_rank=ranks)
        )
