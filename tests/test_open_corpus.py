"""open: datasets (any corpus x any questions), the out-of-core corpus store and DPR top-k accuracy.

Fixtures are written here in the real formats from ../shared/data: SQuAD dev
articles cut into 100-word passages as DPR's ``psgs_w100.tsv`` (csv-quoted,
header row), the same passages as a Pyserini JsonCollection, SQuAD dev
questions as a DPR ``qa.csv`` and as a CuratedTREC-style regex JSONL.  The
reference for every accuracy is Pyserini's own ``evaluate_dpr_retrieval``.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import pickle
import re
import subprocess
import sys
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from tests.conftest import DATA, READER, ROOT

ARTICLES = 12


@pytest.fixture(scope="module")
def squad_dev():
    with zipfile.ZipFile(DATA / "squad" / "dev-v1.1.json.zip") as z:
        return json.loads(z.read("dev-v1.1.json"))


def _passages(squad, articles=ARTICLES):
    """(id, title, text): each article's paragraphs joined and cut into 100-word passages (as DPR cut Wikipedia)."""
    pid = 1
    for article in squad["data"][:articles]:
        words = " ".join(p["context"] for p in article["paragraphs"]).split()
        for lo in range(0, len(words), 100):
            yield str(pid), article["title"].replace("_", " "), " ".join(words[lo : lo + 100])
            pid += 1


def _questions(squad, articles=ARTICLES, per_paragraph=1):
    for article in squad["data"][:articles]:
        for para in article["paragraphs"]:
            for qa in para["qas"][:per_paragraph]:
                yield qa["question"].replace("\t", " "), list(dict.fromkeys(a["text"] for a in qa["answers"]))


def _pattern(answer: str) -> str:
    """A CuratedTREC-style pattern for an answer: words joined by \\s+, digits free-form, an optional plural."""
    words = [re.escape(w) for w in answer.split()]
    return r"\s+".join(words) + ("s?" if answer[-1:].isalpha() else "")


@pytest.fixture(scope="module")
def files(tmp_path_factory, squad_dev):
    root = tmp_path_factory.mktemp("open")
    passages = list(_passages(squad_dev))
    tsv = root / "psgs_w100.tsv"
    with open(tsv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")  # DPR quotes fields with quotes in them the csv way
        w.writerow(["id", "text", "title"])
        for pid, title, text in passages:
            w.writerow([pid, text, title])
    coll = root / "collection"
    coll.mkdir()
    half = len(passages) // 2
    with open(coll / "docs00.jsonl", "w", encoding="utf-8") as f:
        for pid, title, text in passages[:half]:
            f.write(json.dumps({"id": pid, "contents": f"{title}\n{text}"}) + "\n")
    with gzip.open(coll / "docs01.jsonl.gz", "wt", encoding="utf-8") as f:
        for pid, title, text in passages[half:]:
            f.write(json.dumps({"id": pid, "contents": f"{title}\n{text}"}) + "\n")
    questions = list(_questions(squad_dev))
    qa = root / "squad-dev.qa.csv"
    with open(qa, "w", encoding="utf-8") as f:
        for q, answers in questions:
            f.write(f"{q}\t{answers!r}\n")
    trec = root / "trec-dev.jsonl"
    with open(trec, "w", encoding="utf-8") as f:
        for q, answers in questions:
            pats = [_pattern(a) for a in answers] + ["(unbalanced"]  # a bad pattern matches nothing
            f.write(json.dumps({"question": q, "answer": pats}) + "\n")
    return {"root": root, "tsv": tsv, "collection": coll, "qa": qa, "trec": trec,
            "passages": passages, "questions": questions}


def _pyserini_accuracy(retrieval: dict, path: Path, ks=(1, 5, 20, 100), regex=False) -> dict:
    """Pyserini's evaluate_dpr_retrieval on a DPR retrieval JSON: {"Top1": 0.6500, ...} from what it prints."""
    from pyserini.eval.evaluate_dpr_retrieval import evaluate_retrieval

    path.write_text(json.dumps(retrieval, ensure_ascii=False), encoding="utf-8")
    buf = io.StringIO()
    with redirect_stdout(buf):
        evaluate_retrieval(str(path), list(ks), regex)
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"Top(\d+)\taccuracy: ([0-9.]+)", buf.getvalue())}


# ------------------------------------------------------------- has_answer
def test_has_answer_equals_pyserini_on_non_ascii_text(squad_dev):
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    from eval.dpr_accuracy import has_answer

    tok = SimpleTokenizer()
    pairs = []
    for path in (DATA / "xquad" / "xquad.th.json", DATA / "xquad" / "xquad.en.json"):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        for article in data[:8]:
            for para in article["paragraphs"][:6]:
                for qa in para["qas"][:3]:
                    pairs.append((para["context"], [a["text"] for a in qa["answers"]]))
    contexts = [c for c, _ in pairs]
    rng = np.random.default_rng(0)
    pairs += [(contexts[int(rng.integers(len(contexts)))], a) for _, a in pairs]  # mostly non-matching
    pairs += [("Ο ΔΡΟΜΟΣ ΚΑΙ Η ΣΟΦΙΑ", ["δρομος"]), ("İstanbul büyük", ["i̇stanbul"]), ("Café au lait", ["cafe"]),
              ("Café au lait", ["CAFÉ"]), ("Zürich (ZH)", ["zurich"]), ("x y", [""]), ("", [""]), ("U.S. army", ["u.s"])]
    ours = [has_answer(c, a) for c, a in pairs]
    ref = [has_answers(c, a, tok, False) for c, a in pairs]
    assert ours == ref
    assert 0 < sum(ours) < len(ours)  # both outcomes are exercised
    assert any(has_answer(c, a) for c, a in pairs[:50] if re.search("[\u0e00-\u0e7f]", c))  # Thai matches


def test_regex_match_equals_pyserini():
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    from eval.dpr_accuracy import has_answer

    tok = SimpleTokenizer()
    cases = [("The Denver Broncos won 24–10.", [r"Denver\s+Broncos?"]), ("the denver   bronco", [r"Denver\s+Broncos?"]),
             ("won 24-10", [r"24\s*[-–]\s*10"]), ("no match here", [r"^here"]), ("line one\nhere it is", [r"^here"]),
             ("anything", ["(unbalanced"]), ("Café", ["cafe"]), ("Café", ["caf.."])]
    for text, pats in cases:
        assert has_answer(text, pats, "regex") == has_answers(text, pats, tok, True), (text, pats)
    assert has_answer("line one\nhere it is", [r"^here"], "regex")  # MULTILINE
    assert not has_answer("anything", ["(unbalanced"], "regex")


