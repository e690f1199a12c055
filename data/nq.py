"""ReQA Natural Questions (``reqa_nq``): NQ records -> SQuAD format -> ReQA.

Ahmad, Constant, Yang & Cer 2019, "ReQA: An Evaluation for End-to-End Answer
Retrieval Models", build their NQ set from Natural Questions (Kwiatkowski et
al. 2019) the way their ``nq_to_squad.py`` does, which :func:`nq_to_squad`
re-implements:

* only the first annotation of a record is used (NQ train has one; dev has
  five, and ReQA still reads only ``annotations[0]``);
* keep a record only if that annotation has exactly one short answer, a long
  answer (``start_token != -1``), and the long answer is a ``<P>`` block;
* the paragraph text is the long answer's tokens without HTML tokens, with one
  space between two tokens iff the page has white space between them outside
  an HTML tag (this needs the original format's byte offsets);
* ``answer_start`` is the length of the cleaned text from the paragraph start
  to the short answer's first token;
* every kept record becomes its own SQuAD article with one paragraph and one
  question; :func:`data.reqa.build_reqa` then splits sentences, de-duplicates
  (sentence, paragraph) candidates and builds the query inputs.

ReQA reports 74,097 (train) and 1,772 (dev) query inputs.

Input formats, detected per record:

* the original NQ JSONL (``document_html`` + ``document_tokens`` with
  ``html_token``/``start_byte``/``end_byte``): exact ReQA text;
* the simplified JSONL (``document_text``, tokens joined by single spaces, no
  byte offsets): spacing cannot be recovered, so text tokens are joined by one
  space (``"Paris , France"`` where the original gives ``"Paris, France"``);
  the title is taken from ``document_url``;
* Hugging Face ``natural_questions`` records (``document.tokens`` with
  ``is_html``; exact when the tokens carry byte offsets, else as simplified).

Files may be plain or gzipped, and a directory is read shard by shard in name
order (Google distributes ``v1.0/dev/nq-dev-00..04.jsonl.gz`` and
``v1.0/train/nq-train-00..49.jsonl.gz``).  Local lookup, under the data dir
(``--data-dir`` / ``QA_DATA_DIR``), first match wins:

* dev: ``nq/dev/`` (the original shards), ``nq/v1.0/dev/``,
  ``nq/nq-dev-all.jsonl.gz``, ``nq/v1.0-simplified_nq-dev-all.jsonl.gz``;
* train: ``nq/train/``, ``nq/v1.0/train/``, ``nq/simplified-nq-train.jsonl.gz``,
  ``nq/v1.0-simplified_simplified-nq-train.jsonl.gz``.

Converted datasets are cached under the project cache, keyed by the input
files' sha256 (hashes of big files are remembered by path, size and mtime);
one streamed from the hub (no local file, online) is keyed by the hub
dataset's revision, so it is streamed once, not on every run.
"""

from __future__ import annotations

import gzip
import json
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import parse_qs, urlparse

from data import locations
from data.errors import UserError
from data.io import remembered_sha256_file
from data.types import Dataset

NQ_LOCAL = {
    "dev": ["nq/dev", "nq/v1.0/dev", "nq/nq-dev-all.jsonl.gz", "nq/v1.0-simplified_nq-dev-all.jsonl.gz"],
    "train": [
        "nq/train",
        "nq/v1.0/train",
        "nq/simplified-nq-train.jsonl.gz",
        "nq/v1.0-simplified_simplified-nq-train.jsonl.gz",
    ],
}
NQ_SHARDS = {"dev": "nq-dev-00..04.jsonl.gz", "train": "nq-train-00..49.jsonl.gz"}
HF_NQ = "google-research-datasets/natural_questions"
CONVERTER_VERSION = "1"

_WS = re.compile(r"\s")
_SIMPLIFIED_HTML = re.compile(r"<[^<>]*>")


# --------------------------------------------------------------- normal form
@dataclass
class _Example:
    example_id: str
    title: str
    question: str
    tokens: list[str]
    is_html: list[bool]
    start_bytes: list[int] | None  # None: no byte offsets (simplified / old HF records)
    end_bytes: list[int] | None
    html: bytes | None
    annotations: list[dict]  # {"long": (start, end), "short": [(start, end), ...]}


