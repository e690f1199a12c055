"""Readers for open-domain corpora and question sets, and the ``open:`` dataset spec.

Spec (``--dataset open:SPEC``)::

    open:CORPUS+QUESTIONS[+match=regex][+name=NAME]
    open:FILE.yaml | FILE.yml | FILE.toml | FILE.json     (keys: corpus, questions, match, name)

CORPUS is ``[FORMAT@]PATH`` or ``hf:wiki_dpr[/CONFIG]``; FORMAT is one of

* ``dpr-tsv``: DPR's ``psgs_w100.tsv[.gz]``, tab-separated ``id, text, title``
  with a header row ``id text title`` (its column order is followed), fields
  CSV-quoted as DPR writes them (read as DPR reads them, with ``csv`` and a tab
  delimiter; for speed by Arrow's CSV reader, which hands any file whose reading
  could differ back to ``csv``: :func:`dpr_tsv_batches`);
* ``beir``: a BEIR ``corpus.jsonl[.gz]`` (``{"_id", "title", "text"}``) or a
  BEIR directory holding one;
* ``pyserini``: a Pyserini JsonCollection file or directory of ``.json``/
  ``.jsonl[.gz]`` files (``{"id", "contents"}`` per line; ``contents`` is
  ``title\\ntext`` as in Pyserini's DPR collections, the first line being the
  title when there is more than one line);
* ``store``: a corpus store directory built by an earlier run
  (``$QA_CACHE_DIR/corpus_store/<key>``, the ``corpus_store`` the run's manifest
  names): the corpus it holds, without its source file, which may be deleted
  once the store is built (:func:`data.open_domain.open_corpus_store`).

Without FORMAT it is inferred (``.tsv`` -> dpr-tsv; a directory with
``corpus.jsonl`` -> beir; a directory with ``passages.arrow`` and
``manifest.json`` -> store; other directories -> pyserini; JSONL by the keys
of its first record).

QUESTIONS is ``[FORMAT@]PATH``, ``squad`` (the SQuAD v1.1 file of the split,
found as ``squad_open`` finds it) or ``hf:nq_open``, ``hf:trivia_qa[/CONFIG]``
(``rc.nocontext`` by default, or ``unfiltered.nocontext``), ``hf:web_questions``;
FORMAT is one of

* ``dpr-csv``: DPR's ``*.qa.csv``: question TAB Python list of answers;
* ``jsonl``: DrQA/Anserini JSONL ``{"question", "answer": [...]}`` (CuratedTREC's
  answers are regular expressions: add ``+match=regex``);
* ``squad``: a SQuAD v1.1 JSON file (``.json``, ``.gz`` or ``.zip``);
* ``dpr-json``: DPR's retriever training/dev JSON (``question``, ``answers``,
  ``positive_ctxs[].passage_id``: the positive passages become known gold).

``{split}`` in a question path is replaced by the split (``nq-{split}.qa.csv``),
so ``--train-split`` finds the training questions.  Question ids are the line
index (0-based, as Pyserini numbers DPR topics) unless the record has an id.
A bad line is ``error: FILE:LINE: what is wrong`` (or skipped and counted with
``--skip-bad-records``).
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from data.errors import UserError

CORPUS_FORMATS = ("dpr-tsv", "beir", "pyserini", "store")
QUESTION_FORMATS = ("dpr-csv", "jsonl", "squad", "dpr-json")
HF_QUESTIONS = ("nq_open", "trivia_qa", "web_questions")
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json")
OPTIONS = ("match", "name")


# ---------------------------------------------------------------------- spec
@dataclass
class SourceSpec:
    kind: str  # "file" or "hf" (or "squad" for questions)
    format: str | None
    path: str  # path, hub name, or ""
    config: str | None = None


@dataclass
class OpenSpec:
    corpus: SourceSpec
    questions: SourceSpec
    match: str = "string"
    name: str | None = None
    text: str = ""  # the spec as given (for the dataset name)
    options: dict = field(default_factory=dict)


def _source(text: str, formats: tuple[str, ...], what: str, base: Path | None) -> SourceSpec:
    text = text.strip()
    if not text:
        raise UserError(f"open: the {what} source is empty (open:CORPUS+QUESTIONS)")
    if text.startswith("hf:"):
        name, _, config = text[3:].partition("/")
        return SourceSpec("hf", None, name, config or None)
    if what == "questions" and text == "squad":
        return SourceSpec("squad", "squad", "")
    fmt = None
    if "@" in text:
        head, _, rest = text.partition("@")
        if head in formats:
            fmt, text = head, rest
        elif head and "/" not in head and os.sep not in head:
            raise UserError(f"open: {what} format {head!r} unknown; use one of {', '.join(formats)}")
    path = Path(text).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return SourceSpec("file", fmt, str(path))


def parse_open_spec(arg: str | None) -> OpenSpec:
    """Parse the argument of ``open:`` (see the module docstring)."""
    if not arg:
        raise UserError("open: give a corpus and questions, e.g. open:psgs_w100.tsv+nq-{split}.qa.csv")
    if "+" not in arg and arg.lower().endswith(CONFIG_SUFFIXES):
        return _config_spec(Path(arg).expanduser())
    parts = arg.split("+")
    options = {}
    positional = []
    for part in parts:
        key, eq, value = part.partition("=")
        if eq and key.strip() in OPTIONS:
            options[key.strip()] = value.strip()
        else:
            positional.append(part)
    if len(positional) != 2:
        raise UserError(f"open:{arg}: expected CORPUS+QUESTIONS[+match=regex] (got {len(positional)} sources)")
    return _make_spec(positional[0], positional[1], options, None, arg)


def _make_spec(corpus, questions, options: dict, base: Path | None, text: str) -> OpenSpec:
    def source(value, formats, what):
        if isinstance(value, dict):
            if "path" not in value:
                raise UserError(f"open: the {what} entry needs a path (and optionally format)")
            value = (f"{value['format']}@" if value.get("format") else "") + str(value["path"])
        return _source(str(value), formats, what, base)

    match = str(options.get("match") or "string")
    if match not in ("string", "regex"):
        raise UserError(f"open: match={match!r}: use string (DPR has_answer) or regex (CuratedTREC)")
    unknown = set(options) - set(OPTIONS) - {"corpus", "questions"}
    if unknown:
        raise UserError(f"open: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(OPTIONS)}")
    return OpenSpec(source(corpus, CORPUS_FORMATS, "corpus"), source(questions, QUESTION_FORMATS, "questions"),
                    match=match, name=options.get("name"), text=text, options=dict(options))


def _config_spec(path: Path) -> OpenSpec:
    if not path.is_file():
        raise UserError(f"{path}: no such file (open: dataset config)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(f"{path}: line {line}: not UTF-8 text") from None
    try:
        from data.io import load_config_text

        cfg = load_config_text(text, path)  # (a key given twice is an error, not the last one winning)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - any parse error is the user's file
        raise UserError(f"{path}: cannot parse ({type(e).__name__}: {e})") from None
    if not isinstance(cfg, dict) or "corpus" not in cfg or "questions" not in cfg:
        raise UserError(f"{path}: an open dataset config needs the keys corpus and questions")
    return _make_spec(cfg["corpus"], cfg["questions"], cfg, path.parent, str(path))


# ------------------------------------------------------------------ helpers
def open_text(path: str | os.PathLike):
    """A text handle on a plain or gzipped UTF-8 file (a byte-order mark is not part of the text: it would
    otherwise be glued to the first id, or turn a DPR TSV header into a passage)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        if gz:
            return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None


