"""Selectors (top-n, threshold, oracle, parse) and rank/score fusion against independent re-statements.

The references here are written from the papers' formulas, not from our code:
Kratzwald & Feuerriegel (2018) §4.1 for the threshold cut-off
(n = min{m : c_1 + ... + c_m >= θ}, 1 <= n <= min(τ, K)), Cormack et al. (2009)
for RRF (sum_m w_m / (k + rank_m), 1-based ranks), Montague & Aslam (2001)
for min-max / ZMUV / Sum normalization.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.errors import UserError
from retrievers.rrf import RRFRetriever, reciprocal_rank_fusion
from retrievers.score_fusion import ScoreFusionRetriever, normalize_scores, score_fusion
from retrievers.types import Ranking
from selection import Oracle, Ordinal, Threshold, TopN, parse_selector, selector_from_dict
from tests.fusion_toys import ScrambleRetriever, planted_dataset


# ---------------------------------------------------------------- top:N
def test_top_defaults_spec_params_and_numpy_ints():
    assert TopN().predict(np.zeros((2, 5))).tolist() == [1, 1]
    sel = TopN(np.int64(3))
    out = sel.predict(np.zeros((2, 5)))
    assert out.tolist() == [3, 3] and out.dtype == np.int64
    assert TopN(1).predict(np.zeros((1, 1))).tolist() == [1]
    assert TopN(4).spec == "top:4" and TopN(4).get_params() == {"n": 4}
    assert TopN(5).predict(np.zeros((3, 5))).tolist() == [5, 5, 5]
    assert TopN(6).predict(np.zeros((3, 5))).tolist() == [5, 5, 5]


@pytest.mark.parametrize("n", [-1, -5, True, False, 2.0, "3", None])
def test_top_rejects_non_positive_or_non_integer_n(n):
    with pytest.raises(UserError, match=r"^selector top:.*: n must be an integer >= 0 \(0: closed book, generative readers only\)$"):
        TopN(n).predict(np.zeros((1, 3)))
    with pytest.raises(UserError, match="n must be an integer >= 0"):
        TopN(n).fit(np.zeros((1, 3)), np.array([1]))


def test_top_fit_returns_self_and_checks_inputs():
    sel = TopN(2)
    assert sel.fit(np.zeros((2, 3)), np.array([1, 3])) is sel
    with pytest.raises(UserError, match="first_relevant_rank"):
        sel.fit(np.zeros((2, 3)), np.array([1]))


# ---------------------------------------------------------------- threshold
def _reference_threshold(row, theta, tau, normalization="softmax"):
    """n = min{m : c_1+...+c_m >= θ} over the real results among the first τ, in 1..min(τ, K, real)."""
    top = list(row[:tau])
    real = []
    for s in top:
        if not math.isfinite(s):
            break
        real.append(s)
    if not real:
        return 1
    if normalization == "softmax":
        mx = max(real)
        w = [math.exp(s - mx) for s in real]
    else:
        w = list(real)
    total = sum(w)
    c = [x / total for x in w] if total > 0 else [1 / len(real)] * len(real)
    acc = 0.0
    for m, x in enumerate(c, start=1):
        acc += x
        if acc >= theta - 1e-9:
            return m
    return len(real)


def test_threshold_defaults_and_spec():
    sel = Threshold()
    assert sel.get_params() == {"theta": 0.8, "tau": 25, "normalization": "softmax"}
    assert sel.spec == "threshold:0.8,25"
    assert Threshold(np.float64(0.75), np.int64(3)).spec == "threshold:0.75,3"
    assert Threshold(1, 2).spec == "threshold:1.0,2"
    # default τ = 25: thirty equal scores, θ = 1 reads all 25 of the top-τ, not 30
    assert sel.predict(np.zeros((1, 30))).tolist() == [20]  # 0.8 * 25
    assert Threshold(1.0).predict(np.zeros((1, 30))).tolist() == [25]
    # default softmax, not sum: [ln 4, ln 2, 0, 0] -> [0.5, 0.25, 0.125, 0.125]
    scores = np.array([[math.log(4), math.log(2), 0.0, 0.0]])
    assert Threshold(0.6).predict(scores).tolist() == [2]
    np.testing.assert_allclose(Threshold(0.6, 3).confidences(scores), [[4 / 7, 2 / 7, 1 / 7]])


def test_threshold_tolerance_is_a_hair_not_more():
    # sum normalization of [x, 1 - x]: the first confidence is x (the row sums to exactly 1)
    x = 0.5 - 1.5e-9
    scores = np.array([[x, 1.0 - x]])
    assert Threshold(0.5, normalization="sum").predict(scores).tolist() == [2]  # 1.5e-9 short: not within 1e-9
    y = 0.5 - 0.5e-9
    assert Threshold(0.5, normalization="sum").predict(np.array([[y, 1.0 - y]])).tolist() == [1]  # within 1e-9
    # exactly θ - 1e-9 counts as reached
    z = 0.5 - 1e-9
    assert z + (1.0 - z) == 1.0
    assert Threshold(0.5, normalization="sum").predict(np.array([[z, 1.0 - z]])).tolist() == [1]
    # 0.1 + 0.2 lands under 0.3 in floats; the tolerance counts it as reached
    assert Threshold(0.3, normalization="sum").predict(np.array([[0.1, 0.2, 0.7]])).tolist() == [2]


@pytest.mark.parametrize("theta", [0, 0.0, 1, 1.0, np.float32(0.5), np.int64(1)])
def test_threshold_accepts_theta_on_the_closed_unit_interval(theta):
    assert Threshold(theta).predict(np.array([[2.0, 1.0, 0.0]])).shape == (1,)


@pytest.mark.parametrize("theta", [-1e-9, 1.0000001, True, False, "0.5", None, float("nan")])
def test_threshold_rejects_bad_theta(theta):
    with pytest.raises(UserError, match=r"^selector threshold:.*,25: θ must be a number in \[0, 1\]$"):
        Threshold(theta).predict(np.zeros((1, 3)))
    with pytest.raises(UserError, match="θ must be a number"):
        Threshold(theta).fit(np.zeros((1, 3)), np.array([1]))


def test_threshold_spec_of_a_non_number_theta_is_its_text():
    with pytest.raises(UserError, match=r"^selector threshold:abc,25: θ"):
        Threshold("abc").predict(np.zeros((1, 3)))


@pytest.mark.parametrize("tau", [0, -3, True, 2.0, "5", None])
def test_threshold_rejects_bad_tau(tau):
    with pytest.raises(UserError, match=r"^selector threshold:0\.5,.*: τ must be an integer >= 1$"):
        Threshold(0.5, tau).predict(np.zeros((1, 3)))


def test_threshold_tau_one_and_numpy_tau():
    assert Threshold(1.0, 1).predict(np.zeros((2, 4))).tolist() == [1, 1]
    assert Threshold(1.0, np.int64(2)).predict(np.zeros((2, 4))).tolist() == [2, 2]


def test_threshold_rejects_unknown_normalization():
    with pytest.raises(UserError, match=r"^selector threshold:0\.5,25,normalization=minmax: normalization must be one of softmax, sum$"):
        Threshold(0.5, normalization="minmax").predict(np.zeros((1, 3)))
    with pytest.raises(UserError, match="normalization must be one of"):
        Threshold(0.5, normalization="minmax").confidences(np.zeros((1, 3)))


def test_threshold_fit_returns_self_and_confidences_use_tau():
    sel = Threshold(0.5, 2)
    assert sel.fit(np.zeros((1, 3)), np.array([2])) is sel
    conf = sel.confidences(np.array([[0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(conf, [[0.5, 0.5]])
    # sum normalization through confidences
    np.testing.assert_allclose(Threshold(0.5, 3, "sum").confidences(np.array([[3.0, 1.0, 0.0, 4.0]])), [[0.75, 0.25, 0.0]])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.lists(st.floats(-20, 20, allow_nan=False), min_size=1, max_size=8), min_size=1, max_size=5),
    st.floats(0, 1),
    st.integers(1, 10),
    st.integers(0, 8),
    st.sampled_from(["softmax", "sum"]),
)
def test_threshold_equals_the_papers_cutoff(rows, theta, tau, pad, normalization):
    k = max(len(r) for r in rows)
    scores = np.full((len(rows), k + pad % 3), -np.inf)
    for i, r in enumerate(rows):
        vals = sorted((abs(v) for v in r) if normalization == "sum" else r, reverse=True)
        scores[i, : len(vals)] = vals
    if pad % 2:
        scores[scores == -np.inf] = np.nan
    sel = Threshold(theta, tau, normalization)
    out = sel.predict(scores)
    assert out.dtype == np.int64
    for i in range(len(rows)):
        ref = _reference_threshold(scores[i], theta, tau, normalization)
        if ref != out[i]:
            # only a cumulative sum within rounding of θ may differ
            conf = sel.confidences(scores[i : i + 1])[0]
            cum = np.cumsum(conf)
            assert np.min(np.abs(cum - (theta - 1e-9))) < 1e-12, (scores[i], theta, tau, out[i], ref)


def test_threshold_on_real_bm25_like_scores_from_data_are_within_bounds():
    rng = np.random.default_rng(3)
    scores = -np.sort(-rng.gamma(2.0, 5.0, size=(50, 30)), axis=1)
    scores[::7, 20:] = -np.inf
    for theta in (0.1, 0.5, 0.9, 1.0):
        out = Threshold(theta, 25).predict(scores)
        ref = [_reference_threshold(r, theta, 25) for r in scores]
        assert out.tolist() == ref


# ---------------------------------------------------------------- oracle
def test_oracle_spec_params_round_trip_and_clipping():
    o = Oracle()
    assert o.spec == "oracle" and o.get_params() == {}
    assert o.to_dict() == {"method": "oracle", "spec": "oracle", "params": {}, "fitted": {}}
    assert isinstance(selector_from_dict(o.to_dict()), Oracle)
    out = o.predict(np.zeros((4, 3)), np.array([1, 2, 3, 99]))
    assert out.tolist() == [1, 2, 3, 3] and out.dtype == np.int64
    assert o.predict(np.zeros((2, 1)), np.array([1, 5])).tolist() == [1, 1]
    with pytest.raises(UserError, match=r"^selector oracle: predict needs first_relevant_rank"):
        o.predict(np.zeros((2, 3)))
    with pytest.raises(UserError, match="1-based"):
        o.predict(np.zeros((2, 3)), np.array([0, 1]))
    with pytest.raises(UserError, match="shape"):
        o.predict(np.zeros((2, 3)), np.array([1, 1, 1]))


# ---------------------------------------------------------------- parse
@pytest.mark.parametrize(
    "spec, cls, params",
    [
        ("top:3", TopN, {"n": 3}),
        ("  TOP : 7 ", TopN, {"n": 7}),
        ("threshold:0.25", Threshold, {"theta": 0.25, "tau": 25, "normalization": "softmax"}),
        ("Threshold: 1 , 4", Threshold, {"theta": 1.0, "tau": 4, "normalization": "softmax"}),
        ("ordinal", Ordinal, None),
        ("ordinal:7", Ordinal, None),
        ("oracle", Oracle, {}),
        (" ORACLE ", Oracle, {}),
    ],
)
def test_parse_builds_each_selector(spec, cls, params):
    sel = parse_selector(spec)
    assert type(sel) is cls
    if params is not None:
        assert sel.get_params() == params
    if spec == "ordinal:7":
        assert sel.get_params()["tau"] == 7
    # the spec string builds an equal selector again
    assert parse_selector(sel.spec).get_params() == sel.get_params()


@pytest.mark.parametrize(
    "spec, message",
    [
        (None, r"^selector None: expected one of top:N, threshold:θ\[,τ\], ordinal\[:τ\], gap\[:τ\[,b\]\], rlt\[:τ\[,λ\]\], confidence\[:τ\], oracle$"),
        ("", r"^selector '': expected one of top:N, threshold:θ\[,τ\], ordinal\[:τ\], gap\[:τ\[,b\]\], rlt\[:τ\[,λ\]\], confidence\[:τ\], oracle$"),
        (3, r"^selector 3: expected one of"),
        ("top", r"^selector 'top': expected top:N$"),
        ("top:", r"^selector 'top:': expected top:N$"),
        ("top:1,2", r"^selector 'top:1,2': expected top:N$"),
        ("top:x", r"^selector 'top:x' option n: expected an integer, got 'x'$"),
        ("top:-1", r"^selector 'top:-1': n must be an integer >= 0 \(0: closed book, generative readers only\)$"),
        ("threshold", r"^selector 'threshold': expected threshold:θ or threshold:θ,τ$"),
        ("threshold:0.1,2,3", r"^selector 'threshold:0.1,2,3': expected threshold:θ or threshold:θ,τ$"),
        ("threshold:high", r"^selector 'threshold:high' option theta: expected a number, got 'high'$"),
        ("threshold:0.5,many", r"^selector 'threshold:0.5,many' option tau: expected an integer, got 'many'$"),
        ("threshold:2", r"^selector 'threshold:2': θ must be a number in \[0, 1\]$"),
        ("threshold:0.5,0", r"^selector 'threshold:0.5,0': τ must be an integer >= 1$"),
        ("ordinal:1,2", r"^selector 'ordinal:1,2': expected ordinal or ordinal:τ$"),
        ("ordinal:x", r"^selector 'ordinal:x' option tau: expected an integer, got 'x'$"),
        ("oracle:1", r"^selector 'oracle:1': oracle takes no parameters$"),
        ("best:3", r"^selector 'best:3': unknown method 'best' \(expected one of top:N, threshold:θ\[,τ\], ordinal\[:τ\], gap\[:τ\[,b\]\], rlt\[:τ\[,λ\]\], confidence\[:τ\], oracle\)$"),
    ],
)
def test_parse_rejects_bad_specs_with_exact_messages(spec, message):
    with pytest.raises(UserError, match=message):
        parse_selector(spec)


def test_selector_from_dict_round_trips_and_rejects():
    for spec in ("top:4", "threshold:0.6,9", "oracle"):
        sel = parse_selector(spec)
        back = selector_from_dict(sel.to_dict())
        assert type(back) is type(sel) and back.get_params() == sel.get_params()
    assert selector_from_dict({"method": "top"}).get_params() == {"n": 1}  # no params: the defaults
    assert selector_from_dict({"method": "threshold", "params": None, "fitted": None}).spec == "threshold:0.8,25"
    with pytest.raises(UserError, match=r"^selector dict: unknown method 'nope' \(expected one of top, threshold, ordinal, gap, rlt, confidence, oracle\)$"):
        selector_from_dict({"method": "nope"})
    with pytest.raises(UserError, match=r"^selector dict: unknown method 'top'"):
        selector_from_dict("top")
    with pytest.raises(UserError, match=r"^selector dict: unknown method None"):
        selector_from_dict({})
    with pytest.raises(UserError, match=r"^selector dict for 'top': bad params \{'m': 2\} \("):
        selector_from_dict({"method": "top", "params": {"m": 2}})
    with pytest.raises(UserError, match="n must be an integer"):
        selector_from_dict({"method": "top", "params": {"n": -1}})
    with pytest.raises(UserError, match="unexpected fitted state"):
        selector_from_dict({"method": "top", "params": {"n": 2}, "fitted": {"w": [1]}})


# ---------------------------------------------------------------- RRF reference
def _ranking(rows: list[list[int]], depth: int) -> Ranking:
    ids = np.full((len(rows), depth), -1, dtype=np.int64)
    scores = np.full((len(rows), depth), -np.inf, dtype=np.float32)
    for q, r in enumerate(rows):
        ids[q, : len(r)] = r
        scores[q, : len(r)] = np.linspace(10, 1, len(r)) if r else []
    return Ranking(ids, scores)


def _check_fused_against(ref: list[dict[int, float]], fused: Ranking, k: int):
    """``fused`` is a top-``k`` of ``ref`` (candidate -> fused score) with the reference's scores."""
    assert fused.ids.shape == (len(ref), k)
    for q, scores in enumerate(ref):
        ids = [int(i) for i in fused.ids[q] if i >= 0]
        assert len(ids) == min(k, len(scores)) and len(set(ids)) == len(ids)
        got = fused.scores[q, : len(ids)].astype(np.float64)
        want = np.array([scores[i] for i in ids])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        assert np.all(np.diff(got) <= 1e-7)
        assert np.all(np.isneginf(fused.scores[q, len(ids):])) and np.all(fused.ids[q, len(ids):] == -1)
        left = [s for i, s in scores.items() if i not in ids]
        if left and ids:
            assert max(left) <= min(want) + 1e-6


