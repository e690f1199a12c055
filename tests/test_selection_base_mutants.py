"""selection/base.py against plain-Python re-statements of its contracts.

``normalize_scores`` is the confidence kernel of Kratzwald & Feuerriegel (2018)
§4.1/§4.2: per row, the real results among the first τ (the leading finite
scores: counting stops at the first NaN/-inf) get softmax confidences
``exp(s_i - max s) / sum_j exp(s_j - max s)`` or ``s_i / sum_j s_j`` (the
authors' notebook, non-negative scores), every other column is 0, and a row
whose weights sum to 0 is spread evenly over its real results.  The reference
below computes that row by row with ``math``, independent of the numpy code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from selection import SELECTORS, Oracle, Ordinal, Selector, Threshold, TopN, selector_from_dict
from selection.base import check_ranks, check_scores, normalize_scores, valid_counts

NAN, NEG_INF = float("nan"), float("-inf")


def _real_prefix(row) -> list[float]:
    real = []
    for s in row:
        if not math.isfinite(s):
            break
        real.append(float(s))
    return real


def _reference_row(row, tau: int, normalization: str) -> list[float]:
    real = _real_prefix(list(row)[:tau])
    out = [0.0] * tau
    if not real:
        return out
    if normalization == "softmax":
        m = max(real)
        weights = [math.exp(s - m) for s in real]
    else:
        weights = real
    total = math.fsum(weights)
    for i, w in enumerate(weights):
        out[i] = w / total if total > 0 else 1.0 / len(real)
    return out


def _reference(scores, tau, normalization):
    return np.array([_reference_row(r, tau, normalization) for r in scores], dtype=np.float64).reshape(len(scores), tau)


def _check(scores, tau, normalization):
    scores = np.asarray(scores, dtype=np.float64)
    got = normalize_scores(scores, tau, normalization)
    assert got.dtype == np.float64 and got.shape == (scores.shape[0], tau)
    np.testing.assert_allclose(got, _reference(scores, tau, normalization), rtol=1e-12, atol=1e-300)
    return got


# ---------------------------------------------------------------- normalize_scores
def test_softmax_rows_of_different_scale_are_normalized_each_on_its_own_max():
    # BM25-like, dot-product-like (hundreds: exp overflows without the max shift) and negative rows
    scores = [
        [812.0, 811.0, 809.5, 700.0],
        [3.0, 2.0, 1.0, 0.5],
        [-740.0, -741.0, -745.0, -750.0],
        [0.9, 0.8, 0.8, 0.1],
    ]
    got = _check(scores, 4, "softmax")
    assert np.all(np.isfinite(got)) and np.allclose(got.sum(axis=1), 1.0)
    # the default is softmax
    np.testing.assert_array_equal(normalize_scores(np.asarray(scores), 4), got)


def test_softmax_masks_padding_with_large_scores():
    # padded (-inf / NaN) tails must neither raise the max nor get weight
    scores = [
        [900.0, 899.0, NEG_INF, NEG_INF],
        [450.0, NAN, NAN, NAN],
        [5.0, 4.0, 3.0, 2.0],
        [NEG_INF, NEG_INF, NEG_INF, NEG_INF],
    ]
    got = _check(scores, 4, "softmax")
    assert got[3].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert got[1].tolist() == [1.0, 0.0, 0.0, 0.0]
    # τ beyond K: extra columns are zero padding
    wide = _check(scores, 6, "softmax")
    assert np.all(wide[:, 4:] == 0.0)
    # τ below K: only the first τ count
    _check(scores, 2, "softmax")


@pytest.mark.parametrize("normalization", ["softmax", "sum"])
def test_results_are_the_leading_finite_prefix_only(normalization):
    # a finite score after a hole is not a result; a row that starts with a hole has none
    scores = [
        [4.0, NAN, 3.0, 2.0],
        [NAN, 2.0, 1.0, 0.5],
        [NEG_INF, 7.0, NEG_INF, 1.0],
        [2.0, 1.0, NEG_INF, 1.0],
    ]
    got = _check(scores, 4, normalization)
    assert got[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert got[1].tolist() == [0.0] * 4 and got[2].tolist() == [0.0] * 4
    assert got[3, 2:].tolist() == [0.0, 0.0]


def test_sum_normalization_divides_by_the_row_total_even_below_one():
    # cosine-like scores whose totals are under 1, BM25-like ones above
    scores = [
        [0.2, 0.15, 0.1, 0.05],
        [0.3, 0.1, NEG_INF, NEG_INF],
        [12.0, 6.0, 2.0, 0.0],
    ]
    got = _check(scores, 4, "sum")
    np.testing.assert_allclose(got[0], [0.4, 0.3, 0.2, 0.1], rtol=1e-12)
    np.testing.assert_allclose(got[1], [0.75, 0.25, 0.0, 0.0], rtol=1e-12)
    np.testing.assert_allclose(got[2], [0.6, 0.3, 0.1, 0.0], rtol=1e-12)


def test_sum_all_zero_rows_spread_evenly_over_their_own_real_results():
    scores = [
        [0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, NEG_INF, NEG_INF],
        [0.0, NAN, NAN, NAN],
        [3.0, 1.0, 0.0, 0.0],
        [NEG_INF] * 4,
    ]
    got = _check(scores, 4, "sum")
    assert got[0].tolist() == [0.25] * 4
    assert got[1].tolist() == [0.5, 0.5, 0.0, 0.0]
    assert got[2].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert got[4].tolist() == [0.0] * 4
    # alone, too
    assert normalize_scores(np.array([[0.0, NEG_INF]]), 2, "sum").tolist() == [[1.0, 0.0]]


def test_no_queries_gives_an_empty_float_matrix():
    out = normalize_scores(np.zeros((0, 3)), 5, "softmax")
    assert out.shape == (0, 5) and out.dtype == np.float64


def test_bad_normalization_and_negative_sum_scores_are_user_errors():
    with pytest.raises(UserError, match=r"^score normalization 'minmax': use one of softmax, sum$"):
        normalize_scores(np.zeros((1, 2)), 2, "minmax")
    with pytest.raises(UserError, match=r"^score normalization 'sum' needs non-negative retrieval scores; use 'softmax'$"):
        normalize_scores(np.array([[1.0, -0.5]]), 2, "sum")
    # a negative score past the real results (or past τ) is not looked at
    assert normalize_scores(np.array([[1.0, NAN, -3.0]]), 3, "sum").tolist() == [[1.0, 0.0, 0.0]]
    assert normalize_scores(np.array([[1.0, 1.0, -3.0]]), 2, "sum").tolist() == [[0.5, 0.5]]


def _rows(draw, k, low, high):
    n_real = draw(st.integers(0, k))
    real = sorted(draw(st.lists(st.floats(low, high), min_size=n_real, max_size=n_real)), reverse=True)
    if n_real == k:
        return real
    hole = draw(st.sampled_from([NAN, NEG_INF]))
    tail = draw(st.lists(st.one_of(st.sampled_from([NAN, NEG_INF]), st.floats(low, high)),
                         min_size=k - n_real - 1, max_size=k - n_real - 1))
    return real + [hole] + tail


@st.composite
def _score_matrix(draw, low, high):
    k = draw(st.integers(1, 6))
    q = draw(st.integers(1, 5))
    return [_rows(draw, k, low, high) for _ in range(q)], draw(st.integers(1, k + 2))


@settings(max_examples=150, deadline=None)
@given(_score_matrix(-900.0, 900.0))
def test_softmax_matches_reference(case):
    scores, tau = case
    _check(scores, tau, "softmax")


@settings(max_examples=150, deadline=None)
@given(_score_matrix(0.0, 2.0))
def test_sum_matches_reference(case):
    scores, tau = case
    # zeros are common so all-zero rows come up
    scores = [[0.0 if math.isfinite(s) and s < 0.5 else s for s in row] for row in scores]
    _check(scores, tau, "sum")


# ---------------------------------------------------------------- valid_counts / check_scores / check_ranks
def test_valid_counts_counts_the_leading_finite_scores_at_least_one():
    scores = np.array([
        [3.0, 2.0, 1.0],
        [3.0, NEG_INF, NEG_INF],
        [3.0, 2.0, NAN],
        [NAN, 2.0, 1.0],
        [NEG_INF, NEG_INF, NEG_INF],
        [1.0, NAN, 1.0],
    ])
    got = valid_counts(scores)
    assert got.dtype == np.int64
    assert got.tolist() == [max(len(_real_prefix(r)), 1) for r in scores.tolist()] == [3, 1, 2, 1, 1, 1]


def test_check_scores_returns_float64():
    arr = check_scores([[3, 2, 1], [1, 0, 0]])
    assert arr.dtype == np.float64 and arr.tolist() == [[3.0, 2.0, 1.0], [1.0, 0.0, 0.0]]
    arr32 = check_scores(np.array([[0.5, 0.25]], dtype=np.float32))
    assert arr32.dtype == np.float64


def test_check_ranks_returns_int64_and_rejects_non_numbers():
    got = check_ranks(np.array([2.0, 1.0, 5.0]), 3)
    assert got.dtype == np.int64 and got.tolist() == [2, 1, 5]
    assert check_ranks([1, 3], 2).dtype == np.int64
    message = r"^first_relevant_rank must hold integer ranks \(1-based; K when none is relevant\)$"
    for bad in (np.array([True, False]), np.array(["1", "2"]), np.array([1.5, 2.0])):
        with pytest.raises(UserError, match=message):
            check_ranks(bad, 2)
    with pytest.raises(UserError, match=r"^first_relevant_rank 0: ranks are 1-based"):
        check_ranks([0, 2], 2)


# ---------------------------------------------------------------- persistence and repr
def _fitted_examples() -> list[Selector]:
    rng = np.random.default_rng(7)
    scores = -np.sort(-rng.gamma(2.0, 3.0, size=(40, 6)), axis=1)
    ranks = 1 + np.argmax(rng.random((40, 6)) < np.linspace(0.5, 0.1, 6), axis=1)
    ordinal = Ordinal(tau=6, offset=0, alpha=0.5, normalization="sum").fit(scores, ranks)
    return [TopN(3), Threshold(0.65, 4, "sum"), Threshold(0.9), Ordinal(), ordinal, Oracle()]


@pytest.mark.parametrize("index", range(6))
def test_to_dict_from_dict_round_trip_every_selector(index):
    sel = _fitted_examples()[index]
    saved = json.loads(json.dumps(sel.to_dict()))
    assert saved["method"] == sel.method and saved["spec"] == sel.spec
    assert saved["params"] == sel.get_params() and saved["fitted"] == sel.fitted_state()
    for loader in (selector_from_dict, type(sel).from_dict):
        loaded = loader(saved)
        assert type(loaded) is type(sel)
        assert loaded.to_dict() == saved
    scores = np.array([[9.0, 4.0, 2.0, 1.0, 0.5, 0.0], [3.0, 3.0, 2.5, NEG_INF, NEG_INF, NEG_INF]])
    ranks = np.array([2, 6])
    if sel.method == "ordinal" and not sel.fitted_state():
        return
    np.testing.assert_array_equal(selector_from_dict(saved).predict(scores, ranks), sel.predict(scores, ranks))


def test_subclass_from_dict_rejects_another_method():
    saved = Threshold(0.5, 10).to_dict()
    with pytest.raises(UserError, match=r"^selector dict has method 'threshold', expected 'top'$"):
        TopN.from_dict(saved)
    with pytest.raises(UserError, match=r"^selector dict has method 'oracle', expected 'ordinal'$"):
        Ordinal.from_dict(Oracle().to_dict())
    assert isinstance(Threshold.from_dict(saved), Threshold)


def test_repr_names_the_class_and_its_params_and_evaluates_back():
    assert repr(Threshold(0.5, 10, "sum")) == "Threshold(theta=0.5, tau=10, normalization='sum')"
    assert repr(TopN(4)) == "TopN(n=4)"
    assert repr(Oracle()) == "Oracle()"
    for sel in _fitted_examples():
        text = repr(sel)
        assert text.startswith(type(sel).__name__ + "(")
        again = eval(text, {cls.__name__: cls for _, cls in SELECTORS.items()})
        assert type(again) is type(sel) and again.get_params() == sel.get_params()
