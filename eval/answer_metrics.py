"""Answer-string metrics: exact match, token F1, ROUGE-L, METEOR (and BERT-F1).

* ``exact_match`` / ``f1`` follow the official SQuAD v1.1 evaluation script
  (Rajpurkar et al. 2016, "SQuAD: 100,000+ Questions for Machine Comprehension
  of Text"): answers are normalized by lower-casing, removing ASCII punctuation,
  removing the articles a/an/the and collapsing white space; F1 is the
  bag-of-tokens overlap F1; the score of a prediction is the maximum over the
  gold answers.  As in that script, a prediction and a gold answer that both
  normalize to the empty string (``"The"`` vs ``"a"``) have EM 1 but F1 0.
* ``language="th"`` (Thai, written without spaces between words): the same
  lower-casing, punctuation removal and white-space collapsing, no article
  removal, and F1 tokens from PyThaiNLP's ``word_tokenize`` with its default
  offline dictionary engine ``newmm`` (white-space tokens dropped).
* ``rouge_l``: ROUGE-L F-measure (Lin 2004) from the ``rouge-score`` package,
  maximum over gold answers.  Its default tokenizer keeps only ``[a-z0-9]``
  runs, which would erase Thai, so ``language="th"`` tokenizes with PyThaiNLP
  as above.
* ``meteor``: METEOR (Banerjee & Lavie 2005) from NLTK's ``meteor_score``
  with its default parameters (alpha 0.9, beta 3, gamma 0.5, Porter stemmer,
  WordNet synonyms, lower-casing), on tokens from NLTK's Treebank-style
  ``NLTKWordTokenizer`` (no sentence splitting, so no punkt data is needed);
  NLTK takes the maximum over gold answers.  WordNet is found or built on first
  use by ``eval.wordnet.wordnet_reader``.  For Thai, tokens come from PyThaiNLP
  (WordNet synonyms then never fire; exact matches still count).
* BERT-F1: see ``eval.bertscore.bert_f1``.

``answer_metrics`` scores a whole run at once and returns one array per metric
(NaN for questions without gold answers); it finds metrics by name in
``eval.registry.ANSWER_METRICS``, where :data:`EM`, :data:`F1`,
:data:`ROUGE_L` and :data:`METEOR` are registered (and ``bert_f1``, a batch
metric, from ``eval.bertscore``).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from data.errors import UserError
from data.types import LANGUAGES
from eval.registry import ANSWER_METRICS, AnswerMetric

METRICS = ("em", "f1", "rouge_l", "meteor")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _check_language(language: str) -> None:
    if language not in LANGUAGES:
        raise UserError(f"language {language!r}: answer metrics support {', '.join(LANGUAGES)}")


def _check_golds(golds) -> None:
    if isinstance(golds, str):
        raise UserError(f"gold answers must be a list of strings, got the string {golds!r}")
    if len(golds) == 0:
        raise UserError("no gold answers to score against (empty list)")


def normalize_answer(text: str, language: str = "en") -> str:
    """SQuAD v1.1 answer normalization (no article removal for Thai)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    if language == "en":
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


@lru_cache(maxsize=1)
def _thai_tokenize():
    from pythainlp.tokenize import word_tokenize

    def tokenize(text: str) -> list[str]:
        return [t for t in word_tokenize(text, engine="newmm", keep_whitespace=False) if t.strip()]

    return tokenize