def _reference_rrf(member_rows, rrf_k, weights):
    out = []
    for q in range(len(member_rows[0])):
        fused: dict[int, float] = {}
        for m, rows in enumerate(member_rows):
            for rank, d in enumerate(rows[q], start=1):  # 1-based rank (Cormack et al.)
                fused[d] = fused.get(d, 0.0) + weights[m] / (rrf_k + rank)
        out.append(fused)
    return out


_ROWS = st.lists(st.integers(0, 15), unique=True, max_size=9)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3).flatmap(lambda n_q: st.lists(st.lists(_ROWS, min_size=n_q, max_size=n_q), min_size=1, max_size=4)),
    st.sampled_from([0.0, 1.0, 60.0, 2.5]),
    st.integers(1, 12),
    st.data(),
)
def test_rrf_equals_the_formula_of_cormack_et_al(member_rows, rrf_k, k, data):
    n_m = len(member_rows)
    weights = data.draw(st.none() | st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=n_m, max_size=n_m).filter(any))
    rankings = [_ranking(rows, 10) for rows in member_rows]
    fused = reciprocal_rank_fusion(rankings, k=k, rank_constant=rrf_k, weights=weights)
    ref = _reference_rrf(member_rows, rrf_k, weights or [1.0] * n_m)
    _check_fused_against(ref, fused, k)


