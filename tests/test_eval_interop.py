"""Files that interoperate: run.trec + qrels scored by pytrec_eval give our numbers;
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
    """pipeline.export's queries/qrels are keyed like the run: the run scores against an export."""
    proc = run_cli("reqa_squad", "--split", "dev", "--limit", "400", "--out", tmp_path, module="pipeline.export")
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert (tmp_path / "qrels" / "dev.tsv").read_text() == (reqa_bm25 / "qrels.tsv").read_text()
    assert (tmp_path / "queries.jsonl").read_text() == (reqa_bm25 / "queries.jsonl").read_text()
    metrics = json.loads((reqa_bm25 / "metrics.json").read_text())["retrieval"]["reqa"]
    mrr, _ = mean_rr(read_trec(reqa_bm25 / "run.trec"), tmp_path / "qrels" / "dev.tsv")
    assert mrr == pytest.approx(metrics["sentence"]["MRR"], abs=0.002)


@pytest.mark.slow
def test_scifact_run_trec_and_qrels_give_our_metrics(scifact_bm25):
    """Every number of metrics.json recomputed by pytrec_eval from run.trec + qrels.tsv alone: run.trec holds the
    whole depth-1000 ranking they are computed from, so R@1000 is re-made too (run.trec was cut at 100)."""
    metrics = json.loads((scifact_bm25 / "metrics.json").read_text())["retrieval"]
    run = read_trec(scifact_bm25 / "run.trec")
    assert max(len(hits) for hits in run.values()) == 1000  # --depth's default: the whole ranking (BM25 ranks fewer
    # for a query whose words few documents hold)
    mrr, _ = mean_rr(run, scifact_bm25 / "qrels.tsv")
    assert mrr == pytest.approx(metrics["reqa"]["sentence"]["MRR"], abs=1e-4)  # (ReQA averages tied ranks)
    from eval.qrels import read_qrels

    qrels = read_qrels(scifact_bm25 / "qrels.tsv")
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "recall.1000"}).evaluate(run)
    assert np.mean([v["ndcg_cut_10"] for v in res.values()]) == pytest.approx(metrics["beir"]["nDCG@10"], abs=1e-9)
    assert np.mean([v["recall_100"] for v in res.values()]) == pytest.approx(metrics["beir"]["R@100"], abs=1e-9)
    assert np.mean([v["recall_1000"] for v in res.values()]) == pytest.approx(metrics["beir"]["R@1000"], abs=1e-9)
    assert metrics["beir"]["R@1000"] > metrics["beir"]["R@100"]  # (so a run.trec cut at 100 could not give it)


@pytest.fixture(scope="module")
def reqa_bm25_deep(tmp_path_factory):
    """ReQA at the command's default depth (1000), as the README's first command runs it, on 300 questions."""
    out = tmp_path_factory.mktemp("reqa_bm25_deep")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "bm25", "--limit", "300", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_reqa_metrics_are_recomputed_from_run_trec_at_the_whole_depth(reqa_bm25_deep):
    """ReQA's MRR and R@k from run.trec + qrels.tsv by pytrec_eval (R@k of a question: a gold sentence in the top k,
    trec_eval's success@k), and which questions find a gold sentence within the depth at all."""
    metrics = json.loads((reqa_bm25_deep / "metrics.json").read_text())["retrieval"]["reqa"]
    run = read_trec(reqa_bm25_deep / "run.trec")
    assert metrics["depth"] == 1000 and max(len(hits) for hits in run.values()) == 1000
    from eval.qrels import read_qrels

    qrels = read_qrels(reqa_bm25_deep / "qrels.tsv")
    res = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "success.1,5,10", "recall.1000"}).evaluate(run)
    found = sum(v["recall_1000"] > 0 for v in res.values())
    assert found == metrics["questions"] - metrics["not_found_within_depth"]
    per_query = {r["id"]: r for r in map(json.loads, (reqa_bm25_deep / "per_query.jsonl").read_text().splitlines())}
    deep = [q for q, v in res.items() if 0 < v["recip_rank"] < 1 / 100]
    assert deep, "no question's first gold sentence ranks below 100 in this slice"
    for q in deep:  # the ranks run.trec was cut off before
        assert per_query[q]["rr"] > 0 and 1 / per_query[q]["rr"] == pytest.approx(1 / res[q]["recip_rank"], abs=5)
    # ties: ReQA averages tied ranks, trec_eval orders them by document id
    assert np.mean([v["recip_rank"] for v in res.values()]) == pytest.approx(metrics["sentence"]["MRR"], abs=0.002)
    for k in (1, 5, 10):
        assert np.mean([v[f"success_{k}"] for v in res.values()]) == pytest.approx(metrics["sentence"][f"R@{k}"], abs=0.01)


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
    sink = Pipe()
    with tqdm(total=0, desc="reading", file=sink, leave=False) as bar:  # the reader grows its total and refreshes
        for _ in range(1000):
            bar.total += 4
            bar.refresh()
            bar.update(4)
    assert len(sink.getvalue().splitlines()) == 1  # the first line only: explicit refreshes wait out the interval too


# ------------------------------------------------------------ per-query values and pipeline.compare
@pytest.fixture(scope="module")
def reqa_zscore(tmp_path_factory):
    out = tmp_path_factory.mktemp("reqa_zscore")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "fuse-zscore:bm25+dense", "--limit", "400",
                   "--depth", "100", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def per_query(run):
    return {r["id"]: r for r in map(json.loads, (run / "per_query.jsonl").read_text().splitlines())}


