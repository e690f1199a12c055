"""Fuzzing every input format we read, with hypothesis.

For each format two properties run on generated files:

* **valid** -- files built by this test from records it generated; the parse must give back exactly those
  records (the test's own construction is the expected value, not the parser's output);
* **damaged** -- a valid file with one mutation (truncation, a field of the wrong type, a missing field,
  bytes that are not UTF-8, a byte-order mark, a duplicated id, blank lines, a wrong column count, NaN or
  huge numbers...).  Each mutation says what it must give: ``error`` (garbage: a ``data.errors.UserError``
  is the only right answer, never a silent parse), ``same`` (a harmless change: the original records, or a
  ``UserError``) or ``prefix`` (a cut at a line end: the first records, or a ``UserError``).  Any other
  exception (a traceback) fails.  A ``UserError`` must be one line naming the file and where in it
  (``FILE:LINE``, ``line N``, ``record N`` or a field path such as ``data[0].paragraphs[1].qas[0].id``);
  messages about the whole file (an empty corpus, a duplicated id) name the file and the id.

Formats (the ``format`` key of the report): ``squad`` (``data.squad.load_squad_json``), ``dpr-tsv`` and
``pyserini`` and ``beir-corpus`` (``open:`` corpora through ``data.open_domain.open_corpus_store``, Arrow
and Python readers), ``dpr-csv`` and ``drqa-jsonl`` (``open:`` questions through ``data.open_domain.load_open``),
``nq`` (``data.nq.nq_squad``: original and simplified NQ JSONL, as ``reqa_nq`` converts them),
``beir`` (``data.beir.read_beir_dir``: corpus.jsonl, queries.jsonl, qrels tsv), ``trec-run``
(``retrievers.trec.read_run``), ``per-query`` (``pipeline.compare.load_run`` and ``compare`` over two runs:
per_query.jsonl and metrics.json), ``config`` (``--config``
YAML/TOML through ``pipeline.cli.config_from_argv``), ``retriever-spec`` (``retrievers.registry.make_retriever``)
and ``selector-spec`` (``selection.registry.parse_selector``); ``cli`` runs damaged files through the real
commands (``pipeline.run --dataset``, ``--config``, ``pipeline.compare``) and wants exit status 2 and exactly
one ``error:`` line on stderr, no traceback, nothing in ``--out``.

Budget: the default run tries 25-150 cases per property (one per command for ``cli``; the file takes about
40 s of wall time on a 2-core machine).
``QA_FUZZ_EXAMPLES=N`` makes every property try ``N`` cases (a long run: ``QA_FUZZ_EXAMPLES=2000``);
``QA_FUZZ_CLI_EXAMPLES=M``, when set, gives the ``cli`` property (four command runs a case) ``M`` cases instead.

Report: with ``QA_FUZZ_REPORT=PATH.json`` every property appends one object to the JSON list in that file
(created when missing; written atomically under a lock, so parallel runs may share it)::

    [{"format": "squad", "cases_tried": 40, "failures": 0, "accepted_damaged": 0}, ...]

``cases_tried`` counts the examples hypothesis ran (shrinking included), ``failures`` those that failed and
``accepted_damaged`` the failures that were damaged input accepted (parsed where only a ``UserError`` is right);
a format appears once per property (sum them per format).  Hypothesis' example database is off: nothing is
written into the working tree.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from data.errors import UserError
from tests.conftest import DATA, ROOT

EXAMPLES = int(os.environ.get("QA_FUZZ_EXAMPLES") or 0)
CLI_EXAMPLES = int(os.environ.get("QA_FUZZ_CLI_EXAMPLES") or 0)


def fuzz_settings(default: int, examples: int = 0):
    """``max_examples``: ``examples`` when given, else ``$QA_FUZZ_EXAMPLES`` for a long run, else ``default``."""
    return settings(max_examples=examples or EXAMPLES or default, deadline=None, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------ report
ACCEPTED = "damaged input was accepted"  # how outcome() says a damaged file was not refused


class Tally:
    """Counts the cases one property tried and failed, and of those the damaged inputs that were accepted;
    :meth:`run` appends them to ``$QA_FUZZ_REPORT``."""

    def __init__(self, fmt: str):
        self.fmt, self.tried, self.failures, self.accepted = fmt, 0, 0, 0

    @contextlib.contextmanager
    def case(self):
        from hypothesis.errors import UnsatisfiedAssumption

        self.tried += 1
        try:
            yield
        except UnsatisfiedAssumption:  # (assume(): a case hypothesis drops, not a failure)
            self.tried -= 1
            raise
        except Exception as e:
            self.failures += 1
            self.accepted += isinstance(e, AssertionError) and str(e).startswith(ACCEPTED)
            raise

    def run(self, prop) -> None:
        try:
            prop()
        finally:
            append_report({"format": self.fmt, "cases_tried": self.tried, "failures": self.failures,
                           "accepted_damaged": self.accepted})


def append_report(entry: dict) -> None:
    target = os.environ.get("QA_FUZZ_REPORT")
    if not target:
        return
    from data.io import file_lock, write_json

    path = Path(target)
    with file_lock(path.with_name(path.name + ".lock")):
        rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and path.stat().st_size else []
        if not isinstance(rows, list):
            raise ValueError(f"{path}: QA_FUZZ_REPORT must hold a JSON list")
        rows.append(entry)
        write_json(path, rows)


# ------------------------------------------------------------- the checks
LINE_LOCATOR = re.compile(r":\d+\b|\bline \d+\b|\brecord \d+\b|\bbyte \d+\b")
FIELD_LOCATOR = re.compile(r"\w\[\d+\]|\btop level\b|\b[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\b|^FILE: (data|retriever|seed|selector)\b")


def check_error(err: BaseException, path: Path | str, *, whole_file: tuple[str, ...] = (), fields: bool = False):
    """``err`` is a one-line UserError naming ``path`` and a line (or field path), or one of the ``whole_file`` phrases
    (those may name the directory of ``path`` instead: a BEIR directory's files disagree, its corpus repeats an id)."""
    assert isinstance(err, UserError), f"{type(err).__name__}: {err}"
    msg = str(err)
    assert msg and "\n" not in msg and "\r" not in msg, msg
    path = str(path)
    if any(p in msg for p in whole_file) and any(f"{d}:" in msg for d in list(Path(path).parents)[:2]):
        return
    assert path in msg or Path(path).name in msg, f"the error does not name {path}: {msg}"
    rest = msg.replace(path, "FILE")
    located = LINE_LOCATOR.search(rest) or (fields and FIELD_LOCATOR.search(rest))
    assert located or any(p in rest for p in whole_file), f"the error names no line or field: {msg}"


def outcome(parse, path, expect: str, value=None, *, whole_file=(), fields=False, equal=None):
    """Run ``parse()`` and check it against ``expect`` (``ok``/``same``/``prefix``/``error``, see the module doc)."""
    try:
        got = parse()
    except UserError as e:
        assert expect != "ok", f"a valid file was refused: {e}"
        check_error(e, path, whole_file=whole_file, fields=fields)
        return None
    assert expect != "error", f"{ACCEPTED}: {got!r:.300}"
    if expect == "prefix":
        assert len(got) <= len(value) and got == value[: len(got)], (got, value)
    elif equal is not None:
        equal(got, value)
    else:
        assert got == value
    return got


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A directory for the generated files and a cache of its own (corpus stores are built there)."""
    root = tmp_path_factory.mktemp("fuzz")
    old = os.environ.get("QA_CACHE_DIR")
    os.environ["QA_CACHE_DIR"] = str(root / "cache")
    yield root
    if old is None:
        os.environ.pop("QA_CACHE_DIR", None)
    else:
        os.environ["QA_CACHE_DIR"] = old


_n = iter(range(10**9))


def fresh(root: Path, name: str) -> Path:
    """A new empty directory under ``root`` holding one file ``name`` to be written."""
    d = root / f"case{next(_n)}"
    d.mkdir()
    return d / name


# -------------------------------------------------------------- strategies
# text that any of our formats may carry: no NUL, no lone surrogates
TEXT_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
words = st.text(st.sampled_from("abcdefgh xyzAB"), min_size=1, max_size=12).map(str.strip).filter(bool)
texts = st.text(TEXT_CHARS, max_size=30)
line_texts = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85"),
                     max_size=20)  # one line of text (no line breaks of any kind)
ids = st.one_of(st.text(st.sampled_from("abcxyz0123456789-_:."), min_size=1, max_size=8),
                st.integers(0, 10**6).map(str))
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\x80")
NON_FINITE = ("NaN", "Infinity", "-Infinity")


def unique_by(key):
    return lambda xs: len({key(x) for x in xs}) == len(xs)


@st.composite
def byte_damage(draw, data: bytes, records: int):
    """A damaged copy of a line-based file: (new bytes, expect), where ``expect`` is error/same/prefix."""
    kind = draw(st.sampled_from(["truncate", "bad_utf8", "bom", "blank_lines", "crlf", "nul"]))
    if kind == "truncate":
        cut = draw(st.integers(0, max(len(data) - 1, 0)))
        new = data[:cut]
        # a cut at a line end leaves whole records; elsewhere the last line is a piece of a record
        return new, ("prefix" if new.endswith(b"\n") or not new else "prefix-or-error")
    if kind == "bad_utf8":
        pos = draw(st.integers(0, len(data)))
        return data[:pos] + draw(st.sampled_from(BAD_UTF8)) + data[pos:], "error"
    if kind == "bom":
        return b"\xef\xbb\xbf" + data, "same"
    if kind == "blank_lines":
        lines = data.split(b"\n")
        at = draw(st.integers(1, len(lines) - 1)) if len(lines) > 1 else 0
        lines.insert(at, draw(st.sampled_from([b"", b"   ", b"\t"])) if at else b"")
        return b"\n".join(lines), "same-or-error"
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n"), "same"
    pos = draw(st.integers(0, len(data)))
    return data[:pos] + b"\x00" + data[pos:], "prefix-or-error"


def loose(expect: str) -> str:
    """A byte damage's expectation as :func:`outcome` takes it (``*-or-error`` means a UserError is right too)."""
    return {"prefix-or-error": "prefix", "same-or-error": "same"}.get(expect, expect)


# ===================================================================== SQuAD
@st.composite
def squad_docs(draw):
    """A valid SQuAD v1.1 document: answers are substrings of their context at their answer_start."""
    articles, qn = [], 0
    for _ in range(draw(st.integers(1, 2))):
        paragraphs = []
        for _ in range(draw(st.integers(1, 2))):
            context = draw(st.text(TEXT_CHARS, min_size=1, max_size=60).filter(lambda t: not t.isspace()))
            qas = []
            for _ in range(draw(st.integers(1, 3))):
                answers = []
                for _ in range(draw(st.integers(1, 2))):  # a span holding a character that is not white space
                    at = draw(st.sampled_from([i for i, c in enumerate(context) if not c.isspace()]))
                    start, end = draw(st.integers(0, at)), draw(st.integers(at + 1, len(context)))
                    answers.append({"text": context[start:end], "answer_start": start})
                qid = draw(st.one_of(st.just(f"q{qn}"), st.just(qn)))
                qn += 1
                qas.append({"id": qid, "question": draw(texts.filter(str.strip)), "answers": answers})
            paragraphs.append({"context": context, "qas": qas})
        articles.append({"title": draw(texts), "paragraphs": paragraphs})
    return {"version": "1.1", "data": articles}


def squad_places(doc):
    """Every (qa dict, answer dict or None, paragraph dict, article dict) of ``doc``."""
    for article in doc["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield qa, para, article


WRONG = {  # values of a type the field never has (SQuAD v1.1; ids are strings or integers)
    "data": [None, {}, "x", 3], "paragraphs": [None, {}, "x", 1.5], "context": [None, 3, [], {}, True],
    "qas": [None, "x", {}, 2], "id": [None, 1.5, [], {}, True], "question": [None, 3, [], {}],
    "answers": [None, "Denver", {}, 0], "text": [None, 3, [], {}], "answer_start": [None, "12", 1.5, [], True, 1e300],
}


@st.composite
def squad_damage(draw):
    """(document or raw bytes, expect, expected document when it parses)."""
    import copy

    doc = draw(squad_docs())
    bad = copy.deepcopy(doc)
    places = list(squad_places(bad))
    qa, para, article = draw(st.sampled_from(places))
    answer = draw(st.sampled_from(qa["answers"]))
    kind = draw(st.sampled_from(["missing", "wrong_type", "shift_start", "huge_start", "nonfinite_start",
                                 "duplicate_id", "blank_question", "empty_answer", "empty_context", "extra_key",
                                 "truncate", "bad_utf8", "bom", "gzip", "top_level"]))
    if kind in ("missing", "wrong_type"):
        owner, key = draw(st.sampled_from([(bad, "data"), (article, "paragraphs"), (para, "context"), (para, "qas"),
                                            (qa, "id"), (qa, "question"), (qa, "answers"), (answer, "text"),
                                            (answer, "answer_start")]))
        if kind == "missing":
            del owner[key]
        else:
            owner[key] = draw(st.sampled_from(WRONG[key]))
        return bad, "error", None
    if kind == "shift_start":
        start = answer["answer_start"] + draw(st.integers(-5, 5).filter(bool))
        answer["answer_start"] = start
        ok = 0 <= start < len(para["context"]) and para["context"][start:start + len(answer["text"])] == answer["text"]
        return bad, ("ok" if ok else "error"), bad
    if kind == "huge_start":
        answer["answer_start"] = draw(st.sampled_from([10**30, -(10**30), 2**63, -1]))
        return bad, "error", None
    if kind == "nonfinite_start":
        answer["answer_start"] = "@@NONFINITE@@"
        return json.dumps(bad).replace('"@@NONFINITE@@"', draw(st.sampled_from(NON_FINITE))).encode(), "error", None
    if kind == "duplicate_id":
        assume(len(places) > 1)
        other = draw(st.sampled_from([p[0] for p in places if p[0] is not qa]))
        qa["id"] = other["id"]
        return bad, "error", None
    if kind == "blank_question":
        qa["question"] = draw(st.sampled_from(["", " ", "\t\n"]))
        return bad, "error", None
    if kind == "empty_answer":
        answer["text"] = ""
        return bad, "error", None
    if kind == "empty_context":
        para["context"] = draw(st.sampled_from(["", "  "]))
        return bad, "error", None
    if kind == "extra_key":
        draw(st.sampled_from([qa, para, article, answer, bad]))["x_extra"] = draw(st.sampled_from([None, 1, "v", []]))
        return bad, "ok", bad
    if kind == "top_level":
        return json.dumps(draw(st.sampled_from([[], "data", 3, None, [doc]]))).encode(), "error", None
    raw = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()
    if kind == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))], "error", None
    if kind == "bad_utf8":  # inside the first context (a string, so the JSON stays well-formed)
        pos = raw.index(b'"context": "') + len(b'"context": "')
        return raw[:pos] + draw(st.sampled_from(BAD_UTF8)) + raw[pos:], "error", None
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw, "ok", doc
    return gzip.compress(raw), "ok", doc