def test_rrf_defaults_and_rejections():
    rows = [[list(range(20))]]
    fused = reciprocal_rank_fusion([_ranking(rows[0], 20)])
    assert fused.ids.shape == (1, 10)  # default k = 10
    np.testing.assert_allclose(fused.scores[0, :2], [1 / 61, 1 / 62], rtol=1e-6)  # default constant 60
    assert reciprocal_rank_fusion([_ranking([[4]], 1)], k=1, rank_constant=0).scores[0, 0] == 1.0
    with pytest.raises(UserError, match=r"^rrf: needs at least one ranking$"):
        reciprocal_rank_fusion([])
    for bad in (-1e-6, float("nan"), float("inf")):
        with pytest.raises(UserError, match=r"^rrf: rank_constant must be a finite non-negative number, got "):
            reciprocal_rank_fusion([_ranking([[1]], 1)], rank_constant=bad)
    with pytest.raises(UserError, match=r"^rrf: 1 weights given for 2"):
        reciprocal_rank_fusion([_ranking([[1]], 1)] * 2, weights=[1])


def _toy_members():
    data = planted_dataset("dev", n_queries=6, n_distractors=150)
    members = [ScrambleRetriever("a", gold_max_rank=40, seed=1), ScrambleRetriever("b", gold_max_rank=40, seed=2)]
    return data, members


