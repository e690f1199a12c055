"""The one span decoder (readers.spans.best_spans) against a brute-force argmax and the two decoders it replaced."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from readers.spans import EARLIEST_START, SHORTEST, best_spans, context_mask


def brute_force(start, end, allowed, max_tokens, ties):
    """Every valid (s, e): both allowed, 0 <= e - s < max_tokens; the best under the tie rule."""
    best = (-np.inf, 0, 0)
    best_key = None
    for s in range(start.shape[0]):
        for e in range(s, min(s + max_tokens, start.shape[0])):
            if not (allowed[s] and allowed[e]):
                continue
            score = start[s] + end[e]
            key = (-score, s, e - s) if ties == EARLIEST_START else (-score, e - s, s)
            if best_key is None or key < best_key:
                best, best_key = (score, s, e), key
    return best


def legacy_numpy(start_logits, end_logits, allowed, max_answer_tokens=30):
    """readers.squad_features.best_spans before the merge (training evaluation), verbatim."""
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    rows, width = start_logits.shape
    s = np.where(allowed, start_logits, -np.inf)
    e = np.where(allowed, end_logits, -np.inf)
    best = np.full(rows, -np.inf)
    best_start = np.zeros(rows, dtype=np.int64)
    best_len = np.zeros(rows, dtype=np.int64)
    for k in range(min(max_answer_tokens, width)):
        score = s[:, : width - k] + e[:, k:]
        arg = score.argmax(axis=1)
        val = score[np.arange(rows), arg]
        better = val > best
        best = np.where(better, val, best)
        best_start = np.where(better, arg, best_start)
        best_len = np.where(better, k, best_len)
    return best, best_start, best_start + best_len


def legacy_band(start_logits, end_logits, ctx_lo, ctx_hi, max_answer_tokens):
    """readers.extractive.best_spans before the merge (inference), verbatim."""
    batch, width = start_logits.shape
    pos = torch.arange(width, device=start_logits.device)
    inside = (pos[None, :] >= ctx_lo[:, None]) & (pos[None, :] <= ctx_hi[:, None])
    neg = torch.tensor(float("-inf"), device=start_logits.device, dtype=start_logits.dtype)
    start = torch.where(inside, start_logits, neg)
    end = torch.where(inside, end_logits, neg)
    band = int(max_answer_tokens)
    end_band = F.pad(end, (0, band - 1), value=float("-inf")).unfold(1, band, 1)
    total = (start[:, :, None] + end_band).reshape(batch, -1)
    score, flat = total.max(dim=1)
    i = torch.div(flat, band, rounding_mode="floor")
    j = i + flat % band
    return score, i, j


def random_cases(seed, n=300):
    """Rows of logits (continuous, or small integers so that ties are common) with masks of three kinds."""
    rng = np.random.default_rng(seed)
    for c in range(n):
        rows, width, max_tokens = int(rng.integers(1, 5)), int(rng.integers(1, 20)), int(rng.integers(1, 8))
        if c % 2:
            start, end = rng.integers(-3, 4, (2, rows, width)).astype(np.float32)
        else:
            start, end = rng.normal(0, 4, (2, rows, width)).astype(np.float32)
        kind = c % 3
        if kind == 0:  # any tokens
            allowed = rng.random((rows, width)) < 0.6
        else:  # one run of context tokens (possibly empty), as a window's passage
            lo = rng.integers(0, width, rows)
            hi = rng.integers(-1, width, rows)
            allowed = context_mask(width, torch.from_numpy(lo), torch.from_numpy(hi)).numpy()
        yield start, end, allowed, max_tokens


@pytest.mark.parametrize("ties", [EARLIEST_START, SHORTEST])
def test_best_spans_equals_brute_force_with_ties(ties):
    for start, end, allowed, max_tokens in random_cases(1):
        for dtype, np_dtype in ((torch.float32, np.float32), (torch.float64, np.float64)):
            score, i, j = best_spans(torch.from_numpy(start).to(dtype), torch.from_numpy(end).to(dtype),
                                     torch.from_numpy(allowed), max_tokens, ties=ties)
            assert score.dtype == dtype
            for r in range(start.shape[0]):
                # sums in the logits' dtype, as the decoder adds them (float32 rounding can make ties)
                want_score, want_i, want_j = brute_force(start[r].astype(np_dtype), end[r].astype(np_dtype),
                                                         allowed[r], max_tokens, ties)
                assert score[r].item() == want_score
                assert (int(i[r]), int(j[r])) == (want_i, want_j)


def test_numpy_inputs_give_the_training_decoder_exactly():
    for start, end, allowed, max_tokens in random_cases(2):
        got = best_spans(start, end, allowed, max_tokens, ties=SHORTEST)
        want = legacy_numpy(start, end, allowed, max_tokens)
        for g, w in zip(got, want):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_context_masks_give_the_inference_decoder_exactly():
    rng = np.random.default_rng(3)
    for c in range(300):
        rows, width, max_tokens = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 12))
        logits = (rng.integers(-3, 4, (2, rows, width)) if c % 2 else rng.normal(0, 4, (2, rows, width)))
        start, end = torch.from_numpy(logits.astype(np.float32))
        lo = torch.from_numpy(rng.integers(0, width, rows))
        hi = torch.from_numpy(rng.integers(-1, width, rows))
        got = best_spans(start, end, context_mask(width, lo, hi), max_tokens)
        want = legacy_band(start, end, lo, hi, max_tokens)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            assert torch.equal(g, w)


def test_rows_without_allowed_tokens_and_empty_windows():
    score, i, j = best_spans(np.ones((2, 5)), np.ones((2, 5)), np.zeros((2, 5), bool), 3)
    assert np.all(score == -np.inf) and np.all(i == 0) and np.all(j == 0)
    score, i, j = best_spans(torch.ones(2, 0), torch.ones(2, 0), torch.zeros(2, 0, dtype=torch.bool), 3)
    assert torch.all(score == float("-inf")) and i.tolist() == j.tolist() == [0, 0]


def test_unknown_tie_rule_is_refused():
    with pytest.raises(ValueError, match="ties"):
        best_spans(np.ones((1, 3)), np.ones((1, 3)), np.ones((1, 3), bool), 2, ties="longest")