# -------------------------------------------------------------- the store
def test_dpr_tsv_store_is_lazy_and_matches_the_file(files):
    from data.corpus_store import StoreColumn
    from data.registry import load_dataset

    spec = f"open:{files['tsv']}+{files['qa']}"
    ds = load_dataset(spec, "dev")
    corpus, passages = ds.corpus, files["passages"]
    assert len(corpus) == len(passages) and ds.level == "paragraph"
    assert isinstance(corpus.texts, StoreColumn) and isinstance(corpus.ids, StoreColumn)
    assert list(corpus.ids) == [p[0] for p in passages]
    assert corpus.bodies[: len(passages)] == [p[2] for p in passages]
    assert corpus.titles[[0, -1]] == [passages[0][1], passages[-1][1]]
    assert corpus.texts[3] == f"{passages[3][1]}\n{passages[3][2]}"  # what BM25 and the reader see
    assert any('"' in p[2] for p in passages)  # csv-quoted fields were un-quoted
    chunks = list(corpus.texts.iter_chunks(100))
    assert sum(map(len, chunks)) == len(passages) and chunks[0][0] == corpus.texts[0]
    view = corpus.subset(np.array([7, 2, 5]))
    assert view.ids[:] == ["8", "3", "6"] and view.bodies[1] == passages[2][2]
    assert view.content_key != corpus.content_key and corpus.content_key
    again = pickle.loads(pickle.dumps(view))
    assert again.texts[:] == view.texts[:] and len(pickle.dumps(corpus)) < 10_000
    assert len(ds.queries) == len(files["questions"]) and ds.queries.ids[0] == "0"
    assert ds.queries.answers[0] == files["questions"][0][1]
    # built once: a second load opens the same store without rebuilding it
    manifest = Path(ds.sources["corpus_store"]) / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    assert load_dataset(spec, "dev").corpus.content_key == corpus.content_key
    assert manifest.stat().st_mtime_ns == stamp


def _both_readers(path: Path):
    """(Arrow reader's records or "python", csv reader's records or its error line) of one TSV."""
    from data.open_sources import BadRecords, NeedsPythonReader, _dpr_tsv, _reading, dpr_tsv_batches

    try:
        fast = [r for b in dpr_tsv_batches(path, block_bytes=1 << 12)
                for r in zip(*(b.column(c).to_pylist() for c in ("id", "title", "text")))]
    except NeedsPythonReader:
        fast = "python"
    try:
        slow = list(_reading(path, _dpr_tsv(path, BadRecords(False))))
    except UserError as e:
        slow = str(e)
    return fast, slow


def _both_readers_of(tmp_path: Path, name: str, text: str):
    p = tmp_path / f"{name}.tsv"
    p.write_text(text, encoding="utf-8", newline="")
    return _both_readers(p)


def test_arrow_tsv_reader_gives_what_the_csv_reader_gives(files, tmp_path):
    """The store's fast DPR TSV reader (Arrow's CSV parser) yields exactly the csv module's records, or hands over."""
    # the fixture (csv-quoted fields, header), gzipped too, in small blocks (records cross block ends)
    fast, slow = _both_readers(files["tsv"])
    assert fast == slow == [(p, t, x) for p, t, x in files["passages"]]
    gz = tmp_path / "psgs.tsv.gz"
    gz.write_bytes(gzip.compress(files["tsv"].read_bytes()))
    assert _both_readers(gz) == (slow, slow)
    # valid files the two must read alike, and the cases the Arrow reader leaves to the csv reader
    valid = {
        "quotes and newlines": 'id\ttext\ttitle\n1\t"a ""q"" b"\tT\n2\t"multi\nline\r\nfield"\t\n\n3\tx"y\t"t\tab"\r\n',
        "no header": "5\ta\tT\n6\tb\tU",
        "other column order": "title\ttext\tid\nT\tx\t7\n",
        "header reordered": "ID\ttitle\ttext\n7\tT\tx\n",
    }
    for name, text in valid.items():
        fast, slow = _both_readers_of(tmp_path, name, text)
        assert fast == slow and isinstance(slow, list) and slow, name
    handed_over = {
        "byte-order mark": "\ufeffid\ttext\ttitle\n1\ta\tT\n",  # the csv reader drops it: then a header
        "empty first line": "\nid\ttext\ttitle\n1\ta\tT\n",  # csv takes the header line for data
        "two columns": "id\ttext\ttitle\n1\ta\tT\n2\tonly two\n",
        "blank line of spaces": "id\ttext\ttitle\n1\ta\tT\n   \n2\tb\tU\n",
        "id to strip": "id\ttext\ttitle\n 1\ta\tT\n",
        "empty id": "id\ttext\ttitle\n\ta\tT\n",
        "bad header": "id\ttext\tfoo\n1\ta\tT\n",
        "unterminated quote": 'id\ttext\ttitle\n1\t"abc\tT\n',
    }
    for name, text in handed_over.items():
        assert _both_readers_of(tmp_path, name, text)[0] == "python", name
    bad = tmp_path / "latin1.tsv"
    bad.write_bytes("1\tcaf\u00e9\tT\n".encode("latin-1"))
    assert _both_readers(bad)[0] == "python"
    # random short files of quotes, tabs, line ends and odd characters: wherever Arrow reads one, it agrees
    rng = np.random.default_rng(7)
    alphabet = ["a", "b", " ", '"', "\t", "\n", "\r", '""', "\u00e9", "\x00", "\x1c", "\x0b"]
    agreed = 0
    for i in range(400):
        lines = []
        for _ in range(int(rng.integers(1, 4))):
            fields = ["".join(rng.choice(alphabet, int(rng.integers(0, 5)))) for _ in range(3)]
            if rng.random() < 0.6:  # mostly well-formed: quoted where needed, as csv.writer quotes
                fields = ['"' + f.replace('"', '""') + '"' if rng.random() < 0.5 else
                          f.replace('"', "").replace("\t", "").replace("\n", "").replace("\r", "") for f in fields]
                fields[0] = f"id{i}-{len(lines)}"
            lines.append("\t".join(fields))
        text = "\n".join(lines) + str(rng.choice(["", "\n", "\r\n"]))
        fast, slow = _both_readers_of(tmp_path, "fuzz", text)
        if fast != "python":
            assert fast == slow, text
            agreed += 1
    assert agreed > 100  # the comparison ran on many files the fast reader took