def test_rrf_retriever_fuses_each_members_top_depth():
    data, members = _toy_members()
    texts = data.queries.texts
    for depth, k in ((100, 10), (5, 10), (30, 3), (1, 1)):
        rrf = RRFRetriever(members, depth=depth) if depth != 100 else RRFRetriever(members)
        assert rrf.index(data.corpus) is rrf
        fused = rrf.search(texts, k)
        deep = [m.search(texts, max(depth, k)) for m in members]
        rows = [[[int(i) for i in r.ids[q] if i >= 0] for q in range(len(texts))] for r in deep]
        _check_fused_against(_reference_rrf(rows, 60.0, [1.0, 1.0]), fused, k)
        # fuse() on deeper precomputed rankings cuts them to max(depth, k) first
        deeper = [m.search(texts, 160) for m in members]
        _check_fused_against(_reference_rrf(rows, 60.0, [1.0, 1.0]), rrf.fuse(deeper, k), k)


def test_rrf_retriever_config_and_rejections():
    data, members = _toy_members()
    rrf = RRFRetriever(members, rank_constant=10, weights=[2, 1])
    assert rrf.name == "rrf(a+b)" and rrf.method == "rrf"
    members_saved = [{"name": "a", "params": {"name": "a", "gold_max_rank": 40, "seed": 1}},
                     {"name": "b", "params": {"name": "b", "gold_max_rank": 40, "seed": 2}}]  # each with its settings
    assert rrf.to_dict() == {"method": "rrf", "name": "rrf(a+b)", "rank_constant": 10.0, "depth": 100, "weights": [2.0, 1.0],
                             "members": members_saved}
    d = RRFRetriever(members).to_dict()
    assert d["rank_constant"] == 60.0 and d["depth"] == 100 and d["weights"] is None
    rrf.index(data.corpus)
    texts = data.queries.texts
    rows = [[[int(i) for i in r.ids[q] if i >= 0] for q in range(len(texts))] for r in (m.search(texts, 100) for m in members)]
    _check_fused_against(_reference_rrf(rows, 10.0, [2.0, 1.0]), rrf.search(texts, 8), 8)
    assert RRFRetriever(members, rank_constant=0).rank_constant == 0.0
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(UserError, match=r"^rrf: rank_constant must be a finite non-negative number, got "):
            RRFRetriever(members, rank_constant=bad)
    with pytest.raises(UserError, match=r"^rrf depth: expected a positive integer"):
        RRFRetriever(members, depth=0)
    with pytest.raises(UserError, match=r"^rrf: 1 weights given"):
        RRFRetriever(members, weights=[1])
    with pytest.raises(UserError, match=r"^rrf search k: expected a positive integer"):
        rrf.search(texts, 0)
    with pytest.raises(UserError, match=r"^rrf: needs at least 1 member"):
        RRFRetriever([])