class BadRecords:
    """Raise on the first bad record, or count them (``--skip-bad-records``)."""

    def __init__(self, skip: bool):
        self.skip = skip
        self.count = 0

    def __call__(self, where: str, what: str) -> None:
        if not self.skip:
            raise UserError(f"{where}: {what}")
        self.count += 1


def _reading(path, gen):
    """Run the generator ``gen``, turning decoding/IO failures into one-line errors."""
    try:
        yield from gen
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start} of a block)") from None
    except (OSError, EOFError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None


# ------------------------------------------------------------------ corpora
def detect_corpus_format(path: Path) -> str:
    if path.is_dir():
        if any((path / n).is_file() for n in ("corpus.jsonl", "corpus.jsonl.gz")):
            return "beir"
        if (path / "passages.arrow").is_file() and (path / "manifest.json").is_file():
            return "store"
        return "pyserini"
    name = path.name.lower()
    if name.endswith((".tsv", ".tsv.gz")):
        return "dpr-tsv"
    first = _first_record(path)
    if "contents" in first:
        return "pyserini"
    if "_id" in first or "text" in first:
        return "beir"
    raise UserError(f"{path}: cannot tell the corpus format (give it: dpr-tsv@, beir@ or pyserini@PATH)")


def _first_record(path: Path) -> dict:
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
                return rec if isinstance(rec, dict) else {}
    return {}


def corpus_files(path: Path, fmt: str) -> list[Path]:
    """The files a corpus is read from, in reading order."""
    if not path.exists():
        raise UserError(f"{path}: no such file or directory (open: corpus)")
    if fmt == "beir" and path.is_dir():
        for n in ("corpus.jsonl", "corpus.jsonl.gz"):
            if (path / n).is_file():
                return [path / n]
        raise UserError(f"{path}: no corpus.jsonl[.gz] in this BEIR directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz")))
        if not files:
            raise UserError(f"{path}: no .json/.jsonl files in this JsonCollection directory")
        return files
    return [path]