def test_squad_valid_round_trip(work):
    from data.squad import load_squad_json

    tally = Tally("squad")

    @fuzz_settings(40)
    @given(doc=squad_docs(), compress=st.sampled_from(["plain", "gzip", "zip"]), ascii_only=st.booleans())
    def prop(doc, compress, ascii_only):
        with tally.case():
            raw = json.dumps(doc, ensure_ascii=ascii_only).encode()
            path = fresh(work, "squad.json")
            if compress == "zip":
                import zipfile

                with zipfile.ZipFile(path, "w") as zf:
                    zf.writestr("inner/squad.json", raw)
            else:
                write(path, raw, gz=compress == "gzip")
            outcome(lambda: load_squad_json(path), path, "ok", doc)

    tally.run(prop)


def test_squad_damaged(work):
    from data.squad import load_squad_json

    tally = Tally("squad")

    @fuzz_settings(80)
    @given(case=squad_damage())
    def prop(case):
        with tally.case():
            content, expect, expected = case
            path = fresh(work, "squad.json")
            write(path, content if isinstance(content, bytes) else json.dumps(content).encode())
            outcome(lambda: load_squad_json(path), path, expect, expected, fields=True)

    tally.run(prop)


# ============================================================ open: corpora
def corpus_rows(path: Path, fmt: str | None):
    """``(id, title, text)`` of every passage, as the ``open:`` corpus store holds them."""
    from data.open_domain import open_corpus_store
    from data.open_sources import SourceSpec

    store, _ = open_corpus_store(SourceSpec("file", fmt, str(path)))
    corpus = store.corpus()
    return list(zip(corpus.ids, corpus.titles, corpus.bodies))


def compare_rows(expect: str):
    """How a damaged corpus' parse is compared (see :func:`outcome`): ``cut`` keeps all but the last record."""

    def equal(got, value):
        if expect == "cut":  # a line cut anywhere: the last record may be a shorter piece of the original one
            assert len(got) <= len(value) and got[:-1] == value[: max(len(got) - 1, 0)], (got, value)
        else:
            assert got == value, (got, value)

    return equal


@st.composite
def dpr_passages(draw, one_line: bool = False):
    """[(id as written, title, text)]: ids unique once stripped, never the header word ``id``."""
    body = line_texts if one_line else texts
    rows = draw(st.lists(st.tuples(ids, body, body), min_size=1, max_size=6, unique_by=lambda r: r[0]))
    pad = draw(st.sampled_from(["", " ", "\u3000"]))
    rows = [(pad + pid if i == 0 else pid, title, text) for i, (pid, title, text) in enumerate(rows)]
    assume(all(pid.strip().lower() != "id" for pid, _, _ in rows))
    return rows