# ---------------------------------------------------------------- score fusion reference
def _reference_normalize(values: list[float], method: str) -> tuple[list[float], float]:
    """Montague & Aslam (2001) normalizations of one list; (normalized, value for a missing candidate)."""
    n = len(values)
    if n == 0:
        return [], 0.0
    lo, hi = min(values), max(values)
    if method == "minmax":
        return ([(v - lo) / (hi - lo) for v in values] if hi > lo else [1.0] * n), 0.0
    if method == "zscore":
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        if std == 0:
            return [0.0] * n, 0.0
        return [(v - mean) / std for v in values], (lo - mean) / std
    total = sum(v - lo for v in values)
    return ([(v - lo) / total for v in values] if total > 0 else [1.0 / n] * n), 0.0


_SCORE = st.sampled_from([0.0, 1.0, 2.0, 3.5, -1.25, 7.0, 100.0])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.booleans(), _SCORE), min_size=1, max_size=6), min_size=1, max_size=4),
    st.sampled_from(["minmax", "zscore", "sum"]),
)
def test_normalize_scores_equals_montague_aslam(rows, method):
    width = max(len(r) for r in rows)
    scores = np.full((len(rows), width), 123.0)
    valid = np.zeros((len(rows), width), dtype=bool)
    for q, r in enumerate(rows):
        for j, (ok, s) in enumerate(r):
            valid[q, j], scores[q, j] = ok, s
    out, floor = normalize_scores(scores, valid, method)
    assert out.shape == scores.shape and floor.shape == (len(rows),)
    for q in range(len(rows)):
        vals = [scores[q, j] for j in range(width) if valid[q, j]]
        ref, ref_floor = _reference_normalize(vals, method)
        np.testing.assert_allclose(out[q][valid[q]], ref, rtol=1e-9, atol=1e-12)
        assert np.all(out[q][~valid[q]] == 0)
        assert math.isclose(floor[q], ref_floor, rel_tol=1e-9, abs_tol=1e-12)


def test_normalize_scores_single_and_empty_rows():
    scores = np.array([[5.0, 9.0], [5.0, 9.0], [-2.0, 3.0]])
    valid = np.array([[True, False], [False, False], [True, True]])
    for method, row0, row2, floor2 in (("minmax", 1.0, [0.0, 1.0], 0.0), ("zscore", 0.0, [-1.0, 1.0], -1.0),
                                       ("sum", 1.0, [0.0, 1.0], 0.0)):
        out, floor = normalize_scores(scores, valid, method)
        assert out[0].tolist() == [row0, 0.0] and out[1].tolist() == [0.0, 0.0]
        np.testing.assert_allclose(out[2], row2)
        np.testing.assert_allclose(floor, [0.0, 0.0, floor2])
    with pytest.raises(UserError, match=r"^score fusion: unknown normalization 'max' \(choose from minmax, zscore, sum\)$"):
        normalize_scores(scores, valid, "max")