def _both_json_readers(path: Path, fmt: str, chunk_bytes: int = 1 << 12):
    """(Arrow reader's records or "python", the json reader's records or its error line) of one JSON-lines file."""
    from data.open_sources import BadRecords, NeedsPythonReader, _beir_jsonl, _pyserini_json, _reading, json_corpus_batches

    try:
        fast = [r for b in json_corpus_batches(path, fmt, chunk_bytes=chunk_bytes)
                for r in zip(*(b.column(c).to_pylist() for c in ("id", "title", "text")))]
    except NeedsPythonReader:
        fast = "python"
    try:
        slow = list(_reading(path, (_beir_jsonl if fmt == "beir" else _pyserini_json)(path, BadRecords(False))))
    except UserError as e:
        slow = str(e)
    return fast, slow


def test_arrow_json_reader_gives_what_the_json_reader_gives(files, tmp_path):
    """The store's fast BEIR / JsonCollection reader (Arrow's JSON parser) yields exactly the json module's records,
    or hands over."""
    # the JsonCollection fixture (plain and gzipped), in chunks far smaller than the file (lines cross them)
    plain, gz = sorted(files["collection"].iterdir())
    half = len(files["passages"]) // 2
    for path, want in ((plain, files["passages"][:half]), (gz, files["passages"][half:])):
        fast, slow = _both_json_readers(path, "pyserini")
        assert fast == slow == [(p, t, x) for p, t, x in want]
        assert _both_json_readers(path, "pyserini", chunk_bytes=4 << 20) == (slow, slow)
    beir = tmp_path / "corpus.jsonl"
    beir.write_text("".join(json.dumps({"_id": p, "title": t, "text": x, "metadata": {"n": [1, 2]}}) + "\n"
                            for p, t, x in files["passages"]), encoding="utf-8")
    assert _both_json_readers(beir, "beir") == (files["passages"], files["passages"])

    def write(name, text):
        p = tmp_path / f"{name}.jsonl"
        p.write_text(text, encoding="utf-8", newline="")
        return p

    valid = {
        ("pyserini", "title splits"): '{"id":"1","contents":"T\\nbody\\nmore"}\n{"id":"2","contents":"no title"}\n'
                                      '{"id":"3","contents":"\\nlead"}\n{"id":"4","contents":""}\n{"id":"5","contents":"T\\n"}',
        ("pyserini", "crlf, escapes, extra fields"): '{"id":"a b","contents":"\\u00e9\\ud83d\\ude00\\/\\t","x":NaN,"y":[{}]}\r\n'
                                                     '{"\\u0069d":"7","contents":"x\\u0000y"}\r\n',
        ("pyserini", "no titles"): '{"id":"1","contents":"a"}\n{"id":"2","contents":""}\n',
        ("beir", "titles"): '{"_id":"1","title":"T","text":"x"}\n{"_id":"2","text":"y"}\n{"_id":"3","title":null,"text":""}\n'
                            '{"_id":" 4 ","title":"","text":"z"}\n',
    }
    for (fmt, name), text in valid.items():
        fast, slow = _both_json_readers(write("valid", text), fmt)
        assert fast == slow and isinstance(slow, list) and slow, name
    handed_over = {
        ("beir", "id instead of _id"): '{"id":"1","title":"T","text":"x"}\n',
        ("pyserini", "docid instead of id"): '{"docid":"1","contents":"x"}\n',
        ("pyserini", "blank id"): '{"id":" \\u3000 ","contents":"x"}\n',
        ("pyserini", "numeric id"): '{"id":1,"contents":"x"}\n',
        ("pyserini", "null contents"): '{"id":"1","contents":null}\n',
        ("pyserini", "no contents"): '{"id":"1"}\n',
        ("beir", "numeric title"): '{"_id":"1","title":5,"text":"x"}\n',
        ("pyserini", "blank line"): '{"id":"1","contents":"x"}\n\n{"id":"2","contents":"y"}\n',
        ("pyserini", "line of spaces"): '{"id":"1","contents":"x"}\n   \n{"id":"2","contents":"y"}\n',
        ("pyserini", "leading space"): ' {"id":"1","contents":"x"}\n',
        ("pyserini", "two objects on a line"): '{"id":"1","contents":"x"} {"id":"2","contents":"y"}\n',
        ("pyserini", "object across lines"): '{"id":"1",\n"contents":"x"}\n',
        ("pyserini", "carriage return between fields"): '{"id":"1",\r"contents":"x"}\n',
        ("pyserini", "carriage return between records"): '{"id":"1","contents":"x"}\r{"id":"2","contents":"y"}\n',
        ("pyserini", "JSON array"): '[{"id":"1","contents":"x"}]\n',
        ("pyserini", "duplicated key"): '{"id":"1","contents":"x","contents":"y"}\n',
        ("pyserini", "lone surrogate"): '{"id":"1","contents":"a\\ud800b"}\n',
        ("pyserini", "byte-order mark"): '\ufeff{"id":"1","contents":"x"}\n',
        ("pyserini", "malformed"): '{"id":"1","contents":"x",}\n',
        ("pyserini", "empty file"): "",
    }
    for (fmt, name), text in handed_over.items():
        assert _both_json_readers(write("bad", text), fmt)[0] == "python", name
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes('{"id":"1","contents":"caf\u00e9"}\n'.encode("latin-1"))
    assert _both_json_readers(latin, "pyserini")[0] == "python"
    # a byte that is not UTF-8 where Arrow looks at nothing (a key or value it ignores): the file is refused all
    # the same (the Arrow reader once read a BEIR record whose title key held one as a record without a title)
    for fmt, raw in (("beir", b'{"_id": "0", "\xfftitle": "0", "text": ""}\n'),
                     ("beir", b'{"_id": "0", "title": "0", "text": "", "extra": "\xff"}\n'),
                     ("pyserini", b'{"id": "0", "contents": "a", "\xfe": 1}\n')):
        stray = tmp_path / "stray.jsonl"
        stray.write_bytes(raw)
        fast, slow = _both_json_readers(stray, fmt)
        assert fast == "python" and "not UTF-8" in slow, (raw, fast, slow)
    # random short files of JSON-ish lines: wherever Arrow reads one, it agrees
    rng = np.random.default_rng(11)
    pieces = ['"a"', '"\\n"', '"b\\nc"', '""', '" "', "null", "1", "[]", "{}", '"\\u00e9"', '"\\ud800"']
    agreed = 0
    for i in range(300):
        lines = []
        for j in range(int(rng.integers(1, 4))):
            rec = {"id": f'"{i}-{j}"' if rng.random() < 0.9 else rng.choice(pieces),
                   "contents": rng.choice(pieces) if rng.random() < 0.3 else f'"t{j}\\nbody {i}"'}
            if rng.random() < 0.2:
                rec["contents" if rng.random() < 0.5 else "extra"] = rng.choice(pieces)
            body = ",".join(f'"{k}":{v}' for k, v in rec.items() if rng.random() < 0.95)
            lines.append("{" + body + "}" + str(rng.choice(["", "", "", "", " ", ","])))
        text = str(rng.choice(["\n", "\n", "\r\n", "\n\n", "\r"])).join(lines) + str(rng.choice(["", "\n"]))
        fast, slow = _both_json_readers(write("fuzz", text), "pyserini")
        if fast != "python":
            assert fast == slow, text
            agreed += 1
    assert agreed > 100  # the comparison ran on many files the fast reader took