def _as_rows(x) -> list[dict]:
    """A sequence of records given as a list of dicts or a dict of lists (HF)."""
    if x is None:
        return []
    if isinstance(x, dict):
        keys = list(x)
        if not keys:
            return []
        return [dict(zip(keys, vals)) for vals in zip(*(x[k] for k in keys))]
    return list(x)


def _int(value, what: str) -> int:
    """An integer field (a token or byte offset): ``"3"``, ``3.5``, ``true`` and ``null`` are errors, not offsets."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} {value!r} is not an integer")
    return int(value)


def _or(value, default):
    """``value``, or ``default`` where it is null (not where it is merely falsy: ``[]`` is a wrong type, not no title)."""
    return default if value is None else value


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} {value!r:.40} is not true or false")
    return value


def _str(value, what: str, blank: bool = True) -> str:
    """A text field (``blank``: may be empty)."""
    if not isinstance(value, str) or not (blank or value.strip()):
        raise ValueError(f"{what} {value!r:.40} is not {'a string' if blank else 'a string that is not empty'}")
    return value


def _example_id(value) -> str:
    """A record's example_id: an integer or a string (``null`` became the id 'None')."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, str)) or not str(value).strip():
        raise ValueError(f"example_id {value!r:.40} is not an integer or a string")
    return str(value)


def _annotation(ann: dict) -> dict:
    la = ann.get("long_answer") or {}
    shorts = _as_rows(ann.get("short_answers"))
    return {
        "long": (_int(la.get("start_token", -1), "start_token"), _int(la.get("end_token", -1), "end_token")),
        "short": [(_int(s["start_token"], "start_token"), _int(s["end_token"], "end_token")) for s in shorts],
    }


def _title_from_url(url: str) -> str:
    try:
        title = parse_qs(urlparse(url).query).get("title", [""])[0]
    except ValueError:
        return ""
    return title.replace("_", " ")


def _normalize(rec: dict, where: str) -> _Example:
    if "document_tokens" in rec:  # original format
        toks = rec["document_tokens"]
        if not isinstance(toks, list):
            raise ValueError("document_tokens is not a list")
        return _Example(
            example_id=_example_id(rec["example_id"]),
            title=_str(_or(rec.get("document_title"), ""), "document_title"),
            question=_str(rec["question_text"], "question_text", blank=False),
            tokens=[_str(t["token"], "token") for t in toks],
            is_html=[_bool(t["html_token"], "html_token") for t in toks],
            start_bytes=[_int(t["start_byte"], "start_byte") for t in toks],
            end_bytes=[_int(t["end_byte"], "end_byte") for t in toks],
            html=_str(rec["document_html"], "document_html").encode("utf-8"),
            annotations=[_annotation(a) for a in rec.get("annotations") or []],
        )
    if "document_text" in rec:  # simplified format
        tokens = _str(rec["document_text"], "document_text").split(" ")
        return _Example(
            example_id=_example_id(rec["example_id"]),
            title=_str(rec.get("document_title"), "document_title") if rec.get("document_title") not in (None, "")
            else _title_from_url(_str(rec.get("document_url", ""), "document_url")),
            question=_str(rec["question_text"], "question_text", blank=False),
            tokens=tokens,
            is_html=[bool(_SIMPLIFIED_HTML.fullmatch(t)) for t in tokens],
            start_bytes=None,
            end_bytes=None,
            html=None,
            annotations=[_annotation(a) for a in rec.get("annotations") or []],
        )
    if isinstance(rec.get("document"), dict):  # Hugging Face natural_questions
        doc = rec["document"]
        toks = _as_rows(doc.get("tokens"))
        exact = bool(toks) and "start_byte" in toks[0] and "end_byte" in toks[0] and doc.get("html")
        question = rec.get("question")
        return _Example(
            example_id=str(rec.get("id", "")),
            title=doc.get("title") or "",
            question=question["text"] if isinstance(question, dict) else str(question),
            tokens=[t["token"] for t in toks],
            is_html=[bool(t["is_html"]) for t in toks],
            start_bytes=[int(t["start_byte"]) for t in toks] if exact else None,
            end_bytes=[int(t["end_byte"]) for t in toks] if exact else None,
            html=doc["html"].encode("utf-8") if exact else None,
            annotations=[_annotation(a) for a in _as_rows(rec.get("annotations"))],
        )
    raise UserError(f"{where}: not a Natural Questions record (no document_tokens, document_text or document field)")