def _reference_score_fusion(member_lists, method, weights):
    """member_lists[m][q]: [(id, score), ...]; CombSUM of normalized scores, missing -> normalized minimum."""
    out = []
    for q in range(len(member_lists[0])):
        pool = sorted({d for lists in member_lists for d, _ in lists[q]})
        fused = {d: 0.0 for d in pool}
        for m, lists in enumerate(member_lists):
            ids = [d for d, _ in lists[q]]
            norm, floor = _reference_normalize([s for _, s in lists[q]], method)
            by_id = dict(zip(ids, norm))
            for d in pool:
                fused[d] += weights[m] * by_id.get(d, floor)
        out.append(fused)
    return out


def _score_ranking(lists: list[list[tuple[int, float]]], depth: int) -> Ranking:
    ids = np.full((len(lists), depth), -1, dtype=np.int64)
    scores = np.full((len(lists), depth), -np.inf, dtype=np.float32)
    for q, row in enumerate(lists):
        for j, (d, s) in enumerate(row):
            ids[q, j], scores[q, j] = d, s
    return Ranking(ids, scores)


def _member_lists(draw_rows):
    # each row: unique ids with descending float32-exact scores
    return [[(d, float(s)) for d, s in row] for row in draw_rows]


_SCORED_ROW = st.lists(st.integers(0, 12), unique=True, max_size=7).flatmap(
    lambda ids: st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 9.0, -3.0]), min_size=len(ids), max_size=len(ids)).map(
        lambda ss: list(zip(ids, sorted(ss, reverse=True)))))


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 3).flatmap(lambda n_q: st.lists(st.lists(_SCORED_ROW, min_size=n_q, max_size=n_q), min_size=1, max_size=3)),
    st.sampled_from(["minmax", "zscore", "sum"]),
    st.integers(1, 10),
    st.data(),
)
def test_score_fusion_equals_combsum_of_normalized_scores(member_lists, method, k, data):
    n_m = len(member_lists)
    weights = data.draw(st.none() | st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=n_m, max_size=n_m).filter(any))
    rankings = [_score_ranking(lists, 8) for lists in member_lists]
    fused = score_fusion(rankings, method=method, k=k, weights=weights)
    _check_fused_against(_reference_score_fusion(member_lists, method, weights or [1.0] * n_m), fused, k)


def test_score_fusion_defaults_and_rejections():
    a = _score_ranking([[(d, 20.0 - d) for d in range(15)]], 15)
    b = _score_ranking([[(d, float(d)) for d in range(3, 18)]], 15)
    fused = score_fusion([a, b])
    assert fused.ids.shape == (1, 10)  # default k = 10
    ref = _reference_score_fusion([[[(d, 20.0 - d) for d in range(15)]], [[(d, float(d)) for d in range(3, 18)]]], "minmax", [1, 1])
    _check_fused_against(ref, fused, 10)
    with pytest.raises(UserError, match=r"^score fusion: needs at least one ranking$"):
        score_fusion([])
    with pytest.raises(UserError, match=r"^fuse-zscore: 1 weights given for 2"):
        score_fusion([a, b], method="zscore", weights=[1])


def _toy_lists(ranking: Ranking):
    return [[(int(d), float(s)) for d, s in zip(ranking.ids[q], ranking.scores[q]) if d >= 0] for q in range(len(ranking))]


@pytest.mark.parametrize("method", ["minmax", "zscore", "sum"])
def test_score_fusion_retriever_normalizes_each_members_top_depth(method):
    data, members = _toy_members()
    texts = data.queries.texts
    for depth, k in ((100, 10), (6, 10), (20, 4)):
        sf = ScoreFusionRetriever(members, method=method, depth=depth) if depth != 100 else ScoreFusionRetriever(members, method=method)
        assert sf.index(data.corpus) is sf
        deep = [_toy_lists(m.search(texts, max(depth, k))) for m in members]
        ref = _reference_score_fusion(deep, method, [1.0, 1.0])
        _check_fused_against(ref, sf.search(texts, k), k)
        _check_fused_against(ref, sf.fuse([m.search(texts, 160) for m in members], k), k)