def read_corpus(path: Path, fmt: str, bad: BadRecords, fast: bool = False) -> Iterator:
    """``(id, title, text)`` records of a corpus source, streamed.

    With ``fast``, the records come as Arrow record batches (columns id, title,
    text) from :func:`dpr_tsv_batches` (DPR TSV) or :func:`json_corpus_batches`
    (BEIR, JsonCollection), which raise :class:`NeedsPythonReader` where only
    the Python reader can decide; the caller then starts again without ``fast``.
    """
    for f in corpus_files(path, fmt):
        if fmt == "dpr-tsv":
            yield from _reading(f, dpr_tsv_batches(f) if fast else _dpr_tsv(f, bad))
        elif fmt == "beir":
            yield from _reading(f, json_corpus_batches(f, fmt) if fast else _beir_jsonl(f, bad))
        elif fmt == "pyserini":
            yield from _reading(f, json_corpus_batches(f, fmt) if fast else _pyserini_json(f, bad))
        else:
            raise UserError(f"open: corpus format {fmt!r} unknown; use one of {', '.join(CORPUS_FORMATS)}")


def _tsv_column_order(row: list[str]) -> tuple[int, int, int] | None:
    """(id, text, title) column positions when ``row`` is a DPR TSV header (first field ``id``), else None.

    ``ValueError`` for a header without exactly the columns id, text, title.
    """
    if not (row and row[0].strip().lower() == "id"):
        return None
    names = [c.strip().lower() for c in row]
    if sorted(names) != ["id", "text", "title"]:
        raise ValueError("expected the columns id, text, title")
    return names.index("id"), names.index("text"), names.index("title")


def _dpr_tsv(path: Path, bad: BadRecords):
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with open_text(path) as f:
        reader = csv.reader(f, delimiter="\t")
        order = (0, 1, 2)  # id, text, title: DPR's psgs_w100 column order
        first = True
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                bad(f"{path}:{reader.line_num}", f"unreadable TSV line ({e})")
                continue
            if any("\x00" in c for c in row):  # a damaged file (never text; before the header, it hides it)
                first = False
                bad(f"{path}:{reader.line_num}", "NUL byte in the line")
                continue
            if first:
                first = False
                try:
                    header = _tsv_column_order(row)
                except ValueError as e:
                    raise UserError(f"{path}:{reader.line_num}: header {row!r}: {e}") from None
                if header is not None:
                    order = header
                    continue
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != 3:
                bad(f"{path}:{reader.line_num}", f"expected 3 tab-separated columns (id, text, title), got {len(row)}")
                continue
            pid = row[order[0]].strip()
            if not pid:
                bad(f"{path}:{reader.line_num}", "empty passage id")
                continue
            yield pid, row[order[2]], row[order[1]]


class NeedsPythonReader(Exception):
    """An Arrow reader met something whose reading (or error message) only the Python reader decides."""


# Python's str.strip() whitespace (str.isspace), as an RE2 class: an id with it at either end is one the csv
# reader would strip (left to that reader)
_PY_SPACE = r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
_EDGE_SPACE = f"^{_PY_SPACE}|{_PY_SPACE}$"