# --------------------------------------------------------------- clean text
def clean_text(ex: _Example, start: int, end: int, ignore_final_whitespace: bool = True) -> str:
    """Tokens ``[start, end)`` without HTML tokens, spaced as on the page.

    A single space follows a text token iff the page has a white-space
    character between it and the next text token (looking no further than
    ``end``, or ``end + 1`` when ``ignore_final_whitespace`` is false) that is
    not inside an HTML tag (``<``/``>`` are counted because some tags are not
    tokens).  Without byte offsets, text tokens are joined by single spaces.
    """
    tokens, is_html = ex.tokens, ex.is_html
    n = len(tokens)
    if ex.html is None:
        words = [tokens[i] for i in range(max(start, 0), min(end, n)) if not is_html[i]]
        text = " ".join(words)
        if words and not ignore_final_whitespace:
            j = max(end, 0)
            while j < n and is_html[j]:
                j += 1
            if j < n:  # a text token follows: the join would put a space before it
                text += " "
        return text
    starts, ends, html = ex.start_bytes, ex.end_bytes, ex.html
    parts: list[str] = []
    last = min(end if ignore_final_whitespace else end + 1, n)
    for i in range(max(start, 0), min(end, n)):
        if is_html[i]:
            continue
        parts.append(tokens[i])
        nxt = i
        for j in range(i + 1, last):
            nxt = j
            if not is_html[j]:
                break
        gap = html[ends[i] : starts[nxt]].decode("utf-8", errors="replace")
        depth = 0
        for ch in gap:
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif depth == 0 and _WS.match(ch):
                parts.append(" ")
                break
    return "".join(parts)


# ---------------------------------------------------------------- converter
SKIP_REASONS = ("no_annotation", "not_one_short_answer", "no_long_answer", "long_answer_not_paragraph", "empty_paragraph")


def nq_record_to_article(rec: dict, stats: dict | None = None, where: str = "<nq>") -> dict | None:
    """One NQ record -> one SQuAD article (one paragraph, one question), or None if ReQA skips it."""
    stats = {} if stats is None else stats
    ex = _normalize(rec, where)

    def skip(reason: str):
        stats[reason] = stats.get(reason, 0) + 1
        return None

    if not ex.annotations:
        return skip("no_annotation")
    ann = ex.annotations[0]
    if len(ann["short"]) != 1:
        return skip("not_one_short_answer")
    s_start, s_end = ann["short"][0]
    l_start, l_end = ann["long"]
    if l_start == -1:
        return skip("no_long_answer")
    if not 0 <= l_start < len(ex.tokens) or ex.tokens[l_start] != "<P>":
        return skip("long_answer_not_paragraph")
    paragraph = clean_text(ex, l_start, l_end)
    if not paragraph.strip():
        return skip("empty_paragraph")
    answer = clean_text(ex, s_start, s_end)
    answer_start = len(clean_text(ex, l_start, s_start, ignore_final_whitespace=False))
    if paragraph[answer_start : answer_start + len(answer)] != answer or not answer:
        # ReQA keeps these too (only answer_start matters for the answer sentence)
        stats["answer_text_mismatch"] = stats.get("answer_text_mismatch", 0) + 1
    stats["kept"] = stats.get("kept", 0) + 1
    return {
        "title": ex.title,
        "paragraphs": [
            {
                "context": paragraph,
                "qas": [{"id": ex.example_id, "question": ex.question,
                         "answers": [{"answer_start": answer_start, "text": answer}]}],
            }
        ],
    }