def dpr_tsv_bytes(rows, header, terminator="\n", columns=None, quote_all=False) -> bytes:
    """DPR's psgs_w100 layout, written by ``csv`` as DPR writes it (``header``: the column order, or None).

    (``csv`` quotes a field holding a carriage return only when the line terminator holds one: with ``\n``
    such a file is quoted throughout, else the carriage return would end the line for any reader.)
    """
    buf = io.StringIO()
    if terminator == "\n" and any("\r" in field for row in rows for field in row):
        quote_all = True
    writer = csv.writer(buf, delimiter="\t", lineterminator=terminator,
                        quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    order = [c.lower() for c in header] if header else ["id", "text", "title"]
    if header:
        writer.writerow(header)
    for pid, title, text in rows:
        writer.writerow([{"id": pid, "title": title, "text": text}[c] for c in order] if columns is None else columns(pid, title, text))
    return buf.getvalue().encode("utf-8")


HEADERS = st.sampled_from([None, ["id", "text", "title"], ["id", "title", "text"], ["ID", "Text", "Title"]])


def test_dpr_tsv_valid_round_trip(work):
    tally = Tally("dpr-tsv")

    @fuzz_settings(30)
    @given(rows=dpr_passages(), header=HEADERS, gz=st.booleans(), terminator=st.sampled_from(["\n", "\r\n"]),
           named=st.booleans(), quote_all=st.booleans())
    def prop(rows, header, gz, terminator, named, quote_all):
        with tally.case():
            path = write(fresh(work, "psgs.tsv.gz" if gz else "psgs.tsv"),
                         dpr_tsv_bytes(rows, header, terminator, quote_all=quote_all), gz)
            expected = [(pid.strip(), title, text) for pid, title, text in rows]
            outcome(lambda: corpus_rows(path, "dpr-tsv" if named else None), path, "ok", expected)

    tally.run(prop)


@st.composite
def dpr_tsv_damage(draw):
    rows = draw(dpr_passages(one_line=True))
    header = draw(HEADERS)
    expected = [(pid.strip(), title, text) for pid, title, text in rows]
    data = dpr_tsv_bytes(rows, header)
    kind = draw(st.sampled_from(["columns", "empty_id", "duplicate_id", "bytes", "bytes"]))
    i = draw(st.integers(0, len(rows) - 1))
    if kind == "columns":
        width = draw(st.sampled_from([2, 4, 5]))
        data = dpr_tsv_bytes(rows, header, columns=lambda p, t, x: ([p, x, t, "extra", "more"][:width] if p == rows[i][0]
                                                                     else [p, x, t]))
        return data, "error", expected
    if kind == "empty_id":
        rows[i] = (draw(st.sampled_from(["", " ", "\t"])), rows[i][1], rows[i][2])
        return dpr_tsv_bytes(rows, header), "error", expected
    if kind == "duplicate_id":
        assume(len(rows) > 1)
        j = draw(st.integers(0, len(rows) - 1).filter(lambda j: j != i))
        rows[i] = (rows[j][0].strip(), rows[i][1], rows[i][2])
        return dpr_tsv_bytes(rows, header), "error", expected
    damaged, expect = draw(byte_damage(data, len(rows)))
    if b"\x00" in damaged:
        expect = "error"  # a NUL byte is never text
    elif expect == "prefix-or-error":
        expect = "cut"
    elif expect == "prefix":
        expect = "cut" if header is None or damaged.count(b"\n") > 0 else "prefix"
    return damaged, expect, expected


def test_dpr_tsv_damaged(work):
    tally = Tally("dpr-tsv")

    @fuzz_settings(50)
    @given(case=dpr_tsv_damage())
    def prop(case):
        with tally.case():
            data, expect, expected = case
            path = write(fresh(work, "psgs.tsv"), data)
            outcome(lambda: corpus_rows(path, "dpr-tsv"), path, "same" if expect in ("cut", "same-or-error") else expect,
                    expected, whole_file=("the corpus is empty", "appears"), equal=compare_rows(expect))

    tally.run(prop)


JSON_FIELDS = {"pyserini": ("id", "contents"), "beir": ("_id", "text")}


@st.composite
def json_passages(draw, fmt: str):
    """(records, expected rows): JsonCollection ``{"id","contents"}`` or BEIR ``{"_id","title","text"}``."""
    n = draw(st.integers(1, 5))
    pids = draw(st.lists(ids.filter(lambda s: s.strip() == s), min_size=n, max_size=n, unique=True))
    records, expected = [], []
    for pid in pids:
        key = draw(st.sampled_from([pid, int(pid)] if pid.isdigit() and str(int(pid)) == pid else [pid]))
        if fmt == "pyserini":
            title = draw(st.one_of(st.just(""), line_texts.filter(bool)))
            text = draw(texts) if title else draw(line_texts)
            records.append({"id": key, "contents": f"{title}\n{text}" if title else text})
        else:
            title, text = draw(texts), draw(texts)
            records.append({"_id": key, "title": title, "text": text} if title or draw(st.booleans())
                           else {"_id": key, "text": text})
        expected.append((pid, title, text))
    return records, expected


def jsonl_bytes(records, ensure_ascii=True) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in records).encode("utf-8")


def test_json_corpus_valid_round_trip(work):
    tally = Tally("pyserini+beir-corpus")

    @fuzz_settings(30)
    @given(fmt=st.sampled_from(["pyserini", "beir"]), data=st.data(), array=st.booleans(), gz=st.booleans())
    def prop(fmt, data, array, gz):
        with tally.case():
            records, expected = data.draw(json_passages(fmt))
            raw = json.dumps(records).encode() if array else jsonl_bytes(records, data.draw(st.booleans()))
            path = write(fresh(work, "docs.json.gz" if gz else "docs.jsonl"), raw, gz)
            outcome(lambda: corpus_rows(path, fmt), path, "ok", expected)

    tally.run(prop)