def dpr_tsv_batches(path: Path, block_bytes: int = 2 << 20) -> Iterator:
    """A DPR TSV as Arrow record batches ``(id, title, text)``, parsed by Arrow's streaming CSV reader.

    The same records :func:`_dpr_tsv` (Python's ``csv``, as DPR reads the file)
    gives, 3-4x faster, for every file that reader reads without complaint.  Where
    the two could differ -- a byte-order mark, an empty first line (``csv`` takes
    the line after it for data, not the header), a row without three columns, an
    unterminated quote, text that is not UTF-8, an empty id or one with
    surrounding whitespace -- this raises :class:`NeedsPythonReader` and the
    ``csv`` reader decides (with its ``FILE:LINE`` error, or ``--skip-bad-records``).
    Equality with :func:`_dpr_tsv` on valid and broken input: tests/test_open_corpus.py.
    Blocks of 2 MB: at 1M passages as fast as 32 MB blocks and 230 instead of
    860 MB peak RSS (Arrow reads blocks ahead); a record longer than a block is
    one Arrow cannot place, handed over too.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
        head = f.read(3)
    if head == b"\xef\xbb\xbf" or head[:1] in (b"\n", b"\r"):
        raise NeedsPythonReader("byte-order mark or empty first line")
    raw = pa.OSFile(str(path), "rb")
    stream = pa.CompressedInputStream(raw, "gzip") if gz else raw
    try:
        names = ["c0", "c1", "c2"]
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(column_names=names, block_size=block_bytes, use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char='"', double_quote=True, escape_char=False,
                                             newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in names},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False))
        order = (0, 1, 2)  # id, text, title: DPR's psgs_w100 column order
        first = True
        schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            if first and batch.num_rows:
                first = False
                try:
                    header = _tsv_column_order([batch.column(i)[0].as_py() for i in range(3)])
                except ValueError:
                    raise NeedsPythonReader("bad header") from None  # the csv reader words the error
                if header is not None:
                    order = header
                    batch = batch.slice(1)
            if not batch.num_rows:
                continue
            ids = batch.column(order[0])
            # (no Python object goes into these calls: converting one makes pyarrow import pandas, 0.6 s)
            if pc.min(pc.utf8_length(ids)).as_py() == 0 or pc.any(pc.match_substring_regex(ids, _EDGE_SPACE)).as_py():
                raise NeedsPythonReader("empty id, or one with whitespace to strip")
            if any(pc.any(pc.match_substring(batch.column(i), "\x00")).as_py() for i in range(3)):
                raise NeedsPythonReader("a NUL byte")  # the csv reader refuses the line
            yield pa.record_batch([ids, batch.column(order[2]), batch.column(order[1])], schema=schema)
    except pa.ArrowInvalid as e:
        raise NeedsPythonReader(str(e)) from None
    finally:
        stream.close()
        raw.close()


# the fields a JSON corpus record is read from, by format: (id field, title field or None, text field); and how
# its Python reader treats them: whether the text must be a string (else null/missing reads as ""), whether title
# and text are str.strip()ped, and whether an id of whitespace only is bad (else only the empty id)
_JSON_FIELDS = {"beir": ("_id", "title", "text"), "pyserini": ("id", None, "contents"),
                "beir-dataset": ("_id", "title", "text")}
_JSON_RULES = {"beir": (True, False, True), "pyserini": (True, False, True), "beir-dataset": (False, True, False)}
# what str.isspace() calls whitespace: str.strip() strips exactly these (pc.utf8_trim with them does the same)
_PY_WHITESPACE = "\x09\x0a\x0b\x0c\x0d\x1c\x1d\x1e\x1f\x20\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # all 29 (tests check)
# a line that starts like this is blank or begins with whitespace: only the Python reader skips or rejects it
_LINE_STARTS_BLANK = rb"\n[\n\r \t]"


def json_corpus_batches(path: Path, fmt: str, chunk_bytes: int = 8 << 20) -> Iterator:
    """A BEIR or JsonCollection JSON-lines file as Arrow record batches ``(id, title, text)``, by Arrow's JSON reader.

    The records :func:`_beir_jsonl` / :func:`_pyserini_json` (Python's ``json``,
    line by line) give -- or, for ``fmt="beir-dataset"``, what ``beir:NAME``'s
    reader keeps (:func:`data.beir.build_beir`: title and text stripped, a
    missing one empty) -- 1.5-2x faster for a whole store build of 1M passages
    (bench/json_store.py: 1.5-1.6x on an Intel Xeon, 1.8-2.0x on an AMD EPYC), for every
    file that reader reads without complaint.  The file is cut into chunks of about
    ``chunk_bytes`` at line ends and each chunk parsed by Arrow; a chunk must give
    exactly one record per line.  Where the two readers could differ -- a
    byte-order mark, a blank line or one starting with whitespace, a JSON array
    file, a lone carriage return (a line end to Python), a line that is not one
    JSON object, a duplicated key, a lone surrogate
    escape, text that is not UTF-8, a missing/null/non-string id or text, an id
    of whitespace only, a record that has the fallback key (``id`` for BEIR,
    ``docid`` for JsonCollection) instead of the first -- this raises
    :class:`NeedsPythonReader` and the Python reader decides (with its
    ``FILE:LINE`` error, or ``--skip-bad-records``).  A JsonCollection
    ``contents`` is split at its first newline into title and text as
    :func:`_pyserini_json` splits it.  Equality with the Python reader on valid
    and broken input: tests/test_open_corpus.py.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    id_field, title_field, text_field = _JSON_FIELDS[fmt]
    text_required, strip, blank_id_bad = _JSON_RULES[fmt]
    names = [id_field] + ([title_field] if title_field else []) + [text_field]
    read_opts = pj.ReadOptions(block_size=1 << 20, use_threads=True)
    parse_opts = pj.ParseOptions(explicit_schema=pa.schema([(n, pa.string()) for n in names]),
                                 unexpected_field_behavior="ignore", newlines_in_values=False)
    schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
    from data.corpus_store import utf8_scalar

    empty = utf8_scalar("")  # (made from buffers: converting "" makes pyarrow import pandas)
    blank_id = f"^{_PY_SPACE}*$"

    def batches(data, cr: bool) -> "pa.RecordBatch":  # bytes or a memoryview of whole lines; cr: holds a "\r"
        # (numpy and RE2 over the chunk's bytes: bytes.count and `in` take 10x longer than the parse)
        raw = pa.py_buffer(data)
        whole = pa.Array.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(np.array([0, len(data)], np.int64)), raw])
        # a chunk that does not start with an object: pyarrow 26's read_json crashes the process (SIGSEGV) on a
        # first line `null`; the others (a BOM, a JSON array, a blank line) only the Python reader decides
        if (bytes(data[:1]) != b"{"
                or np.frombuffer(pc.count_substring_regex(whole, _LINE_STARTS_BLANK).buffers()[1], np.int64)[0]):
            raise NeedsPythonReader("byte-order mark, JSON array, a first line that is no object, or a blank line or one starting with whitespace")
        octets = np.frombuffer(data, np.uint8)
        if cr and _has_lone_cr(octets):
            # Python's text files end a line at a lone carriage return too; Arrow reads it as whitespace
            raise NeedsPythonReader("a carriage return not followed by a newline")
        lines = int(np.count_nonzero(octets == 10)) + (bytes(data[-1:]) != b"\n")
        try:  # the whole chunk: Arrow's JSON parser checks no string for UTF-8, and skips the keys and values it
            # ignores unseen (a stray byte in an unknown key was read as if the key were absent)
            whole.view(pa.large_string()).validate(full=True)
        except pa.ArrowInvalid:
            raise NeedsPythonReader("text that is not UTF-8") from None
        try:
            table = pj.read_json(raw, read_options=read_opts, parse_options=parse_opts)
        except (pa.ArrowInvalid, UnicodeDecodeError) as e:
            raise NeedsPythonReader(str(e)[:200]) from None
        if table.num_rows != lines:
            raise NeedsPythonReader("a line that is not exactly one JSON object")
        table = table.combine_chunks()
        ids, text = table.column(id_field).chunk(0), table.column(text_field).chunk(0)
        if ids.null_count or (text_required and text.null_count):
            raise NeedsPythonReader("a record without the id or the text (or with null there)")
        text = pc.fill_null(text, empty) if text.null_count else text
        try:  # Arrow's JSON parser does not check that strings are UTF-8
            for name in names:
                table.column(name).chunk(0).validate(full=True)
        except pa.ArrowInvalid:
            raise NeedsPythonReader("text that is not UTF-8") from None
        # (no Python object goes into these calls: converting one makes pyarrow import pandas, 0.6 s)
        if pc.any(pc.match_substring_regex(ids, blank_id if blank_id_bad else "^$")).as_py():
            raise NeedsPythonReader("an empty id, or one of whitespace only")
        if title_field:  # BEIR: `rec.get("title") or ""`
            title = table.column(title_field).chunk(0)
            title = pc.fill_null(title, empty) if title.null_count else title
        else:  # JsonCollection: "title\ntext" split at the first newline, else no title
            title, text = _split_first_line(text, empty)
        if strip:
            title, text = pc.utf8_trim(title, characters=_PY_WHITESPACE), pc.utf8_trim(text, characters=_PY_WHITESPACE)
        return pa.record_batch([ids, title, text], schema=schema)

    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            carry, any_rows = b"", False
            while True:  # chunks of whole lines: the lines of a block up to its last newline, after the carry
                block = f.read(chunk_bytes)
                if not block:
                    if carry:  # the last line, without a newline
                        any_rows = True
                        yield batches(carry, b"\r" in carry)
                    break
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    carry += block
                    continue
                view = memoryview(block)
                cr = b"\r" in carry or block.find(b"\r", 0, cut) >= 0  # (memchr: a pass over the chunk in 0.1 ms)
                data = carry + view[:cut] if carry else view[:cut]
                carry = bytes(view[cut:])
                any_rows = True
                yield batches(data, cr)
                del data, view
            if not any_rows:
                raise NeedsPythonReader("an empty file")
    except (OSError, EOFError) as e:
        raise NeedsPythonReader(f"cannot read ({e})") from None


