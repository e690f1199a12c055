"""The cut-offs beyond Kratzwald & Feuerriegel: gap (Adaptive-k), rlt (supervised truncation) and confidence
(the reader in the loop), on hand-made score lists, on a real reader, and through pipeline.run and the API."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from data.errors import UserError
from selection import Confidence, Gap, Truncation, parse_selector, selector_from_dict
from tests.conftest import READER, ROOT

INF = float("inf")


# ------------------------------------------------------------------------ gap
@pytest.mark.parametrize(
    "row, tau, buffer, tail, expected",
    [
        ([10, 9, 5, 4.5, 4, 3.9], 6, 0, 0.0, 2),  # the largest drop is after rank 2
        ([10, 9, 5, 4.5, 4, 3.9], 6, 2, 0.0, 4),  # plus the buffer
        ([10, 9, 5, 4.5, 4, 3.9], 6, 9, 0.0, 6),  # never past the real results
        ([10, 8, 6, 4, 2, 0], 6, 0, 0.0, 1),  # equal gaps: the first wins
        ([3, 3, 3, 3, 3], 5, 0, 0.0, 1),  # a flat list cuts after the first result
        ([3, 3, 3, 3, 3], 5, 5, 0.1, 5),  # ... and the buffer reads on
        ([7.0], 1, 5, 0.1, 1),  # a single result is read
        ([7.0, -INF, -INF], 3, 0, 0.0, 1),  # padding is no result
        ([10, 9, 7.5, 1, 0.5], 3, 0, 0.0, 2),  # τ smaller than the list: the gap after rank 3 is not seen
        ([10, 9.5, 9, 8.5, 8, 7.5, 7, 6.5, 6, 5.5, 0], 11, 0, 0.1, 1),  # the tail's gap (10% of 10 = 1) is ignored
        ([10, 9.5, 9, 8.5, 8, 7.5, 7, 6.5, 6, 5.5, 0], 11, 0, 0.0, 10),  # ... and seen without the tail rule
    ],
)
def test_gap_cuts_at_the_first_largest_gap_plus_buffer(row, tau, buffer, tail, expected):
    sel = Gap(tau=tau, buffer=buffer, tail=tail)
    assert sel.predict(np.array([row], dtype=float)).tolist() == [expected]


def test_gap_defaults_are_the_papers_and_specs_round_trip():
    sel = parse_selector("gap")
    assert (sel.tau, sel.buffer, sel.tail) == (25, 5, 0.1) and sel.spec == "gap:25,5" and not sel.learned
    assert parse_selector("gap:10,2").get_params() == {"tau": 10, "buffer": 2, "tail": 0.1}
    assert selector_from_dict(parse_selector("gap:10,2,tail=0.2").to_dict()).tail == 0.2
    for bad, message in (("gap:0", "τ must be"), ("gap:5,-1", "buffer b"), ("gap:5,1,tail=1", "tail must")):
        with pytest.raises(UserError, match=message):
            parse_selector(bad)


def test_gap_is_scale_free():
    rng = np.random.default_rng(3)
    scores = -np.sort(-rng.normal(size=(50, 25)), axis=1)
    sel = Gap(tau=25, buffer=1)
    assert np.array_equal(sel.predict(scores), sel.predict(scores * 37.0 + 4.0))


# ------------------------------------------------------------------------ rlt
def _synthetic(q=400, k=20, seed=0):
    """Lists with a clear drop after the relevant results: the first relevant rank is where the head ends."""
    rng = np.random.default_rng(seed)
    head = rng.integers(1, 8, size=q)
    scores = np.sort(rng.uniform(0, 1, size=(q, k)), axis=1)[:, ::-1] + np.where(np.arange(k)[None, :] < head[:, None], 3.0, 0.0)
    first = np.where(rng.uniform(size=q) < 0.9, head, k)  # 10% have no relevant result
    return scores, first


def test_rlt_learns_where_relevance_ends_and_pays_for_passages():
    scores, first = _synthetic()
    cheap = Truncation(tau=20, cost=0.005).fit(scores, first)
    dear = Truncation(tau=20, cost=0.05).fit(scores, first)
    p = cheap.probabilities(scores)
    assert np.all(np.diff(p, axis=1) >= 0), "P(first relevant within k) is monotone in k"
    n_cheap, n_dear = cheap.predict(scores), dear.predict(scores)
    assert np.all(n_dear <= n_cheap) and n_dear.mean() < n_cheap.mean()
    found = first < 20  # the others have no relevant result (rank K)
    recall = (first[found] <= n_cheap[found]).mean()
    head = first[found].mean()
    assert recall > 0.97 and n_cheap.mean() < head + 2.5, (recall, n_cheap.mean(), head)  # reads the head, not the list
    again = selector_from_dict(json.loads(json.dumps(cheap.to_dict())))
    assert np.array_equal(again.predict(scores), n_cheap)


def test_rlt_edge_cases():
    scores, first = _synthetic(q=50)
    sel = Truncation(tau=5).fit(scores, first)
    assert sel.predict(np.array([[4.0, -INF, -INF, -INF, -INF]])).tolist() == [1]  # one result
    assert sel.predict(scores[:, :3]).max() <= 3  # τ larger than K
    with pytest.raises(UserError, match="not fitted"):
        Truncation().predict(scores)
    with pytest.raises(UserError, match="at least 2"):
        Truncation().fit(scores[:1], first[:1])
    assert parse_selector("rlt").learned and parse_selector("rlt:10,0.02").get_params()["cost"] == 0.02


# ------------------------------------------------------------------ confidence
RETR = np.array([[5.0, 4.0, 3.0, 2.0, 1.0]] * 3)


@pytest.mark.parametrize(
    "answer, n_read, threshold, signal, expected",
    [
        ([[1, 2, 8, 1, 1]], 5, 6.0, "score", [3]),  # stops at the first n whose best answer score reaches t
        ([[9, 2, 8, 1, 1]], 5, 6.0, "score", [1]),
        ([[1, 2, 3, 1, 1]], 5, 6.0, "score", [5]),  # never confident: reads all of τ
        ([[1, 2, 3, 1, 1]], 3, 6.0, "score", [0]),  # ... undecided while unread passages remain
        ([[6, 6, 6, 1, 1]], 5, 6.0, "score", [1]),  # a tie with t holds
        ([[9, 2, 8, 1, 1]], 5, 5.0, "margin", [2]),  # margin: 9 - 2 at n = 2 (never at n = 1)
        ([[9, 8, 8.5, 1, 1]], 5, 5.0, "margin", [5]),
    ],
)
def test_confidence_stop_rule(answer, n_read, threshold, signal, expected):
    sel = Confidence(tau=5, signal=signal, threshold=threshold)
    answer = np.array(answer, dtype=float)
    assert sel.stop_points(RETR[:1], answer, np.array([n_read])).tolist() == expected


def test_confidence_respects_tau_and_real_passages():
    sel = Confidence(tau=3, threshold=100.0)
    retrieval = np.array([[5.0, 4.0, 3.0, 2.0], [5.0, -INF, -INF, -INF]])
    answer = np.array([[1.0, 1, 1, 1], [1.0, -INF, -INF, -INF]])
    assert sel.predict(retrieval, answer_scores=answer).tolist() == [3, 1]


def test_confidence_fits_the_threshold_that_maximizes_em_per_passage():
    # question 0: right at n = 1 when confident (score 9); question 1: a confident wrong answer at n = 1 is
    # overruled by rank 3; questions 2-3: low scores everywhere, right only at n = 1
    answer = np.array([[9.0, 1, 1, 1], [5.0, 1, 10, 1], [2.0, 1, 1, 1], [2.0, 1.5, 1, 1]])
    correct = np.array([[1.0, 1, 1, 1], [0.0, 0, 1, 1], [1.0, 1, 1, 1], [1.0, 1, 1, 1]])
    retrieval = np.tile([4.0, 3, 2, 1], (4, 1))
    sel = Confidence(tau=4).fit(retrieval, None, answer_scores=answer, correct=correct)
    n = sel.predict(retrieval, answer_scores=answer)
    assert correct[np.arange(4), n - 1].mean() == 1.0 and sel.fitted_state()["train_em"] == 1.0
    assert 2.0 < sel.threshold_ <= 9.0, sel.threshold_
    costly = Confidence(tau=4, cost=1.0).fit(retrieval, None, answer_scores=answer, correct=correct)
    assert costly.fitted_state()["train_mean_n"] <= sel.fitted_state()["train_mean_n"]
    again = selector_from_dict(json.loads(json.dumps(sel.to_dict())))
    assert again.threshold_ == sel.threshold_
    with pytest.raises(UserError, match="training split's reads"):
        Confidence(tau=4).fit(retrieval, None)
    assert not Confidence(threshold=3.0).needs_fit() and Confidence().needs_fit()


class CountingReader:
    """The real extractive reader, with every (question, passage) pair it is asked to read counted."""

    def __init__(self, reader):
        self.reader = reader
        self.pairs: dict[str, int] = {}

    def read_pairs(self, questions, passages, cache=None):
        for q in questions:
            self.pairs[q] = self.pairs.get(q, 0) + 1
        return self.reader.read_pairs(questions, passages, cache=cache)


@pytest.fixture(scope="module")
def squad_slice():
    from pipeline import api

    dataset = api.load_dataset("reqa_squad", "dev", limit=30)
    return dataset, api.retrieve("bm25", dataset, depth=10)


@pytest.fixture(scope="module")
def reader():
    from pipeline import api

    return api.make_reader(str(READER), threads=2, batch_size=16)


@pytest.mark.slow
def test_confidence_never_reads_past_its_stop(squad_slice, reader):
    from pipeline import api, stages

    dataset, ranking = squad_slice
    sel = Confidence(tau=8, threshold=6.0)
    counting = CountingReader(reader)
    found = stages.candidates_for(dataset, ranking, 8)
    reads, n, seconds = stages.read_until(sel, counting, found.queries.texts, found.passages)
    expected: dict[str, int] = {}  # a question text asked twice (SQuAD has some) reads for both
    for text, k in zip(found.queries.texts, n):
        expected[text] = expected.get(text, 0) + int(k)
    assert counting.pairs == expected, "each question read exactly its n passages"
    assert 1 < n.mean() < 8 and len(set(n.tolist())) > 2, n  # a real spread of stops on real reads
    # the stop found by reading incrementally is the one the rule gives on the full top-8 reads
    full = stages.read_top(reader, found.queries.texts, found.passages)
    assert np.array_equal(stages.select_n(sel, found.passages, found.first_relevant(), reads=full), n)
    assert np.all(seconds > 0)
    # the API reads the same way
    assert api.select(sel, ranking, dataset, reader=reader).tolist() == n.tolist()
    answers = api.read(reader, dataset, ranking, sel)
    expected, _ = stages.answers_for_n(reads, stages.take_top(found.passages, n), n)
    assert list(answers.values()) == expected


@pytest.mark.slow
def test_confidence_fits_on_its_fit_metric(squad_slice, reader):
    """fit_metric=f1 fits the threshold on the F1 of the answer chosen at each n (EM by default): the training score
    it records is the mean F1 at its fitted stops, and that F1 is at least what EM's fitted threshold gives in F1."""
    from pipeline import stages

    dataset, ranking = squad_slice
    found = stages.candidates_for(dataset, ranking, 8)
    reads = stages.read_top(reader, found.queries.texts, found.passages)
    chosen = stages.answers_every_n(reads, found.passages, 1.0)
    per_n = {m: stages.metric_every_n(m, reads, chosen, found.queries.answers, "en") for m in ("em", "f1")}
    assert not np.array_equal(per_n["em"], per_n["f1"])  # real reads where partial credit differs from EM
    fitted = {m: stages.fit_selector(Confidence(tau=8, fit_metric=m), dataset, ranking, 8, reader=reader)
              for m in ("em", "f1")}
    scores = stages.answer_scores(reads, found.passages, 1.0)
    rows = np.arange(len(found.rows))

    def at_stops(selector, metric):
        n = selector.stop_points(found.passages.retriever_scores, scores)
        return float(np.nanmean(per_n[metric][rows, n - 1]))

    for m, sel in fitted.items():
        assert sel.fit_metric == m and sel.train_em_ == pytest.approx(at_stops(sel, m), abs=1e-6)
    assert at_stops(fitted["f1"], "f1") >= at_stops(fitted["em"], "f1") - 1e-9
    with pytest.raises(UserError, match="fit_metric"):
        parse_selector("confidence:8,fit_metric=bert_f1").max_depth  # not scored per answer cell


