"""Best-span decoding: the one decoder of inference (:mod:`readers.extractive`) and training evaluation.

Decoding follows BERT's SQuAD recipe (Devlin et al., 2019, "BERT: Pre-training
of Deep Bidirectional Transformers for Language Understanding", section 4.2):
per window, the span ``i <= j < i + max_answer_tokens`` over allowed (passage)
tokens that maximises start logit ``i`` + end logit ``j``.  Instead of the full
L x L table only the band of the upper triangle is scored:
``score[b, i, k] = start[b, i] + end[b, i + k]`` for ``k < max_answer_tokens``
(B x L x A work), in the dtype and on the device of the logits.
"""

from __future__ import annotations

import numpy as np

# tie rules: which of several spans with the same score wins
EARLIEST_START = "start"  # the earliest start, then the shortest span (inference: readers.extractive)
SHORTEST = "short"  # the shortest span, then the earliest start (training evaluation: readers.squad_features)
TIE_RULES = (EARLIEST_START, SHORTEST)


def context_mask(width: int, ctx_lo, ctx_hi):
    """``[B, width]`` bool mask of the tokens in ``[ctx_lo[b], ctx_hi[b]]`` (a window's passage tokens).

    ``ctx_lo``/``ctx_hi`` are int tensors ``[B]`` (a row with ``ctx_hi < ctx_lo``
    allows no token); the mask is on their device.
    """
    import torch

    pos = torch.arange(width, device=ctx_lo.device)
    return (pos[None, :] >= ctx_lo[:, None]) & (pos[None, :] <= ctx_hi[:, None])


def best_spans(start_logits, end_logits, allowed, max_answer_tokens: int = 30, *, ties: str = EARLIEST_START):
    """Per row, the span ``s <= e < s + max_answer_tokens`` over allowed tokens maximising start + end logit.

    ``start_logits``/``end_logits`` are ``[B, L]`` float tensors, ``allowed`` a
    ``[B, L]`` bool mask (see :func:`context_mask`).  Returns ``(scores,
    starts, ends)``, tensors ``[B]`` on the logits' device; the score is
    computed in the logits' dtype.  A row with no allowed token gets score
    ``-inf`` and span ``(0, 0)``.  ``ties`` picks among spans with equal scores:
    :data:`EARLIEST_START` or :data:`SHORTEST`.

    NumPy arrays (or lists) work too: they are decoded in float64 on the CPU and the
    results come back as NumPy arrays (float64 scores, int64 positions).
    """
    import torch

    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r}: expected one of {TIE_RULES}")
    if not isinstance(start_logits, torch.Tensor):
        score, i, j = best_spans(
            torch.from_numpy(np.asarray(start_logits, dtype=np.float64)),
            torch.from_numpy(np.asarray(end_logits, dtype=np.float64)),
            torch.from_numpy(np.asarray(allowed, dtype=bool)),
            max_answer_tokens,
            ties=ties,
        )
        return score.numpy(), i.numpy(), j.numpy()
    import torch.nn.functional as F

    batch, width = start_logits.shape
    if width == 0:
        zeros = torch.zeros(batch, dtype=torch.int64, device=start_logits.device)
        return torch.full((batch,), float("-inf"), dtype=start_logits.dtype, device=start_logits.device), zeros, zeros
    neg = torch.tensor(float("-inf"), device=start_logits.device, dtype=start_logits.dtype)
    start = torch.where(allowed, start_logits, neg)
    end = torch.where(allowed, end_logits, neg)
    band = int(max_answer_tokens)
    end_band = F.pad(end, (0, band - 1), value=float("-inf")).unfold(1, band, 1)  # [B, L, A]: end[b, i + k]
    total = start[:, :, None] + end_band
    if ties == EARLIEST_START:  # flat index i * A + k: the first maximum has the earliest start
        score, flat = total.reshape(batch, -1).max(dim=1)
        i = torch.div(flat, band, rounding_mode="floor")
        k = flat % band
    else:  # flat index k * L + i: the first maximum is the shortest span
        score, flat = total.transpose(1, 2).reshape(batch, -1).max(dim=1)
        k = torch.div(flat, width, rounding_mode="floor")
        i = flat % width
    return score, i, i + k