def test_store_build_hands_a_file_over_to_the_python_reader(files, tmp_path, monkeypatch):
    """A TSV or JSON file the Arrow readers leave alone is stored by the csv / json reader: same records, the
    manifest says which."""
    from data.corpus_store import open_store
    from data.registry import load_dataset

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    bom = tmp_path / "bom.tsv"
    bom.write_bytes(b"\xef\xbb\xbf" + files["tsv"].read_bytes().split(b"\n", 1)[1])  # no header: BOM + data
    for path, reader in ((files["tsv"], "arrow"), (bom, "python")):
        ds = load_dataset(f"open:{path}+{files['qa']}", "dev")
        store = open_store(ds.sources["corpus_store"])
        assert store.manifest["reader"] == reader
        assert list(ds.corpus.bodies) == [p[2] for p in files["passages"]]
    assert ds.corpus.ids[0] == "1"  # the byte-order mark is not part of the first id (nor of a header)
    # a JsonCollection: Arrow's JSON reader, unless a file has a line only the json reader decides (a blank one)
    blank = tmp_path / "blank"
    blank.mkdir()
    for f in sorted(files["collection"].iterdir()):
        data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
        (blank / f.name.replace(".gz", "")).write_bytes(data.replace(b"\n", b"\n\n", 1))
    for path, reader in ((files["collection"], "arrow"), (blank, "python")):
        ds = load_dataset(f"open:{path}+{files['qa']}", "dev")
        assert open_store(ds.sources["corpus_store"]).manifest["reader"] == reader
        assert list(ds.corpus.ids) == [p[0] for p in files["passages"]]
        assert list(ds.corpus.bodies) == [p[2] for p in files["passages"]] and ds.corpus.titles[:3] == [p[1] for p in files["passages"][:3]]


def test_building_a_store_and_its_index_input_does_not_import_pandas(files, tmp_path):
    """Turning a Python object into Arrow makes pyarrow import pandas (0.6 s per process); the TSV and JsonCollection
    store builds and the index input written from them convert none."""
    code = ("import sys; from pathlib import Path; from data.registry import load_dataset; "
            "from retrievers.lucene import write_row_text_files; "
            f"ds = load_dataset('open:{files['tsv']}+{files['qa']}', 'dev'); "
            f"coll = load_dataset('open:{files['collection']}+{files['qa']}', 'dev'); "
            f"n = write_row_text_files(ds.corpus.texts.iter_arrow_chunks(50), len(ds.corpus), Path({str(tmp_path / 'in')!r}), 2); "
            "print(n, ds.sources['corpus_store'] != coll.sources['corpus_store'], 'pandas' in sys.modules)")
    env = {"QA_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(len(files["passages"])), "True", "False"]


@pytest.mark.slow
def test_dense_over_the_store_reads_rows_lazily_and_ranks_as_in_memory(files, tmp_path, monkeypatch):
    """Dense retrieval encodes a store-backed corpus shard by shard from disk (no list of N texts) and
    ranks exactly as over the same texts held in memory; its embeddings key is the store's content key."""
    from data.corpus_store import StoreColumn
    from data.registry import load_dataset
    from data.types import Corpus
    from retrievers.dense import DenseRetriever

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    corpus = load_dataset(f"open:{files['tsv']}+{files['qa']}", "dev").corpus
    view = corpus.subset(np.arange(0, len(corpus), 6))  # about 100 passages: encoded twice below
    questions = [q for q, _ in files["questions"][:20]]
    lazy = DenseRetriever(shard_texts=16)
    assert isinstance(lazy._texts(view), StoreColumn)  # what the shards slice: the store's column
    for field in ("context", "sentence+context"):
        assert not isinstance(DenseRetriever(field=field)._texts(view), list)
    got = lazy.index(view).search(questions, 10)
    texts = view.texts[:]
    plain = Corpus(ids=view.ids[:], texts=texts, contexts=texts, paragraph_ids=view.paragraph_ids)
    want = DenseRetriever(shard_texts=16).index(plain).search(questions, 10)
    assert np.array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)
    assert lazy.encode_stats_["shards"] == -(-len(view) // 16)
    assert lazy._store_key(view) != lazy._store_key(corpus)  # a view is other content


def test_pyserini_collection_and_config_file_give_the_same_corpus(files, tmp_path):
    from data.registry import load_dataset

    tsv = load_dataset(f"open:{files['tsv']}+{files['qa']}", "dev").corpus
    coll = load_dataset(f"open:{files['collection']}+{files['qa']}", "dev").corpus
    assert list(coll.ids) == list(tsv.ids) and list(coll.bodies) == list(tsv.bodies) and coll.titles[:] == tsv.titles[:]
    cfg = tmp_path / "nq.yaml"
    cfg.write_text(f"corpus: {{path: {files['collection']}, format: pyserini}}\nquestions: {files['trec']}\nmatch: regex\n")
    ds = load_dataset(f"open:{cfg}", "dev")
    assert ds.queries.answer_match == "regex" and list(ds.corpus.ids) == list(tsv.ids)


def test_read_ahead_store_build_equals_the_serial_one_and_hands_over_mid_file(files, tmp_path, monkeypatch):
    """The store build's read-ahead thread (data.io.read_ahead): the same store as reading in line, an Arrow reader's
    hand-over after many batches reaches the builder (nothing published), and a consumer that stops early stops the
    producer."""
    from data import corpus_store
    from data.io import read_ahead
    from data.open_sources import NeedsPythonReader, json_corpus_batches

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    plain = sorted(files["collection"].iterdir())[0]
    batches = lambda: json_corpus_batches(plain, "pyserini", chunk_bytes=1 << 12)  # noqa: E731 - dozens of batches
    assert sum(1 for _ in batches()) > 20
    serial = corpus_store.cached_store(["serial"], batches)
    ahead = corpus_store.cached_store(["ahead"], lambda: read_ahead(batches()))
    for name in ("id", "title", "text", "contents"):
        assert ahead.column(name)[:] == serial.column(name)[:]
    # a line only the json reader decides, near the end: raised in the builder after the batches before it
    late = tmp_path / "late.jsonl"
    late.write_bytes(plain.read_bytes() + b"\n" + b'{"id": "x", "contents": "y"}\n')  # a blank line
    with pytest.raises(NeedsPythonReader):
        corpus_store.cached_store(["late"], lambda: read_ahead(json_corpus_batches(late, "pyserini", chunk_bytes=1 << 12)))
    assert sorted(p.name for p in corpus_store.store_root().iterdir() if p.is_dir()) == sorted(
        [serial.directory.name, ahead.directory.name])
    made, closed = [], []

    def producer():
        try:
            for i in range(1000):
                made.append(i)
                yield i
        finally:
            closed.append(True)

    ahead_items = read_ahead(producer(), depth=2)
    assert [next(ahead_items) for _ in range(3)] == [0, 1, 2]
    ahead_items.close()
    assert closed and len(made) <= 3 + 2 + 1  # three taken, two queued, one waiting to be queued


def test_killed_build_is_never_trusted(files, tmp_path, monkeypatch):
    from data import corpus_store

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))

    def dying():
        yield ("1", "t", "x")
        raise KeyboardInterrupt  # killed mid-build

    with pytest.raises(KeyboardInterrupt):
        corpus_store.cached_store(["k"], dying)
    root = corpus_store.store_root()
    assert not [p for p in root.iterdir() if p.is_dir() and p.name != "digests"]  # nothing (half) built left
    stale = root / ".abc.tmp"  # as a SIGKILL would leave it
    stale.mkdir()
    store = corpus_store.cached_store(["k"], lambda: iter([("1", "t", "x"), ("2", "", "y")]))
    assert len(store) == 2 and store.column("contents")[:] == ["t\nx", "y"]
    with pytest.raises(UserError, match="appears 2 times"):
        corpus_store.cached_store(["dup"], lambda: iter([("1", "", "x"), ("1", "", "y")]))