def _run(*args):
    return subprocess.run([sys.executable, "-m", "pipeline.run", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_confidence_in_pipeline_run_fits_on_train_and_records_costs(tmp_path):
    out = tmp_path / "run"
    proc = _run("--dataset", "reqa_squad", "--limit", "30", "--reader", READER, "--selector", "confidence:8,fit_questions=40",
                "--metrics", "em,f1", "--reader-batch-size", "16", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fitted = json.loads((out / "selector.json").read_text())["selector"]
    assert fitted["fitted"]["n_train"] == 40 and np.isfinite(float(fitted["fitted"]["threshold"]))
    details = [json.loads(line) for line in (out / "details.jsonl").read_text().splitlines()]
    costs = [json.loads(line) for line in (out / "costs.jsonl").read_text().splitlines()]
    assert [d["id"] for d in details] == [c["id"] for c in costs]
    assert [d["n"] for d in details] == [c["passages_read"] for c in costs] == [len(d["read"]) for d in details]
    metrics = json.loads((out / "metrics.json").read_text())["reading"]
    assert metrics["mean_n"] == pytest.approx(np.mean([c["passages_read"] for c in costs]))
    reading = json.loads((out / "manifest.json").read_text())["reading"]
    assert reading["passages_read"] == sum(c["passages_read"] for c in costs)
    assert reading["reads_done"] + reading["reads_reused"] <= reading["passages_read"]


def test_learned_selectors_refuse_the_evaluated_split(tmp_path):
    proc = _run("--dataset", "reqa_squad", "--limit", "5", "--reader", READER, "--selector", "confidence:4",
                "--train-split", "dev", "--out", tmp_path / "r")
    assert proc.returncode == 2
    # one line, before any work (the dataset is not even loaded: no note about it comes first)
    assert proc.stderr.strip().splitlines() == ["error: selector confidence:4 is learned: --train-split dev is the evaluated "
                                                "split; fit it on another split"]
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_the_sweep_refuses_to_fit_on_the_evaluated_split(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline.sweep", "--dataset", "squad_open", "--reader", str(READER),
                           "--selector", "rlt:3", "--train-split", "dev", "--n", "1-3", "--limit", "5", "--out", str(tmp_path / "s")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --train-split dev is the evaluated split: learned selectors are fitted on another split")
    assert not (tmp_path / "s" / "summary.json").exists()