def _has_lone_cr(octets: np.ndarray) -> bool:
    """Whether a chunk's bytes hold a carriage return that no newline follows."""
    cr = np.flatnonzero(octets == 13)
    if not cr.size:
        return False
    after = cr + 1
    return bool(after[-1] >= octets.size or (octets[after[after < octets.size]] != 10).any())


def _split_first_line(contents, empty):
    """(title, text) of JsonCollection contents as :func:`_pyserini_json` splits them (``str.partition("\\n")``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(contents, "\n", max_splits=1)  # one or two pieces per row
    # (the offsets from their buffer: Array.to_numpy imports pandas too)
    offsets = np.frombuffer(parts.buffers()[1], dtype=np.int32)[parts.offset : parts.offset + len(parts) + 1]
    pieces = parts.values
    if len(pieces) == len(contents):  # no row has a newline: no titles
        none = pa.Array.from_buffers(pa.string(), len(contents), [None, pa.py_buffer(np.zeros(len(contents) + 1, np.int32)), pa.py_buffer(b"")])
        return none, contents

    def int32(values):  # (from buffers: pa.array(ndarray) imports pandas)
        v = np.ascontiguousarray(values, dtype=np.int32)
        return pa.Array.from_buffers(pa.int32(), len(v), [None, pa.py_buffer(v)])

    two = np.packbits((offsets[1:] - offsets[:-1]) == 2, bitorder="little")
    text = pieces.take(int32(offsets[1:] - 1))  # the last piece: the text, or all of the contents
    # the first piece where there are two, else "": a null index takes nothing, so only the titles are copied
    first = np.ascontiguousarray(offsets[:-1], dtype=np.int32)
    firsts = pa.Array.from_buffers(pa.int32(), len(contents), [pa.py_buffer(two), pa.py_buffer(first)])
    return pc.fill_null(pieces.take(firsts), empty), text

def _json_lines(path: Path, bad: BadRecords):
    """``(where, record)`` of a JSON-lines file, or of a file holding one JSON array of records."""
    with open_text(path) as f:
        first = True
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if first and line.lstrip().startswith("["):  # a JSON array (Pyserini reads these too)
                try:
                    records = json.loads(line + f.read())
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{e.lineno + lineno - 1}: malformed JSON ({e.msg})") from None
                for i, rec in enumerate(records if isinstance(records, list) else [records]):
                    if not isinstance(rec, dict):
                        bad(f"{path}: record {i}", "expected a JSON object")
                        continue
                    yield f"{path}: record {i}", rec
                return
            first = False
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                bad(f"{path}:{lineno}", f"malformed JSON ({e.msg})")
                continue
            if not isinstance(rec, dict):
                bad(f"{path}:{lineno}", "expected a JSON object")
                continue
            yield f"{path}:{lineno}", rec


def _good_id(pid) -> bool:
    """A passage id: a string that is not blank, or an integer (not ``null``, ``true``, a list or an object)."""
    return (isinstance(pid, str) and bool(pid.strip())) or (isinstance(pid, int) and not isinstance(pid, bool))


def _beir_jsonl(path: Path, bad: BadRecords):
    for where, rec in _json_lines(path, bad):
        pid = rec.get("_id", rec.get("id"))
        text = rec.get("text")
        if not _good_id(pid):
            bad(where, "record without '_id' (a string or an integer)")
            continue
        if not isinstance(text, str):
            bad(where, "record without a string 'text'")
            continue
        title = "" if rec.get("title") is None else rec["title"]
        if not isinstance(title, str):
            bad(where, "'title' is not a string")
            continue
        yield str(pid), title, text


def _pyserini_json(path: Path, bad: BadRecords):
    for where, rec in _json_lines(path, bad):
        pid = rec.get("id", rec.get("docid"))
        contents = rec.get("contents")
        if not _good_id(pid):
            bad(where, "record without 'id' (a string or an integer)")
            continue
        if not isinstance(contents, str):
            bad(where, "record without a string 'contents'")
            continue
        title, nl, text = contents.partition("\n")
        if not nl:
            title, text = "", contents
        yield str(pid), title, text


def hub_corpus(name: str, config: str | None) -> Iterator[tuple[str, str, str]]:
    """``(id, title, text)`` of a Hugging Face passage set (``wiki_dpr``: fields id/text/title), streamed."""
    import datasets

    if name != "wiki_dpr":
        raise UserError(f"open: corpus hf:{name}: only hf:wiki_dpr[/CONFIG] is supported (or give a file)")
    rows = datasets.load_dataset("wiki_dpr", config or "psgs_w100.nq.no_index", split="train", streaming=True)
    for r in rows:
        yield str(r["id"]), str(r.get("title") or ""), str(r["text"])


# ---------------------------------------------------------------- questions
@dataclass
class Question:
    qid: str
    text: str
    answers: list[str]
    gold_ids: list[str] = field(default_factory=list)


def detect_question_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")):
        return "dpr-csv"
    if name.endswith((".jsonl", ".jsonl.gz", ".txt")):
        return "jsonl"
    if name.endswith((".json", ".json.gz", ".json.zip", ".zip")):
        from data.squad import read_json_file

        head = read_json_file(path)
        if isinstance(head, dict) and "data" in head:
            return "squad"
        if isinstance(head, list):
            return "dpr-json"
    raise UserError(f"{path}: cannot tell the question format (give it: dpr-csv@, jsonl@, squad@ or dpr-json@PATH)")


def read_questions(path: Path, fmt: str, bad: BadRecords) -> list[Question]:
    if not path.is_file():
        raise UserError(f"{path}: no such file (open: questions)")
    if fmt == "dpr-csv":
        return list(_reading(path, _dpr_csv(path, bad)))
    if fmt == "jsonl":
        return list(_reading(path, _drqa_jsonl(path, bad)))
    if fmt == "squad":
        return _squad_questions(path, bad)
    if fmt == "dpr-json":
        return _dpr_json(path, bad)
    raise UserError(f"open: question format {fmt!r} unknown; use one of {', '.join(QUESTION_FORMATS)}")


def _answer_list(value) -> list[str] | None:
    """The answers, or None when they are not a string or a list of strings that are not blank (a blank
    answer would be found in every passage)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(a, str) and a.strip() for a in value):
        return list(value)
    return None