def test_duplicate_ids_are_found_across_batches_whatever_the_ids_look_like(tmp_path, monkeypatch):
    """Integer ids are checked as int64 while the batches are written, other ids with Arrow over the file: both
    find a duplicate in another batch, name the first duplicated id in file order, and count the duplicated ids;
    two spellings of one number ("17", "017") are two ids; a clean build of integer ids keeps no hash table."""
    from data import corpus_store

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(corpus_store, "BATCH_ROWS", 3)  # several batches from a few records

    def build(name, ids):
        return corpus_store.cached_store([name], lambda: iter([(i, "", f"text {k}") for k, i in enumerate(ids)]))

    assert len(build("ints", [str(i) for i in range(10)])) == 10
    assert len(build("spellings", ["17", "017", "+17", "5"])) == 4  # not integers in canonical form: Arrow's check
    for name, ids in (("int-dups", ["1", "2", "3", "4", "9", "3", "9", "2", "7"]),
                      ("str-dups", ["a", "b", "c", "d", "z", "c", "z", "b", "g"]),
                      ("mixed-dups", ["1", "2", "x", "4", "9", "x", "9", "2", "7"])):
        with pytest.raises(UserError, match=rf"passage id '{ids[1]}' appears 2 times \(3 duplicated ids in all\)"):
            build(name, ids)
    check = corpus_store._IdCheck()
    import pyarrow as pa

    check.add(pa.array(["3", "1"]))
    check.add(pa.array(["2", "3", "3"]))
    assert check.integers and check.duplicate() == ("3", 3, 1)
    check.add(pa.array(["4", None]))
    assert not check.integers and check.duplicate() is None  # the file is checked instead


def _rss_file_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc are Linux's")
@pytest.mark.parametrize("release", [True, False])
def test_random_fetches_do_not_leave_the_store_mapped(tmp_path, monkeypatch, release):
    """Fetching rows all over a store (DPR has-answer at depth) maps its file page by page, and a mapped page counts
    in RSS: the store drops its mapped pages every RELEASE_ROWS fetched rows, so RSS stays far below the file's
    size while the values stay right; without the release (the second case) the whole file ends up mapped."""
    from data import corpus_store

    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    words = np.array([f"w{i:05d}" for i in range(5000)])
    n = 20_000  # ~13 MB of 100-word passages
    texts = [" ".join(rng.choice(words, 100)) for _ in range(n)]
    store = corpus_store.cached_store(["rss", n], lambda: iter([(str(i), "", t) for i, t in enumerate(texts)]))
    file_kib = store.disk_bytes // 1024
    monkeypatch.setattr(corpus_store, "RELEASE_ROWS", 512 if release else 10**9)
    store = corpus_store.open_store(store.directory)  # a fresh map, nothing of it touched yet
    before = _rss_file_kib()
    order = rng.permutation(n)
    for lo in range(0, n, 2000):
        rows = order[lo : lo + 2000]
        assert store.fetch("text", rows) == [texts[r] for r in rows]
    grown = _rss_file_kib() - before
    if release:
        assert grown < file_kib / 4, (grown, file_kib)
    else:
        assert grown > file_kib / 2, (grown, file_kib)