def nq_to_squad(records: Iterable[dict], stats: dict | None = None, *, version: str = "reqa_nq",
                where: list[str] | None = None) -> dict:
    """Convert NQ records (original, simplified or HF format) to a SQuAD v1.1-format dict.

    ``stats`` (if given) receives ``records``, ``kept``, the count of each skip
    reason in :data:`SKIP_REASONS` and ``answer_text_mismatch`` (kept records
    whose cleaned short answer is not at ``answer_start``; ReQA keeps them).
    ``where`` (from :func:`iter_nq_records`): ``[FILE:LINE]`` of the record being
    read, named by the errors.
    """
    stats = {} if stats is None else stats
    data = []
    for n, rec in enumerate(records):
        at = f"{where[0]}: " if where else ""
        stats["records"] = stats.get("records", 0) + 1
        if not isinstance(rec, dict):
            raise UserError(f"{at or '<nq>: '}record {n}: expected a JSON object")
        try:
            article = nq_record_to_article(rec, stats, where=f"{at}record {n}")
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise UserError(f"{at}NQ record {n} (example_id {rec.get('example_id', rec.get('id', '?'))}): "
                            f"malformed ({type(e).__name__}: {e})") from None
        if article is not None:
            data.append(article)
    for reason in SKIP_REASONS + ("kept", "records", "answer_text_mismatch"):
        stats.setdefault(reason, 0)
    return {"version": version, "data": data}


