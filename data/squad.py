"""Read SQuAD v1.1-format files (plain JSON, .gz or .zip), validate them, and find SQuAD v1.1 itself.

Every problem is reported as one line naming the file and the field, e.g.
``dev.json: data[3].paragraphs[0].qas[2].answers[0].answer_start: 912 is
outside the context (length 640)``.

SQuAD v1.1's own splits are looked up under the data dir (:data:`SQUAD_FILES`,
see :mod:`data.locations`), else on the Hugging Face hub (:func:`load_squad_any`).
"""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from data.errors import UserError


def read_json_file(path: str | Path) -> Any:
    """Parse a JSON file that may be plain, gzipped or the single JSON member of a zip."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        elif raw[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(raw)) as zf:
                members = [n for n in zf.namelist() if n.endswith(".json") and not n.startswith("__MACOSX")]
                if len(members) != 1:
                    raise UserError(f"{path}: expected one .json member in the zip, found {len(members)}")
                raw = zf.read(members[0])
        text = raw.decode("utf-8-sig")
    except UserError:
        raise
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except (OSError, EOFError, zipfile.BadZipFile, gzip.BadGzipFile) as e:
        raise UserError(f"{path}: cannot read ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: malformed JSON at line {e.lineno} column {e.colno} ({e.msg})") from None


def load_squad_json(path: str | Path, *, skip_bad_records: bool = False, stats: dict | None = None) -> dict:
    """Load and validate a SQuAD v1.1-format file; returns the parsed dict.

    With ``skip_bad_records`` a question whose answers are invalid is dropped
    and counted in ``stats["skipped_records"]`` instead of failing the load.
    """
    path = Path(path)
    squad = read_json_file(path)
    return validate_squad(squad, name=path.name, skip_bad_records=skip_bad_records, stats=stats)


def validate_squad(squad: Any, *, name: str = "<squad>", skip_bad_records: bool = False, stats: dict | None = None) -> dict:
    """Check the SQuAD structure; raise UserError naming the first bad field."""

    def need(obj, key, typ, where):
        if not isinstance(obj, dict) or key not in obj:
            raise UserError(f"{name}: {where}: missing field '{key}'")
        val = obj[key]
        if not isinstance(val, typ) or isinstance(val, bool):  # (JSON true/false is no id, text or offset)
            raise UserError(f"{name}: {where}.{key}: expected {_tname(typ)}, got {type(val).__name__}")
        return val

    if not isinstance(squad, dict):
        raise UserError(f"{name}: top level must be an object with a 'data' list")
    articles = need(squad, "data", list, "top level")
    skipped = 0
    seen_ids: dict[str, str] = {}
    for a, article in enumerate(articles):
        paragraphs = need(article, "paragraphs", list, f"data[{a}]")
        for p, para in enumerate(paragraphs):
            where_p = f"data[{a}].paragraphs[{p}]"
            context = need(para, "context", str, where_p)
            qas = need(para, "qas", list, where_p)
            if not context.strip() and qas:
                raise UserError(f"{name}: {where_p}.context: empty context")
            keep = []
            for q, qa in enumerate(qas):
                where_q = f"{where_p}.qas[{q}]"
                try:
                    qid = need(qa, "id", (str, int), where_q)
                    question = need(qa, "question", str, where_q)
                    if not question.strip():
                        raise UserError(f"{name}: {where_q}.question: empty question")
                    if str(qid) in seen_ids:
                        raise UserError(f"{name}: {where_q}.id: duplicate id {qid!r} (also at {seen_ids[str(qid)]})")
                    answers = need(qa, "answers", list, where_q)
                    if not answers and not qa.get("is_impossible", False):
                        raise UserError(f"{name}: {where_q}.answers: no answers")
                    for k, ans in enumerate(answers):
                        where_a = f"{where_q}.answers[{k}]"
                        text = need(ans, "text", str, where_a)
                        if not text.strip():
                            raise UserError(f"{name}: {where_a}.text: empty answer")
                        start = need(ans, "answer_start", int, where_a)
                        if isinstance(start, bool) or not 0 <= start < max(len(context), 1):
                            raise UserError(
                                f"{name}: {where_a}.answer_start: {start} is outside the context (length {len(context)})"
                            )
                        if context[start : start + len(text)] != text:
                            raise UserError(
                                f"{name}: {where_a}.answer_start: {start} does not point at the answer text {text[:40]!r}"
                            )
                except UserError:
                    if not skip_bad_records:
                        raise
                    skipped += 1
                    continue
                seen_ids[str(qid)] = where_q
                keep.append(qa)
            if skip_bad_records:
                para["qas"] = keep
    if stats is not None:
        stats["skipped_records"] = stats.get("skipped_records", 0) + skipped
    return squad


def _tname(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__


# ------------------------------------------------------------ SQuAD v1.1 itself
SQUAD_FILES = {
    "dev": ["squad/dev-v1.1.json", "squad/dev-v1.1.json.zip", "squad/dev-v1.1.json.gz"],
    "train": [
        "squad/train-v1.1.json",
        "squad/train-v1.1.json.gz",
        "squad/train-v1.1.json.zip",
        "squad/train-v1.1.reconstructed.json.gz",
    ],
}


def squad_dict(split: str, *, data_dir: Path | None, data_file: Path | None,
               skip_bad_records: bool = False) -> tuple[Path | None, str | None]:
    """The local SQuAD v1.1 file for ``split`` (``data_file``, else found under the data dir) and its sha256.

    ``(None, None)`` when there is no local file (the hub is then the only source).
    """
    from data.io import sha256_file
    from data.locations import find_local

    if split not in SQUAD_FILES:
        raise UserError(f"SQuAD has no split {split!r}; use dev or train")
    path = data_file or find_local(data_dir, SQUAD_FILES[split])
    if path is not None:
        return path, sha256_file(path)
    return None, None


def load_squad_counted(path: Path, digest: str, skip_bad_records: bool = False) -> tuple[dict, dict]:
    """A local SQuAD file and its sources; with ``skip_bad_records``, how many records were skipped."""
    stats: dict = {}
    squad = load_squad_json(path, skip_bad_records=skip_bad_records, stats=stats)
    sources: dict = {str(path): digest}
    if skip_bad_records:
        sources["skipped_records"] = stats.get("skipped_records", 0)
    return squad, sources


def load_squad_any(split: str, *, data_dir, data_file, skip_bad_records=False) -> tuple[dict, dict]:
    """Load SQuAD v1.1 (local file, else the hub); returns (squad dict, sources).

    The hub is tried only when it can be reached (:mod:`data.hub`, one probe per process); offline the error
    naming the file to put where comes at once."""
    from data import hub
    from data.locations import shown_dir

    path, digest = squad_dict(split, data_dir=data_dir, data_file=data_file)
    if path is not None:
        return load_squad_counted(path, digest, skip_bad_records)
    message = (f"SQuAD v1.1 {split} not found: put {SQUAD_FILES[split][0]} (or .zip/.gz) under {shown_dir(data_dir)}"
               " (set QA_DATA_DIR or --data-dir), or pass --data-file")
    if hub.offline():
        raise UserError(f"{message}; {hub.why_offline()}")
    try:
        return squad_from_hub(split), {"hf:squad": split}
    except Exception as e:  # the datasets library cannot reach the hub after all
        raise UserError(f"{message}; the hub was not reachable ({type(e).__name__})") from None


def squad_from_hub(split: str) -> dict:
    """SQuAD v1.1 from the Hugging Face ``squad`` dataset, regrouped into SQuAD JSON."""
    import datasets

    rows = datasets.load_dataset("squad", split={"dev": "validation", "train": "train"}[split])
    return records_to_squad(rows)


def records_to_squad(rows) -> dict:
    """Flat (id, title, context, question, answers{text, answer_start}) records -> SQuAD dict."""
    articles: dict[str, dict[str, list]] = {}
    for r in rows:
        paras = articles.setdefault(r.get("title", ""), {})
        qas = paras.setdefault(r["context"], [])
        ans = r["answers"]
        qas.append(
            {
                "id": str(r["id"]),
                "question": r["question"],
                "answers": [{"text": t, "answer_start": int(s)} for t, s in zip(ans["text"], ans["answer_start"])],
            }
        )
    return {
        "data": [
            {"title": t, "paragraphs": [{"context": c, "qas": q} for c, q in paras.items()]}
            for t, paras in articles.items()
        ]
    }