# ---------------------------------------------------- bad input, the CLI
def test_bad_tsv_line_is_one_error_line_exit_2(files, tmp_path):
    bad = tmp_path / "bad.tsv"
    lines = files["tsv"].read_text(encoding="utf-8").splitlines()
    lines.insert(5, "77\tonly two columns")  # file line 6
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {"QA_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "QA_DATA_DIR": str(DATA), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", f"open:{bad}+{files['qa']}",
                           "--retriever", "bm25", "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert err == [f"error: {bad}:6: expected 3 tab-separated columns (id, text, title), got 2"]
    assert "Traceback" not in proc.stderr
    assert not any(p.is_dir() and not p.name.startswith(".") for p in (tmp_path / "cache" / "corpus_store").iterdir()
                   if p.name != "digests")
    from data.registry import load_dataset

    ds = load_dataset(f"open:{bad}+{files['qa']}", "dev", skip_bad_records=True)
    assert ds.sources["skipped_records"] == 1 and len(ds.corpus) == len(files["passages"])


def test_spec_errors():
    from data.open_domain import load_open_questions
    from data.open_sources import hub_questions, parse_open_spec

    for arg, msg in (("", "give a corpus"), ("a.tsv", "CORPUS\\+QUESTIONS"), ("tsvx@a+b", "format 'tsvx' unknown"),
                     ("a.tsv+b.csv+match=fuzzy", "match='fuzzy'")):
        with pytest.raises(UserError, match=msg):
            parse_open_spec(arg)
    with pytest.raises(UserError, match="test split has no answers|no answers in its test split"):
        hub_questions("trivia_qa", None, "test")
    with pytest.raises(UserError, match="no split 'dev'"):
        hub_questions("web_questions", None, "dev")
    with pytest.raises(UserError, match="no such file"):
        load_open_questions(parse_open_spec("a.tsv+/nonexistent/q-{split}.qa.csv").questions, "train")


# ------------------------------------------------ accuracy vs Pyserini
def _run(argv):
    from pipeline.run import main

    assert main(argv) == 0


def _independent_dpr_json(run_trec: Path, files, answers_of) -> dict:
    """A DPR retrieval JSON built from our run.trec with texts read straight from the TSV (not our store)."""
    text_of = {}
    with open(files["tsv"], newline="", encoding="utf-8") as f:
        for row in list(csv.reader(f, delimiter="\t"))[1:]:
            text_of[row[0]] = (row[2], row[1])
    out: dict = {}
    for line in run_trec.read_text().splitlines():
        qid, _, doc, rank, score, _ = line.split()
        title, text = text_of[doc]
        entry = out.setdefault(qid, {"question": "", "answers": answers_of[qid], "contexts": []})
        assert int(rank) == len(entry["contexts"]) + 1
        entry["contexts"].append({"docid": doc, "score": float(score), "text": f"{title}\n{text}"})
    return out


def test_cli_top_k_accuracy_equals_pyserini(files, tmp_path, capsys):
    out = tmp_path / "run"
    _run(["--dataset", f"open:{files['tsv']}+{files['qa']}", "--retriever", "bm25", "--depth", "100", "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    # passages are the candidates: the summary says so (metrics.json keeps the "sentence" key for its readers)
    summary = capsys.readouterr().out
    assert metrics["level"] == "paragraph" and "paragraph MRR" in summary and "sentence MRR" not in summary
    assert summary.count("paragraph MRR") == 1
    dpr = metrics["retrieval"]["dpr"]
    with open(files["qa"], newline="", encoding="utf-8") as f:
        answers_of = {str(i): ast.literal_eval(row[1]) for i, row in enumerate(csv.reader(f, delimiter="\t"))}
    ref = _pyserini_accuracy(_independent_dpr_json(out / "run.trec", files, answers_of), tmp_path / "dpr.json")
    assert set(ref) == {"1", "5", "20", "100"}
    for k, v in ref.items():
        assert round(dpr["accuracy"][f"Top{k}"], 4) == v, (k, dpr, ref)
    assert 0.3 < ref["1"] < ref["20"] <= ref["100"] < 1.0 or ref["100"] == 1.0
    # the resolved gold (answer-bearing retrieved passages) drives R@k: R@1 is the top-1 accuracy
    assert metrics["retrieval"]["reqa"]["sentence"]["R@1"] == pytest.approx(dpr["accuracy"]["Top1"])


def test_the_built_store_is_the_corpus_once_its_file_is_gone(files, tmp_path):
    """``open:STORE_DIR+QUESTIONS`` (or ``store@DIR``): the store an earlier run built, named as the corpus, gives
    the same run with the TSV deleted, searching the index built for it; a damaged or renamed store named so is
    one error line, and is left where it is (it may be the only copy of the corpus)."""
    import shutil

    cache, tsv = tmp_path / "cache", tmp_path / "psgs_w100.tsv"
    shutil.copy(files["tsv"], tsv)
    env = {"QA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "QA_DATA_DIR": str(DATA),
           "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}

    def run(corpus, out):
        return subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", f"open:{corpus}+{files['qa']}",
                               "--retriever", "bm25", "--depth", "20", "--out", str(tmp_path / out)],
                              cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)

    assert run(tsv, "from-tsv").returncode == 0
    store = Path(json.loads((tmp_path / "from-tsv" / "manifest.json").read_text())["data"]["corpus_store"])
    assert store.parent == cache / "corpus_store"
    tsv.unlink()
    for corpus, out in ((store, "from-store"), (f"store@{store}", "from-store-at")):
        done = run(corpus, out)
        assert done.returncode == 0, done.stderr[-2000:]
        for name in ("run.trec", "metrics.json", "per_query.jsonl"):  # the dataset keeps the TSV's name
            assert (tmp_path / out / name).read_bytes() == (tmp_path / "from-tsv" / name).read_bytes(), (out, name)
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        assert manifest["data"]["corpus_store"] == str(store)
        assert manifest["data"][str(tsv)] == json.loads((tmp_path / "from-tsv" / "manifest.json").read_text())["data"][str(tsv)]
        assert [i["index_check"]["checksums"] for i in manifest["indexes"]] == ["unchanged since checked"]
    renamed = tmp_path / "my-wikipedia"
    shutil.copytree(store, renamed)
    with open(store / "passages.arrow", "r+b") as f:  # a flipped byte in the texts
        f.seek(f.seek(0, 2) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    for corpus, message in ((store, "passages.arrow: checksum mismatch"), (renamed, "names the store"),
                            (tmp_path, "not a usable corpus store")):
        done = run(f"store@{corpus}", "bad")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
        assert line.startswith(f"error: {corpus}: not a usable corpus store") and message in line, line
        assert not (tmp_path / "bad" / "metrics.json").exists()
    assert (store / "passages.arrow").is_file()  # named by the user: reported, never removed


def test_regex_answers_top_k_equals_pyserini(files, tmp_path):
    from data.registry import load_dataset
    from eval.dpr_accuracy import write_dpr_retrieval_json
    from pipeline import stages

    ds = load_dataset(f"open:{files['tsv']}+{files['trec']}+match=regex", "dev")
    retriever = stages.build_retriever("bm25", {})
    ranking = stages.retrieve(retriever, ds, 50)
    from eval.retrieval_families import retrieval_metrics

    got = retrieval_metrics(ranking, ds, families=["dpr"])["dpr"]
    c = ds.corpus
    path = tmp_path / "dpr.json"
    write_dpr_retrieval_json(path, ds.queries.ids, ds.queries.texts, ds.queries.answers, ranking.ids, ranking.scores,
                             c.ids.fetch, c.titles.fetch, c.bodies.fetch)
    ref = _pyserini_accuracy(json.loads(path.read_text()), tmp_path / "again.json", ks=(1, 5, 20, 50), regex=True)
    for k, v in ref.items():
        assert round(got["accuracy"][f"Top{k}"], 4) == v
    # the regexes match more than the exact strings do (plurals, free spacing), never less
    plain = load_dataset(f"open:{files['tsv']}+{files['qa']}", "dev")
    stages.resolve_open_gold(plain.queries, plain.corpus, ranking)
    assert (plain.queries.has_answer <= ds.queries.has_answer).all()


def test_dpr_json_positive_passages_are_known_gold(files, tmp_path):
    """DPR's retriever JSON names positive passages: they are gold even when not retrieved, ``wiki:`` ids included."""
    from data.registry import load_dataset
    from pipeline import stages

    passages = files["passages"]
    records = []
    for i, (q, answers) in enumerate(files["questions"][:20]):
        pos = [p for p in passages if answers[0] in p[2]][:1]
        ids = [("wiki:" if i % 2 else "") + p[0] for p in pos]
        records.append({"question": q, "answers": answers, "positive_ctxs": [{"passage_id": x, "title": "", "text": ""} for x in ids]})
    path = tmp_path / "nq-dev.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    ds = load_dataset(f"open:{files['tsv']}+dpr-json@{path}", "dev")
    row_of = {p[0]: r for r, p in enumerate(passages)}
    for rec, known in zip(records, ds.queries.known_gold):
        assert known.tolist() == [row_of[c["passage_id"].removeprefix("wiki:")] for c in rec["positive_ctxs"]]
    assert ds.sources["known_gold_questions"] == sum(1 for r in records if r["positive_ctxs"]) > 10
    ranking = stages.retrieve(stages.build_retriever("bm25", {}), ds, 5)
    for q, known in enumerate(ds.queries.known_gold):
        assert set(known.tolist()) <= set(ds.queries.gold[q].tolist())  # kept beside the answer-bearing rows
    from eval.retrieval_families import retrieval_metrics

    metrics = retrieval_metrics(ranking, ds, families=["dpr"])
    assert metrics["known_gold"]["questions"] == ds.sources["known_gold_questions"]
    assert 0 < metrics["known_gold"]["sentence"]["R@5"] <= 1


def test_every_row_view_is_the_corpus_itself(files):
    """A sweep's "all" level restricts the corpus to every row in order: that is the corpus (same content key), so
    its BM25 index is the one pipeline.run builds over the corpus, not a second one; any other selection of rows,
    the same rows reordered included, is a new content with its own key."""
    from data.open_domain import restrict_corpus
    from data.registry import load_dataset
    from pipeline import stages

    ds = load_dataset(f"open:{files['tsv']}+{files['qa']}", "dev")
    n = len(ds.corpus)
    bm25 = stages.build_retriever("bm25", {})
    whole = restrict_corpus(ds, np.arange(n)).corpus
    assert whole.content_key == ds.corpus.content_key and bm25.index_key(whole) == bm25.index_key(ds.corpus)
    assert list(whole.ids) == list(ds.corpus.ids)
    others = [restrict_corpus(ds, rows).corpus for rows in (np.arange(n - 1), np.arange(n)[::-1].copy(), np.arange(1, n))]
    keys = {c.content_key for c in others}
    assert len(keys) == 3 and ds.corpus.content_key not in keys
    assert list(others[1].ids) == list(ds.corpus.ids)[::-1]


# --------------------------------------------------- reading and sweeps
@pytest.mark.skipif(not READER.is_dir(), reason="reader model missing")
def test_open_run_with_reader_and_mu(files, tmp_path):
    out = tmp_path / "read"
    _run(["--dataset", f"open:{files['tsv']}+{files['qa']}", "--retriever", "bm25", "--depth", "20", "--limit", "6",
          "--reader", str(READER), "--selector", "top:3", "--mu", "0.5", "--metrics", "em,f1", "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    reading = metrics["reading"]
    assert reading["questions"] == 6 and reading["mean_n"] == 3
    assert reading["em"] > 0  # SQuAD questions over SQuAD passages: the reader finds some answers
    details = [json.loads(x) for x in (out / "details.jsonl").read_text().splitlines()]
    ids = {p[0] for p in files["passages"]}
    assert all(set(d["passages"]) <= ids and len(d["passages"]) == 3 for d in details)
    preds = json.loads((out / "predictions.json").read_text())
    assert sorted(preds) == sorted(str(i) for i in range(6))


@pytest.mark.skipif(not READER.is_dir(), reason="reader model missing")
def test_a_question_that_retrieves_nothing_reads_nothing(files, tmp_path):
    """A question none of whose words is in the corpus retrieves no passage: with any selector (a learned one
    fitted on training questions that include such a question too) it reads 0 passages and answers nothing,
    and the run's other questions are read as usual."""
    for split in ("dev", "train"):
        rows = files["questions"][:5] if split == "dev" else files["questions"][5:25]
        with open(tmp_path / f"q-{split}.qa.csv", "w", encoding="utf-8") as f:
            for q, answers in [*rows[:2], ("Zyzzyva qwertyuiop?", ["Xylograph"]), *rows[2:]]:
                f.write(f"{q}\t{answers!r}\n")
    spec = f"open:{files['tsv']}+{tmp_path}/q-{{split}}.qa.csv"
    for selector in ("top:2", "gap:4", "rlt:4"):
        out = tmp_path / selector.replace(":", "-")
        _run(["--dataset", spec, "--retriever", "bm25", "--depth", "4", "--reader", str(READER),
              "--selector", selector, "--metrics", "em,f1", "--out", str(out)])
        details = [json.loads(x) for x in (out / "details.jsonl").read_text().splitlines()]
        assert [d["question"] for d in details][2] == "Zyzzyva qwertyuiop?"
        empty = details[2]
        assert (empty["n"], empty["passages"], empty["read"], empty["answer"]) == (0, [], [], ""), selector
        assert empty["em"] == 0 and empty["error"] == "retrieval"
        others = details[:2] + details[3:]
        assert all(1 <= d["n"] == len(d["passages"]) == len(d["read"]) <= 4 for d in others), selector
        reading = json.loads((out / "metrics.json").read_text())["reading"]
        assert reading["mean_n"] == pytest.approx(sum(d["n"] for d in details) / 6)
        assert json.loads((out / "predictions.json").read_text())[empty["id"]] == ""


@pytest.mark.skipif(not READER.is_dir(), reason="reader model missing")
def test_open_run_closes_its_index_before_reading(files, tmp_path):
    """pipeline.run reads after it has searched: the BM25 index's files are unmapped by then (over 21M passages
    they are 2 GiB of resident pages next to the reader), and the run's outputs are whole."""
    from data.io import cache_dir
    from data.registry import load_dataset
    from pipeline import stages

    tsv = tmp_path / "own.tsv"  # a corpus of this test's own (other tests leave the fixture corpus's index open)
    tsv.write_text("".join(files["tsv"].read_text(encoding="utf-8").splitlines(keepends=True)[:-3]), encoding="utf-8")
    spec = f"open:{tsv}+{files['qa']}"
    out = tmp_path / "run"
    _run(["--dataset", spec, "--retriever", "bm25", "--depth", "10", "--limit", "4", "--reader", str(READER),
          "--selector", "top:2", "--metrics", "em,f1", "--out", str(out)])
    key = stages.build_retriever("bm25", {}).index_key(load_dataset(spec, "dev").corpus)
    assert (cache_dir("bm25") / key).is_dir()  # the run built and searched it
    assert f"/{key}/" not in Path("/proc/self/maps").read_text()
    assert json.loads((out / "metrics.json").read_text())["reading"]["questions"] == 4


@pytest.mark.skipif(not READER.is_dir(), reason="reader model missing")
def test_open_sweep_uniform_nested_levels(files, tmp_path):
    from pipeline.sweep import main

    out = tmp_path / "sweep"
    argv = ["--dataset", f"open:{files['tsv']}+{files['qa']}", "--reader", str(READER), "--corpus-sizes", "50,0.5,all",
            "--n", "1-3", "--depth", "8", "--no-ordinal", "--limit", "6", "--bootstrap", "20", "--metrics", "em,f1",
            "--weighting", "log-trapezoid", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    n = len(files["passages"])
    assert summary["corpus_sizes"] == [50, round(n / 2), n] and summary["gold_rows"] == 0
    found = summary["answer_bearing_by_size"]  # questions with an answer-bearing passage in the top 8, per size
    assert sorted(found) == sorted(map(str, summary["corpus_sizes"]))
    assert all(0 <= v["answer_bearing_questions"] <= 6 for v in found.values())
    assert found[str(n)]["answer_bearing_questions"] >= 3 and found["50"]["answer_bearing_rows"] <= 6 * 8
    assert (out / "em_vs_corpus_size.png").is_file()
    # the ranking's answer recall@k for k = 1..depth per size: non-decreasing, ending at the share of questions
    # with an answer-bearing passage within the depth, and equal at k <= n to the answer recall of the top-n reads
    curves = summary["answer_recall_at_k_by_size"]
    agg = {(int(r["corpus_size"]), r["system"]): r for r in csv.DictReader((out / "summary.csv").open())}
    for size in summary["corpus_sizes"]:
        curve = curves[str(size)]
        assert len(curve) == 8 and all(a <= b for a, b in zip(curve, curve[1:]))
        assert curve[-1] == pytest.approx(found[str(size)]["answer_bearing_questions"] / 6, abs=1e-6)  # 6 decimals
        for k in (1, 2, 3):
            assert curve[k - 1] == pytest.approx(float(agg[(size, f"top:{k}")]["answer_recall_mean"]), abs=1e-6)
    assert (out / "retrieval_recall_vs_corpus_size.png").is_file() and (out / "retrieval_recall_vs_k.png").is_file()
    # regret over log size (sizes spread over decades): the area between the curves drawn on a log axis
    regret = summary["regret"]
    em = {name: np.array(v) for name, v in summary["em_by_size"].items()}
    best = np.max([v for name, v in em.items() if name != "oracle"], axis=0)
    logs = np.log(summary["corpus_sizes"])
    for name in ("top:1", "top:3"):
        want = np.trapezoid(best - em[name], logs) / (logs[-1] - logs[0])
        assert regret["weighting"] == "log-trapezoid" and regret["systems"][name]["mean"] == pytest.approx(want, abs=1e-6)
    from pipeline.sweep_report import report

    text = report(out, [1, 3])
    table = text.splitlines()  # no noise ratio and no ordinal regression: still a table
    rows = [line for line in table if line.startswith(f"| {n:,} |")]
    assert rows and "| — |" in rows[0]
    assert f"{found[str(n)]['answer_bearing_questions']:,.0f} of 6" in rows[0]
    assert "answer recall@5 (%)" in text and f"| {n:,} | {100 * curves[str(n)][0]:.1f} |" in text
    assert not any("ordinal" in line for line in table)
    from data.io import cache_dir
    from data.open_domain import corpus_levels, restrict_corpus
    from data.registry import load_dataset
    from pipeline import stages

    small, large = corpus_levels(n, [], [50, n // 2], seed=1)
    assert set(small) <= set(large)
    # every level's index is closed once its questions are retrieved: none of the smaller levels' Lucene files is
    # still mapped (a sweep to 21M passages would otherwise hold each level's index in memory to the end)
    ds = load_dataset(f"open:{files['tsv']}+{files['qa']}", "dev")
    bm25 = stages.build_retriever("bm25", {})
    keys = [bm25.index_key(restrict_corpus(ds, rows).corpus) for rows in corpus_levels(n, [], [50, round(n / 2)], seed=1)]
    mapped = Path("/proc/self/maps").read_text()
    assert all((cache_dir("bm25") / key).is_dir() for key in keys)  # the levels built them
    assert not [key for key in keys if f"/{key}/" in mapped]