def _dpr_csv(path: Path, bad: BadRecords):
    with open_text(path) as f:
        reader = csv.reader(f, delimiter="\t")  # as DPR reads its qa.csv files
        index = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                bad(f"{path}:{reader.line_num}", f"unreadable line ({e})")
                continue
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != 2:
                bad(f"{path}:{reader.line_num}", f"expected question TAB [answers], got {len(row)} columns")
                continue
            if "\x00" in row[0] or "\x00" in row[1]:
                bad(f"{path}:{reader.line_num}", "a NUL byte in the line")
                continue
            if not row[0].strip():
                bad(f"{path}:{reader.line_num}", "the question is empty")
                continue
            try:
                answers = _answer_list(ast.literal_eval(row[1].strip()))
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                answers = None
            if not answers:
                bad(f"{path}:{reader.line_num}", f"answers {row[1][:60]!r} are not a Python list of strings that are not empty")
                continue
            yield Question(str(index), row[0], answers)
            index += 1


def _drqa_jsonl(path: Path, bad: BadRecords):
    index = 0
    seen: dict[str, str] = {}
    for where, rec in _json_lines(path, bad):
        question = rec.get("question")
        answers = _answer_list(rec.get("answer", rec.get("answers")))
        if not isinstance(question, str) or not question.strip():
            bad(where, "record without a string 'question'")
            continue
        if not answers:
            bad(where, "record without 'answer' (a string or a list of strings that are not empty)")
            continue
        key = "id" if "id" in rec else "qid" if "qid" in rec else None
        qid = rec[key] if key else index
        if not _good_id(qid):  # (null was the id 'None', true 'True')
            bad(where, f"'{key}' is not a string or an integer")
            continue
        qid = str(qid)
        if qid in seen:
            bad(where, f"question id {qid!r} appears again (first at {seen[qid]})")
            continue
        first = where[len(str(path)) + 1:].strip()
        seen[qid] = f"line {first}" if first.isdigit() else first
        yield Question(qid, question, answers)
        index += 1