def test_score_fusion_retriever_config_and_rejections():
    data, members = _toy_members()
    sf = ScoreFusionRetriever(members, method="zscore", weights="1, 3", depth=50)
    assert sf.name == "fuse-zscore(a+b)" and sf.method == "zscore"
    assert sf.to_dict() == {"method": "fuse-zscore", "name": "fuse-zscore(a+b)", "normalization": "zscore", "depth": 50,
                            "weights": [1.0, 3.0], "members": [{"name": "a", "params": {"name": "a", "gold_max_rank": 40, "seed": 1}},
                                                               {"name": "b", "params": {"name": "b", "gold_max_rank": 40, "seed": 2}}]}
    d = ScoreFusionRetriever(members).to_dict()
    assert d["normalization"] == "minmax" and d["depth"] == 100 and d["weights"] is None
    sf.index(data.corpus)
    texts = data.queries.texts
    deep = [_toy_lists(m.search(texts, 50)) for m in members]
    _check_fused_against(_reference_score_fusion(deep, "zscore", [1.0, 3.0]), sf.search(texts, 7), 7)
    with pytest.raises(UserError, match=r"^score fusion: unknown normalization 'max' \(choose from minmax, zscore, sum\)$"):
        ScoreFusionRetriever(members, method="max")
    with pytest.raises(UserError, match=r"^fuse-sum depth: expected a positive integer"):
        ScoreFusionRetriever(members, method="sum", depth=0)
    with pytest.raises(UserError, match=r"^fuse-sum: 3 weights given"):
        ScoreFusionRetriever(members, method="sum", weights=[1, 1, 1])
    with pytest.raises(UserError, match=r"^fuse-zscore search k: expected a positive integer"):
        sf.search(texts, 0)
    with pytest.raises(UserError, match=r"^score fusion: needs at least 1 member"):
        ScoreFusionRetriever([])


# ---------------------------------------------------------------- ordinal
def _ordinal_data(n=60, k=12, seed=0):
    rng = np.random.default_rng(seed)
    scores = -np.sort(-rng.gamma(2.0, 3.0, size=(n, k)), axis=1)
    ranks = rng.integers(1, 2 * k, size=n)
    return scores, ranks


def test_ordinal_defaults_and_parameter_checks():
    sel = Ordinal()
    assert sel.get_params() == {"tau": 25, "offset": 1, "alpha": 1.0, "normalization": "softmax"}
    assert sel.spec == "ordinal:25" and Ordinal(np.int64(4)).spec == "ordinal:4"
    cases = [
        (dict(tau=0), r"^selector ordinal:0: τ must be an integer >= 1$"),
        (dict(tau=True), r"^selector ordinal:True: τ must be an integer >= 1$"),
        (dict(tau=2.0), r"^selector ordinal:2.0: τ must be an integer >= 1$"),
        (dict(tau=3, offset=1.5), r"^selector ordinal:3,offset=1\.5: offset b must be an integer, got 1.5$"),
        (dict(tau=3, offset=True), r"^selector ordinal:3,offset=True: offset b must be an integer, got True$"),
        (dict(tau=3, alpha=0), r"^selector ordinal:3,alpha=0\.0: alpha must be > 0, got 0$"),
        (dict(tau=3, alpha="1"), r"^selector ordinal:3,alpha=1: alpha must be > 0, got '1'$"),
        (dict(tau=3, normalization="l2"), r"^selector ordinal:3,normalization=l2: normalization must be one of softmax, sum$"),
    ]
    scores, ranks = _ordinal_data()
    for kwargs, message in cases:
        with pytest.raises(UserError, match=message):
            Ordinal(**kwargs).fit(scores, ranks)
        with pytest.raises(UserError, match=message):
            Ordinal(**kwargs).features(scores)
    # accepted edge values
    Ordinal(tau=1, offset=np.int64(-2), alpha=np.float32(0.5)).fit(scores, ranks)
    Ordinal(tau=3, offset=0, alpha=2).fit(scores, ranks)


@pytest.mark.parametrize("tau, alpha, normalization", [(25, 1.0, "softmax"), (5, 3.0, "sum"), (12, 0.25, "softmax")])
def test_ordinal_is_ridge_on_capped_ranks_rounded_and_clipped(tau, alpha, normalization):
    from sklearn.linear_model import Ridge

    scores, ranks = _ordinal_data(seed=tau)
    sel = Ordinal(tau=tau, alpha=alpha, normalization=normalization)
    assert sel.fit(scores, ranks) is sel
    # the features: the paper's normalized top-τ scores, zero padded past K
    top = scores[:, :tau]
    if normalization == "softmax":
        w = np.exp(top - top.max(axis=1, keepdims=True))
    else:
        w = top.copy()
    feats = np.zeros((len(scores), tau))
    feats[:, : top.shape[1]] = w / w.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(sel.features(scores), feats, rtol=1e-12)
    labels = np.minimum(ranks, tau)
    ridge = Ridge(alpha=alpha).fit(feats, labels)
    np.testing.assert_allclose(sel.coef_, ridge.coef_, rtol=1e-6, atol=1e-9)
    assert sel.intercept_ == pytest.approx(ridge.intercept_, rel=1e-9)
    assert sel.label_max_ == labels.max() and sel.n_train_ == len(scores)
    assert sel.backend_ == "mord 0.7" or sel.backend_ == "sklearn Ridge"
    raw = ridge.predict(feats)
    rank = np.clip(np.round(raw), 0, labels.max()).astype(int)
    assert sel.predict_rank(scores).tolist() == rank.tolist()
    assert sel.predict_rank(scores).dtype == np.int64
    k = scores.shape[1]
    for offset in (-3, 0, 1, 4):
        sel.offset = offset
        out = sel.predict(scores)
        assert out.dtype == np.int64
        assert out.tolist() == np.clip(rank + offset, 1, min(tau, k)).tolist()


