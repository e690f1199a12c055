"""Re-ranking: a second stage that re-scores a first-stage retriever's top ``depth`` hits.

Grammar of ``--rerank``::

    spec    := [ KIND ":" ] MODEL [ "[" option ("," option)* "]" ]
    option  := KEY "=" VALUE          (quote VALUE, '...' or "...", to hold "," or "]")
    KIND    := a name of RERANKERS: cross-encoder | a plugin's

A spec without a kind is a cross-encoder (:class:`retrievers.cross_encoder.CrossEncoderScorer`): any
sentence-transformers ``CrossEncoder`` directory or ``AutoModelForSequenceClassification`` checkpoint (a local
directory; a hub name is only tried when given).  Bracket keys are the scorer class's constructor parameters
(``max_length``, ``dtype``, ``backend``, ``batch_size``...) plus two that belong to the re-ranking stage itself:
``depth``, the first-stage hits re-scored; ``field``, what a candidate's passage is (``sentence``, or
``sentence+context``: the sentence, the scorer's separator, then its paragraph; by default what the model was
trained on, as its ``recipe.json`` says, else ``sentence``); and ``mix``, the weight of the first stage's score in
the final one (default 0: the scorer's alone; see :func:`mix_scores`).  Examples: ``/models/ce``,
``cross-encoder:/models/ce[depth=50,dtype=bfloat16]``.

:data:`RERANKERS` is open to other packages through the entry-point group ``qa_retrieval_eval.rerankers``: a
class whose constructor takes ``model`` first and offers ``identity()`` (a string that changes whenever a score
may change: it keys the score cache), ``facts()`` (what the manifest records), ``load()`` and
``score_pairs(questions, passages) -> float32 [P]`` (higher is more relevant).

The stage is a retriever (:class:`RerankRetriever`) wrapping the first-stage one as its only member, so the
selectors, readers and metrics downstream see a :class:`retrievers.types.Ranking` as from any retriever: the
re-ranked top ``depth`` (padded with ``-1`` / ``-inf`` to the search's ``k`` when ``k`` is deeper).  The
first stage's ranking of the last search stays available (:attr:`RerankRetriever.first_stage`): the run writes
it as ``run.first-stage.trec``.  Scores are cached (:class:`ScoreCache`) by the scorer's identity, the question
text and the passage text, in CRC-checked shards written atomically, so a killed run resumes with the pairs
already scored and identical scores.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from data.errors import UserError
from data.io import cache_dir as project_cache_dir
from data.io import sha256_text
from data.plugins import Registry, bracket_options, build, parameters
from retrievers.base import Retriever, RetrieverBase
from retrievers.types import Ranking

RERANKERS: Registry = Registry("rerankers", what="reranker kind")
RERANKERS.register("cross-encoder", "retrievers.cross_encoder:CrossEncoderScorer")

DEFAULT_KIND = "cross-encoder"
DEFAULT_DEPTH = 100
PASSAGE_FIELDS = ("sentence", "sentence+context")  # what a candidate's passage is to the scorer
STAGE_OPTIONS = ("depth", "field", "mix")  # spec options of the stage, not of its scorer
RERANK = "rerank"  # the options key of the re-ranking stage (beside a retriever kind's and "fusion")


def parse_rerank_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"cross-encoder:/models/ce[depth=50]"`` -> ``("cross-encoder", "/models/ce", {"depth": "50"})``; a spec without
    a registered kind in front is a cross-encoder's model."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("rerank spec is empty (give a model: PATH, HUB_NAME or KIND:MODEL)")
    body, options = bracket_options(spec.strip(), "rerank")
    kind, colon, model = body.partition(":")
    if colon and (kind in RERANKERS.builtin_names() or (kind and "/" not in kind and "." not in kind and RERANKERS.find(kind))):
        if not model.strip():
            raise UserError(f"rerank {spec!r}: {kind} needs a model ({kind}:MODEL)")
        return kind, model.strip(), options
    if not body.strip():
        raise UserError(f"rerank {spec!r}: no model before its options")
    if colon and kind and "/" not in kind and "." not in kind and "\\" not in kind and not Path(body).expanduser().exists():
        raise UserError(f"rerank {spec!r}: unknown reranker kind {kind!r} (known: {', '.join(RERANKERS.names())})")
    return DEFAULT_KIND, body.strip(), options


def make_scorer(spec: str, options: Mapping[str, Any] | None = None, **fixed: Any):
    """The pair scorer a spec names (its ``depth`` option left out: it is the stage's): the kind's class with
    ``model``, the ``fixed`` settings it takes (device, ...), then ``options`` and the spec's bracket options (the
    spec's win), typed by the class."""
    import inspect

    kind, model, spec_options = parse_rerank_spec(spec)
    factory = RERANKERS.get(kind)
    takes = inspect.signature(factory).parameters
    merged = {k: v for k, v in {**dict(options or {}), **spec_options}.items() if k not in STAGE_OPTIONS}
    allowed = [n for n in parameters(factory) if n != "model"]
    unknown = [k for k in merged if str(k).replace("-", "_") not in allowed]
    if unknown:
        raise UserError(f"rerank {spec!r}: unknown option {unknown[0]!r} (allowed: {', '.join(STAGE_OPTIONS + tuple(allowed))})")
    fixed = {k: v for k, v in fixed.items() if k in takes and v is not None and k not in merged}
    return build(factory, merged, f"rerank {spec!r}", model=model, **fixed)


def spec_depth(spec: str, default: int | None) -> int:
    """The depth a spec's ``[depth=N]`` sets, else ``default`` (else :data:`DEFAULT_DEPTH`), checked."""
    _, _, options = parse_rerank_spec(spec)
    value: Any = options.get("depth", default if default is not None else DEFAULT_DEPTH)
    try:
        depth = int(str(value).strip())
    except ValueError:
        raise UserError(f"rerank {spec!r}: depth {value!r} is not a whole number") from None
    if depth < 1:
        raise UserError(f"rerank {spec!r}: depth must be >= 1 (got {depth})")
    return depth


def spec_field(spec: str, default: str | None) -> str | None:
    """The passage field a spec's ``[field=...]`` sets, else ``default`` (``None``: the model's recipe decides), checked."""
    _, _, options = parse_rerank_spec(spec)
    value = options.get("field", default)
    if value is not None and value not in PASSAGE_FIELDS:
        raise UserError(f"rerank {spec!r}: field {value!r} unknown; use one of {', '.join(PASSAGE_FIELDS)}")
    return value


def spec_mix(spec: str, default: float | None) -> float:
    """The first-stage weight a spec's ``[mix=W]`` sets, else ``default`` (else 0), checked: 0 <= W < 1."""
    _, _, options = parse_rerank_spec(spec)
    value: Any = options.get("mix", default if default is not None else 0.0)
    try:
        mix = float(str(value).strip())
    except ValueError:
        raise UserError(f"rerank {spec!r}: mix {value!r} is not a number") from None
    if not 0.0 <= mix < 1.0:
        raise UserError(f"rerank {spec!r}: mix must be in [0, 1) (got {mix})")
    return mix


def mix_scores(rescored: np.ndarray, first: np.ndarray, mix: float) -> np.ndarray:
    """``(1 - mix) * z(rescored) + mix * z(first)``, z-scores taken per row over its scored hits (finite ``rescored``).

    The interpolation of a first-stage score with a cross-encoder's that Birch uses (Yilmaz et al., 2019,
    "Cross-Domain Modeling of Sentence-Level Evidence for Document Retrieval"), here on per-question z-scores so the
    weight does not depend on either score's scale.  A row's padding stays ``-inf``; a row whose scores are all equal
    has z-scores of 0."""
    rescored = np.asarray(rescored, np.float64)
    first = np.asarray(first, np.float64)
    real = np.isfinite(rescored) & np.isfinite(first)
    out = np.full(rescored.shape, -np.inf)
    for row in range(rescored.shape[0]):
        hits = real[row]
        if not hits.any():
            continue
        parts = []
        for values in (rescored[row, hits], first[row, hits]):
            spread = values.std()
            parts.append((values - values.mean()) / spread if spread > 0 else np.zeros_like(values))
        out[row, hits] = (1.0 - mix) * parts[0] + mix * parts[1]
    return out.astype(np.float32)


def trained_field(scorer: Any) -> str:
    """The passage field a scorer's model was trained on: ``recipe.json``'s ``passage`` in a local model directory
    (:mod:`retrievers.train_reranker` writes it), else ``sentence``."""
    import json

    path = Path(str(getattr(scorer, "model", ""))).expanduser() / "recipe.json"
    try:
        recipe = json.loads(path.read_text(encoding="utf-8")).get("recipe") or {}
    except (OSError, ValueError, AttributeError):
        return "sentence"
    field = recipe.get("passage", "sentence") if isinstance(recipe, dict) else "sentence"
    return field if field in PASSAGE_FIELDS else "sentence"


def pair_passage(sentence: str, context: str, field: str, separator: str) -> str:
    """What a scorer reads as a candidate's passage: its sentence, or for ``sentence+context`` (ReQA's candidate, a
    sentence in its paragraph) the sentence, ``separator`` and the paragraph.  A candidate that is its own paragraph
    (or has none) is read once."""
    if field == "sentence" or not context or context == sentence:
        return sentence
    return f"{sentence}{separator}{context}"


def scorer_separator(scorer: Any) -> str:
    """The text between a sentence and its paragraph for ``scorer``: its ``context_separator()`` (a cross-encoder's
    tokenizer's separator token), else a blank line."""
    own = getattr(scorer, "context_separator", None)
    return own() if callable(own) else "\n\n"


# settings the commands give every re-ranking stage (flags, config): a scorer kind that does not take one is not
# given it; any other option is the scorer's own and checked against its constructor
STAGE_SETTINGS = ("max_length", "dtype", "backend", "batch_size", "device", "num_threads")


def make_rerank_retriever(first_stage: Retriever, settings: Mapping[str, Any]) -> "RerankRetriever":
    """``first_stage`` re-ranked as ``settings`` say: ``spec`` (required), ``depth``, ``cache_dir``, the commands'
    settings (:data:`STAGE_SETTINGS`, used where the scorer takes them; the spec's bracket options win) and any other
    option of the scorer's constructor."""
    settings = dict(settings)
    spec = settings.pop("spec", None)
    if not spec:
        raise UserError("rerank: no spec (give --rerank MODEL)")
    depth = spec_depth(spec, settings.pop("depth", None))
    field = spec_field(spec, settings.pop("field", None))
    mix = spec_mix(spec, settings.pop("mix", None))
    cache = settings.pop("cache_dir", None)
    fixed = {k: settings.pop(k) for k in STAGE_SETTINGS if k in settings}
    scorer = make_scorer(spec, settings, **fixed)
    return RerankRetriever([first_stage], scorer, depth=depth, cache_dir=cache, spec=spec,
                           field=field if field is not None else trained_field(scorer), mix=mix)


# ------------------------------------------------------------------ the cache
class ScoreCache:
    """(question, passage) scores of one scorer identity, in CRC-checked, atomically written shards.

    The shards are :class:`readers.extractive.ReadCache`'s (one new shard per :meth:`add`, a damaged shard
    removed with a warning and its pairs scored again, never served); a key is the SHA-256 of the scorer's
    identity (model content, max length, precision, ...), the question and the passage, so scores never cross
    models or settings even in a shared directory.
    """

    def __init__(self, directory: str | os.PathLike, identity: str):
        from readers.extractive import ReadCache

        self.directory = Path(directory)
        self.identity = identity
        self._reads = ReadCache(self.directory)

    def keys(self, questions: Sequence[str], passages: Sequence[str]) -> list[str]:
        return [sha256_text("rerank-score-v1", self.identity, q, p) for q, p in zip(questions, passages)]

    def lookup(self, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        found, score, _, _ = self._reads.lookup(keys)
        return found, score

    def add(self, keys: list[str], scores: np.ndarray) -> None:
        minus = np.full(len(keys), -1, np.int64)
        self._reads.add(keys, np.asarray(scores, np.float32), minus, minus)


def score_cached(scorer, questions: Sequence[str], passages: Sequence[str], cache: ScoreCache | None,
                 chunk: int = 2048) -> tuple[np.ndarray, int, int]:
    """Scores of every pair (duplicates scored once), from ``cache`` where it has them: ``(scores, scored, reused)``.

    New scores are added to the cache chunk by chunk, so a killed call keeps what it finished."""
    questions, passages = list(questions), list(passages)
    distinct: dict[tuple[str, str], int] = {}
    row_of = np.array([distinct.setdefault((q, p), len(distinct)) for q, p in zip(questions, passages)], dtype=np.int64)
    pairs = list(distinct)
    scores = np.full(len(pairs), np.nan, np.float32)
    keys: list[str] = []
    if cache is not None and pairs:
        keys = cache.keys([q for q, _ in pairs], [p for _, p in pairs])
        found, cached = cache.lookup(keys)
        scores[found] = cached[found]
    todo = np.flatnonzero(np.isnan(scores))
    # one progress bar over every chunk (a scorer's own bar would start again, and print a line, for each chunk)
    from data.progress import tqdm

    own_bar = getattr(scorer, "progress", None)
    show = bool(own_bar) and len(todo) > chunk
    with tqdm(total=len(todo), unit="pair", desc="re-ranking", leave=False, disable=not show) as bar:
        if show:
            scorer.progress = False
        try:
            for lo in range(0, len(todo), chunk):
                rows = todo[lo : lo + chunk]
                got = np.asarray(scorer.score_pairs([pairs[r][0] for r in rows], [pairs[r][1] for r in rows]),
                                 dtype=np.float32)
                if got.shape != (len(rows),):
                    raise UserError(f"reranker {type(scorer).__name__}: score_pairs gave shape {got.shape} for "
                                    f"{len(rows)} pairs")
                got = np.where(np.isnan(got), -np.inf, got).astype(np.float32)  # NaN means "not scored yet" here
                scores[rows] = got
                if cache is not None:
                    cache.add([keys[r] for r in rows], got)
                bar.update(len(rows))
        finally:
            if show:
                scorer.progress = own_bar
    return scores[row_of], int(len(todo)), int(len(pairs) - len(todo))


# ------------------------------------------------------------------ the stage
class RerankRetriever(RetrieverBase):
    """A first-stage retriever's top ``depth`` hits re-scored by a pair scorer (a cross-encoder).

    Parameters
    ----------
    members: one retriever, the first stage (a list, as fused retrievers hold theirs).
    scorer: a pair scorer (:data:`RERANKERS`): ``identity()``, ``facts()``, ``score_pairs(questions, passages)``.
    depth: how many first-stage hits per query are re-scored; the re-ranked ranking holds at most these.
    cache_dir: the score cache (default: ``$QA_CACHE_DIR/rerank-scores``; keys never cross scorers).
    spec: the ``--rerank`` spec it was built from (recorded in the manifest).
    field: a candidate's passage as the scorer reads it: ``sentence`` (its text) or ``sentence+context`` (its text,
        the scorer's separator and its paragraph, :func:`pair_passage`).
    mix: weight of the first stage's score in the final one (:func:`mix_scores`); 0 ranks by the scorer alone.

    A search for ``k`` hits searches the first stage for ``max(k, depth)`` (kept in :attr:`first_stage`, its
    top ``k``), re-scores the top ``depth`` of each query and returns them sorted by the new score (ties keep the
    first stage's order), padded to ``k`` columns.
    """

    def __init__(self, members: Sequence[Retriever], scorer: Any, depth: int = DEFAULT_DEPTH,
                 cache_dir: str | None = None, spec: str | None = None, field: str = "sentence", mix: float = 0.0):
        members = list(members)
        if len(members) != 1:
            raise UserError(f"rerank: re-ranks one first-stage retriever, got {len(members)}")
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise UserError(f"rerank: depth must be a whole number >= 1 (got {depth!r})")
        if field not in PASSAGE_FIELDS:
            raise UserError(f"rerank: field {field!r} unknown; use one of {', '.join(PASSAGE_FIELDS)}")
        if isinstance(mix, bool) or not isinstance(mix, (int, float, np.floating)) or not 0.0 <= float(mix) < 1.0:
            raise UserError(f"rerank: mix must be a number in [0, 1) (got {mix!r})")
        self.members = members
        self.field = field
        self.mix = float(mix)
        self.scorer = scorer
        self.depth = int(depth)
        self.cache_dir = cache_dir
        self.spec = spec
        self.name = f"rerank({getattr(members[0], 'name', type(members[0]).__name__)})"
        self.first_stage: Ranking | None = None
        self.scored_ = 0
        self.reused_ = 0

    @property
    def first(self) -> Retriever:
        return self.members[0]

    def index(self, corpus) -> "RerankRetriever":
        self.first.index(corpus)
        self._texts = corpus.texts
        self._contexts = corpus.contexts
        self._size = len(corpus)
        return self

    def _cache(self) -> ScoreCache:
        directory = Path(self.cache_dir) if self.cache_dir else project_cache_dir("rerank-scores")
        if directory.exists() and not directory.is_dir():
            raise UserError(f"--rerank-cache {directory}: not a directory")
        return ScoreCache(directory, self.scorer.identity())

    def search(self, query_texts: Sequence[str], k: int) -> Ranking:
        if not hasattr(self, "_texts"):
            raise UserError(f"{self.name}: call index(corpus) before search")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"rerank search k must be >= 1 (got {k!r})")
        query_texts = list(query_texts)
        first = self.first.search(query_texts, max(int(k), min(self.depth, self._size)))  # a depth past the corpus asks no more
        self.first_stage = first.top(int(k))
        top = first.top(self.depth)
        where = np.argwhere(top.ids >= 0)
        questions = [query_texts[q] for q, _ in where]
        rows = [int(top.ids[q, j]) for q, j in where]
        if self.field == "sentence":
            passages = [str(self._texts[r]) for r in rows]
        else:
            separator = scorer_separator(self.scorer)
            passages = [pair_passage(str(self._texts[r]), str(self._contexts[r] or ""), self.field, separator) for r in rows]
        scores, self.scored_, self.reused_ = score_cached(self.scorer, questions, passages, self._cache())
        new = np.full(top.ids.shape, -np.inf, np.float32)
        if len(where):
            new[where[:, 0], where[:, 1]] = scores
        if self.mix:
            new = mix_scores(new, np.where(top.ids >= 0, top.scores, -np.inf), self.mix)
        return rank_by(top.ids, new, int(k))

    def facts(self) -> dict:
        """The manifest's ``reranker`` entry: spec, depth, scorer identity and facts (model, precision), cache counts."""
        facts = {"spec": self.spec, "depth": self.depth, "field": self.field, "mix": self.mix,
                 "kind": type(self.scorer).__name__,
                 "identity": self.scorer.identity(), "pairs_scored": self.scored_, "pairs_reused": self.reused_}
        scorer_facts = getattr(self.scorer, "facts", None)
        if callable(scorer_facts):
            facts.update(scorer_facts() or {})
        return {"reranker": facts}

    def to_dict(self) -> dict:
        from retrievers.pooling import member_config

        out = {"method": RERANK, "name": self.name, "spec": self.spec, "depth": self.depth,
               "members": [member_config(m) for m in self.members]}
        if self.field != "sentence":  # the defaults stay out, so configs written before them keep their content
            out["field"] = self.field
        if self.mix:
            out["mix"] = self.mix
        return out


def rank_by(ids: np.ndarray, scores: np.ndarray, k: int) -> Ranking:
    """Each row's ``ids`` sorted by ``scores`` descending (a tie keeps the given order; padding last), ``k`` columns."""
    ids = np.asarray(ids, np.int64)
    scores = np.where(ids >= 0, np.asarray(scores, np.float32), -np.inf).astype(np.float32)
    order = np.argsort(-scores, axis=1, kind="stable")
    # padding (-1) goes after every real hit, even one scored -inf
    order = np.take_along_axis(order, np.argsort(np.take_along_axis(ids, order, 1) < 0, axis=1, kind="stable"), 1)
    out_ids = np.take_along_axis(ids, order, 1)[:, :k]
    out_scores = np.take_along_axis(scores, order, 1)[:, :k]
    if out_ids.shape[1] < k:
        pad = k - out_ids.shape[1]
        out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=-1)
        out_scores = np.pad(out_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return Ranking(out_ids, out_scores)


def check_rerankers(retriever: Any) -> None:
    """Check the model of every re-ranking stage in ``retriever`` (its source, its head, its settings) before any
    work: a bad ``--rerank`` is one line before data is read."""
    for stage in rerankers_of(retriever):
        identity = getattr(stage.scorer, "identity", None)
        if callable(identity):
            identity()


def static_facts(retriever: Any) -> list[dict]:
    """The facts of every re-ranking stage in ``retriever`` that do not depend on what it scored (spec, depth,
    model identity, max length, precision...): what a sweep's manifest records once for all its levels."""
    out = []
    for stage in rerankers_of(retriever):
        facts = stage.facts()["reranker"]
        out.append({k: v for k, v in facts.items() if k not in ("pairs_scored", "pairs_reused")})
    return out


def rerankers_of(retriever: Any) -> list[RerankRetriever]:
    """The re-ranking stages in a retriever (itself or a member's), breadth first."""
    from retrievers.base import walk

    return [r for r in walk(retriever) if isinstance(r, RerankRetriever)]
