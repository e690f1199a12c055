"""The stages of a run, as functions over plain types.

retrieve -> passages to read -> read the top N once -> answers for any n.
``pipeline.run`` and ``pipeline.sweep`` are thin drivers over these.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from data.errors import UserError
from data.types import Corpus, Dataset, Queries
from eval.answer_metrics import normalize_answer  # official SQuAD normalization
from retrievers.types import Ranking

READ_UNITS = ("sentence", "paragraph")


# ----------------------------------------------------------------- retrieval
def build_retriever(spec: str, options: dict[str, Any]):
    """The (unindexed) retriever ``spec`` names; ``options`` per registered kind (``bm25``, ``dense``, a plugin's, ``fusion``)."""
    from retrievers.registry import make_retriever

    return make_retriever(spec, options)


def retrieve(retriever, dataset: Dataset, depth: int, train: Dataset | None = None) -> Ranking:
    """Fit (learned retrievers, on ``train``), index the corpus, search every query."""
    from retrievers.fusion import needs_fit

    if depth < 1:
        raise UserError(f"--depth must be >= 1 (got {depth})")
    if needs_fit(retriever):
        if train is None:
            raise UserError(f"retriever {retriever.name!r} is learned: it needs a training split (--train-split)")
        retriever.fit(train)
    retriever.index(dataset.corpus)
    ranking = retriever.search(dataset.queries.texts, depth)
    if dataset.queries.answer_match is not None:
        resolve_open_gold(dataset.queries, dataset.corpus, ranking)
    return ranking


def resolve_open_gold(queries: Queries, corpus: Corpus, ranking: Ranking) -> np.ndarray:
    """Open-domain gold from a ranking: the known gold rows plus the retrieved rows that have an answer.

    DPR's protocol (Karpukhin et al. 2020) decides has-answer over the
    retrieved passages only, so no question scans the corpus.  Sets
    ``queries.gold`` and ``queries.has_answer`` (the ``[Q, K]`` matrix, in
    ranking order) and returns the matrix.
    """
    from eval.dpr_accuracy import has_answer_matrix

    mask = has_answer_matrix(ranking.ids, corpus.answer_texts, queries.answers, queries.answer_match,
                             progress=len(queries) >= 2000)
    known = queries.known_gold or [np.zeros(0, dtype=np.int64)] * len(queries)
    queries.gold = [np.union1d(np.asarray(k, dtype=np.int64), ranking.ids[q][mask[q]]) for q, k in enumerate(known)]
    queries.has_answer = mask
    return mask


# ------------------------------------------------------------------ passages
@dataclass
class Passages:
    """The passages a reader sees, per query, in retrieval order.

    ``keys[q, j]`` is the corpus row (``unit="sentence"``) or paragraph id
    (``unit="paragraph"``) of the j-th passage of query q, ``-1`` padding;
    ``texts[q][j]`` its text; ``retriever_scores[q, j]`` its retrieval score
    (for paragraphs: the score of its best-ranked sentence).
    """

    keys: np.ndarray
    texts: list[list[str]]
    retriever_scores: np.ndarray
    unit: str

    @property
    def depth(self) -> int:
        return self.keys.shape[1]


def passages_for(ranking: Ranking, corpus: Corpus, depth: int, unit: str = "sentence") -> Passages:
    """Top-``depth`` passages per query.  With paragraphs, repeated paragraphs keep their best rank."""
    if unit not in READ_UNITS:
        raise UserError(f"--read-unit {unit!r}: use sentence or paragraph")
    q = len(ranking)
    keys = np.full((q, depth), -1, dtype=np.int64)
    scores = np.full((q, depth), -np.inf, dtype=np.float32)
    texts: list[list[str]] = []
    use_paragraphs = unit == "paragraph" and bool(corpus.paragraph_texts)
    for i in range(q):
        row_keys, row_texts = [], []
        seen = set()
        for cid, s in zip(ranking.ids[i], ranking.scores[i]):
            if cid < 0:
                break
            key = int(corpus.paragraph_ids[cid]) if use_paragraphs else int(cid)
            if key in seen:
                continue
            seen.add(key)
            scores[i, len(row_keys)] = s
            row_keys.append(key)
            row_texts.append(corpus.paragraph_texts[key] if use_paragraphs else corpus.texts[cid])
            if len(row_keys) == depth:
                break
        keys[i, : len(row_keys)] = row_keys
        texts.append(row_texts)
    return Passages(keys, texts, scores, unit)


# ------------------------------------------------------------ answer overlap
def answer_bearing(passages: Passages, answers: Sequence[Sequence[str]], language: str = "en", *,
                   match: str | None = None, corpus: Corpus | None = None) -> np.ndarray:
    """``[Q, N]`` bool: passage j of query q contains a gold answer (normalized, whole tokens).

    With ``match`` (open-domain questions: ``"string"`` or ``"regex"``) it is
    DPR's has-answer test (:mod:`eval.dpr_accuracy`) on the passage text
    without its title, fetched by row from ``corpus``.
    """
    keys_are_rows = corpus is not None and (passages.unit == "sentence" or not corpus.paragraph_texts)
    if match is not None and keys_are_rows:
        from eval.dpr_accuracy import has_answer_matrix

        return has_answer_matrix(passages.keys, corpus.answer_texts, answers, match)
    out = np.zeros(passages.keys.shape, dtype=bool)
    for q, (row, golds) in enumerate(zip(passages.texts, answers)):
        if language == "en":
            needles = [f" {norm} " for norm in map(normalize_answer, golds) if norm]
            for j, text in enumerate(row):
                hay = f" {normalize_answer(text)} "
                out[q, j] = any(n in hay for n in needles)
        else:  # no word spaces to anchor on: plain containment after case folding
            needles = [a.strip().lower() for a in golds if a.strip()]
            for j, text in enumerate(row):
                out[q, j] = any(n in text.lower() for n in needles)
    return out


def first_true(mask: np.ndarray, none: int) -> np.ndarray:
    """1-based column of the first True per row (``none`` when a row has none)."""
    found = mask.any(axis=1)
    return np.where(found, mask.argmax(axis=1) + 1, none).astype(np.int64)


# ------------------------------------------------------------------- reading
@dataclass
class TopReads:
    """Reader output for every (query, passage) of the top N: ``[Q, N]`` arrays."""

    scores: np.ndarray
    texts: list[list[str]]
    n_read: int
    n_reused: int


def read_top(reader, questions: Sequence[str], passages: Passages, cache=None) -> TopReads:
    """Read every (question, passage) pair of the top N once."""
    flat_q, flat_p, where = [], [], []
    for q, row in enumerate(passages.texts):
        for j, text in enumerate(row):
            flat_q.append(questions[q])
            flat_p.append(text)
            where.append((q, j))
    reads = reader.read_pairs(flat_q, flat_p, cache=cache)
    scores = np.full(passages.keys.shape, -np.inf, dtype=np.float32)
    texts = [[""] * passages.depth for _ in range(len(passages.texts))]
    for (q, j), s, t in zip(where, reads.score, reads.text):
        scores[q, j] = s
        texts[q][j] = t
    return TopReads(scores, texts, reads.n_read, reads.n_reused)


def answers_for_n(reads: TopReads, passages: Passages, n: np.ndarray, mu: float = 1.0) -> tuple[list[str], np.ndarray]:
    """The answer per query when reading its top ``n[q]`` passages, and the chosen column."""
    from readers.aggregate import choose_passage

    retr = passages.retriever_scores if mu != 1.0 else None
    chosen = choose_passage(reads.scores, retr, n=n, mu=mu)
    answers = [reads.texts[q][c] if c >= 0 else "" for q, c in enumerate(chosen)]
    return answers, chosen


def answers_every_n(reads: TopReads, passages: Passages, mu: float = 1.0) -> np.ndarray:
    """``[Q, N]`` chosen column for every n = 1..N (one running argmax)."""
    from readers.aggregate import choose_passage_every_n

    retr = passages.retriever_scores if mu != 1.0 else None
    return choose_passage_every_n(reads.scores, retr, mu=mu)


def unique_question_rows(queries: Queries) -> list[int]:
    """One query input per question id (the first), in order: the rows a reader answers."""
    seen, rows = set(), []
    for i, qid in enumerate(queries.question_ids):
        if qid not in seen:
            seen.add(qid)
            rows.append(i)
    return rows


# ---------------------------------------------------------------- generation
def generate_top(reader, questions: Sequence[str], passages: Passages, n: np.ndarray, cache=None):
    """A generative reader's answer of each question from its top ``n[q]`` passages at once (n = 0: closed book):
    :class:`readers.generative.Generations`."""
    n = np.asarray(n, dtype=np.int64)
    return reader.generate(list(questions), [passages.texts[q][: int(n[q])] for q in range(len(questions))], cache=cache)


def generate_every_n(reader, questions: Sequence[str], passages: Passages, cache=None) -> tuple[TopReads, list]:
    """A generative reader's answer for every n = 0..N (N = the passages' depth), shared prompt prefixes reused.

    Returns ``(reads, grid)``: ``reads`` is the ``[Q, N]`` view the sweep and the selectors take (column n - 1
    holds the answer from the top n and its mean token log-probability as its score, so
    :func:`answers_every_n`'s counterpart is the identity: :func:`generated_columns`), ``grid[n]`` the
    :class:`readers.generative.Generations` at n (``grid[0]``: closed book).
    """
    depth = passages.depth
    grid = reader.generate_every_n(list(questions), passages.texts, depth, cache=cache)
    q_count = len(questions)
    scores = np.full((q_count, depth), -np.inf, dtype=np.float32)
    texts = [[""] * depth for _ in range(q_count)]
    for n in range(1, depth + 1):
        g = grid[n]
        scores[:, n - 1] = np.where(np.isnan(g.logprob), -np.inf, g.logprob)
        for q in range(q_count):
            texts[q][n - 1] = g.text[q]
    done = sum(g.n_read for g in grid)
    reused = sum(g.n_reused for g in grid)
    return TopReads(scores, texts, done, reused), grid


def generated_columns(q_count: int, depth: int) -> np.ndarray:
    """``[Q, N]`` the column holding the answer from the top n: n - 1 (a generative reader answers from all n)."""
    return np.broadcast_to(np.arange(depth, dtype=np.int64)[None, :], (q_count, depth)).copy()


# ----------------------------------------------------------------- selection
def answer_scores(reads: TopReads, passages: Passages, mu: float = 1.0) -> np.ndarray:
    """``[Q, N]`` the score each passage's answer is chosen by: the reader's span score, or its mix with the
    retriever's score (``mu < 1``; :func:`readers.aggregate.passage_scores`); ``-inf`` where nothing was read."""
    from readers.aggregate import passage_scores

    return passage_scores(reads.scores, passages.retriever_scores if mu != 1.0 else None, mu)


def select_n(selector, passages: Passages, first_relevant_rank: np.ndarray, reads: TopReads | None = None,
             mu: float = 1.0) -> np.ndarray:
    """Passages to read per query: the selector's n, at least 1, never past a query's real passages (so 0 for a
    query that retrieved none: there is nothing to read, and its answer is empty).

    A selector with the reader in the loop (``reads_answers``) decides on ``reads`` of its top τ (the sweep
    has them cached); :func:`read_until` is how a run reads only up to each stop.
    """
    if getattr(selector, "reads_answers", False):
        if reads is None:
            raise UserError(f"selector {selector.spec} decides from the reader's answers: it needs the reads of its top passages")
        n = selector.predict(passages.retriever_scores, first_relevant_rank, answer_scores=answer_scores(reads, passages, mu))
    else:
        n = selector.predict(passages.retriever_scores, first_relevant_rank=first_relevant_rank)
    real = (passages.keys >= 0).sum(axis=1)
    return np.minimum(np.clip(n, 1, passages.depth), real).astype(np.int64)


def take_top(passages: Passages, n: np.ndarray) -> Passages:
    """The first ``n[q]`` passages of each query (the rest padded as no passage)."""
    inside = np.arange(passages.depth)[None, :] < np.asarray(n)[:, None]
    return Passages(keys=np.where(inside, passages.keys, -1), texts=[row[: n[q]] for q, row in enumerate(passages.texts)],
                    retriever_scores=np.where(inside, passages.retriever_scores, -np.inf), unit=passages.unit)


def read_until(selector, reader, questions: Sequence[str], passages: Passages, cache=None, mu: float = 1.0,
               progress: bool = False) -> tuple[TopReads, np.ndarray, np.ndarray]:
    """Read in rank order until each question's stop: ``(reads, n, reader seconds per question)``.

    Round j reads the passage at rank j of every question still reading (one batch across questions, so
    the reader stays efficient), then asks the selector (``stop_points``) which of them stop.  A question
    never reads past its stop: its n equals the passages it read.  Reader seconds of a round are shared
    equally by the questions read in it.
    """
    import time

    q_count, depth = passages.keys.shape
    depth = min(depth, int(selector.max_depth or depth))
    scores = np.full(passages.keys.shape, -np.inf, dtype=np.float32)
    texts = [[""] * passages.depth for _ in range(q_count)]
    real = (passages.keys >= 0).sum(axis=1)
    n_read = np.zeros(q_count, dtype=np.int64)
    stop = np.zeros(q_count, dtype=np.int64)
    seconds = np.zeros(q_count, dtype=np.float64)
    done = reused = 0
    for j in range(depth):
        active = np.flatnonzero((stop == 0) & (real > j))
        if active.size == 0:
            break
        t0 = time.perf_counter()
        reads = reader.read_pairs([questions[q] for q in active], [passages.texts[q][j] for q in active], cache=cache)
        seconds[active] += (time.perf_counter() - t0) / active.size
        done, reused = done + reads.n_read, reused + reads.n_reused
        for q, s, t in zip(active, reads.score, reads.text):
            scores[q, j] = s
            texts[q][j] = t
        n_read[active] = j + 1
        partial = TopReads(scores, texts, done, reused)
        found = selector.stop_points(passages.retriever_scores, answer_scores(partial, passages, mu), n_read)
        stop = np.where(stop == 0, found, stop)
        if progress:
            print(f"read rank {j + 1}: {active.size} questions read, {int((stop > 0).sum())}/{q_count} stopped", file=sys.stderr)
    n = np.minimum(np.maximum(np.where(stop > 0, stop, n_read), 1), real).astype(np.int64)  # 0: nothing retrieved
    return TopReads(scores, texts, done, reused), n, seconds


@dataclass
class Candidates:
    """What a reader may read, per question: its first query input's ``rows`` in the dataset, those ``queries``,
    their top passages and which of them bear an answer (``[Q, depth]``)."""

    rows: list[int]
    queries: Queries
    passages: Passages
    bearing: np.ndarray

    def first_relevant(self) -> np.ndarray:
        """1-based rank of the first answer-bearing passage per question (the depth when none)."""
        return first_true(self.bearing, none=self.passages.depth)

    def subset(self, idx) -> "Candidates":
        """These candidates for the questions at positions ``idx`` only."""
        idx = np.asarray(idx, dtype=np.int64)
        p = self.passages
        return Candidates([self.rows[i] for i in idx], self.queries.subset(idx),
                          Passages(p.keys[idx], [p.texts[i] for i in idx], p.retriever_scores[idx], p.unit), self.bearing[idx])


def candidates_for(dataset: Dataset, ranking: Ranking, depth: int, unit: str = "sentence") -> Candidates:
    """One query input per question, its top-``depth`` passages and their answer overlap (the run, the sweep,
    selector fitting and the Python API all start reading from here)."""
    rows = unique_question_rows(dataset.queries)
    queries = dataset.queries.subset(rows)
    passages = passages_for(ranking.subset(rows), dataset.corpus, depth, unit)
    bearing = answer_bearing(passages, queries.answers, queries.language, match=queries.answer_match, corpus=dataset.corpus)
    return Candidates(rows, queries, passages, bearing)


def metric_every_n(name: str, reads, chosen: np.ndarray, golds, language: str) -> np.ndarray:
    """``[Q, N]`` values of a registered per-answer metric for the answer chosen at every n
    (each distinct (question, passage) answer scored once)."""
    from eval.registry import answer_metric

    metric = answer_metric(name)
    out = np.full(chosen.shape, np.nan, dtype=np.float32)
    for q in range(chosen.shape[0]):
        gold = [g for g in golds[q] if isinstance(g, str)]
        if not gold or chosen.shape[1] == 0:
            continue
        cols, inverse = np.unique(chosen[q], return_inverse=True)
        values = np.array([metric.score(reads.texts[q][c] if c >= 0 else "", gold, language) for c in cols], dtype=np.float32)
        out[q] = values[inverse]
    return out


def fit_selector(selector, train: Dataset, ranking: Ranking, depth: int, unit: str = "sentence", *, reader=None,
                 cache=None, mu: float = 1.0):
    """Fit ``selector`` on a training split's ranking: its top-``depth`` scores and the 1-based rank of
    the first answer-bearing passage (``depth`` when none).  ``pipeline.run`` and ``pipeline.sweep``
    both fit through here, so a learned selector is fitted the same way by either driver.

    A selector with the reader in the loop is fitted on ``reader``'s reads of the top ``depth`` passages of
    (at most ``selector.fit_questions``, the first) training questions: their answer scores and the EM (or the
    selector's ``fit_metric``) of the answer chosen at every n (a generative reader: its answer from the top n and
    that answer's mean token log-probability).
    """
    found = candidates_for(train, ranking, depth, unit)
    if not getattr(selector, "reads_answers", False):
        return selector.fit(found.passages.retriever_scores, found.first_relevant())
    if reader is None:
        raise UserError(f"selector {selector.spec} is fitted on the training split's reads: it needs a reader")
    limit = getattr(selector, "fit_questions", None)
    if limit and len(found.rows) > limit:
        found = found.subset(np.arange(limit))
    if getattr(reader, "reads", "pairs") == "set":  # a generative reader: its answer (and confidence) at every n
        reads, _ = generate_every_n(reader, found.queries.texts, found.passages, cache=cache)
        chosen = generated_columns(len(found.rows), found.passages.depth)
    else:
        reads = read_top(reader, found.queries.texts, found.passages, cache=cache)
        chosen = answers_every_n(reads, found.passages, mu)
    correct = metric_every_n(getattr(selector, "fit_metric", "em"), reads, chosen, found.queries.answers, found.queries.language)
    return selector.fit(found.passages.retriever_scores, found.first_relevant(),
                        answer_scores=answer_scores(reads, found.passages, mu), correct=correct)
