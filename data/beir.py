"""BEIR / MTEB retrieval sets (``beir:NAME``, ``mteb:NAME``) as document-level datasets.

Thakur et al. 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation
of Information Retrieval Models"; Muennighoff et al. 2023, "MTEB: Massive Text
Embedding Benchmark" (whose retrieval tasks are the BEIR sets).

The BEIR layout, read from ``$QA_DATA_DIR/NAME/`` (or ``--data-file DIR``, or
``beir:/path/to/DIR``)::

    corpus.jsonl[.gz]     {"_id", "title", "text"} per line
    queries.jsonl[.gz]    {"_id", "text"} per line
    qrels/{split}.tsv     query-id <TAB> corpus-id <TAB> score, with a header line

When there is no local copy the Hugging Face datasets ``mteb/NAME``
(``mteb:NAME``) or ``BeIR/NAME`` + ``BeIR/NAME-qrels`` (``beir:NAME``) are
tried, which needs a network connection.

The dataset has ``level="document"``: candidate text = ``title + " " + text``
(how BEIR's dense models and Pyserini's flat BEIR indexes see a document),
titles kept; queries = the queries judged in the split's qrels, in qrels order
(as BEIR's loader keeps them); ``gold`` = judged documents with grade > 0 and
``gold_grades`` their grades.  There are no answer strings, so the reader stage
does not apply (see :data:`NO_ANSWERS_MESSAGE`).  Score rankings with
:mod:`eval.beir_metrics`.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from data import locations
from data.errors import UserError
from data.types import Dataset, Queries

NO_ANSWERS_MESSAGE = (
    "{name}: reader stage skipped: this BEIR/MTEB retrieval set has relevance judgements but no answer strings;"
    " only retrieval metrics (nDCG@10, MRR@10, R@100, R@1000) are reported"
)

BEIR_SPLITS = ("train", "dev", "test")


def load_beir(split: str, *, data_dir: Path | None = None, data_file: Path | None = None, arg: str | None = None,
              skip_bad_records: bool = False) -> Dataset:
    """Registry loader for ``beir:NAME`` (local BEIR directory, else ``BeIR/NAME`` on the hub)."""
    return _load(split, data_dir=data_dir, data_file=data_file, arg=arg, hub="BeIR", prefix="beir")


def load_mteb(split: str, *, data_dir: Path | None = None, data_file: Path | None = None, arg: str | None = None,
              skip_bad_records: bool = False) -> Dataset:
    """Registry loader for ``mteb:NAME`` (local BEIR directory, else ``mteb/NAME`` on the hub)."""
    return _load(split, data_dir=data_dir, data_file=data_file, arg=arg, hub="mteb", prefix="mteb")


def _load(split, *, data_dir, data_file, arg, hub, prefix) -> Dataset:
    if not arg:
        raise UserError(f"{prefix}: name the dataset, e.g. {prefix}:scifact")
    name = f"{prefix}:{Path(arg).name if os.sep in arg else arg}"
    local = _local_dir(arg, data_dir, data_file)
    if local is not None:
        return read_beir_dir(local, split, name=name)
    where = locations.shown_dir(data_dir) / arg
    message = (f"{name}: no local BEIR copy at {where} (create it with corpus.jsonl[.gz], queries.jsonl[.gz],"
               f" qrels/{split}.tsv)")
    if hub_offline():
        raise UserError(message + "; " + offline_reason())
    try:
        corpus_rows, query_rows, qrels_rows = _from_hub(hub, arg, split)
    except Exception as e:  # offline, unknown name, or no such split on the hub
        raise UserError(message + f"; {hub}/{arg} could not be loaded from the hub ({type(e).__name__})") from None
    return build_beir(corpus_rows, query_rows, qrels_rows, name=name, split=split,
                      sources={f"hf:{hub}/{arg}": split}, where=f"{hub}/{arg}",
                      corpus_key=["hub", hub, arg, getattr(corpus_rows, "_fingerprint", "")])


def _local_dir(arg: str, data_dir: Path | None, data_file: Path | None) -> Path | None:
    if data_file is not None:
        if not Path(data_file).is_dir():
            raise UserError(f"{data_file}: not a directory (a BEIR dataset is a directory with corpus.jsonl, queries.jsonl, qrels/)")
        return Path(data_file)
    if Path(arg).is_dir() and (os.sep in arg or arg.startswith(".")):
        return Path(arg)
    data_dir = locations.data_dir(data_dir)
    if data_dir is not None:
        for cand in (arg, arg.lower()):
            p = Path(data_dir) / cand
            if p.is_dir():
                return p
    return None


# ----------------------------------------------------------------- local files
def _find(directory: Path, stem: str) -> Path:
    for suffix in ("", ".gz"):
        p = directory / f"{stem}{suffix}"
        if p.is_file():
            return p
    raise UserError(f"{directory}: missing {stem} (or {stem}.gz) in this BEIR directory")


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSONL file (plain or gzipped); a bad line is a one-line UserError."""
    for _, rec in _numbered_jsonl(path):
        yield rec


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a plain or gzipped UTF-8 file, decoded line by line so that bytes that are not
    UTF-8 are named with their line (a byte-order mark is dropped)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path}: line {lineno}: not UTF-8 text (byte {e.start + 1} of the line)") from None