def _squad_questions(path: Path, bad: BadRecords) -> list[Question]:
    from data.squad import load_squad_json

    squad = load_squad_json(path, skip_bad_records=bad.skip, stats=(stats := {}))
    bad.count += int(stats.get("skipped_records", 0))
    out = []
    for article in squad["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                if answers:
                    out.append(Question(str(qa["id"]), qa["question"], answers))
    return out


def _dpr_json(path: Path, bad: BadRecords) -> list[Question]:
    from data.squad import read_json_file

    records = read_json_file(path)
    if not isinstance(records, list):
        raise UserError(f"{path}: expected a JSON list of DPR records")
    out = []
    for i, rec in enumerate(records):
        where = f"{path}: record {i}"
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
            bad(where, "expected an object with a string 'question'")
            continue
        answers = _answer_list(rec.get("answers"))
        if not answers:
            bad(where, "'answers' is not a list of strings that are not empty")
            continue
        gold = [str(c.get("passage_id", c.get("id"))) for c in rec.get("positive_ctxs") or []
                if isinstance(c, dict) and c.get("passage_id", c.get("id")) is not None]
        out.append(Question(str(rec.get("id", i)), rec["question"], answers, gold))
    return out


HF_SPLITS = {
    "nq_open": {"dev": "validation", "train": "train"},
    "trivia_qa": {"dev": "validation", "train": "train"},
    "web_questions": {"train": "train", "test": "test"},
}


def hub_questions(name: str, config: str | None, split: str) -> list[Question]:
    """Questions from ``nq_open``, ``trivia_qa`` (answer aliases) or ``web_questions`` on the hub."""
    if name not in HF_QUESTIONS:
        raise UserError(f"open: questions hf:{name}: use one of {', '.join('hf:' + n for n in HF_QUESTIONS)} (or give a file)")
    if name == "trivia_qa" and split == "test":
        raise UserError("open: hf:trivia_qa has no answers in its test split (use dev, as DPR does, or a DPR trivia-test.qa.csv)")
    hf_split = HF_SPLITS[name].get(split)
    if hf_split is None:
        raise UserError(f"open: hf:{name} has no split {split!r}; use {' or '.join(HF_SPLITS[name])}")
    import datasets

    if name == "trivia_qa":
        config = config or "rc.nocontext"
        if config not in ("rc.nocontext", "unfiltered.nocontext"):
            raise UserError(f"open: hf:trivia_qa/{config}: use rc.nocontext or unfiltered.nocontext")
        rows = datasets.load_dataset("trivia_qa", config, split=hf_split)
        return [Question(str(r.get("question_id", i)), r["question"], list(r["answer"]["aliases"]))
                for i, r in enumerate(rows)]
    rows = datasets.load_dataset(name, split=hf_split)
    key = "answer" if name == "nq_open" else "answers"
    return [Question(str(i), r["question"], list(r[key])) for i, r in enumerate(rows)]
