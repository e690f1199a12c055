"""Choosing the answer passage among the n passages read for one question.

The answer of a question is the span of the passage with the highest score:
the reader's span score alone (DrQA; Chen et al., 2017, "Reading Wikipedia to
Answer Open-Domain Questions", ACL) or its linear interpolation with the
retriever's score (BERTserini; Yang et al., 2019, "End-to-End Open-Domain
Question Answering with BERTserini", NAACL demos):

    score = (1 - mu) * retriever_score + mu * reader_score

``mu = 1`` is reader-only (DrQA), ``mu = 0`` retriever-only.  Retriever scores
are used as given (BM25 scores, dot products, fused scores...): nothing here
normalizes them, so a useful ``mu`` depends on the retriever's score scale and
is tuned per retriever.

Inputs are ``[Q, N]`` arrays whose column ``j`` is the passage at retrieval
rank ``j`` (best first).  Entries that are NaN or ``-inf`` (padding, empty
passages) are never chosen unless every candidate of the prefix is such an
entry; then rank 0 is returned.  Ties go to the better-ranked passage.
"""

from __future__ import annotations

import numpy as np

from data.errors import UserError


def passage_scores(reader_scores, retriever_scores=None, mu: float = 1.0) -> np.ndarray:
    """The ``[Q, N]`` score the answer passage is chosen by (NaN mapped to ``-inf``)."""
    reader = _as_matrix(reader_scores, "reader_scores")
    mu = float(mu)
    if not 0.0 <= mu <= 1.0:
        raise UserError(f"mu={mu}: must be in [0, 1]")
    if retriever_scores is None:
        if mu != 1.0:
            raise UserError(f"mu={mu} interpolates with retriever scores, but none were given")
        combined = reader
    else:
        retriever = _as_matrix(retriever_scores, "retriever_scores")
        if retriever.shape != reader.shape:
            raise UserError(f"retriever_scores shape {retriever.shape} differs from reader_scores shape {reader.shape}")
        if mu == 1.0:
            combined = reader
        elif mu == 0.0:
            combined = retriever
        else:
            with np.errstate(invalid="ignore"):
                combined = (1.0 - mu) * retriever + mu * reader
    return np.where(np.isnan(combined), -np.inf, combined)


def choose_passage(reader_scores, retriever_scores=None, n=None, mu: float = 1.0) -> np.ndarray:
    """Rank (column) of the chosen passage per query among its top ``n[q]``: int64 ``[Q]``.

    ``n`` is one int for all queries or an int array ``[Q]`` with values in
    ``0..N`` (default ``N``); a query with ``n = 0`` reads nothing and gets -1.
    """
    scores = passage_scores(reader_scores, retriever_scores, mu)
    q, width = scores.shape
    n = _as_n(n, q, width)
    masked = np.where(np.arange(width)[None, :] < n[:, None], scores, -np.inf)
    chosen = masked.argmax(axis=1) if width else np.zeros(q, np.int64)
    return np.where(n > 0, chosen, -1).astype(np.int64)


def choose_passage_every_n(reader_scores, retriever_scores=None, mu: float = 1.0) -> np.ndarray:
    """Chosen passage for every n at once: int64 ``[Q, N]``, column ``n - 1`` is for top-n.

    A running argmax over rank prefixes (O(Q·N)): rank ``j`` becomes the choice
    when it beats the best score of ranks ``0..j-1``; the choice for top-n is
    the last such rank below n.  Equals :func:`choose_passage` for each n.
    """
    scores = passage_scores(reader_scores, retriever_scores, mu)
    q, width = scores.shape
    if width == 0:
        return np.zeros((q, 0), np.int64)
    best_before = np.maximum.accumulate(scores, axis=1)
    best_before = np.concatenate([np.full((q, 1), -np.inf), best_before[:, :-1]], axis=1)
    takes_over = scores > best_before
    takes_over[:, 0] = True
    ranks = np.where(takes_over, np.arange(width)[None, :], 0)
    return np.maximum.accumulate(ranks, axis=1).astype(np.int64)


def _as_matrix(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2:
        raise UserError(f"{name}: expected a [queries, passages] matrix, got shape {array.shape}")
    return array


def _as_n(n, q: int, width: int) -> np.ndarray:
    if n is None:
        return np.full(q, width, np.int64)
    array = np.asarray(n)
    if array.ndim == 0:
        array = np.full(q, array)
    if array.shape != (q,):
        raise UserError(f"n: expected one value or {q} values (one per query), got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise UserError("n: values must be whole numbers")
        array = array.astype(np.int64)
    if len(array) and (array.min() < 0 or array.max() > width):
        raise UserError(f"n: values must be in 0..{width}, got {int(array.min())}..{int(array.max())}")
    return array.astype(np.int64)