def _numbered_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        for lineno, line in _lines(path):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}: line {lineno}: malformed JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise UserError(f"{path}: line {lineno}: expected a JSON object")
            yield lineno, rec
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None


def read_checked(path: Path, *, queries: bool = False) -> Iterator[dict]:
    """:func:`read_jsonl` records with an ``_id`` (a string that is not blank, or an integer) and a string ``text``
    (and ``title``; in a corpus either may be missing or null); ids of queries must be unique.  Anything else is a
    one-line UserError naming the file and line (it would be read as the id 'None', or fail later)."""
    seen: dict[str, int] = {}
    for lineno, rec in _numbered_jsonl(path):
        doc_id = rec.get("_id", rec.get("id"))
        if not ((isinstance(doc_id, str) and doc_id.strip()) or (isinstance(doc_id, int) and not isinstance(doc_id, bool))):
            raise UserError(f"{path}: line {lineno}: '_id' must be a string or an integer, got {json.dumps(doc_id)[:40]}")
        for key in ("text",) if queries else ("title", "text"):
            if not isinstance(rec.get(key), str) and (queries or rec.get(key) is not None):
                raise UserError(f"{path}: line {lineno}: '{key}' must be a string, got {json.dumps(rec.get(key))[:40]}")
        if queries:
            if str(doc_id) in seen:
                raise UserError(f"{path}: line {lineno}: duplicate query id {str(doc_id)!r} (also line {seen[str(doc_id)]})")
            seen[str(doc_id)] = lineno
        yield rec


def read_qrels(path: Path) -> Iterator[tuple[str, str, int]]:
    """(query id, corpus id, grade) rows of a BEIR qrels TSV; the header line is skipped."""
    seen: dict[tuple[str, str], int] = {}
    try:
        for lineno, line in _lines(path):
            if not line.strip():
                continue
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) != 3:
                raise UserError(f"{path}: line {lineno}: expected 3 tab-separated columns, got {len(cols)}")
            try:
                score = float(cols[2])
            except ValueError:
                if lineno == 1:
                    continue  # header: query-id corpus-id score
                raise UserError(f"{path}: line {lineno}: score {cols[2]!r} is not a number") from None
            if not score.is_integer():  # (also NaN and infinities)
                raise UserError(f"{path}: line {lineno}: score {cols[2]!r} is not an integer grade")
            if not cols[0].strip() or not cols[1].strip():
                raise UserError(f"{path}: line {lineno}: empty query or corpus id")
            if (cols[0], cols[1]) in seen:
                raise UserError(f"{path}: line {lineno}: query {cols[0]!r} judges document {cols[1]!r} again"
                                f" (also line {seen[cols[0], cols[1]]})")
            seen[cols[0], cols[1]] = lineno
            yield cols[0], cols[1], int(score)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None


def read_beir_dir(directory: str | Path, split: str, *, name: str | None = None) -> Dataset:
    """A BEIR-layout directory as a document-level :class:`Dataset` for ``split``."""
    from data.io import sha256_file

    directory = Path(directory)
    name = name or f"beir:{directory.name}"
    qrels_path = directory / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (directory / "qrels").glob("*.tsv")) if (directory / "qrels").is_dir() else []
        raise UserError(f"{qrels_path}: no such file; {name} has splits: {', '.join(have) or 'none'}")
    corpus_path = _find(directory, "corpus.jsonl")
    queries_path = _find(directory, "queries.jsonl")
    sources = {str(p): sha256_file(p) for p in (corpus_path, queries_path, qrels_path)}
    return build_beir(read_checked(corpus_path), read_checked(queries_path, queries=True), read_qrels(qrels_path),
                      name=name, split=split, sources=sources, where=str(directory),
                      corpus_key=["file", sources[str(corpus_path)]], corpus_file=corpus_path)


# ------------------------------------------------------------------------ hub
def hub_offline() -> bool:
    """True when the hub is not to be used: switched off by the user (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``)
    or not reachable (one probe per process, :mod:`data.hub`); :func:`data.hub.why_offline` says which."""
    from data import hub

    return hub.offline()


def offline_reason() -> str:
    """Why the hub is not used, as a message's tail: ``hub access is switched off (HF_HUB_OFFLINE)``,
    ``https://huggingface.co cannot be reached: ...``."""
    from data import hub

    return hub.why_offline()


def _from_hub(hub: str, arg: str, split: str):
    import datasets

    if hub == "mteb":
        corpus = datasets.load_dataset(f"mteb/{arg}", "corpus", split="corpus")
        queries = datasets.load_dataset(f"mteb/{arg}", "queries", split="queries")
        qrels = datasets.load_dataset(f"mteb/{arg}", "default", split=split)
    else:
        corpus = datasets.load_dataset(f"BeIR/{arg}", "corpus", split="corpus")
        queries = datasets.load_dataset(f"BeIR/{arg}", "queries", split="queries")
        qrels = datasets.load_dataset(f"BeIR/{arg}-qrels", split=split)
    qrels_rows = ((str(r["query-id"]), str(r["corpus-id"]), int(r["score"])) for r in qrels)
    return corpus, queries, qrels_rows