def test_per_query_means_are_the_reported_metrics(reqa_bm25, scifact_bm25):
    for run, keys in ((reqa_bm25, {"rr": ("reqa", "sentence", "MRR"), "r@5": ("reqa", "sentence", "R@5"),
                                   "paragraph_rr": ("reqa", "paragraph", "MRR")}),
                      (scifact_bm25, {"rr": ("reqa", "sentence", "MRR"), "ndcg@10": ("beir", "nDCG@10"),
                                      "r@100": ("beir", "R@100")})):
        metrics = json.loads((run / "metrics.json").read_text())
        rows = per_query(run)
        assert list(rows) == list(read_trec(run / "run.trec"))  # keyed by the run.trec / qrels ids
        for name, path in keys.items():
            value = metrics["retrieval"]
            for p in path:
                value = value[p]
            assert np.mean([r[name] for r in rows.values()]) == pytest.approx(value, abs=1e-12)
        lo, hi = metrics["ci95"]["retrieval.reqa.sentence.MRR"]
        assert lo < metrics["retrieval"]["reqa"]["sentence"]["MRR"] < hi and metrics["scale"] == "fraction"


def pairs_csv(path):
    import csv

    with open(path, newline="") as f:
        return {r["metric"]: r for r in csv.DictReader(f)}


@pytest.mark.slow
def test_compare_p_values_are_scipys(reqa_bm25, reqa_zscore, tmp_path):
    from scipy import stats

    a, b = per_query(reqa_bm25), per_query(reqa_zscore)
    ids = list(a)
    x, y = (np.array([rows[q]["rr"] for q in ids]) for rows in (a, b))
    out = tmp_path / "t"
    proc = run_cli(reqa_bm25, reqa_zscore, "--names", "bm25,zscore", "--metrics", "rr,r@10", "--out", out, module="pipeline.compare")
    assert proc.returncode == 0, proc.stderr[-2000:]
    pairs = pairs_csv(out / "compare_pairs.csv")
    assert float(pairs["rr"]["p"]) == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-9)
    x10, y10 = (np.array([rows[q]["r@10"] for q in ids]) for rows in (a, b))
    assert float(pairs["r@10"]["p"]) == pytest.approx(stats.ttest_rel(x10, y10).pvalue, rel=1e-9)
    assert float(pairs["rr"]["p_corrected"]) == float(pairs["rr"]["p"])  # one comparison per metric: nothing to correct
    assert float(pairs["rr"]["mean_a"]) == pytest.approx(json.loads((reqa_bm25 / "metrics.json").read_text())["retrieval"]["reqa"]["sentence"]["MRR"], abs=1e-12)
    md = proc.stdout
    assert "| a | `bm25` |" in md and "<sup>a</sup>" in md.split("| b | `zscore` |")[1].splitlines()[0]  # z-score beats BM25 here
    assert (out / "compare.tex").read_text().startswith("\\begin{tabular}") and (out / "compare.md").is_file()
    # an --out that cannot be a directory: one error line before anything is compared or printed
    proc = run_cli(reqa_bm25, reqa_zscore, "--out", out / "compare.md" / "sub", module="pipeline.compare")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-500:]
    assert proc.stderr.strip().splitlines() == [f"error: {out / 'compare.md' / 'sub'}: cannot create output directory (Not a directory)"]

    # three runs (the third a copy of BM25: p = 1 against it): Holm over each metric's three comparisons
    import csv
    import shutil

    shutil.copytree(reqa_bm25, tmp_path / "bm25copy")
    out = tmp_path / "three"
    proc = run_cli(reqa_bm25, reqa_zscore, tmp_path / "bm25copy", "--metrics", "rr", "--out", out, module="pipeline.compare")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "compare_pairs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    raw = np.array([stats.ttest_rel(x, y).pvalue, 1.0, stats.ttest_rel(y, x).pvalue])  # (a,b), (a,c), (b,c)
    np.testing.assert_allclose([float(r["p"]) for r in rows], raw, rtol=1e-9)
    order = np.argsort(raw)
    holm = np.maximum.accumulate([min(1.0, (3 - k) * raw[i]) for k, i in enumerate(order)])
    expected = np.empty(3)
    expected[order] = holm
    np.testing.assert_allclose([float(r["p_corrected"]) for r in rows], expected, rtol=1e-9)

    rng = lambda: np.random.default_rng(7)  # noqa: E731  (the seed pipeline.compare passes to scipy)
    for test, expected in (
        ("randomization", stats.permutation_test((x, y), lambda u, v, axis=-1: u.mean(axis) - v.mean(axis), permutation_type="samples",
                                                 n_resamples=2000, vectorized=True, rng=rng()).pvalue),
        ("bootstrap", None),
    ):
        if expected is None:  # paired bootstrap: centred resampled mean differences at least as far from 0 as observed
            d = x - y
            boot = stats.bootstrap((d,), np.mean, n_resamples=2000, method="percentile", vectorized=True, rng=rng())
            expected = np.mean(np.abs(boot.bootstrap_distribution - d.mean()) >= abs(d.mean()))
        out = tmp_path / test
        proc = run_cli(reqa_bm25, reqa_zscore, "--metrics", "rr", "--test", test, "--resamples", "2000", "--seed", "7",
                       "--correction", "none", "--out", out, module="pipeline.compare")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert float(pairs_csv(out / "compare_pairs.csv")["rr"]["p"]) == pytest.approx(expected, rel=1e-12)


def test_compare_refuses_other_question_sets(reqa_bm25, tmp_path):
    import shutil

    other = tmp_path / "fewer"
    shutil.copytree(reqa_bm25, other)
    lines = (other / "per_query.jsonl").read_text().splitlines()
    (other / "per_query.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    proc = run_cli(reqa_bm25, other, "--metrics", "rr", module="pipeline.compare")
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "other questions" in errors[0] and "Traceback" not in proc.stderr