def answer_tokens(text: str, language: str = "en") -> list[str]:
    """Tokens of the normalized answer: white-space split (en) or PyThaiNLP newmm (th)."""
    normalized = normalize_answer(text, language)
    if language == "th":
        return _thai_tokenize()(normalized) if normalized else []
    return normalized.split()


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(prediction_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """1.0 when the normalized prediction equals some normalized gold answer, else 0.0."""
    _check_language(language)
    _check_golds(golds)
    pred = normalize_answer(prediction, language)
    return float(any(pred == normalize_answer(g, language) for g in golds))


def f1(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """SQuAD v1.1 token F1, maximum over gold answers (see module doc for Thai)."""
    _check_language(language)
    _check_golds(golds)
    pred = answer_tokens(prediction, language)
    return max(_token_f1(pred, answer_tokens(g, language)) for g in golds)


def has_answer(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """1.0 when a gold answer occurs in the prediction: normalized as for EM (SQuAD's normalization) and matched on
    whole tokens (for Thai, whose text has no word spaces: plain containment after normalization).  The
    "answer contained" accuracy of generative readers (FlashRAG's ``acc``; Cuconasu et al., 2024, "The Power of
    Noise: Redefining Retrieval for RAG Systems", SIGIR), which credits a correct answer written in a sentence."""
    _check_language(language)
    _check_golds(golds)
    hay = normalize_answer(prediction, language)
    for gold in golds:
        needle = normalize_answer(gold, language)
        if not needle:
            continue
        if language == "en" and f" {needle} " in f" {hay} ":
            return 1.0
        if language != "en" and needle in hay:
            return 1.0
    return 0.0


class _ThaiRougeTokenizer:
    """rouge-score tokenizer interface (``tokenize(text) -> list[str]``) for Thai."""

    def tokenize(self, text: str) -> list[str]:
        return answer_tokens(text, "th")


@lru_cache(maxsize=4)
def _rouge_scorer(language: str, use_stemmer: bool):
    from rouge_score import rouge_scorer

    tokenizer = _ThaiRougeTokenizer() if language == "th" else None
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer, tokenizer=tokenizer)


def rouge_l(prediction: str, golds: Sequence[str], language: str = "en", use_stemmer: bool = False) -> float:
    """ROUGE-L F-measure (rouge-score), maximum over gold answers."""
    _check_language(language)
    _check_golds(golds)
    scorer = _rouge_scorer(language, use_stemmer)
    return max(scorer.score(g, prediction)["rougeL"].fmeasure for g in golds)


@lru_cache(maxsize=1)
def _word_tokenizer():
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def meteor_tokens(text: str, language: str = "en") -> list[str]:
    """Tokens METEOR sees: NLTK's Treebank-style tokenizer (en) or PyThaiNLP (th)."""
    return list(_meteor_tokens(text, language))


@lru_cache(maxsize=1 << 16)
def _meteor_tokens(text: str, language: str) -> tuple[str, ...]:
    if language == "th":
        return tuple(_thai_tokenize()(text)) if text.strip() else ()
    return tuple(_word_tokenizer().tokenize(text))


class _MemoStemmer:
    """NLTK's Porter stemmer with each word's stem remembered (METEOR stems every word of every pair again)."""

    def __init__(self):
        from nltk.stem.porter import PorterStemmer

        self.stem = lru_cache(maxsize=1 << 17)(PorterStemmer().stem)


class _MemoWordNet:
    """The WordNet reader METEOR asks for each hypothesis word's synsets, each word's answer remembered."""

    def __init__(self, reader):
        self.synsets = lru_cache(maxsize=1 << 17)(reader.synsets)


@lru_cache(maxsize=1)
def _meteor_resources() -> tuple[_MemoStemmer, _MemoWordNet]:
    """The stemmer and WordNet METEOR uses, remembering per word what they answered: the same values, looked up
    once per distinct word (the main job's METEOR: 10.1 s -> 3.8 s on the Intel Xeon)."""
    from eval.wordnet import wordnet_reader

    return _MemoStemmer(), _MemoWordNet(wordnet_reader())


def meteor(prediction: str, golds: Sequence[str], language: str = "en") -> float:
    """NLTK METEOR with WordNet synonyms, maximum over gold answers."""
    _check_language(language)
    _check_golds(golds)
    from nltk.translate.meteor_score import meteor_score

    stemmer, wordnet = _meteor_resources()
    return float(
        meteor_score(
            [meteor_tokens(g, language) for g in golds],
            meteor_tokens(prediction, language),
            stemmer=stemmer,
            wordnet=wordnet,
        )
    )


class AnswerScores(dict):
    """``{metric: float64 array [Q]}`` plus ``info``: provenance of model-based metrics."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.info: dict[str, dict] = {}


PARALLEL_FROM = 2000  # answers from which the per-answer metrics run in a forked process beside a batch metric


class _Beside:
    """``work()`` run in a forked process where fork exists and this process may use two cores or more;
    ``result()`` waits for it and returns its value or raises what it raised.  Otherwise ``result()`` runs it."""

    def __init__(self, work):
        import multiprocessing as mp

        import hardware

        self._work, self._process = work, None
        if "fork" not in mp.get_all_start_methods() or hardware.available_cores() < 2:
            return
        context = mp.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_run_and_send, args=(work, send), daemon=True)
        self._process.start()
        send.close()

    def result(self):
        if self._process is None:
            return self._work()
        try:
            kind, value = self._receive.recv()
        except EOFError:
            kind, value = "error", f"the process scoring answers died (exit code {self._process.exitcode})"
        finally:
            self._process.join()
            self._receive.close()
        if kind == "error":
            raise value if isinstance(value, BaseException) else RuntimeError(value)
        return value


def _run_and_send(work, send) -> None:
    try:
        message = ("ok", work())
    except BaseException as err:  # noqa: BLE001 (raised in the parent)
        message = ("error", err)
    try:
        send.send(message)
    except Exception:  # an exception that does not pickle: its text
        send.send(("error", f"{type(message[1]).__name__}: {message[1]}"))
    send.close()


# The registry entries of the per-answer metrics above (eval.registry.ANSWER_METRICS names them lazily).
EM = AnswerMetric("em", exact_match, display="EM", sweep="cell", description="exact match (SQuAD v1.1)")
F1 = AnswerMetric("f1", f1, display="F1", sweep="cell", description="token F1 (SQuAD v1.1)")
ROUGE_L = AnswerMetric("rouge_l", rouge_l, display="ROUGE-L", sweep="cell", description="ROUGE-L F-measure (rouge-score)")
HAS_ANSWER = AnswerMetric("has_answer", has_answer, display="has answer", sweep="cell",
                          description="a gold answer occurs in the answer (answer contained; normalized, whole tokens)")
METEOR = AnswerMetric("meteor", meteor, display="METEOR", sweep="cell", description="METEOR with WordNet synonyms (NLTK)")


def _golds_of(golds: Sequence) -> list[str]:
    return [g for g in golds if isinstance(g, str)]


def answer_metrics(
    predictions: Sequence[str],
    golds: Sequence[Sequence[str]],
    language: str = "en",
    metrics: Sequence[str] = METRICS,
    bertscore: dict | None = None,
    progress: bool = True,
    options: Mapping[str, Mapping] | None = None,
) -> "AnswerScores":
    """Per-question scores of a run: ``{metric: float64 array [Q]}``, in the order of ``metrics``.

    ``metrics`` are names in :data:`eval.registry.ANSWER_METRICS` (``em``,
    ``f1``, ``rouge_l``, ``meteor``, ``bert_f1`` and installed plugins; an
    unknown name is a one-line ``UserError`` listing the known ones).
    ``options`` gives a batch metric its keyword options, e.g. ``{"bert_f1":
    {"model": PATH, "num_layers": 6}}`` (checked before anything is scored;
    options of a metric not in ``metrics`` are ignored).  ``bertscore={...}``
    (keyword arguments of ``eval.bertscore.bert_f1``) is the older spelling:
    it adds ``bert_f1`` with those options.  A batch metric gets ``language``
    unless its options name one.  What produced a batch metric (model, layer,
    versions) is in ``result.info[name]``.  Questions without gold answers
    score NaN.
    """
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    _check_language(language)
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    if len(predictions) != len(golds):
        raise UserError(f"{len(predictions)} predictions but {len(golds)} gold answer lists")
    entries = {m: ANSWER_METRICS.get(m) for m in dict.fromkeys(metrics)}
    labels: dict[str, str] = {}
    chosen: dict[str, Mapping] = {}
    for name, opts in (options or {}).items():
        ANSWER_METRICS.get(name)  # a misspelt name is an error even when not computed
        chosen[name] = opts or {}
    if bertscore is not None:
        entries.setdefault("bert_f1", ANSWER_METRICS.get("bert_f1"))
        chosen["bert_f1"] = {**chosen.get("bert_f1", {}), **bertscore}
        labels["bert_f1"] = "bertscore option"
    checked = {m: e.check_options(chosen.get(m), labels.get(m)) for m, e in entries.items()}
    if isinstance(predictions, str) or any(not isinstance(p, str) for p in predictions):
        raise UserError("predictions must be a list of strings")
    n = len(predictions)
    out = AnswerScores({m: np.full(n, np.nan, dtype=np.float64) for m in entries})
    scalar = [(m, e.score) for m, e in entries.items() if not e.batch]

    def score_scalar() -> dict[str, np.ndarray]:
        values = {m: np.full(n, np.nan, dtype=np.float64) for m, _ in scalar}
        rows = tqdm(range(n), desc="answer metrics", unit="q", disable=not progress or n < 500)
        for q in rows:
            gold = _golds_of(golds[q])
            if not gold:
                continue
            for m, score in scalar:
                values[m][q] = score(predictions[q], gold, language)
        return values

    # With a batch metric to compute too, the per-answer metrics are scored in a forked process meanwhile: on the
    # main job METEOR (~6 s, one core) runs while BERT-F1 loads its model (~6 s, one core) instead of before it
    beside = None
    if scalar and any(e.batch for e in entries.values()) and n >= PARALLEL_FROM:
        beside = _Beside(score_scalar)
    elif scalar:
        out.update(score_scalar())
    for m, e in entries.items():
        if e.batch:
            kwargs = {"language": language, **checked[m]}
            values, info = e.score(list(predictions), [_golds_of(g) for g in golds], **kwargs)
            values = np.asarray(values, dtype=np.float64)
            if values.shape != (n,):
                raise UserError(f"answer metric {m!r} returned {values.shape} values for {n} predictions")
            values = values.copy()
            values[[not _golds_of(g) for g in golds]] = np.nan
            out[m] = values
            out.info[m] = info
    if beside is not None:
        out.update(beside.result())
    return out
