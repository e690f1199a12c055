"""Regret and bootstrap (eval.tradeoff) against independent derivations: numpy's trapezoid rule,
explicit resampling of the questions, numpy's percentiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from data.errors import UserError
from eval.tradeoff import bootstrap_means, bootstrap_weights, gaps, percentile_interval, regret, size_weights


@st.composite
def tables(draw, batch=False):
    k = draw(st.integers(1, 6))
    m = draw(st.integers(1, 4))
    shape = ((draw(st.integers(1, 3)),) if batch else ()) + (k, m)
    table = draw(arrays(np.float64, shape, elements=st.floats(0, 100)))
    steps = draw(st.lists(st.integers(1, 5000), min_size=k, max_size=k))
    sizes = np.cumsum(steps).astype(np.float64)
    ref = np.asarray(draw(st.lists(st.booleans(), min_size=m, max_size=m)))
    if not ref.any():
        ref[draw(st.integers(0, m - 1))] = True
    return table, sizes, ref


@settings(max_examples=40, deadline=None)
@given(tables())
def test_regret_is_the_area_between_the_curves_over_the_size_range(args):
    table, sizes, ref = args
    best = table[:, ref].max(axis=1)
    gap = best[:, None] - table
    np.testing.assert_allclose(gaps(table, ref), gap)
    np.testing.assert_allclose(gaps(table), table.max(axis=1)[:, None] - table)
    if len(sizes) > 1:
        want = np.trapezoid(gap, sizes, axis=0) / (sizes[-1] - sizes[0])
    else:
        want = gap[0]
    np.testing.assert_allclose(regret(table, sizes, ref), want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(regret(table, sizes, ref, weighting="uniform"), gap.mean(axis=0), rtol=1e-9, atol=1e-9)
    if len(sizes) > 1:  # the area between the curves drawn over log size, divided by the log size range
        logs = np.log(sizes)
        want_log = np.trapezoid(gap, logs, axis=0) / (logs[-1] - logs[0])
        np.testing.assert_allclose(regret(table, sizes, ref, weighting="log-trapezoid"), want_log, rtol=1e-9, atol=1e-9)
    w = size_weights(sizes)
    assert w.shape == sizes.shape and w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(size_weights(sizes, "uniform"), np.full(len(sizes), 1 / len(sizes)))


@settings(max_examples=20, deadline=None)
@given(tables(batch=True))
def test_leading_axes_are_replicates(args):
    # [B, K, M]: every replicate's regret is the regret of its own table
    table, sizes, ref = args
    got = regret(table, sizes, ref)
    assert got.shape == (table.shape[0], table.shape[2])
    for b in range(table.shape[0]):
        np.testing.assert_allclose(got[b], regret(table[b], sizes, ref))
        np.testing.assert_allclose(gaps(table, ref)[b], gaps(table[b], ref))


def test_regret_errors_name_the_problem():
    with pytest.raises(UserError, match="^regret: need at least one corpus size$"):
        size_weights([])
    with pytest.raises(UserError, match="at least one corpus size"):
        size_weights([[1.0, 2.0]])
    with pytest.raises(UserError, match=r"strictly increasing, got \[1.0, 1.0\]"):
        size_weights([1, 1])
    with pytest.raises(UserError, match="weighting 'simpson': use one of trapezoid, log-trapezoid, uniform"):
        size_weights([1, 2], "simpson")
    with pytest.raises(UserError, match="weighting 'simpson'"):
        size_weights([1], "simpson")  # checked before the one-size shortcut
    with pytest.raises(UserError, match=r"log-trapezoid weights need positive corpus sizes, got \[0.0, 5.0\]"):
        size_weights([0, 5], "log-trapezoid")
    with pytest.raises(UserError, match=r"table must be \[sizes, systems\], got shape \(3,\)"):
        gaps(np.zeros(3))
    with pytest.raises(UserError, match="reference mask"):
        gaps(np.zeros((2, 3)), reference=[True, True])  # wrong length
    with pytest.raises(UserError, match="^regret: the reference mask must name at least one of the systems$"):
        gaps(np.zeros((2, 3)), reference=[False, False, False])
    with pytest.raises(UserError, match="table has 2 sizes but 3 sizes were given"):
        regret(np.zeros((2, 3)), [1, 2, 3])
    with pytest.raises(UserError, match="^bootstrap: no questions$"):
        bootstrap_weights(0, 10, 0)
    with pytest.raises(UserError, match=r"n_boot must be >= 1 \(got 0\)"):
        bootstrap_weights(5, 0, 0)
    with pytest.raises(UserError, match="3 questions but weights for 4"):
        bootstrap_means(np.zeros(3), bootstrap_weights(4, 2, 0))
    for level in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(UserError, match=f"confidence level {level}: must be in"):
            percentile_interval(np.zeros(10), level)


def test_the_smallest_valid_arguments_are_accepted():
    assert size_weights([5.0]).tolist() == [1.0]
    w = bootstrap_weights(1, 1, 0)  # one question, one replicate: it is drawn once
    assert w.shape == (1, 1) and w.tolist() == [[1.0]]
    lo, hi = percentile_interval(np.arange(101.0), 0.5)
    assert (lo, hi) == (25.0, 75.0)


@settings(max_examples=30, deadline=None)
@given(q=st.integers(1, 40), b=st.integers(1, 30), seed=st.integers(0, 2**31), extra=st.integers(1, 3))
def test_bootstrap_replicates_are_means_of_resampled_questions(q, b, seed, extra):
    w = bootstrap_weights(q, b, seed)
    assert w.shape == (b, q) and w.dtype == np.float32
    counts = np.rint(w.astype(np.float64) * q).astype(np.int64)
    np.testing.assert_allclose(w, counts / q, rtol=1e-6)  # multinomial counts / Q
    assert np.all(counts >= 0) and np.all(counts.sum(axis=1) == q)  # Q draws with replacement
    assert np.array_equal(w, bootstrap_weights(q, b, seed))  # seeded
    x = np.random.default_rng(seed).random((q, 2, extra))  # per question: [sizes, systems]
    reps = bootstrap_means(x, w)
    assert reps.shape == (b, 2, extra)
    for r in range(b):
        resample = np.repeat(x, counts[r], axis=0)  # the replicate's question sample, explicitly
        np.testing.assert_allclose(reps[r], resample.mean(axis=0), rtol=1e-5, atol=1e-7)


def test_bootstrap_weights_draw_every_question_uniformly():
    w = bootstrap_weights(7, 4000, 1).astype(np.float64) * 7
    # each question's count is Binomial(7, 1/7): mean 1, variance 6/7
    assert w.mean(axis=0) == pytest.approx(np.ones(7), abs=0.08)
    assert w.var(axis=0) == pytest.approx(np.full(7, 6 / 7), abs=0.1)
    assert not np.array_equal(bootstrap_weights(7, 50, 1), bootstrap_weights(7, 50, 2))


@settings(max_examples=25, deadline=None)
@given(reps=arrays(np.float64, st.tuples(st.integers(2, 60), st.integers(1, 3)), elements=st.floats(-5, 5)),
       level=st.floats(0.05, 0.99))
def test_percentile_interval_equals_numpy_percentiles(reps, level):
    lo, hi = percentile_interval(reps, level)
    alpha = 100 * (1 - level) / 2
    np.testing.assert_allclose(lo, np.percentile(reps, alpha, axis=0), atol=1e-12)
    np.testing.assert_allclose(hi, np.percentile(reps, 100 - alpha, axis=0), atol=1e-12)
    default = percentile_interval(reps)
    np.testing.assert_allclose(default[0], np.percentile(reps, 2.5, axis=0), atol=1e-12)
    np.testing.assert_allclose(default[1], np.percentile(reps, 97.5, axis=0), atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(tables(batch=True), st.sampled_from([np.uint8, np.int16, np.float32]))
def test_any_numeric_table_and_a_0_1_reference_give_the_float64_result(args, dtype):
    # EM counts stored as unsigned ints: a system above the reference best (an oracle) must get a
    # negative gap, not a wrapped-around one; a 0/1 reference is a mask, not column indices
    table, sizes, ref = args
    table = np.rint(table).astype(dtype)
    exact = table.astype(np.float64)
    ref01 = ref.astype(int).tolist()
    np.testing.assert_allclose(gaps(table, ref01), gaps(exact, ref), rtol=1e-12, atol=0)
    np.testing.assert_allclose(regret(table, sizes, ref01), regret(exact, sizes, ref), rtol=1e-12, atol=1e-12)
    # no reference: the best over every system, per replicate
    np.testing.assert_allclose(gaps(table), exact.max(axis=-1, keepdims=True) - exact, rtol=1e-12, atol=0)


def test_an_oracle_left_out_of_the_reference_has_negative_gaps_in_any_dtype():
    table = np.array([[50, 60], [40, 41]], dtype=np.uint8)
    assert gaps(table, [1, 0]).tolist() == [[0.0, -10.0], [0.0, -1.0]]