def test_ordinal_rank_is_clipped_to_zero_and_label_max():
    sel = Ordinal(tau=3, offset=0)
    sel.set_fitted_state({"coef": [0.0, 0.0, 0.0], "intercept": -4.0, "label_max": 2})
    assert sel.predict_rank(np.zeros((2, 3))).tolist() == [0, 0]
    assert sel.predict(np.zeros((2, 3))).tolist() == [1, 1]
    sel.set_fitted_state({"coef": [0.0, 0.0, 0.0], "intercept": 9.0, "label_max": 2})
    assert sel.predict_rank(np.zeros((2, 3))).tolist() == [2, 2]
    sel.set_fitted_state({"coef": [0.0, 0.0, 0.0], "intercept": 1.6, "label_max": 3})
    assert sel.predict_rank(np.zeros((1, 3))).tolist() == [2]
    sel.offset = 5
    assert sel.predict(np.zeros((1, 2))).tolist() == [2]  # min(τ, K) = 2


def test_ordinal_fitted_state_round_trip_and_errors():
    scores, ranks = _ordinal_data()
    sel = Ordinal(tau=6).fit(scores, ranks)
    state = sel.fitted_state()
    assert set(state) == {"coef", "intercept", "label_max", "n_train", "backend"}
    assert state["n_train"] == 60 and state["label_max"] == 6 and len(state["coef"]) == 6
    back = selector_from_dict(sel.to_dict())
    assert back.fitted_state() == state
    assert back.predict(scores).tolist() == sel.predict(scores).tolist()
    assert Ordinal().fitted_state() == {}
    bare = Ordinal(tau=2)
    bare.set_fitted_state({"coef": [1.0, 2.0], "intercept": 0.5, "label_max": 3})
    assert bare.n_train_ == 0 and bare.backend_ == "" and bare.intercept_ == 0.5 and bare.label_max_ == 3
    bare.set_fitted_state({})
    assert bare.label_max_ == 3
    with pytest.raises(UserError, match=r"^selector ordinal:2: bad fitted state \('intercept'\)$"):
        Ordinal(tau=2).set_fitted_state({"coef": [1.0, 2.0], "label_max": 3})
    with pytest.raises(UserError, match=r"^selector ordinal:2: bad fitted state"):
        Ordinal(tau=2).set_fitted_state({"coef": [1.0, 2.0], "intercept": "x", "label_max": 3})
    with pytest.raises(UserError, match=r"^selector ordinal:2: fitted coefficients have shape \(3,\), expected \(2,\)$"):
        Ordinal(tau=2).set_fitted_state({"coef": [1.0, 2.0, 3.0], "intercept": 0.0, "label_max": 3})
    with pytest.raises(UserError, match=r"^selector ordinal:2: fitting needs at least 2 queries, got 1$"):
        Ordinal(tau=2).fit(scores[:1], ranks[:1])
    Ordinal(tau=2).fit(scores[:2], np.array([1, 2]))
    with pytest.raises(UserError, match=r"^selector ordinal:25: not fitted \(fit it on training queries or load a fitted one\)$"):
        Ordinal().predict_rank(scores)


@pytest.mark.parametrize("method", ["minmax", "zscore", "sum"])
def test_score_fusion_with_a_member_that_returned_no_columns(method):
    # a member ranking of depth 0 (e.g. searched over an empty corpus) contributes nothing
    out, floor = normalize_scores(np.zeros((2, 0)), np.zeros((2, 0), dtype=bool), method)
    assert out.shape == (2, 0) and floor.tolist() == [0.0, 0.0]
    lists = [[(3, 3.0), (1, 2.0), (2, 1.0)], [(0, 0.5)]]
    a = _score_ranking(lists, 3)
    empty = Ranking(np.zeros((2, 0), dtype=np.int64), np.zeros((2, 0), dtype=np.float32))
    fused = score_fusion([a, empty], method=method, k=4)
    _check_fused_against(_reference_score_fusion([lists, [[], []]], method, [1.0, 1.0]), fused, 4)


def test_ordinal_without_mord_fits_sklearn_ridge(monkeypatch):
    import sys

    from sklearn.linear_model import Ridge

    scores, ranks = _ordinal_data(seed=5)
    with_mord = Ordinal(tau=8, alpha=2.0).fit(scores, ranks)
    monkeypatch.setitem(sys.modules, "mord", None)  # an environment without mord: `import mord` raises ImportError
    sel = Ordinal(tau=8, alpha=2.0).fit(scores, ranks)
    assert sel.backend_ == "sklearn Ridge"
    ridge = Ridge(alpha=2.0).fit(sel.features(scores), np.minimum(ranks, 8))
    np.testing.assert_allclose(sel.coef_, ridge.coef_, rtol=1e-9, atol=1e-12)
    assert sel.intercept_ == pytest.approx(ridge.intercept_, rel=1e-9)
    np.testing.assert_allclose(sel.coef_, with_mord.coef_, rtol=1e-6, atol=1e-9)
    assert sel.predict(scores).tolist() == with_mord.predict(scores).tolist()