# ---------------------------------------------------------------- file input
def nq_files(path: str | Path) -> list[Path]:
    """The JSONL files of ``path``: the file itself, or a directory's ``*.jsonl[.gz]`` in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and re.search(r"\.jsonl(\.gz)?$", p.name))
        if not files:
            raise UserError(f"{path}: no *.jsonl or *.jsonl.gz files in this directory")
        return files
    if path.is_file():
        return [path]
    raise UserError(f"{path}: no such file or directory")


def iter_nq_records(files: Iterable[Path], where: list[str] | None = None) -> Iterator[dict]:
    """Records of NQ JSONL files (plain or gzipped), with a progress bar per file; ``where`` (a list) holds the
    ``FILE:LINE`` of the record last yielded."""
    from data.progress import tqdm  # a line every 30 s when stderr is not a terminal

    for path in files:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        opener = gzip.open if gz else open
        try:
            with opener(path, "rb") as f:  # (bytes, decoded line by line: a line that is not UTF-8 is named)
                for lineno, raw in enumerate(tqdm(f, desc=f"nq {path.name}", unit="rec", leave=False, mininterval=2), 1):
                    try:
                        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # (a byte-order mark is no text)
                    except UnicodeDecodeError:
                        raise UserError(f"{path}: cannot read line {lineno} (not UTF-8 text)") from None
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise UserError(f"{path}: line {lineno}: malformed JSON ({e.msg})") from None
                    if where is not None:
                        where[:] = [f"{path}:{lineno}"]
                    yield rec
        except (OSError, EOFError) as e:
            raise UserError(f"{path}: cannot read ({e})") from None


def _local_nq(split: str, data_dir: Path | None) -> Path | None:
    data_dir = locations.data_dir(data_dir)
    if data_dir is None:
        return None
    for rel in NQ_LOCAL[split]:
        p = Path(data_dir) / rel
        if p.is_file() or (p.is_dir() and any(re.search(r"\.jsonl(\.gz)?$", c.name) for c in p.iterdir())):
            return p
    return None


def nq_squad(split: str, *, data_dir: Path | None = None, data_file: Path | None = None,
             stats: dict | None = None, revision: str | None = None) -> tuple[dict, dict]:
    """The ReQA NQ SQuAD-format dict for ``split`` and its sources (path -> sha256).

    The converted dict is cached (``<cache>/nq/<key>.json.gz``) under the
    input files' sha256; ``stats`` receives the conversion counts.  Without a
    local file it is streamed from the hub (at ``revision`` when given).
    """
    from data.io import atomic_path, cache_dir, sha256_text

    if split not in NQ_LOCAL:
        raise UserError(f"reqa_nq has no split {split!r}; use dev or train")
    stats = {} if stats is None else stats
    path = Path(data_file) if data_file else _local_nq(split, data_dir)
    if path is None:
        return _nq_squad_from_hub(split, data_dir, stats, revision)
    files = nq_files(path)
    sources = {str(p): remembered_sha256_file(p) for p in files}
    key = sha256_text(CONVERTER_VERSION, sorted(sources.values()))[:24]
    cached = cache_dir("nq") / f"{key}.json.gz"
    if cached.is_file():
        try:
            with gzip.open(cached, "rt", encoding="utf-8") as f:
                blob = json.load(f)
            stats.update(blob["stats"])
            return blob["squad"], sources
        except (OSError, EOFError, ValueError, KeyError):
            cached.unlink(missing_ok=True)
    where: list[str] = []
    squad = nq_to_squad(iter_nq_records(files, where), stats, where=where)
    try:
        with atomic_path(cached) as tmp:
            with gzip.open(tmp, "wt", encoding="utf-8") as f:
                json.dump({"squad": squad, "stats": stats}, f, ensure_ascii=False)
    except (UserError, UnicodeEncodeError):  # e.g. a lone surrogate (an escape json.loads accepts) in a record
        pass  # an unwritable cache only costs time
    return squad, sources


def hub_revision() -> str:
    """The commit of the hub's Natural Questions dataset now (what a build from the hub is keyed by); a
    ``UserError`` when the hub cannot say."""
    try:
        from huggingface_hub import HfApi

        sha = HfApi().dataset_info(HF_NQ).sha
    except Exception as e:
        raise UserError(f"reqa_nq: the revision of {HF_NQ} could not be read from the hub ({type(e).__name__})") from None
    if not sha:
        raise UserError(f"reqa_nq: the hub gave no revision of {HF_NQ}")
    return str(sha)


def _nq_squad_from_hub(split: str, data_dir: Path | None, stats: dict,
                       revision: str | None = None) -> tuple[dict, dict]:
    from data.beir import hub_offline, offline_reason

    where = locations.shown_dir(data_dir)
    message = (
        f"reqa_nq {split}: Natural Questions not found: put the original-format shards {NQ_SHARDS[split]}"
        f" (NQ v1.0 release, v1.0/{split}/) in {where / 'nq' / split}/, or pass --data-file FILE_OR_DIR"
    )
    if hub_offline():
        raise UserError(message + "; " + offline_reason())
    try:
        import datasets

        rows = datasets.load_dataset(HF_NQ, split={"dev": "validation", "train": "train"}[split], streaming=True,
                                     **({"revision": revision} if revision else {}))
        squad = nq_to_squad(iter(rows), stats)
    except UserError:
        raise
    except Exception as e:
        raise UserError(message + f"; the hub was not reachable ({type(e).__name__})") from None
    return squad, {f"hf:{HF_NQ}": split, **({"hf_revision": revision} if revision else {})}


# ------------------------------------------------------------ registry loader
def load_reqa_nq(split: str, *, data_dir: Path | None = None, data_file: Path | None = None, arg: str | None = None,
                 skip_bad_records: bool = False) -> Dataset:
    """ReQA NQ for ``split`` (dev or train): NQ -> :func:`nq_to_squad` -> :func:`data.reqa.build_reqa`.

    ``dataset.sources`` holds the input checksums (or the hub dataset and its
    revision) and the conversion counts (``nq_records``, ``nq_kept``,
    ``nq_<skip reason>``).  Built once and cached (:func:`data.cache.cached_build`):
    from local files keyed by their sha256, from the hub by the dataset's
    revision, so a second run reads the cache instead of streaming NQ again.
    """
    from data.beir import hub_offline
    from data.cache import cached_build
    from data.reqa import build_reqa

    if split not in NQ_LOCAL:
        raise UserError(f"reqa_nq has no split {split!r}; use dev or train")
    path = Path(data_file) if data_file else _local_nq(split, data_dir)
    revision = None if path is not None or hub_offline() else hub_revision()

    def build() -> Dataset:
        stats: dict = {}
        squad, sources = nq_squad(split, data_dir=data_dir, data_file=data_file, stats=stats, revision=revision)
        sources = dict(sources)
        sources.update({f"nq_{k}": v for k, v in stats.items()})
        return build_reqa(squad, name="reqa_nq", split=split, sources=sources)

    if path is None:
        if revision is None:
            return build()  # offline: its one-line error names the files to put where
        return cached_build(["reqa_nq", CONVERTER_VERSION, split, "hub", HF_NQ, revision], build)
    digests = sorted(remembered_sha256_file(p) for p in nq_files(path))
    return cached_build(["reqa_nq", CONVERTER_VERSION, split, digests], build)
