"""pipeline.run end to end on a small slice (real Pyserini, real FAISS), its outputs and errors."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run_cli(*args, module="pipeline.run"):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=900)


def error_lines(proc):
    return [l for l in proc.stderr.splitlines() if l.startswith("error:")]


@pytest.fixture(scope="module")
def bm25_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bm25")
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "bm25", "--limit", "300", "--depth", "100", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_outputs_written(bm25_run):
    metrics = json.loads((bm25_run / "metrics.json").read_text())
    r = metrics["retrieval"]["reqa"]
    assert metrics["corpus_size"] == 10250
    assert r["query_inputs"] >= 300 and r["depth"] == 100
    for level in ("sentence", "paragraph"):
        assert set(r[level]) == {"MRR", "R@1", "R@5", "R@10"}
        assert r[level]["R@1"] <= r[level]["R@5"] <= r[level]["R@10"]
    # paragraph-level is easier than sentence-level
    assert r["paragraph"]["MRR"] >= r["sentence"]["MRR"]
    lines = (bm25_run / "run.trec").read_text().splitlines()
    qid, q0, docid, rank, score, tag = lines[0].split()
    assert q0 == "Q0" and rank == "1" and tag == "bm25"
    assert len(lines) == 100 * r["questions"]  # one ranking per unique question (eval.qrels)
    manifest = json.loads((bm25_run / "manifest.json").read_text())
    assert manifest["config"]["retriever"]["spec"] == "bm25" and manifest["flags"]["retriever"] == "bm25"
    assert any(k.endswith("dev-v1.1.json.zip") for k in manifest["data"])
    assert "pyserini" in manifest["versions"] and "retrieve" in manifest["timings_s"]
    (index,) = manifest["indexes"]  # the Lucene index searched, and how it was built
    assert index["retriever"] == "bm25" and index["search"] == "batch-helper"
    assert index["index_build"]["docs"] == metrics["corpus_size"] and index["jvm"]["heap_max"]


def test_a_rerun_with_other_settings_leaves_only_its_own_outputs(tmp_path):
    """The same --out reused for a retrieval-only run after a run with a reader: the reader's files of the first
    run are gone (said in a note), so every file in the directory is the last run's."""
    from tests.conftest import READER

    out = tmp_path / "run"
    proc = run_cli("--dataset", "reqa_squad", "--limit", "8", "--depth", "10", "--reader", READER, "--selector", "top:2",
                   "--metrics", "em", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reader_files = {"predictions.json", "details.jsonl", "costs.jsonl", "selector.json"}
    assert reader_files <= {p.name for p in out.iterdir()}
    proc = run_cli("--dataset", "reqa_squad", "--limit", "5", "--depth", "10", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not reader_files & {p.name for p in out.iterdir()}
    assert f"note: {out}: removed costs.jsonl, details.jsonl, predictions.json, selector.json of an earlier run" in proc.stderr
    assert "reading" not in json.loads((out / "metrics.json").read_text())
    assert (out / "reads").is_dir()  # the read cache stays: a later run with the reader reuses it


def test_bm25_regression_slice(bm25_run):
    """2CR-style regression: the first 300 dev questions (docs/reproductions.md: full-dev numbers)."""
    r = json.loads((bm25_run / "metrics.json").read_text())["retrieval"]["reqa"]["sentence"]
    assert r["MRR"] == pytest.approx(EXPECTED_BM25_300["MRR"], abs=0.002)
    assert r["R@1"] == pytest.approx(EXPECTED_BM25_300["R@1"], abs=0.004)


@pytest.mark.slow
def test_dense_regression_slice(tmp_path):
    """2CR-style regression for the default dense encoder (all-MiniLM-L6-v2, exact FAISS)."""
    out = tmp_path / "dense"
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "dense", "--limit", "300", "--depth", "100", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads((out / "metrics.json").read_text())["retrieval"]["reqa"]["sentence"]
    assert r["MRR"] == pytest.approx(EXPECTED_DENSE_300["MRR"], abs=0.002)
    assert r["R@1"] == pytest.approx(EXPECTED_DENSE_300["R@1"], abs=0.004)


@pytest.mark.slow
def test_refined_compressed_dense_index_scores_like_exact_search(tmp_path):
    """--dense-refine re-ranks a 4-bit PQ index by exact vectors: the regression slice's numbers come back."""
    out = tmp_path / "refined"
    proc = run_cli("--dataset", "reqa_squad", "--split", "dev", "--retriever", "dense", "--dense-index", "IVF64,PQ48x4fs",
                   "--nprobe", "16", "--dense-refine", "4", "--limit", "300", "--depth", "100", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads((out / "metrics.json").read_text())["retrieval"]["reqa"]["sentence"]
    assert r["MRR"] == pytest.approx(EXPECTED_DENSE_300["MRR"], abs=0.01)
    assert r["R@1"] == pytest.approx(EXPECTED_DENSE_300["R@1"], abs=0.01)
    (index,) = json.loads((out / "manifest.json").read_text())["indexes"]
    assert (index["factory"], index["params"], index["refine"]["k_factor"]) == ("IVF64,PQ48x4fs", {"nprobe": 16}, 4.0)


def test_trec_run_reads_back_to_the_same_metrics(bm25_run, reqa_dev):
    from eval.retrieval_metrics import reqa_metrics
    from data.types import limit_queries
    from retrievers.trec import read_trec_run

    from eval.qrels import question_groups

    ds = limit_queries(reqa_dev, 300)
    groups = question_groups(ds.queries)
    ranking = read_trec_run(bm25_run / "run.trec", groups.ids, ds.corpus.ids)
    group_of = {key: g for g, key in enumerate(dict.fromkeys(ds.queries.question_keys))}
    ranking = ranking.subset([group_of[k] for k in ds.queries.question_keys])  # each input: its question's ranking
    m = reqa_metrics(ranking, ds.queries, ds.corpus)
    saved = json.loads((bm25_run / "metrics.json").read_text())["retrieval"]["reqa"]
    assert m["sentence"]["MRR"] == pytest.approx(saved["sentence"]["MRR"], abs=1e-6)


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"data": [', "malformed JSON"),
        ('{"data": [{"paragraphs": [{"context": "A b.", "qas": [{"id": "1", "question": "q?"}]}]}]}', "missing field 'answers'"),
        ('{"data": []}', "corpus is empty"),
        ('{"rows": []}', "missing field 'data'"),
    ],
)
def test_bad_squad_file_is_one_line_error(tmp_path, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "out"
    proc = run_cli("--dataset", f"squad_file:{bad}", "--retriever", "bm25", "--out", out)
    assert proc.returncode == 2
    errs = error_lines(proc)
    assert len(errs) == 1 and needle in errs[0] and "bad.json" in errs[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "metrics.json").exists()


def test_unknown_dataset_exits_nonzero(tmp_path):
    proc = run_cli("--dataset", "no_such_set", "--out", tmp_path / "o")
    assert proc.returncode == 2 and error_lines(proc) == [l for l in proc.stderr.splitlines() if l.strip()]
    assert "unknown dataset 'no_such_set'" in proc.stderr


def test_export_beir_layout(tmp_path, reqa_dev):
    proc = run_cli("reqa_squad", "--split", "dev", "--out", tmp_path, module="pipeline.export")
    assert proc.returncode == 0, proc.stderr[-1000:]
    corpus = (tmp_path / "corpus.jsonl").read_text().splitlines()
    queries = (tmp_path / "queries.jsonl").read_text().splitlines()
    qrels = (tmp_path / "qrels" / "dev.tsv").read_text().splitlines()
    assert len(corpus) == 10250
    assert len(queries) == len(set(reqa_dev.queries.question_keys))
    first = json.loads(corpus[0])
    assert set(first) == {"_id", "title", "text"} and first["text"] in first["title"]
    assert qrels[0] == "query-id\tcorpus-id\tscore"
    # every question's qrels = union of its query inputs' gold candidates
    union = {}
    for key, gold in zip(reqa_dev.queries.question_keys, reqa_dev.queries.gold):
        union.setdefault(key, set()).update(int(g) for g in gold)
    assert len(qrels) - 1 == sum(len(v) for v in union.values())


EXPECTED_BM25_300 = {"MRR": 0.5872, "R@1": 0.4780}  # python -m pipeline.run --retriever bm25 --limit 300 --depth 100
EXPECTED_DENSE_300 = {"MRR": 0.5745, "R@1": 0.4136}  # python -m pipeline.run --retriever dense --limit 300 --depth 100