@st.composite
def json_corpus_damage(draw):
    fmt = draw(st.sampled_from(["pyserini", "beir"]))
    records, expected = draw(json_passages(fmt))
    id_key, text_key = JSON_FIELDS[fmt]
    i = draw(st.integers(0, len(records) - 1))
    kind = draw(st.sampled_from(["missing", "wrong_type", "duplicate_id", "bad_line", "bytes", "bytes"]))
    if kind == "missing":
        del records[i][draw(st.sampled_from([id_key, text_key]))]
        return fmt, jsonl_bytes(records), "error", expected
    if kind == "wrong_type":
        key = draw(st.sampled_from([id_key, text_key] + (["title"] if fmt == "beir" else [])))
        records[i][key] = draw(st.sampled_from([None, [], {}, True, 1.5, ["a"]] if key == id_key
                                               else [None, 3, [], {}, ["a"], True]))
        if key == "title" and records[i][key] is None:
            return fmt, jsonl_bytes(records), "ok", expected[:i] + [(expected[i][0], "", expected[i][2])] + expected[i + 1:]
        return fmt, jsonl_bytes(records), "error", expected
    if kind == "duplicate_id":
        assume(len(records) > 1)
        records[i][id_key] = records[(i + 1) % len(records)][id_key]
        return fmt, jsonl_bytes(records), "error", expected
    if kind == "bad_line":
        lines = jsonl_bytes(records).split(b"\n")
        line = lines[i]
        lines[i] = draw(st.sampled_from([line[: max(len(line) // 2, 1)], b"[1, 2]", b'"text"', b"3", b"null",
                                         line + b"}", line.replace(b":", b"", 1)]))
        return fmt, b"\n".join(lines), "error", expected
    original = jsonl_bytes(records)
    damaged, expect = draw(byte_damage(original, len(records)))
    if expect == "prefix-or-error":  # a cut inside a JSON line, or a NUL byte: never valid JSON (a cut of the newline
        expect = "prefix" if damaged.endswith(b"\n") or original.startswith(damaged + b"\n") else "error"  # alone is)
    if expect == "prefix" and not damaged.strip():
        expect = "error"  # nothing left: an empty corpus
    return fmt, damaged, expect, expected


def test_a_json_corpus_without_its_last_newline_is_whole(work):
    """The last line of a JSON-lines corpus may lack its newline: every record is read (the damaged-corpus property
    once expected an error for a cut of that newline alone)."""
    for fmt, records, expected in (
            ("pyserini", [{"id": "y.", "contents": "0"}, {"id": 179, "contents": "a b"}],
             [("y.", "", "0"), ("179", "", "a b")]),
            ("beir", [{"_id": "d1", "title": "T", "text": "x"}, {"_id": 2, "text": "y z"}],
             [("d1", "T", "x"), ("2", "", "y z")])):
        path = write(fresh(work, "docs.jsonl"), jsonl_bytes(records).removesuffix(b"\n"))
        assert corpus_rows(path, fmt) == expected


def test_json_corpus_damaged(work):
    tally = Tally("pyserini+beir-corpus")

    @fuzz_settings(50)
    @given(case=json_corpus_damage())
    def prop(case):
        with tally.case():
            fmt, data, expect, expected = case
            path = write(fresh(work, "docs.jsonl"), data)
            outcome(lambda: corpus_rows(path, fmt), path, loose(expect), expected,
                    whole_file=("the corpus is empty", "appears"))

    tally.run(prop)


# ========================================================== open: questions
def question_rows(path: Path, fmt: str):
    """``(id, question, answers)`` of every question, as ``open:`` loads them."""
    from data.open_domain import load_open_questions
    from data.open_sources import SourceSpec

    questions, _, _ = load_open_questions(SourceSpec("file", fmt, str(path)), "dev")
    return [(q.qid, q.text, q.answers) for q in questions]


answers_lists = st.lists(texts.filter(str.strip), min_size=1, max_size=3)


@st.composite
def dpr_questions(draw, one_line: bool = False):
    """[(question, answers)]: DPR numbers its questions 0, 1, ... in file order."""
    body = line_texts if one_line else texts
    return draw(st.lists(st.tuples(body.filter(str.strip), answers_lists), min_size=1, max_size=5))


def dpr_csv_bytes(rows, terminator="\n", cells=None) -> bytes:
    """DPR's ``*.qa.csv``: question TAB ``str(list of answers)``, written by ``csv`` as DPR writes it (``cells``: the
    cells of a row instead, for damage)."""
    buf = io.StringIO()
    quote_all = terminator == "\n" and any("\r" in q for q, _ in rows)  # (see dpr_tsv_bytes)
    writer = csv.writer(buf, delimiter="\t", lineterminator=terminator,
                        quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    for i, (question, answers) in enumerate(rows):
        writer.writerow(cells(i, question, answers) if cells else [question, str(answers)])
    return buf.getvalue().encode("utf-8")


def test_dpr_csv_valid_round_trip(work):
    tally = Tally("dpr-csv")

    @fuzz_settings(30)
    @given(rows=dpr_questions(), gz=st.booleans(), terminator=st.sampled_from(["\n", "\r\n"]), named=st.booleans())
    def prop(rows, gz, terminator, named):
        with tally.case():
            path = write(fresh(work, "q.qa.csv.gz" if gz else "q.qa.csv"), dpr_csv_bytes(rows, terminator), gz)
            expected = [(str(i), q, answers) for i, (q, answers) in enumerate(rows)]
            outcome(lambda: question_rows(path, "dpr-csv" if named else None), path, "ok", expected)

    tally.run(prop)


ANSWER_CELLS = {  # the answers cell as written -> the answers it means (None: not DPR answers, an error)
    "['a', 'b']": ["a", "b"], "('a',)": ["a"], "'a'": ["a"], '["x y"]': ["x y"],
    "[]": None, "['']": None, "[' ']": None, "['a', '']": None, "['a', None]": None, "[1]": None, "1": None,
    "None": None, "abc": None, "['a'": None, "{'a'}": None, "[b'a']": None, "{'a': 1}": None, "['a'] + ['b']": None,
    "": None, "[[]]": None, "__import__('os')": None,
}


@st.composite
def dpr_csv_damage(draw):
    rows = draw(dpr_questions(one_line=True))
    expected = [(str(i), q, answers) for i, (q, answers) in enumerate(rows)]
    i = draw(st.integers(0, len(rows) - 1))
    kind = draw(st.sampled_from(["empty_question", "empty_answer", "answers_cell", "columns", "bytes", "bytes"]))
    if kind == "empty_question":
        rows[i] = (draw(st.sampled_from(["", " ", "\t", "\u3000"])), rows[i][1])
        return dpr_csv_bytes(rows), "error", expected
    if kind == "empty_answer":
        answers = list(rows[i][1])
        answers.insert(draw(st.integers(0, len(answers))), draw(st.sampled_from(["", " ", "\n"])))
        rows[i] = (rows[i][0], answers)
        return dpr_csv_bytes(rows), "error", expected
    if kind == "answers_cell":
        cell = draw(st.sampled_from(sorted(ANSWER_CELLS)))
        data = dpr_csv_bytes(rows, cells=lambda j, q, a: [q, cell if j == i else str(a)])
        if ANSWER_CELLS[cell] is None:
            return data, "error", expected
        return data, "ok", expected[:i] + [(str(i), rows[i][0], ANSWER_CELLS[cell])] + expected[i + 1:]
    if kind == "columns":
        width = draw(st.sampled_from([1, 3, 4]))
        data = dpr_csv_bytes(rows, cells=lambda j, q, a: ([q, str(a), "x", "y"][:width] if j == i else [q, str(a)]))
        return data, "error", expected
    damaged, expect = draw(byte_damage(dpr_csv_bytes(rows), len(rows)))
    if b"\x00" in damaged:
        expect = "error"  # a NUL byte is never text
    return damaged, expect, expected


def test_dpr_csv_damaged(work):
    tally = Tally("dpr-csv")

    @fuzz_settings(60)
    @given(case=dpr_csv_damage())
    def prop(case):
        with tally.case():
            data, expect, expected = case
            path = write(fresh(work, "q.qa.csv"), data)
            outcome(lambda: question_rows(path, "dpr-csv"), path, loose(expect), expected,
                    whole_file=("no questions with answers",))

    tally.run(prop)


@st.composite
def drqa_questions(draw):
    """(records, expected rows): DrQA/Anserini ``{"question", "answer"}``, with ids ``id`` or ``qid`` or none (the
    line index)."""
    n = draw(st.integers(1, 5))
    id_key = draw(st.sampled_from([None, "id", "qid"]))
    qids = draw(st.lists(ids.filter(lambda s: s.strip() == s), min_size=n, max_size=n, unique=True))
    records, expected = [], []
    for k, qid in enumerate(qids):
        question, answers = draw(texts.filter(str.strip)), draw(answers_lists)
        written = answers[0] if len(answers) == 1 and draw(st.booleans()) else answers  # one answer: a string or a list
        rec = {"question": question, draw(st.sampled_from(["answer", "answers"])): written}
        if id_key:
            rec[id_key] = draw(st.sampled_from([qid, int(qid)] if qid.isdigit() and str(int(qid)) == qid else [qid]))
        records.append(rec)
        expected.append((qid if id_key else str(k), question, answers))
    return records, expected


def test_drqa_jsonl_valid_round_trip(work):
    tally = Tally("drqa-jsonl")

    @fuzz_settings(30)
    @given(case=drqa_questions(), array=st.booleans(), gz=st.booleans(), ascii_only=st.booleans(), named=st.booleans())
    def prop(case, array, gz, ascii_only, named):
        with tally.case():
            records, expected = case
            raw = json.dumps(records, ensure_ascii=ascii_only).encode() if array else jsonl_bytes(records, ascii_only)
            path = write(fresh(work, "q.jsonl.gz" if gz else "q.jsonl"), raw, gz)
            outcome(lambda: question_rows(path, "jsonl" if named else None), path, "ok", expected)

    tally.run(prop)


@st.composite
def drqa_jsonl_damage(draw):
    records, expected = draw(drqa_questions())
    i = draw(st.integers(0, len(records) - 1))
    answer_key = "answer" if "answer" in records[i] else "answers"
    id_key = next((k for k in ("id", "qid") if k in records[i]), None)
    kind = draw(st.sampled_from(["missing", "wrong_type", "bad_id", "duplicate_id", "extra_key", "bad_line",
                                 "bytes", "bytes"]))
    if kind == "missing":
        del records[i][draw(st.sampled_from(["question", answer_key]))]
        return jsonl_bytes(records), "error", expected
    if kind == "wrong_type":
        if draw(st.booleans()):
            records[i]["question"] = draw(st.sampled_from([None, 3, [], {}, ["q"], True, "", " \t"]))
        else:
            records[i][answer_key] = draw(st.sampled_from([None, 3, [], {}, True, "", " ", [""], ["a", ""], [1], ["a", None],
                                                           [["a"]], {"text": "a"}]))
        return jsonl_bytes(records), "error", expected
    if kind == "bad_id":
        records[i][id_key or draw(st.sampled_from(["id", "qid"]))] = draw(st.sampled_from([None, True, False, 1.5, [], {},
                                                                                           ["1"], "", " "]))
        return jsonl_bytes(records), "error", expected
    if kind == "duplicate_id":
        assume(id_key and len(records) > 1)
        records[i][id_key] = records[(i + 1) % len(records)][id_key]
        return jsonl_bytes(records), "error", expected
    if kind == "extra_key":
        records[i][draw(st.sampled_from(["x_extra", "title", "context"]))] = draw(st.sampled_from([None, 1, "v", []]))
        return jsonl_bytes(records), "ok", expected
    if kind == "bad_line":
        lines = jsonl_bytes(records).split(b"\n")
        line = lines[i]
        lines[i] = draw(st.sampled_from([line[: max(len(line) // 2, 1)], b"[1, 2]", b'"text"', b"3", b"null",
                                         line + b"}", line.replace(b":", b"", 1)]))
        return b"\n".join(lines), "error", expected
    original = jsonl_bytes(records)
    damaged, expect = draw(byte_damage(original, len(records)))
    if expect == "prefix-or-error":  # a cut inside a JSON line, or a NUL byte: never valid JSON (a cut of the newline
        expect = "prefix" if damaged.endswith(b"\n") or original.startswith(damaged + b"\n") else "error"  # alone is)
    return damaged, expect, expected


def test_drqa_jsonl_damaged(work):
    tally = Tally("drqa-jsonl")

    @fuzz_settings(60)
    @given(case=drqa_jsonl_damage())
    def prop(case):
        with tally.case():
            data, expect, expected = case
            path = write(fresh(work, "q.jsonl"), data)
            outcome(lambda: question_rows(path, "jsonl"), path, loose(expect), expected,
                    whole_file=("no questions with answers",))

    tally.run(prop)


# ======================================================================= NQ
NQ_WORD = st.text(st.sampled_from("abcxyzAB019,.'()éß東-"), min_size=1, max_size=6)  # a text token: no space, no < >
NQ_SKIPS = {"kept": None, "two_shorts": "not_one_short_answer", "no_short": "not_one_short_answer",
            "no_long": "no_long_answer", "not_paragraph": "long_answer_not_paragraph", "no_annotation": "no_annotation"}


@st.composite
def nq_records(draw):
    """(NQ records in the original or the simplified format, the ReQA NQ SQuAD dict they make, skip counts).

    A page is ``<H1> title words </H1> <P> words </P>``; the original format's page puts after each text token a
    space or nothing, so ReQA's text is each paragraph word followed by what follows it on the page (the last one
    too: the long answer ends with ``</P>``); the simplified format joins text tokens with one space.
    """
    original = draw(st.booleans())
    records, articles, skips = [], [], dict.fromkeys(set(NQ_SKIPS.values()) - {None}, 0)
    eids = draw(st.lists(st.one_of(st.integers(0, 2**62), ids), min_size=1, max_size=4, unique_by=str))
    for eid in eids:
        title = draw(st.text(st.sampled_from("abcXYZ é"), min_size=1, max_size=10).map(str.strip).filter(bool))
        head = draw(st.lists(NQ_WORD, min_size=1, max_size=2))
        words = draw(st.lists(NQ_WORD, min_size=1, max_size=6))
        seps = [draw(st.sampled_from([" ", ""])) if original else " " for _ in words]
        tokens = ["<H1>", *head, "</H1>", "<P>", *words, "</P>"]
        p0 = len(head) + 2  # the <P>
        kind = draw(st.sampled_from(sorted(NQ_SKIPS)))
        a = draw(st.integers(0, len(words) - 1))
        b = draw(st.integers(a + 1, len(words)))
        short = [(p0 + 1 + a, p0 + 1 + b)]
        long = (p0, len(tokens))
        if kind == "two_shorts":
            short = short * 2
        elif kind == "no_short":
            short = []
        elif kind == "no_long":
            long = (-1, -1)
        elif kind == "not_paragraph":
            long = (draw(st.integers(0, p0 - 1)), len(tokens))
        annotations = [] if kind == "no_annotation" else [
            {"long_answer": {"start_token": long[0], "end_token": long[1], "candidate_index": 0},
             "short_answers": [{"start_token": s, "end_token": e} for s, e in short], "yes_no_answer": "NONE"}]
        question = draw(texts.filter(str.strip))
        rec = {"example_id": eid, "question_text": question, "annotations": annotations}
        if original:
            html, toks = "", []
            after = [" "] * (p0 + 1) + seps + [" "]
            for tok, sep in zip(tokens, after):
                start = len(html.encode("utf-8"))
                html += tok
                toks.append({"token": tok, "html_token": tok.startswith("<"), "start_byte": start,
                             "end_byte": len(html.encode("utf-8"))})
                html += sep
            rec.update(document_title=title, document_html=html, document_tokens=toks)
            context = "".join(w + s for w, s in zip(words, seps))
            answer = "".join(w + s for w, s in zip(words[a:b - 1], seps[a:b - 1])) + words[b - 1]
            start = len("".join(w + s for w, s in zip(words[:a], seps[:a])))
        else:
            rec.update(document_url=f"https://en.wikipedia.org//w/index.php?title={title.replace(' ', '_')}&amp;oldid=1",
                       document_text=" ".join(tokens))
            context, answer = " ".join(words), " ".join(words[a:b])
            start = len(" ".join(words[:a])) + (1 if a else 0)
        records.append(rec)
        if NQ_SKIPS[kind]:
            skips[NQ_SKIPS[kind]] += 1
        else:
            articles.append({"title": title, "paragraphs": [{"context": context, "qas": [
                {"id": str(eid), "question": question, "answers": [{"answer_start": start, "text": answer}]}]}]})
    return records, {"version": "reqa_nq", "data": articles}, skips


def nq_view(path: Path):
    """What ``reqa_nq`` makes of an NQ file: its SQuAD dict and skip counts."""
    from data.nq import nq_squad

    stats: dict = {}
    squad, _ = nq_squad("dev", data_file=path, stats=stats)
    return squad, {k: v for k, v in stats.items() if k in NQ_SKIPS.values()}


def test_nq_valid_round_trip(work):
    tally = Tally("nq")

    @fuzz_settings(30)
    @given(case=nq_records(), gz=st.booleans(), ascii_only=st.booleans())
    def prop(case, gz, ascii_only):
        with tally.case():
            records, squad, skips = case
            path = write(fresh(work, "nq-dev-00.jsonl.gz" if gz else "nq-dev-00.jsonl"), jsonl_bytes(records, ascii_only), gz)
            outcome(lambda: nq_view(path), path, "ok", (squad, skips))

    tally.run(prop)


NQ_WRONG = {  # field -> values of a type it never has
    "example_id": [None, True, 1.5, [], {}, ""], "question_text": [None, 3, [], {}, "", " "],
    "document_text": [None, 3, [], {}], "document_html": [None, 3, []], "document_title": [3, [], {}],
    "start_token": ["3", 1.5, None, True, []], "end_token": ["3", 2.5, None, False], "token": [None, 3, []],
    "html_token": ["yes", 1, None], "start_byte": ["0", 1.5, None, True], "end_byte": ["0", 0.5, None],
}


@st.composite
def nq_damage(draw):
    records, squad, skips = draw(nq_records())
    i = draw(st.integers(0, len(records) - 1))
    rec = records[i]
    original = "document_tokens" in rec
    kind = draw(st.sampled_from(["missing", "wrong_type", "bad_line", "bytes", "bytes"]))
    if kind == "missing":
        del rec[draw(st.sampled_from(["example_id", "question_text", "document_tokens" if original else "document_text"]))]
        return jsonl_bytes(records), "error", (squad, skips)
    if kind == "wrong_type":
        top = ["example_id", "question_text"] + (["document_html", "document_title"] if original else ["document_text"])
        inner = (["start_token", "end_token"] if rec["annotations"] else []) + (
            ["token", "html_token", "start_byte", "end_byte"] if original else [])
        key = draw(st.sampled_from(top + inner))
        value = draw(st.sampled_from(NQ_WRONG[key]))
        if key in ("start_token", "end_token"):
            where = rec["annotations"][0]
            where = draw(st.sampled_from([where["long_answer"]] + where["short_answers"]))
        elif key in ("token", "html_token", "start_byte", "end_byte"):
            where = draw(st.sampled_from(rec["document_tokens"]))
        else:
            where = rec
        where[key] = value
        return jsonl_bytes(records), "error", (squad, skips)
    if kind == "bad_line":
        lines = jsonl_bytes(records).split(b"\n")
        lines[i] = draw(st.sampled_from([lines[i][: max(len(lines[i]) // 2, 1)], b"[1, 2]", b'"text"', b"3", b"null",
                                         lines[i] + b"}"]))
        return b"\n".join(lines), "error", (squad, skips)
    damaged, expect = draw(byte_damage(jsonl_bytes(records), len(records)))
    if b"\x00" in damaged:
        expect = "error"  # a NUL byte is never JSON
    return damaged, expect, (squad, skips)


def test_nq_damaged(work):
    tally = Tally("nq")

    @fuzz_settings(60)
    @given(case=nq_damage())
    def prop(case):
        with tally.case():
            data, expect, (squad, skips) = case
            path = write(fresh(work, "nq-dev-00.jsonl"), data)

            def equal(got, value):
                got_squad, got_skips = got
                if expect.startswith("prefix"):  # a cut at a line end: the first records (a cut elsewhere: an error)
                    kept = got_squad["data"]
                    assert kept == squad["data"][: len(kept)] and all(got_skips[k] <= skips[k] for k in skips), (got, value)
                else:
                    assert got == value

            outcome(lambda: nq_view(path), path, "same" if expect != "error" else "error", (squad, skips), equal=equal)

    tally.run(prop)


# ===================================================================== BEIR
@st.composite
def beir_sets(draw):
    """(corpus records, query records, qrels rows, expected): qrels may name documents the corpus lacks."""
    docs, expected_docs = draw(json_passages("beir"))
    docs = [dict(d, _id=d["_id"]) for d in docs]
    qids = draw(st.lists(ids.filter(lambda s: s.strip() == s), min_size=1, max_size=4, unique=True))
    queries = [{"_id": q, "text": draw(line_texts)} for q in qids]
    doc_ids = [d for d, _, _ in expected_docs]
    pairs = draw(st.lists(st.tuples(st.sampled_from(qids), st.one_of(st.sampled_from(doc_ids), st.just("absent-doc")),
                                    st.integers(0, 3)), min_size=1, max_size=8, unique_by=lambda r: r[:2]))
    return docs, queries, pairs, expected_docs


def beir_dir(root: Path, docs, queries, pairs, header=True, gz=False) -> Path:
    d = root / f"beir{next(_n)}"
    (d / "qrels").mkdir(parents=True)
    write(d / ("corpus.jsonl.gz" if gz else "corpus.jsonl"), jsonl_bytes(docs), gz)
    write(d / "queries.jsonl", jsonl_bytes(queries))
    rows = (["query-id\tcorpus-id\tscore"] if header else []) + [f"{q}\t{doc}\t{g}" for q, doc, g in pairs]
    write(d / "qrels" / "test.tsv", ("\n".join(rows) + "\n").encode())
    return d


def beir_view(ds) -> dict:
    """What a BEIR dataset says, in the terms the test builds it in (ids, not rows)."""
    ids_ = list(ds.corpus.ids)
    return {"corpus": list(zip(ids_, ds.corpus.titles, ds.corpus.bodies)), "queries": list(zip(ds.queries.ids, ds.queries.texts)),
            "gold": [[(ids_[r], int(g)) for r, g in zip(rows, grades)] for rows, grades in zip(ds.queries.gold, ds.queries.gold_grades)],
            "unknown": ds.sources["qrels_unknown_docs"]}


def beir_expected(docs, queries, pairs, expected_docs) -> dict:
    known = {d for d, _, _ in expected_docs}
    text = {q["_id"]: q["text"] for q in queries}
    order = list(dict.fromkeys(q for q, _, _ in pairs))
    return {"corpus": [(d, t.strip(), x.strip()) for d, t, x in expected_docs],
            "queries": [(q, text[q]) for q in order],
            "gold": [[(doc, g) for q2, doc, g in pairs if q2 == q and doc in known and g > 0] for q in order],
            "unknown": sum(doc not in known for _, doc, _ in pairs)}


def test_beir_valid_round_trip(work, capfd):
    from data.beir import read_beir_dir

    tally = Tally("beir")

    @fuzz_settings(25)
    @given(case=beir_sets(), header=st.booleans(), gz=st.booleans())
    def prop(case, header, gz):
        with tally.case():
            d = beir_dir(work, *case[:3], header=header, gz=gz)
            capfd.readouterr()
            expected = beir_expected(*case)
            outcome(lambda: beir_view(read_beir_dir(d, "test")), d, "ok", expected)
            err = [line for line in capfd.readouterr().err.splitlines() if line.startswith(("warning:", "error:"))]
            if expected["unknown"]:  # reported: one warning line with the count, never silently left out
                assert len(err) == 1 and err[0].startswith("warning: ") and f" {expected['unknown']} qrels rows" in err[0], err
            else:
                assert not err, err

    tally.run(prop)


@st.composite
def beir_damage(draw):
    docs, queries, pairs, expected_docs = draw(beir_sets())
    which = draw(st.sampled_from(["corpus", "queries", "qrels"]))
    kind = draw(st.sampled_from(["wrong_type", "missing", "duplicate", "bad_line", "bad_utf8"]))
    if which == "qrels":
        rows = [f"{q}\t{doc}\t{g}" for q, doc, g in pairs]
        i = draw(st.integers(0, len(rows) - 1))
        q, doc, _ = pairs[i]
        if kind == "wrong_type":
            rows[i] = f"{q}\t{doc}\t{draw(st.sampled_from(['x', 'nan', 'inf', '-inf', '1e400', '1.5', '', '0x1']))}"
        elif kind == "missing":
            rows[i] = draw(st.sampled_from([f"{q}\t{doc}", f"{q}\t{doc}\t1\t1", f"{q} {doc} 1", f"\t{doc}\t1", f"{q}\t\t1"]))
        elif kind == "duplicate":
            rows.insert(i + 1, f"{q}\t{doc}\t{draw(st.integers(0, 3))}")
        elif kind == "bad_line":
            rows[i] = f"{draw(st.sampled_from(['not-a-query', 'zz']))}\t{doc}\t1"
            assume(rows[i].split("\t")[0] not in {x["_id"] for x in queries})
        data = ("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n").encode()
        if kind == "bad_utf8":
            data = data.replace(b"\n", b"\n\xff", 1)
        return (docs, queries, data), which, "qrels/test.tsv"
    records = docs if which == "corpus" else queries
    i = draw(st.integers(0, len(records) - 1))
    if kind == "wrong_type":
        key = draw(st.sampled_from(["_id", "text"] + (["title"] if which == "corpus" else [])))
        records[i][key] = draw(st.sampled_from([None, [], {}, True, 1.5, ["a"]] if key == "_id" else [3, [], {}, True]
                                               + ([] if which == "corpus" else [None])))
    elif kind == "missing":
        key = draw(st.sampled_from(["_id"] if which == "corpus" else ["_id", "text"]))
        records[i].pop(key, None)
    elif kind == "duplicate":
        assume(len(records) > 1)
        records[i]["_id"] = records[(i + 1) % len(records)]["_id"]
    data = jsonl_bytes(records)
    if kind == "bad_line":
        lines = data.split(b"\n")
        lines[i] = draw(st.sampled_from([lines[i][:-1], b"[]", b"3", lines[i] + b","]))
        data = b"\n".join(lines)
    if kind == "bad_utf8":
        data = data[:1] + b"\xff" + data[1:]
    name = "corpus.jsonl" if which == "corpus" else "queries.jsonl"
    files = (data, jsonl_bytes(queries)) if which == "corpus" else (jsonl_bytes(docs), data)
    qrels = ("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{doc}\t{g}\n" for q, doc, g in pairs)).encode()
    return (*files, qrels), which, name


def test_beir_damaged(work):
    from data.beir import read_beir_dir

    tally = Tally("beir")

    @fuzz_settings(60)
    @given(case=beir_damage())
    def prop(case):
        with tally.case():
            (corpus, queries, qrels), which, name = case
            d = work / f"beir{next(_n)}"
            (d / "qrels").mkdir(parents=True)
            for rel, data in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
                if isinstance(data, list):
                    data = jsonl_bytes(data)
                write(d / rel, data)
            outcome(lambda: read_beir_dir(d, "test"), d / name, "error",
                    whole_file=("appears", "judged queries are not in the queries file"))

    tally.run(prop)


# ================================================================ TREC runs
@st.composite
def trec_runs(draw):
    """{qid: [(rank, docid, score)]} in rank order, and the file's lines."""
    run = {}
    for q in draw(st.lists(ids.filter(lambda s: s.strip() == s), min_size=1, max_size=3, unique=True)):
        docs = draw(st.lists(ids.filter(lambda s: s.strip() == s), min_size=1, max_size=5, unique=True))
        scores = sorted(draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=len(docs),
                                      max_size=len(docs))), reverse=True)
        run[q] = [(r + 1, d, float(f"{s:.6f}")) for r, (d, s) in enumerate(zip(docs, scores))]
    lines = [f"{q} Q0 {d} {r} {s:.6f} tag" for q, hits in run.items() for r, d, s in hits]
    return run, lines


def test_trec_run_valid_and_damaged(work):
    from retrievers.trec import read_run

    tally = Tally("trec-run")

    @fuzz_settings(80)
    @given(case=trec_runs(), kind=st.sampled_from(["valid", "fields", "number", "nonfinite", "duplicate", "bytes"]),
           data=st.data())
    def prop(case, kind, data):
        with tally.case():
            run, lines = case
            i = data.draw(st.integers(0, len(lines) - 1))
            parts = lines[i].split()
            expect = "error"
            if kind == "valid":
                expect = "ok"
            elif kind == "fields":
                lines[i] = " ".join(parts[: data.draw(st.sampled_from([1, 3, 5]))] + ([] if data.draw(st.booleans()) else parts + ["x"]))
                assume(len(lines[i].split()) != 6)
            elif kind == "number":
                parts[data.draw(st.sampled_from([3, 4]))] = data.draw(st.sampled_from(["x", "1,5", "--1", "1e", "0x10"]))
                lines[i] = " ".join(parts)
            elif kind == "nonfinite":
                parts[4] = data.draw(st.sampled_from(["nan", "NaN", "inf", "-inf", "1e400"]))
                lines[i] = " ".join(parts)
            elif kind == "duplicate":
                lines.insert(i + 1, lines[i])
            raw = ("\n".join(lines) + "\n").encode()
            if kind == "bytes":
                raw, expect = data.draw(byte_damage(raw, len(lines)))
                expect = "error" if b"\x00" in raw else {"prefix-or-error": "cut", "prefix": "cut"}.get(expect, expect)
            path = write(fresh(work, "run.trec"), raw)

            def equal(got, value):
                if expect == "cut":  # a cut line: fewer hits, the last one maybe with a shorter tag or score
                    flat = [(q, h) for q, hits in value.items() for h in hits]
                    mine = [(q, h) for q, hits in got.items() for h in hits]
                    assert len(mine) <= len(flat) and all(m in flat for m in mine[:-1]), (got, value)
                else:
                    assert got == value

            outcome(lambda: read_run(path), path, "same" if expect == "cut" else loose(expect), run, equal=equal)

    tally.run(prop)


# ====================================================== pipeline.compare inputs
@st.composite
def per_query_runs(draw):
    """Two runs' per_query.jsonl rows over the same ids: rr and r@1 fractions (null where a question is not scored,
    in both runs), a text column."""
    qids = draw(st.lists(ids, min_size=2, max_size=6, unique=True))
    scored = {(q, m): draw(st.booleans()) or k == 0 for k, q in enumerate(qids) for m in ("rr", "r@1")}
    fraction = st.one_of(st.floats(0, 1), st.sampled_from([0, 1]))
    return [[{"id": q, "question": draw(line_texts), **{m: draw(fraction) if scored[q, m] else None for m in ("rr", "r@1")}}
             for q in qids] for _ in range(2)]


def compare_dirs(root: Path, runs, raw: bytes | None = None, metrics_json: bytes | None = None) -> Path:
    d = root / f"cmp{next(_n)}"
    for name, rows in zip("ab", runs):
        (d / name).mkdir(parents=True)
        write(d / name / "per_query.jsonl", jsonl_bytes(rows))
        write(d / name / "metrics.json", b'{"dataset": "x", "split": "dev"}\n')
    if raw is not None:
        write(d / "b" / "per_query.jsonl", raw)
    if metrics_json is not None:
        write(d / "b" / "metrics.json", metrics_json)
    return d


def compare_view(d: Path, metrics=None):
    """Each run's rows as loaded, and the means compare() gives (it must not fail on what load_run accepted)."""
    from pipeline.compare import available_metrics, compare, load_run

    runs = [load_run(d / "a"), load_run(d / "b")]
    result = compare(runs, metrics or available_metrics(runs), n_resamples=50)
    return [list(r.rows.values()) for r in runs], {m: v["means"] for m, v in result["metrics"].items()}


def expected_means(runs):
    """The mean of each metric over the questions it scores, per run."""
    return {m: [pytest.approx(sum(r[m] for r in rows if r[m] is not None) / sum(r[m] is not None for r in rows))
                for rows in runs] for m in ("r@1", "rr")}


def test_an_empty_per_query_file_is_an_error(work):
    """A per_query.jsonl cut to nothing is refused, naming the file (it was compared as a run scored on no metric:
    no error and no comparison); found by the per-query property at 10,000 cases."""
    rows = [{"id": "0", "question": "", "rr": 0.0, "r@1": 0.0}, {"id": "1", "question": "", "rr": None, "r@1": None}]
    d = compare_dirs(work, [rows, rows], raw=b"")
    with pytest.raises(UserError) as e:
        compare_view(d)
    check_error(e.value, d / "b" / "per_query.jsonl", whole_file=("empty, no per-query rows",))



def test_an_encoded_surrogate_in_per_query_or_metrics_is_not_utf8(work):
    """Bytes ED A0 80 (a UTF-16 surrogate encoded as if UTF-8) are not UTF-8: refused, naming the file and line
    (``json.loads`` of bytes lets them through); found by the per-query property at 10,000 cases."""
    rows = [{"id": "0", "question": "", "rr": 0.0}, {"id": "00", "question": "", "rr": None}]
    bad = b'{"id": "0", "\xed\xa0\x80question": "", "rr": 0.0}\n{"id": "00", "question": "", "rr": null}\n'
    for raw, metrics_json, name in ((bad, None, "per_query.jsonl"),
                                    (None, b'{"dataset": "\xed\xa0\x80x", "split": "dev"}\n', "metrics.json")):
        d = compare_dirs(work, [rows, rows], raw=raw, metrics_json=metrics_json)
        with pytest.raises(UserError) as e:
            compare_view(d)
        check_error(e.value, d / "b" / name)


def test_a_per_query_file_cut_of_rows_scored_on_nothing_compares_the_same(work):
    """Accepted by design (found by the per-query property at 10,000 cases): compare aligns runs metric by metric on
    the questions each scores, so rows whose every value is null carry nothing to compare and a file cut of them
    alone compares as the whole one; a cut of a scored row is refused.  (pipeline.run writes no such row: every
    question has its retrieval values.)"""
    rows = [{"id": "0", "question": "", "rr": 0.5, "r@1": 0.0}, {"id": "1", "question": "", "rr": 1.0, "r@1": 1.0},
            {"id": "2", "question": "", "rr": None, "r@1": None}]
    whole = compare_view(compare_dirs(work, [rows, rows]))
    cut = compare_view(compare_dirs(work, [rows, rows], raw=jsonl_bytes(rows[:2])))
    assert cut[1] == whole[1] and cut[0][1] == rows[:2]
    d = compare_dirs(work, [rows, rows], raw=jsonl_bytes(rows[:1]))
    with pytest.raises(UserError) as e:
        compare_view(d)
    check_error(e.value, d / "b" / "per_query.jsonl", whole_file=("scored on other questions",))


def test_per_query_valid_and_damaged(work):
    tally = Tally("per-query")

    @fuzz_settings(60)
    @given(runs=per_query_runs(), kind=st.sampled_from(["valid", "not_number", "nonfinite", "duplicate_id", "bad_id",
                                                          "text_metric", "bad_line", "metrics_json", "bytes"]),
           data=st.data())
    def prop(runs, kind, data):
        with tally.case():
            rows = runs[1]
            i = data.draw(st.integers(0, len(rows) - 1))
            raw, metrics_json, expect, path, metrics = None, None, "error", "b/per_query.jsonl", None
            if kind == "valid":
                expect = "ok"
            elif kind == "not_number":  # (text in a column that holds numbers: a text column is no metric)
                rows[0]["rr"] = rows[0]["r@1"] = 0.5
                rows[i or 1][data.draw(st.sampled_from(["rr", "r@1"]))] = data.draw(st.sampled_from(["x", "0.5", "", [1], {"v": 1}]))
            elif kind == "nonfinite":
                rows[i]["rr"] = "@@NONFINITE@@"
                raw = jsonl_bytes(rows).replace(b'"@@NONFINITE@@"', data.draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400"])))
            elif kind == "duplicate_id":
                rows.insert(i + 1, dict(rows[i], rr=data.draw(st.sampled_from([rows[i]["rr"], 0.25]))))
            elif kind == "bad_id":
                rows[i]["id"] = data.draw(st.sampled_from([None, True, 1.5, [], {}, "", " "]))
            elif kind == "text_metric":  # a text column asked for as a metric
                metrics = ["question"]
            elif kind == "bad_line":
                lines = jsonl_bytes(rows).split(b"\n")
                lines[i] = data.draw(st.sampled_from([lines[i][:-1], b"[1]", b"3", b"null", b'{"rr": 1}', b""]))
                raw = b"\n".join(lines)
            elif kind == "metrics_json":
                path = "b/metrics.json"
                metrics_json = data.draw(st.sampled_from([b"[]", b"3", b'"x"', b'{"dataset": ', b'{"dataset": "\xff"}']))
            kept = rows
            if kind == "bytes":
                original = jsonl_bytes(rows)
                raw, expect = data.draw(byte_damage(original, len(rows)))
                expect = "error" if expect.startswith("prefix") or b"\x00" in raw else expect  # fewer questions than run a
                if raw + b"\n" == original:
                    expect = "same"  # only the last newline cut: every question is there
                cut_at_line_end = bool(raw) and raw != original and original.startswith(raw) and \
                    (raw.endswith(b"\n") or original[len(raw):len(raw) + 1] == b"\n")
                if expect == "error" and cut_at_line_end:
                    whole = raw.count(b"\n") + (not raw.endswith(b"\n"))  # the rows the cut left whole
                    if all(r[m] is None for r in rows[whole:] for m in ("rr", "r@1")):
                        # accepted by design: the rows cut off are scored on no metric (every value null), so no
                        # comparison can differ -- compare aligns runs metric by metric on the questions scored
                        expect, kept = "ok", rows[:whole]
            d = compare_dirs(work, runs, raw, metrics_json)
            expected = ([[dict(r, id=str(r["id"])) for r in rows] for rows in (runs[0], kept)], expected_means(runs)) \
                if expect != "error" else None

            def equal(got, value):
                assert got[0] == value[0] and got[1] == value[1], (got, value)

            outcome(lambda: compare_view(d, metrics), d / path, loose(expect), expected, equal=equal,
                    whole_file=("scored on other questions", "empty, no per-query rows"))

    tally.run(prop)


# ================================================================== configs
CONFIG_FIELDS = {  # key in the file -> (value strategy, where the RunConfig keeps it)
    "depth": (st.integers(1, 10**6), ("retriever", "depth")),
    "limit": (st.integers(1, 10**4), ("data", "limit")),
    "seed": (st.integers(0, 2**32 - 1), ("seed",)),  # numpy's seeds: a negative one is refused (tested among the bad inputs)
    "bm25-k1": (st.floats(0, 10, allow_nan=False).map(lambda x: round(x, 3)), ("retriever", "bm25", "k1")),
    "retriever": (st.sampled_from(["bm25", "dense", "rrf:bm25+dense", "fuse-zscore:bm25+dense"]), ("retriever", "spec")),
    "selector": (st.sampled_from(["top:1", "top:5", "threshold:0.5", "threshold:0.8,20", "oracle"]), ("selector",)),
    "dataset": (st.sampled_from(["reqa_squad", "squad_open", "beir:scifact"]), ("data", "dataset")),
}


def toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def parse_run_config(path: Path):
    from pipeline.cli import config_from_argv
    from pipeline.config import RunConfig

    return config_from_argv(RunConfig, ["--config", str(path)], "python -m pipeline.run", "")[0]


def test_config_valid_and_damaged(work):
    import yaml

    tally = Tally("config")

    @fuzz_settings(100)
    @given(settings_=st.dictionaries(st.sampled_from(sorted(CONFIG_FIELDS)), st.none(), min_size=1).flatmap(
        lambda keys: st.fixed_dictionaries({k: CONFIG_FIELDS[k][0] for k in keys})),
        toml=st.booleans(), kind=st.sampled_from(["valid", "wrong_type", "unknown", "not_mapping", "syntax", "bad_utf8",
                                                  "duplicate"]),
        data=st.data())
    def prop(settings_, toml, kind, data):
        with tally.case():
            cfg = dict(settings_)
            expect = "error"
            if kind == "wrong_type":
                key = data.draw(st.sampled_from(sorted(cfg)))
                cfg[key] = data.draw(st.sampled_from(
                    [[1], {"a": 1}, "many", -5, 0] if key in ("depth", "limit") else [[1], {"a": 1}, "abc", -1] if key == "seed"
                    else [[1], {"a": 1}, "abc"] if key == "bm25-k1"
                    else [[1], {"a": 1}] if key == "dataset" else [[1], {"a": 1}, ""] if key == "retriever"
                    else [[1], {"a": 1}, "no-such:thing", ""]))  # (dataset names and retriever specs resolve at the run's start)
            elif kind == "unknown":
                cfg[data.draw(st.sampled_from(["k1", "no_such", "Depth", "retriever_depth"]))] = 1
            if toml:
                text = "".join(f"{k} = {toml_value(v)}\n" for k, v in cfg.items() if not isinstance(v, (list, dict)))
                text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items() if isinstance(v, list))
                text += "".join(f"[{k}]\na = 1\n" for k, v in cfg.items() if isinstance(v, dict))
            else:
                text = yaml.safe_dump(cfg, allow_unicode=True)
            raw = text.encode()
            if kind == "valid":
                expect = "ok"
            elif kind == "not_mapping":
                raw = data.draw(st.sampled_from([b"- depth\n- 3\n", b"3\n", b'"bm25"\n'])) if not toml else b"depth\n"
            elif kind == "syntax":
                raw = raw + data.draw(st.sampled_from([b"retriever: [bm25\n", b"\tdepth: 3\n", b"a: b: c\n", b"= 3\n", b"[x\n"]))
            elif kind == "bad_utf8":
                raw = raw[:3] + data.draw(st.sampled_from(BAD_UTF8)) + raw[3:]
            elif kind == "duplicate":  # a key given again, with its value or another: never "the last one wins"
                key = data.draw(st.sampled_from(sorted(cfg)))
                again = data.draw(st.sampled_from([cfg[key], data.draw(CONFIG_FIELDS[key][0])]))
                raw += (f"{key} = {toml_value(again)}\n" if toml else yaml.safe_dump({key: again}, allow_unicode=True)).encode()
            path = write(fresh(work, "run.toml" if toml else "run.yaml"), raw)
            if kind == "duplicate":
                with pytest.raises(UserError) as info:
                    parse_run_config(path)
                check_error(info.value, path)
                assert f"key {key!r} appears twice" in str(info.value), str(info.value)
                return

            def view(config):
                out = {}
                for key in cfg:
                    node = config
                    for attr in CONFIG_FIELDS[key][1]:
                        node = getattr(node, attr)
                    out[key] = node
                return out

            outcome(lambda: view(parse_run_config(path)), path, expect, cfg, fields=True,
                    whole_file=("unknown setting", "config must be a mapping"))

    tally.run(prop)


# ============================================================ spec strings
SPEC_CHARS = st.sampled_from(list("bm25dense:+[]=,'\" rfuzoptqk1.0-_xy") + ["rrf", "bm25", "dense", "top", "threshold",
                                                                             "gap", "oracle", "k1=", "[", "]"])


def spec_mutant(valid):
    return st.tuples(st.sampled_from(valid), st.lists(st.tuples(st.integers(0, 40), SPEC_CHARS), max_size=3),
                     st.integers(0, 3)).map(lambda t: _mutate(*t))


def _mutate(spec, inserts, cut):
    for at, piece in inserts:
        spec = spec[: at % (len(spec) + 1)] + piece + spec[at % (len(spec) + 1):]
    return spec[: len(spec) - cut] if cut < len(spec) else spec


def test_retriever_specs(work):
    from retrievers.registry import make_retriever

    tally = Tally("retriever-spec")
    valid = ["bm25", "bm25[k1=1.2,b=0.75]", "dense", "dense:some/model", "rrf:bm25+dense", "fuse-zscore:bm25[k1=2]+dense",
             "mrrank:bm25+dense+dense:e5"]

    @fuzz_settings(150)
    @given(spec=st.one_of(st.sampled_from(valid), spec_mutant(valid), st.text(st.sampled_from("bm25dense:+[]=,'\" rfuzk1.0-_"), max_size=20)))
    def prop(spec):
        with tally.case():
            try:
                retriever = make_retriever(spec)
            except UserError as e:
                msg = str(e)
                assert "\n" not in msg
                one = " ".join  # (an error line has its white space runs collapsed)
                named = [one(p.split()) for p in re.split(r"[+:\[\],=]", spec) if p.strip()] + [repr(one(spec.split()))]
                assert any(p in msg for p in named) or msg == "empty --retriever spec", msg
                return
            if spec in valid:  # what the spec says is what was built
                members = list(getattr(retriever, "members", None) or [retriever])
                assert len(members) == spec.count("+") + 1
                if "k1=" in spec:
                    assert members[0].k1 == float(re.search(r"k1=([\d.]+)", spec).group(1))

    tally.run(prop)


def test_selector_specs(work):
    from selection.registry import parse_selector

    tally = Tally("selector-spec")
    valid = ["top:1", "top:20", "threshold:0.8", "threshold:0.8,25", "gap:20", "oracle", "ordinal", "ordinal:25"]

    @fuzz_settings(150)
    @given(spec=st.one_of(st.sampled_from(valid), spec_mutant(valid),
                          st.tuples(st.sampled_from(["top", "threshold", "gap"]), st.sampled_from(
                              ["0", "-1", "nan", "inf", "1e400", "1.5", "", "x", "0.5,nan", "2,0", "1,2,3"])).map(":".join)))
    def prop(spec):
        with tally.case():
            try:
                selector = parse_selector(spec)
            except UserError as e:
                unquoted = str.maketrans("", "", "'\"\\")
                shown = " ".join(spec.split()).translate(unquoted)
                assert "\n" not in str(e) and shown in str(e).translate(unquoted), str(e)
                return
            name, _, args = spec.strip().partition(":")
            if name == "top":
                assert selector.n == int(args) >= 0  # top:0: closed book (generative readers)
            if name == "threshold":
                assert 0 <= selector.theta <= 1 and math.isfinite(selector.theta) and selector.theta == float(args.split(",")[0])

    tally.run(prop)


# ====================================================== the real commands
def cli(module: str, args, tmp: Path):
    env = dict(os.environ, QA_CACHE_DIR=str(tmp / "cli-cache"), QA_DATA_DIR=str(DATA), HF_HUB_OFFLINE="1",
               TQDM_DISABLE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_damaged_files_through_the_commands(work):
    """Damaged SQuAD, DPR TSV, BEIR, config and per-query files through pipeline.run / pipeline.compare: exit 2,
    exactly one ``error:`` line naming the file, no traceback, nothing in --out."""
    tally = Tally("cli")

    @fuzz_settings(1, CLI_EXAMPLES)
    @given(squad=squad_damage().filter(lambda c: c[1] == "error"), tsv=dpr_tsv_damage().filter(lambda c: c[1] == "error"),
           data=st.data())
    def prop(squad, tsv, data):
        for which in ("squad", "tsv", "config", "compare"):
            one(squad, tsv, which, data)

    def one(squad, tsv, which, data):
        with tally.case():
            d = fresh(work, "x").parent
            out = d / "out"
            if which == "squad":
                bad = write(d / "bad.json", squad[0] if isinstance(squad[0], bytes) else json.dumps(squad[0]).encode())
                proc = cli("pipeline.run", ["--dataset", f"squad_file:{bad}", "--out", out], d)
            elif which == "tsv":
                bad = write(d / "psgs.tsv", tsv[0])
                write(d / "q.qa.csv", b"who?\t['a']\n")
                proc = cli("pipeline.run", ["--dataset", f"open:dpr-tsv@{bad}+{d / 'q.qa.csv'}", "--out", out], d)
            elif which == "config":
                bad = write(d / "run.yaml", data.draw(st.sampled_from(
                    [b"depth: [1\n", b"depth: -3\n", b"retriever: {bm25: 3}\n", b"de\xffpth: 3\n", b"- a\n", b"nope: 1\n"])))
                proc = cli("pipeline.run", ["--config", bad, "--out", out], d)
            else:
                for run in ("a", "b"):
                    (d / run).mkdir()
                    write(d / run / "per_query.jsonl", b'{"id": "1", "rr": 1.0}\n{"id": "2", "rr": 0.5}\n')
                bad = write(d / "b" / "per_query.jsonl", data.draw(st.sampled_from(
                    [b'{"id": "1", "rr": 1.0}\n{"id": "2"\n', b'[1]\n', b'{"rr": 1}\n', b'{"id": "1", "rr": 1.0}\n\xff\n'])))
                proc = cli("pipeline.compare", [d / "a", d / "b", "--out", out], d)
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert proc.returncode == 2, proc.stderr[-2000:]
            assert "Traceback" not in proc.stderr and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
            assert bad.name in lines[0], lines[0]
            assert not out.exists() or not any(out.iterdir())

    tally.run(prop)
