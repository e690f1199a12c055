"""Files that interoperate (issue 14): run.trec + qrels scored by pytrec_eval give our numbers;
one scale for metrics; per-query files and pipeline.compare against scipy."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

pytrec_eval = pytest.importorskip("pytrec_eval")


def run_cli(*args, module="pipeline.run"):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=900)


def read_trec(path):
    run: dict[str, dict[str, float]] = {}
    for line in open(path, encoding="utf-8"):
        qid, _, did, _, score, _ = line.split()
        run.setdefault(qid, {})[did] = float(score)
    return run


def mean_rr(run, qrels_path):
    from eval.qrels import read_qrels

    qrels = read_qrels(qrels_path)
    assert set(run) == set(qrels), "run.trec and qrels must name the same questions"
    res = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    return float(np.mean([v["recip_rank"] for v in res.values()])), res


@pytest.fixture(scope="module")
def reqa_bm25(tmp_path_factory):
    out = tmp_path_factory.mktemp("reqa_bm25")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "bm25", "--limit", "400", "--depth", "100", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (out.parent / "reqa_bm25.stderr").write_text(proc.stderr)
    return out


@pytest.fixture(scope="module")
def scifact_bm25(tmp_path_factory):
    out = tmp_path_factory.mktemp("scifact_bm25")
    proc = run_cli("--dataset", "beir:scifact", "--split", "test", "--retriever", "bm25", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_reqa_run_trec_and_qrels_give_our_mrr(reqa_bm25):
    metrics = json.loads((reqa_bm25 / "metrics.json").read_text())["retrieval"]["reqa"]
    run = read_trec(reqa_bm25 / "run.trec")
    assert len(run) == metrics["questions"]  # one ranking per unique question
    for qrels in ("qrels.tsv", "qrels.trec"):
        mrr, _ = mean_rr(run, reqa_bm25 / qrels)
        # ReQA averages tied ranks, trec_eval breaks ties by document id; misses below depth 100 are 0 in both
        assert mrr == pytest.approx(metrics["sentence"]["MRR"], abs=0.002)
    queries = [json.loads(l) for l in (reqa_bm25 / "queries.jsonl").read_text().splitlines()]
    assert [q["_id"] for q in queries] == list(run)  # same ids, same order


def test_export_uses_the_run_ids(reqa_bm25, tmp_path):
    """data.export's queries/qrels are keyed like the run: the run scores against an export."""
    proc = run_cli("reqa_squad", "--split", "dev", "--limit", "400", "--out", tmp_path, module="data.export")
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert (tmp_path / "qrels" / "dev.tsv").read_text() == (reqa_bm25 / "qrels.tsv").read_text()
    assert (tmp_path / "queries.jsonl").read_text() == (reqa_bm25 / "queries.jsonl").read_text()
    metrics = json.loads((reqa_bm25 / "metrics.json").read_text())["retrieval"]["reqa"]
    mrr, _ = mean_rr(read_trec(reqa_bm25 / "run.trec"), tmp_path / "qrels" / "dev.tsv")
    assert mrr == pytest.approx(metrics["sentence"]["MRR"], abs=0.002)


def test_scifact_run_trec_and_qrels_give_our_metrics(scifact_bm25):
    metrics = json.loads((scifact_bm25 / "metrics.json").read_text())["retrieval"]
    run = read_trec(scifact_bm25 / "run.trec")
    mrr, _ = mean_rr(run, scifact_bm25 / "qrels.tsv")
    # run.trec holds the top 100 of a depth-1000 ranking: gold below 100 adds < 1/100 per query to our MRR
    assert mrr == pytest.approx(metrics["reqa"]["sentence"]["MRR"], abs=0.002)
    from eval.qrels import read_qrels

    qrels = read_qrels(scifact_bm25 / "qrels.tsv")
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    assert np.mean([v["ndcg_cut_10"] for v in res.values()]) == pytest.approx(metrics["beir"]["nDCG@10"], abs=1e-9)
    assert np.mean([v["recall_100"] for v in res.values()]) == pytest.approx(metrics["beir"]["R@100"], abs=1e-9)


def test_progress_in_a_log_is_lines_not_carriage_returns(reqa_bm25):
    """stderr is a pipe here: tqdm bars print whole lines, at most one per 30 s per bar."""
    log = (reqa_bm25.parent / "reqa_bm25.stderr").read_text()
    assert "\r" not in log
    bars = [l for l in log.splitlines() if "%|" in l]
    assert bars and all(len(l) <= 200 for l in bars)
    from data.progress import LOG_INTERVAL_S, tqdm

    import io

    class Pipe(io.StringIO):
        def isatty(self):
            return False

    sink = Pipe()
    for _ in tqdm(range(100_000), desc="loop", file=sink, mininterval=0):
        pass
    lines = sink.getvalue().splitlines()
    assert LOG_INTERVAL_S >= 30 and 1 <= len(lines) <= 3 and "\r" not in sink.getvalue()  # start and end, no redraws