# ---------------------------------------------------------------------- build
def build_beir(
    corpus_rows: Iterable[dict],
    query_rows: Iterable[dict],
    qrels_rows: Iterable[tuple[str, str, int]],
    *,
    name: str,
    split: str,
    sources: dict | None = None,
    where: str = "",
    corpus_key: list | None = None,
    corpus_file: Path | None = None,
) -> Dataset:
    """Corpus/queries/qrels records -> a document-level :class:`Dataset`.

    The corpus goes into the corpus store (:mod:`data.corpus_store`, one Arrow
    file built once per ``corpus_key`` -- the corpus file's digest, or the hub
    dataset's fingerprint), so the dataset holds lazy columns, not N Python
    strings; a candidate's text is ``title\ntext`` (both stripped; the text
    alone without a title), which BM25's analyzer and the encoders' tokenizers
    split exactly as they split the title and text joined by a space.  Qrels
    rows naming a document missing from the corpus are dropped and counted in
    ``sources["qrels_unknown_docs"]``; queries judged in the qrels but missing
    from the queries file are an error.  With ``corpus_file`` (the file
    ``corpus_rows`` reads) the store is built by Arrow's JSON reader
    (:func:`data.open_sources.json_corpus_batches`), which hands any file it
    could read differently back to ``corpus_rows``; the manifest's ``reader``
    says which read it.
    """
    from data.corpus_store import cached_store
    from data.io import read_ahead, sha256_text
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    def records(rows):
        for rec in tqdm(rows, desc=f"{name} corpus", unit="doc", leave=False, mininterval=2):
            doc_id = str(rec.get("_id", rec.get("id", "")))
            if not doc_id:
                raise UserError(f"{where}: corpus record without '_id'")
            yield doc_id, (rec.get("title") or "").strip(), (rec.get("text") or "").strip()

    if corpus_key is None:  # records given in memory (tests, small inputs): keyed by their content
        corpus_rows = list(corpus_rows)
        corpus_key = ["records", sha256_text(json.dumps(corpus_rows, sort_keys=True, ensure_ascii=False))]
    from data.open_sources import NeedsPythonReader, json_corpus_batches

    key, desc = ["beir", *corpus_key], f"{name} corpus store"
    try:
        store = None
        if corpus_file is not None:
            try:
                store = cached_store(key, lambda: read_ahead(json_corpus_batches(Path(corpus_file), "beir-dataset")),
                                     meta={"reader": "arrow"}, desc=desc)
            except NeedsPythonReader:
                pass  # the json reader decides this file
        if store is None:
            store = cached_store(key, lambda: records(corpus_rows), meta={"reader": "python"}, desc=desc)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    corpus = store.corpus(language="en")  # every document is its own paragraph (paragraph_texts empty)

    query_text = {str(r.get("_id", r.get("id", ""))): r.get("text") or "" for r in query_rows}

    qrels_rows = list(qrels_rows)
    row_of = store.rows_of_ids([doc_id for _, doc_id, _ in qrels_rows])
    judged: dict[str, list[tuple[int, int]]] = {}
    unknown_docs = 0
    for qid, doc_id, grade in qrels_rows:
        lst = judged.setdefault(qid, [])
        row = row_of.get(doc_id)
        if row is None:
            unknown_docs += 1
            continue
        if grade > 0:
            lst.append((row, grade))
    if not judged:
        raise UserError(f"{where}: qrels for split {split!r} are empty")
    if unknown_docs:  # reported, not scored as misses without a word: the manifest has the count too
        from data.io import warn

        first = next(doc_id for _, doc_id, _ in qrels_rows if doc_id not in row_of)
        warn(f"{where}: {unknown_docs} qrels rows of split {split!r} name documents the corpus lacks (first: {first!r});"
             " they are left out of the gold")
    missing = [q for q in judged if q not in query_text]
    if missing:
        raise UserError(f"{where}: {len(missing)} judged queries are not in the queries file (first: {missing[0]!r})")

    q_ids = list(judged)
    gold = [np.asarray([r for r, _ in judged[q]], dtype=np.int64) for q in q_ids]
    grades = [np.asarray([g for _, g in judged[q]], dtype=np.int64) for q in q_ids]
    queries = Queries(
        ids=q_ids,
        texts=[query_text[q] for q in q_ids],
        gold=gold,
        question_keys=list(q_ids),
        question_ids=list(q_ids),
        answers=[[] for _ in q_ids],
        gold_grades=grades,
        language="en",
    )
    meta = dict(sources or {})
    meta["qrels_unknown_docs"] = unknown_docs
    return Dataset(name=name, split=split, corpus=corpus, queries=queries, sources=meta, level="document")
